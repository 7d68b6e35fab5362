"""``python -m problems.warm``: compile the GLM problems' CPU kernels once, ahead of use.

The GLMs' compiled gradients (:mod:`problems.glm_kernels`) and their batched kernels for 4 to
16 points at once (:mod:`problems.glm_lanes_kernels`) are compiled by numba the first time each
is called with a given dtype and argument layout, and the machine code is cached on disk next to
the sources, as the compressors' kernels are (:mod:`compressors.warm`). On a fresh checkout that
first compilation costs seconds per kernel (a batched kernel, unrolled for its width, up to tens
of seconds) and lands on whatever calls it first: a run, a sweep's first batch, a benchmark or
the test suite. This command pays it once, at set-up: a small logistic-regression problem on
dense, binary and valued sparse rows, in float32 and float64, on the compiled engines, asks for
every kind of gradient the methods and the runner ask for (at one point, at a point per node, on
a minibatch, a difference of two points, the loss, and 1 to 16 points at once). Later processes
load the cached code. Progress goes to stderr (``--quiet`` turns it off); it exits 0 with one
line saying how many cases it ran and how long it took. Without numba there is nothing to
compile, and it says so.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch
from tqdm import tqdm

from problems import glm_kernels, glm_lanes
from problems.logreg_nonconvex import LogRegNonconvex
from streams import Streams

__all__ = ["CASES", "POINTS", "warm"]

#: ``(rows layout, storage)``: dense rows on the dense kernel, binary and valued sparse rows on
#: the CSR kernel and by columns (binary rows are read without their values: another compiled
#: loop), and binary rows on the dense kernel (which reads them as bytes: another compiled
#: form).
CASES = (("dense", "dense"), ("binary", "csr"), ("valued", "csr"), ("binary", "csc"),
         ("valued", "csc"), ("binary", "dense"))  # fmt: skip
#: Point counts of the batched gradients: one, and every width of the batched kernels.
POINTS = (1, *glm_lanes.WIDTHS)
NODES, ROWS, DIM = 4, 6, 10


def _problem(layout: str, storage: str, dtype: torch.dtype) -> LogRegNonconvex:
    rng = np.random.default_rng(0)
    N = NODES * ROWS
    A = sp.random(N, DIM, density=0.4, random_state=rng, format="csr")
    if layout == "binary":
        A.data[:] = 1.0
    if layout == "dense":
        A = A.toarray() + rng.normal(size=(N, DIM))
    b = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    counts = np.full(NODES, ROWS)
    return LogRegNonconvex(A, b, counts, lam=0.1, dtype=dtype, storage=storage, threads=1)


def _calls(p: LogRegNonconvex) -> None:
    """Every kind of gradient and loss a run asks of ``p``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(p.d, generator=gen, dtype=p.dtype)
    X = torch.randn(p.m, p.d, generator=gen, dtype=p.dtype)
    Xf = torch.randn(p.d, p.m, generator=gen, dtype=p.dtype).T  # a point per node, by columns
    batch = p.sample(Streams.for_nodes(0, range(p.m)), 3)
    for point in (x, X, Xf):
        p.grad(point)
        p.grad(point, batch)
        p.grad_diff(point, x)
        p.grad_diff(point, x, batch)
    p.loss(x)
    p.node_loss(x)
    p.node_loss(X)
    p.full_grad(x)
    for R in POINTS:
        P = torch.randn(R, p.d, generator=gen, dtype=p.dtype)
        # each compiled engine of many points, whichever a measurement (or its memo) would pick
        for engine in ("compiled", "lanes") if p._lanes_serve(R) else ("compiled",):
            p.points_engine, p.points_threads = engine, 1
            p.grad_points(P)
            p.loss_grad_points(P)
    p.points_engine = "auto"


def warm(progress: bool = False) -> int:
    """Run :func:`_calls` on each of :data:`CASES` in float32 and float64; returns the number of
    cases run (0 where the kernels are not available)."""
    dtypes = [dt for dt in glm_kernels.DTYPES
              if glm_kernels.available("logistic", dt, torch.device("cpu"))]  # fmt: skip
    cases = [(layout, storage, dt) for layout, storage in CASES for dt in dtypes]
    for layout, storage, dt in tqdm(cases, desc="compiling", disable=not progress,
                                    file=sys.stderr):  # fmt: skip
        _calls(_problem(layout, storage, dt))
    return len(cases)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m problems.warm", description=__doc__)
    ap.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    count = warm(progress=not args.quiet)
    if not count:
        print("numba is not installed: the GLMs use torch's products, with nothing to compile")
        return 0
    print(f"compiled the GLM kernels of {count} cases in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
