"""Peak resident memory of each method against its theoretical state size plus data.

Problem: ``logreg-nonconvex`` on sparse synthetic data with few rows per node (2 rows of
density ``100/d``), so the data is small beside the ``(n, d)`` state. Each method runs in a
process of its own, forked from a server process that has only imported the libraries (so no
method pays their import, and neither the benchmark's peak nor an earlier method's leftovers
count): it builds the problem, resets the peak-RSS counter (``/proc/self/clear_refs``), runs
``init`` and a few steps, and reads ``VmHWM`` (on CUDA: the allocator's peak instead). The
extra memory is the peak minus the resident size just before ``init`` (the problem built and
its gradient run once); the theory is the bytes of the distinct tensors of the method's state
(its ``(n, d)`` buffers and ``(d,)`` vectors) plus the data. The ratio is
``(extra + data) / (state + data)``.

That theory cannot be met by a step that takes its state in and returns a new one (the design's
contract): while it runs, the caller's old state and the new one both exist, and the gradient
oracle returns one ``(n, d)`` tensor. So a second ratio is reported against that working set,
``2 state + one (n, d) gradient + data``.

Sizes: ``(n, d) = (1000, 10^5)``; with ``--quick`` ``(20, 2 * 10^4)``, where the few MiB a
process allocates whatever the method (its first torch and numba calls, about 4 MiB here) weigh
more in the ratios than at the full size.

Run alone: ``python -m benchmarks.memory N D ITERS DEVICE [--parallel P] [METHOD ...]`` (every
method by default) prints one JSON line as each method starts, ``{"start": NAME}``, and one as it
ends, ``{"method": NAME, "rows": [...]}``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import interrupt
from benchmarks.progress import NOT_HERE, Tracker, reason, second_order, why_skipped
from benchmarks.results import write_atomic

__all__ = ["run", "serve", "worker", "SIZE_FULL", "SIZE_QUICK"]

SIZE_FULL = (1000, 100_000)
SIZE_QUICK = (20, 20_000)
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

    from algorithms.registry import ALGORITHMS
    from benchmarks import bandwidth
    from benchmarks.per_iteration import LAM, compressor_for
    from comm import SimulatedComm
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
        why = second_order(ALGORITHMS[name].requires, "(n, d) state benchmark")
        if why is not None:
            rows.append({**row, "error": why, "skipped": NOT_HERE})
            continue
        try:
            algo, _ = ALGORITHMS[name].configure(problem, parse_spec(spec), **opts)
        except ValueError as e:
            rows.append({**row, "error": reason(str(e)), "skipped": why_skipped(str(e))})
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


def _imports() -> None:
    """What :func:`worker` imports, loaded once in the server before it forks. No torch
    operation and no parallel kernel runs here, so no thread pool exists to be lost in a fork
    (torch's and numba's start in the children)."""
    import numpy  # noqa: F401
    import scipy.sparse  # noqa: F401
    import torch  # noqa: F401

    import algorithms.registry  # noqa: F401
    import benchmarks.per_iteration  # noqa: F401
    import problems.logreg_nonconvex  # noqa: F401

    try:  # numba's typing and lowering registries, which each child would load (0.2-0.3 s)
        from numba.core.registry import cpu_target

        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    except (ImportError, AttributeError):
        pass


def _child(path: Path, n: int, d: int, iters: int, device: str, name: str) -> None:
    """A forked child: measure ``name``, write its rows to ``path`` and exit (never returns)."""
    code = 1
    try:
        for s in interrupt.SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        try:
            rows = worker(n, d, iters, device, [name])
            code = 0
        except Exception as e:  # noqa: BLE001 - one method's failure is that method's row
            rows = [{"method": name, "n": n, "d": d, "error": f"{type(e).__name__}: {e}"}]
        write_atomic(path, json.dumps(rows))
    finally:
        os._exit(code)


def serve(
    n: int, d: int, iters: int, device: str, methods: list[str], parallel: int, folder: Path
) -> None:
    """Measure each of ``methods`` in a child forked from this process, ``parallel`` at a
    time, printing a JSON line as each starts and as each ends (see the module docstring); the
    children hand their rows over in files in ``folder``."""
    _imports()

    def say(msg: dict) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    pending, running = list(methods), {}
    while pending or running:
        while pending and len(running) < max(1, parallel):
            name = pending.pop(0)
            path = folder / f"rows-{len(pending)}.json"
            pid = os.fork()
            if pid == 0:
                _child(path, n, d, iters, device, name)
            running[pid] = (name, path)
            say({"start": name})
        pid, status = os.wait()
        name, path = running.pop(pid)
        if path.is_file():
            rows = json.loads(path.read_text())
            path.unlink()
        else:
            code = os.waitstatus_to_exitcode(status)
            what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            rows = [{"method": name, "n": n, "d": d, "error": f"process {what}"}]
        say({"method": name, "rows": rows})


def run(
    quick: bool = False,
    device: str = "cpu",
    size: tuple[int, int] | None = None,
    parallel: int | None = None,
    methods=None,
    track=None,
) -> list[dict]:
    """Rows of :func:`worker` for every method (or ``methods``), each in a fresh process
    (:func:`serve`), ``parallel`` at a time (default: 2 in quick mode, 1 in full); an ``error``
    row for a method whose process fails (e.g. out of memory). ``track``
    (:class:`benchmarks.progress.Tracker`) hears of each method as a case."""
    from algorithms.registry import ALGORITHMS

    track = track or Tracker()
    names = list(methods or ALGORITHMS)
    n, d = size or (SIZE_QUICK if quick else SIZE_FULL)
    iters = 1 if quick else 2
    # Two at a time in quick mode; the full size needs several GiB per method: one at a time.
    parallel = parallel or (2 if quick else 1)
    # A fixed mmap threshold: freed tensors go back to the system at once, so freed buffers
    # cannot hide new allocations from the peak-RSS counter.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    cmd = [sys.executable, "-m", "benchmarks.memory", str(n), str(d), str(iters), device]
    cmd += ["--parallel", str(parallel), *names]
    track.plan(len(names))
    out: dict[str, list[dict]] = {}
    proc = None
    # The folder is this process's: it goes also when the server is killed.
    with tempfile.TemporaryDirectory(prefix="compzoo-memory-") as tmp:
        cmd += ["--folder", tmp]
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            try:
                # A session of its own: a terminal's Ctrl-C reaches the benchmark, which stops
                # the server and its children itself (interrupt.stop), also on SIGTERM.
                with interrupt.shielded():
                    proc = subprocess.Popen(
                        cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                        start_new_session=True,
                    )  # fmt: skip
                for line in proc.stdout:
                    msg = json.loads(line)
                    if "start" in msg:
                        track.case(msg["start"])
                        continue
                    for r in msg["rows"]:
                        if "skipped" in r:
                            track.skip(r["method"], r.pop("skipped"))
                    out[msg["method"]] = msg["rows"]
                    track.rows(msg["rows"])
                proc.wait()
            finally:
                if proc is not None:
                    interrupt.stop(proc)
                    proc.stdout.close()
            err.seek(0)
            tail = err.read().strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    for name in names:
        if name not in out:
            out[name] = [{"method": name, "n": n, "d": d, "error": tail[0]}]
    return [r for name in names for r in out[name]]


def main(argv: list[str] | None = None) -> None:
    from algorithms.registry import ALGORITHMS

    ap = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__)
    ap.add_argument("n", type=int)
    ap.add_argument("d", type=int)
    ap.add_argument("iters", type=int)
    ap.add_argument("device", choices=["cpu", "cuda"])
    ap.add_argument("methods", nargs="*", help="default: every registered method")
    ap.add_argument("--parallel", type=int, default=1, help="methods measured at a time")
    ap.add_argument("--folder", default=None, help="where the children leave their rows")
    a = ap.parse_intermixed_args(argv)
    methods = a.methods or list(ALGORITHMS)
    if a.folder:
        serve(a.n, a.d, a.iters, a.device, methods, a.parallel, Path(a.folder))
        return
    with tempfile.TemporaryDirectory(prefix="compzoo-memory-") as tmp:
        serve(a.n, a.d, a.iters, a.device, methods, a.parallel, Path(tmp))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
