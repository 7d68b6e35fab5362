"""Peak resident memory of each method against its theoretical state size plus data.

Problem: ``logreg-nonconvex`` on sparse synthetic data with few rows per node (2 rows of
density ``100/d``), so the data is small beside the ``(n, d)`` state. A worker subprocess per
method builds the problem, resets the peak-RSS counter (``/proc/self/clear_refs``), runs
``init`` and a few steps, and reads ``VmHWM`` (on CUDA: the allocator's peak instead). The
extra memory is the peak minus the resident size just before ``init`` (the problem built and
its gradient run once); the theory is the bytes of the distinct tensors of the method's state
(its ``(n, d)`` buffers and ``(d,)`` vectors) plus the data. The ratio is
``(extra + data) / (state + data)``.

That theory cannot be met by a step that takes its state in and returns a new one (the design's
contract): while it runs, the caller's old state and the new one both exist, and the gradient
oracle returns one ``(n, d)`` tensor. So a second ratio is reported against that working set,
``2 state + one (n, d) gradient + data``.

Run alone: ``python -m benchmarks.memory N D ITERS DEVICE [METHOD ...]`` prints the rows as
JSON.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["run", "SIZE_FULL", "SIZE_QUICK"]

SIZE_FULL = (1000, 100_000)
SIZE_QUICK = (20, 100_000)
ROWS_PER_NODE = 2
NNZ_PER_ROW = 100

log = logging.getLogger(__name__)


def _status_kb(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{key}:\s+(\d+)", text).group(1))


def _trim() -> None:
    """Hand freed heap memory back to the system (glibc), so the next RSS reading is clean."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def worker(n: int, d: int, iters: int, device: str = "cpu", methods=None) -> list[dict]:
    """Measure every registered method in this process (see the module docstring)."""
    import numpy as np
    import scipy.sparse as sp
    import torch

    from algorithms.comm import SimulatedComm
    from algorithms.registry import ALGORITHMS
    from benchmarks import bandwidth
    from benchmarks.per_iteration import LAM, compressor_for
    from compressors import parse_spec
    from problems.logreg_nonconvex import LogRegNonconvex

    rng = np.random.default_rng(0)
    N = n * ROWS_PER_NODE
    A = sp.random(N, d, density=NNZ_PER_ROW / d, format="csr", random_state=rng)
    b = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    problem = LogRegNonconvex(A, b, np.full(n, ROWS_PER_NODE), lam=LAM, device=device)
    data = A.nnz * (8 + bandwidth.INDEX_BYTES) + (N + 1) * bandwidth.INDEX_BYTES
    rows = []
    for name in methods or ALGORITHMS:
        spec = compressor_for(name, d)
        opts = {"init_mode": "zero"} if name == "diana" else {}
        if name == "dcgd":  # its nonconvex step needs a horizon; memory does not depend on it
            opts["horizon"] = 1000
        row = {"method": name, "spec": spec, "n": n, "d": d, "data_bytes": data}
        try:
            algo, _ = ALGORITHMS[name].configure(problem, parse_spec(spec), **opts)
        except ValueError as e:
            rows.append({**row, "error": str(e)})
            continue
        problem.grad(problem.x0)  # the problem's own lazy buffers are data, not state
        gc.collect()
        _trim()
        _reset_peak()
        cuda = torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() if cuda else _status_kb("VmRSS") * 1024
        comm = SimulatedComm(n, seed=0)
        state = algo.init(problem.x0, problem, comm)
        for _ in range(iters):
            state, _info = algo.step(state, problem, comm)
        peak = torch.cuda.max_memory_allocated() if cuda else _status_kb("VmHWM") * 1024
        sb = bandwidth.state_bytes(state)
        buffers = sum(
            1
            for v in vars(state).values()
            if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == n
        )
        grad = n * d * torch.finfo(problem.dtype).bits // 8  # one (n, d) gradient
        rows.append(
            {
                **row,
                "extra_bytes": peak - before,
                "state_bytes": sb,
                "grad_bytes": grad,
                "nd_buffers": buffers,
            }
        )
        del state, comm
    return rows


def run(
    quick: bool = False,
    device: str = "cpu",
    size: tuple[int, int] | None = None,
    parallel: int | None = None,
) -> list[dict]:
    """Rows of :func:`worker`, each method in a fresh subprocess (so neither this process's
    peak nor an earlier method's leftovers count), ``parallel`` at a time (default: 2 in quick
    mode, 1 in full); an ``error`` row
    for a subprocess that fails (e.g. out of memory)."""
    from algorithms.registry import ALGORITHMS

    n, d = size or (SIZE_QUICK if quick else SIZE_FULL)
    iters = 1 if quick else 2
    # Two at a time in quick mode; the full size needs several GiB per method: one at a time.
    parallel = parallel or (2 if quick else 1)
    # A fixed mmap threshold: freed tensors go back to the system at once, so freed buffers
    # cannot hide new allocations from the peak-RSS counter.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    args = [str(n), str(d), str(iters), device]
    pending, running, out = list(ALGORITHMS), [], {}
    while pending or running:
        while pending and len(running) < max(1, parallel):
            name = pending.pop(0)
            cmd = [sys.executable, "-m", "benchmarks.memory", *args, name]
            running.append(
                (
                    name,
                    subprocess.Popen(
                        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
                    ),
                )
            )
        name, proc = running.pop(0)
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            out[name] = [{"method": name, "n": n, "d": d, "error": tail[0]}]
        else:
            out[name] = json.loads(stdout)
    return [r for name in ALGORITHMS for r in out[name]]


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    a = sys.argv[1:]
    out = worker(int(a[0]), int(a[1]), int(a[2]), a[3], a[4:] or None)
    sys.stdout.write(json.dumps(out) + "\n")
