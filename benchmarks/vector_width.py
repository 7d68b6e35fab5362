"""``python -m benchmarks.vector_width``: choose, on this machine, the vector width numba
compiles the project's kernels for (256 or 512 bits; :mod:`streams.vector_width`), and record it.

On a CPU without AVX-512 there is nothing to choose: 256 bits is recorded at once. Otherwise a
probe process per width (``COMPZOO_VECTOR_BITS`` set, its kernels compiled or loaded from numba's
cache for that width) times a few of the project's kernels on inputs of the papers' sizes:

* the GLM gradients of logistic regression at one point on dense rows (phishing's shape, the
  ``dense`` engine) and on binary sparse rows by columns (w8a's shape, the ``csc`` engine), and
  at 12 points at once on those sparse rows (a batch of runs: the ``lanes`` kernel), float64;
  and on a small set's binary rows by columns in float32 (mushrooms' shape: a gradient of a
  tenth of a millisecond, where a wider form's longer set-up of each loop counts the most);
* encode + decode of one float32 row of 2^22 entries by QSGD, natural dithering, FastSGD and
  3LC (a random draw per entry, and the bit-level work of the other quantizers).

The probes run twice each, alternating (256, 512, 256, 512); each kernel keeps its faster
time per width. The wider form is recorded when the geometric mean over the kernels of its time
over the narrower one's is at most :data:`THRESHOLD`; else 256 bits. Later processes of the
project use the record (:func:`streams.vector_width.apply`). It prints one line with the choice
and the mean; ``--quiet`` drops the progress bar. About a minute on 2 cores, the first time each
width's kernels are compiled included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

from tqdm import tqdm

from benchmarks.clock import median_seconds
from streams import vector_width

__all__ = ["THRESHOLD", "choose", "main", "probe"]

#: The wider form must be at least this much faster (geometric mean of the time ratios).
THRESHOLD = 0.95
REPEATS = 25
ORDER = (256, 512, 256, 512)


def _timed(fn) -> float:
    """Seconds per call: the median of :data:`REPEATS` calls after an untimed one."""
    return median_seconds(fn, REPEATS)


def _glm(rows: int, dim: int, per_row: int | None, storage: str, dtype: str = "float64"):
    """A logistic-regression problem on 20 nodes: dense rows, or binary sparse rows with
    ``per_row`` entries each."""
    import numpy as np
    import scipy.sparse as sp
    import torch

    from problems.logreg_nonconvex import LogRegNonconvex

    rng = np.random.default_rng(0)
    if per_row is None:
        A = rng.normal(size=(rows, dim))
    else:
        cols = rng.integers(0, dim, size=(rows, per_row))
        at = (np.repeat(np.arange(rows), per_row), cols.ravel())
        A = sp.csr_matrix((np.ones(rows * per_row), at), shape=(rows, dim))
        A.sum_duplicates()
        A.data[:] = 1.0  # a repeated column counts once: binary rows
    b = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    counts = np.full(20, rows // 20)
    A, b = A[: counts.sum()], b[: counts.sum()]
    dt = getattr(torch, dtype)
    return LogRegNonconvex(A, b, counts, lam=0.1, dtype=dt, storage=storage)


def probe() -> dict[str, float]:
    """Seconds per call of each kernel, in this process (its width set before numba loaded)."""
    import torch

    from comm import SimulatedComm
    from compressors import parse_spec

    out = {}
    dense = _glm(11_040, 68, None, "dense")
    sparse = _glm(49_740, 300, 12, "csc")
    small = _glm(8_120, 112, 21, "csc", "float32")
    for name, p in (("glm dense", dense), ("glm csc", sparse), ("glm csc small float32", small)):
        x = torch.linspace(-0.1, 0.1, p.d, dtype=p.dtype)
        out[name] = _timed(lambda p=p, x=x: p.grad(x))
    sparse.points_engine = "lanes"  # the batched kernel itself, not the engine measured best
    P = torch.linspace(-0.1, 0.1, 12 * sparse.d, dtype=sparse.dtype).reshape(12, sparse.d)
    out["glm lanes, 12 points"] = _timed(lambda: sparse.grad_points(P))
    x = torch.randn(1, 1 << 22, generator=torch.Generator().manual_seed(0))
    for spec in ("qsgd", "natural-dithering", "fastsgd", "3lc"):
        C, comm = parse_spec(spec).bind(1), SimulatedComm(1, seed=0)
        out[spec] = _timed(lambda C=C, comm=comm: C.decode(C.encode(x, comm.rng_for(C, 0))))
    return out


def choose(timings: dict[int, dict[str, float]]) -> tuple[int, float]:
    """``(bits, mean)``: the width to record from each width's seconds per kernel, and the
    geometric mean of the 512-bit times over the 256-bit ones (kernels both timed)."""
    narrow, wide = timings[256], timings[512]
    names = sorted(set(narrow) & set(wide))
    if not names:
        raise ValueError("no kernel was timed at both widths")
    mean = math.exp(statistics.fmean(math.log(wide[k] / narrow[k]) for k in names))
    return (512 if mean <= THRESHOLD else 256), mean


def _run_probe(bits: int) -> dict[str, float]:
    env = dict(os.environ)
    if vector_width.APPLIED:  # this process's own setting, not the user's: the probe sets its
        env.pop("NUMBA_CPU_FEATURES", None)
    env[vector_width.ENV] = str(bits)
    cmd = [sys.executable, "-m", "benchmarks.vector_width", "--probe"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {bits}-bit probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.vector_width", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    user = [k for k in ("NUMBA_CPU_FEATURES", "NUMBA_CPU_NAME") if k in os.environ]
    if user and not vector_width.APPLIED:
        print(f"vector width: not chosen, {user[0]} is set (numba compiles for it as given)")
        return 0
    if vector_width.wide_features() is None:
        return _record(256, {}, "no AVX-512 on this CPU")
    timings: dict[int, dict[str, float]] = {256: {}, 512: {}}
    for bits in tqdm(ORDER, desc="vector width", unit="probe", disable=args.quiet, file=sys.stderr):
        try:
            got = _run_probe(bits)
        except RuntimeError as e:  # the wider form cannot be used here: the default stands
            if bits == 256:
                print(f"error: {e}", file=sys.stderr)
                return 1
            return _record(256, {}, f"the 512-bit probe failed: {e}")
        for name, s in got.items():
            timings[bits][name] = min(s, timings[bits].get(name, math.inf))
    bits, mean = choose(timings)
    rec = {str(k): v for k, v in timings.items()} | {"mean_512_over_256": mean}
    kernels = len(timings[256])
    return _record(bits, rec, f"512-bit time / 256-bit time, geometric mean over {kernels} "
                   f"kernels: {mean:.3f}; threshold {THRESHOLD}")  # fmt: skip


def _record(bits: int, timings: dict, why: str) -> int:
    """Write the record and say so (exit status 0), or name the file that could not be
    written (1: the kernels then keep LLVM's own width)."""
    try:
        path = vector_width.write(bits, timings)
    except OSError as e:
        print(f"error: cannot write the vector-width record {vector_width.record_path()} ({e}); "
              f"set {vector_width.RECORD_ENV} to a writable file", file=sys.stderr)  # fmt: skip
        return 1
    print(f"vector width: {bits} bits ({why}); recorded in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
