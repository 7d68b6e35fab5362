"""Seconds per iteration of every registered method, against per-node NumPy loops.

Problem: ``logreg-nonconvex`` (lambda = 0.1) on synthetic data at each case of :data:`CASES`:
dense ``(n, d, m_i)`` shapes in float64 and float32, and a w8a-shaped sparse case (``d = 300``,
density 4%, 50,000 rows over ``n = 20`` nodes) run once on sparse data and once densified
(the same matrix, forced down the dense-kernel path). Each method uses its usual compressor:
Top-K for contractive methods, Rand-K otherwise, with ``k = max(1, d/100)``, and its theory
step. EF21 + Top-K, DIANA + Rand-K, MARINA + Rand-K and DASHA + Rand-K are also run by the
per-node loops of :mod:`benchmarks.baselines` on the same data with the same parameters; the
ratio is baseline seconds / compzoo seconds (above 1: compzoo is faster).

Both sides time steps alone: compzoo's ``iters`` steps after an untimed ``init``; a loop (whose
init is part of the same function) as the difference between a run of ``iters`` iterations and
a run of none. Within a case all compzoo timings come
first, then all baseline timings, with a pause between: NumPy's BLAS threads and torch's keep
spinning briefly after a call and slow the other side down when they alternate.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from algorithms.base import step_mode
from algorithms.registry import ALGORITHMS, usual_compressor
from benchmarks import bandwidth, baselines
from benchmarks.clock import median_seconds
from benchmarks.progress import NOT_HERE, Tracker, reason, second_order, why_skipped
from comm import SimulatedComm
from compressors import parse_spec
from problems.logreg_nonconvex import LogRegNonconvex
from streams import tags

log = logging.getLogger(__name__)

LAM = 0.1
DENSE_SHAPES = (
    (20, 1000, 100),
    (100, 1000, 100),
    (20, 10000, 500),
    (1000, 100, 20),
    (10000, 100, 10),
)
W8A = (20, 300, 2500, 0.04)  # n, d, m_i, density: 50,000 rows as in w8a
BASELINES = ("ef21", "diana", "marina", "dasha")


@dataclass(frozen=True)
class Case:
    """One benchmark problem: ``kind`` is ``dense``, ``sparse`` or ``densified``."""

    kind: str
    n: int
    d: int
    m_i: int
    dtype: str
    density: float = 1.0

    @property
    def label(self) -> str:
        return f"{self.kind} {self.dtype} n={self.n} d={self.d} m_i={self.m_i}"


QUICK_SHAPE = (20, 1000, 100)  # the quick run's one dense shape with every method
QUICK_MANY_NODES = (1000, 100, 20)  # and its n >= 1000 shape (the 10x target), with baselines


def cases(quick: bool) -> list[tuple[Case, tuple[str, ...] | None]]:
    """``(case, methods)`` pairs (None: every registered method).

    Full: every method at every case. Quick: every method on one dense float64 shape
    (:data:`QUICK_SHAPE`); the four methods with baselines on the ``n = 1000`` float64 shape,
    on the float32 version of the first, and on the sparse and densified pair.
    """
    n, d, m_i, rho = W8A
    if quick:
        return [
            (Case("dense", *QUICK_SHAPE, "float64"), None),
            (Case("dense", *QUICK_MANY_NODES, "float64"), BASELINES),
            (Case("dense", *QUICK_SHAPE, "float32"), BASELINES),
        ] + [(Case(k, n, d, m_i, "float64", rho), BASELINES) for k in ("sparse", "densified")]
    out = [Case("dense", *s, "float64") for s in DENSE_SHAPES]
    out += [Case("dense", *s, "float32") for s in DENSE_SHAPES]
    out += [Case(k, n, d, m_i, "float64", rho) for k in ("sparse", "densified")]
    return [(c, None) for c in out]


def make_data(case: Case, seed: int = 0):
    """Rows ``A`` (dense array, or CSR for sparse kinds) and labels ``b`` in {-1, +1}."""
    rng = np.random.default_rng(seed)
    N = case.n * case.m_i
    b = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    if case.kind == "dense":
        return rng.standard_normal((N, case.d)) / np.sqrt(case.d), b
    A = sp.random(N, case.d, density=case.density, format="csr", random_state=rng)
    A.data[:] = 1.0  # binary features, as in w8a
    return A, b


def compressor_for(name: str, d: int) -> str:
    """The method's usual compressor spec (:func:`algorithms.registry.usual_compressor`)."""
    k = max(1, d // 100)
    return usual_compressor(name, k)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_case(
    case: Case, iters: int, repeats: int, device: str = "cpu", methods=None, track=None
) -> list[dict]:
    """Rows of :func:`run` for one case: one per method, baselines where they exist. A method
    that cannot be configured here gets an ``error`` row and is reported to ``track``."""
    track = track or Tracker()
    dev = torch.device(device)
    A, b = make_data(case)
    counts = np.full(case.n, case.m_i)
    dtype = getattr(torch, case.dtype)
    storage = "dense" if case.kind == "densified" else "auto"  # the dense kernels, forced
    problem = LogRegNonconvex(
        A, b, counts, lam=LAM, dtype=dtype, device=dev, x0="zeros", storage=storage
    )
    nnz = None if problem.dense else int(problem._A64.nnz)
    itemsize = torch.finfo(dtype).bits // 8
    jobs = []
    for name in methods or ALGORITHMS:
        spec = compressor_for(name, case.d)
        why = second_order(ALGORITHMS[name].requires, "first-order benchmark")
        if why is not None:
            track.skip(name, NOT_HERE)
            jobs.append({"method": name, "spec": spec, "error": why})
            continue
        opts = {"init_mode": "zero"} if name == "diana" else {}
        if name == "dcgd":  # its nonconvex step needs the horizon: the steps timed
            opts["horizon"] = iters
        try:
            algo, _rec = ALGORITHMS[name].configure(problem, parse_spec(spec), **opts)
        except ValueError as e:
            track.skip(name, why_skipped(str(e)))
            jobs.append({"method": name, "spec": spec, "error": reason(str(e))})
            continue
        final: dict = {}

        def ours(algo=algo, final=final, iters=iters):
            """Seconds of ``iters`` steps after an untimed ``init``, as the runner steps."""
            with step_mode(problem):
                comm = SimulatedComm(case.n, seed=0)
                state = algo.init(problem.x0, problem, comm)
                _sync(dev)
                t0 = time.perf_counter()
                for _ in range(iters):
                    state, _info = algo.step(state, problem, comm)
                _sync(dev)
                final["state"] = state
                return time.perf_counter() - t0

        jobs.append({"method": name, "spec": spec, "algo": algo, "ours": ours, "final": final})
    for job in jobs:
        if "ours" in job:
            job["ours"](iters=1)  # warm-up: lazy constants, allocator, kernels
    for job in jobs:
        if "ours" in job:
            job["compzoo_s"] = statistics.median(job["ours"]() for _ in range(repeats)) / iters
    if dev.type == "cpu":
        time.sleep(0.5)
        for name, run_for in _baseline_jobs(case, A, b, dtype, jobs, iters).items():
            # A loop's init is part of the same function: the steps are the difference
            # between a run of ``iters`` iterations and a run of none.
            whole = median_seconds(lambda run_for=run_for: run_for(iters), repeats, warmup=False)
            start = median_seconds(lambda run_for=run_for: run_for(0), repeats, warmup=False)
            job = next(j for j in jobs if j["method"] == name)
            job["numpy_loop_s"] = max(whole - start, 1e-9) / iters
        time.sleep(0.5)
    rows = []
    for job in jobs:
        row = {"case": case.label, "kind": case.kind, "n": case.n, "d": case.d}
        row.update(m_i=case.m_i, dtype=case.dtype, method=job["method"], spec=job["spec"])
        if "error" in job:
            rows.append({**row, "error": job["error"]})
            continue
        sbytes = bandwidth.state_bytes(job["final"]["state"])
        # Minibatch methods touch only their batches' rows: the bound counts those (a lower
        # bound: the PAGE/MVR variants evaluate two points, and sometimes a full pass).
        batch = getattr(job["algo"], "batch_size", None)
        rows_touched = case.n * min(case.m_i, batch) if batch else case.n * case.m_i
        nz = None if nnz is None else nnz * rows_touched // (case.n * case.m_i)
        dbytes = bandwidth.data_bytes(rows_touched, case.d, itemsize, nz)
        if batch:
            row["batch"] = batch
        row.update(
            compzoo_s=job["compzoo_s"],
            bytes=bandwidth.iteration_bytes(dbytes, sbytes),
            data_bytes=dbytes,
            state_bytes=sbytes,
        )
        if "numpy_loop_s" in job:
            row["numpy_loop_s"] = job["numpy_loop_s"]
        rows.append(row)
    return rows


def _baseline_jobs(case: Case, A, b, dtype, jobs: list[dict], max_iters: int) -> dict:
    """The per-node NumPy loops for the methods that have one, on this case's data: each a
    function of the number of iterations (at most ``max_iters``)."""
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    m = case.m_i
    if case.kind == "densified":
        A = A.toarray()
    A_nodes = [A[i * m : (i + 1) * m].astype(np_dtype) for i in range(case.n)]
    b_nodes = [b[i * m : (i + 1) * m].astype(np_dtype) for i in range(case.n)]
    x0 = np.zeros(case.d, dtype=np_dtype)
    k = max(1, case.d // 100)
    algos = {j["method"]: j["algo"] for j in jobs if "algo" in j}
    out: dict[str, Callable[[int], np.ndarray]] = {}
    if "ef21" in algos:
        g = algos["ef21"].gamma
        out["ef21"] = lambda iters: baselines.ef21_topk(A_nodes, b_nodes, x0, g, k, LAM, iters)
    if "diana" in algos:
        al = algos["diana"]
        out["diana"] = lambda iters: baselines.diana_randk(
            A_nodes, b_nodes, x0, al.gamma, k, al.alpha, LAM, iters
        )
    if "marina" in algos:
        ma = algos["marina"]
        comm = SimulatedComm(case.n, seed=0)
        p = ma._p(case.d)
        syncs = np.array([comm.coin(t, p, tag=tags.COIN) for t in range(max_iters)])
        out["marina"] = lambda iters: baselines.marina_randk(
            A_nodes, b_nodes, x0, ma.gamma, k, syncs, LAM, iters
        )
    if "dasha" in algos:
        da = algos["dasha"]
        a = da._a(case.d)
        out["dasha"] = lambda iters: baselines.dasha_randk(
            A_nodes, b_nodes, x0, da.gamma, k, a, LAM, iters
        )
    return out


def run(quick: bool = False, device: str = "cpu", methods=None, track=None) -> list[dict]:
    """Every case of :func:`cases`; one row per (case, method), each the median of 7 timings of
    10 steps (with ``quick``: 3 of 10). ``track`` (:class:`benchmarks.progress.Tracker`) hears
    of each case and its rows. Quick runs time 10 steps too: the first steps after a pause run
    slower than the rest, and over 2 steps they decided the row (EF21 + Top-1, n = 1000,
    d = 100, m_i = 20, float64, 2-core Intel Xeon: 5.6 ms a step over 2 steps, 1.2-1.9 ms over
    10, the per-node loop 20 ms either way; after a 0.5 s pause the first step took 3.1-5.7 ms,
    the tenth 1.3-1.7)."""
    iters, repeats = (10, 3) if quick else (10, 7)
    track = track or Tracker()
    plan = cases(quick)
    track.plan(len(plan))
    rows = []
    for case, some in plan:
        t0 = time.perf_counter()
        chosen = [m for m in (methods or ALGORITHMS) if some is None or m in some]
        track.case(f"{case.label}, {len(chosen)} method{'s' * (len(chosen) > 1)}")
        new = bench_case(case, iters, repeats, device, chosen, track)
        rows += new
        track.rows(new)
        log.debug("%s: %.1f s", case.label, time.perf_counter() - t0)
    return rows
