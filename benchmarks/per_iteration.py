"""Seconds per iteration of compzoo's batched methods against per-node NumPy loops.

EF21 + Top-K and DIANA + Rand-K on dense ``logreg-nonconvex`` data (lambda = 0.1) at
``(n, d, m_i)`` in {(20, 1000, 100), (100, 1000, 100), (1000, 100, 20)}, float64, one thread
pool, both sides timed in the same run on the same data with the same step; the ratio is
baseline seconds / compzoo seconds (above 1: compzoo is faster). Within a shape, all compzoo
timings come first, then all baseline timings, with a pause between: NumPy's BLAS threads
and torch's keep spinning briefly after a call and slow the other side down when they
alternate.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from algorithms.comm import SimulatedComm
from algorithms.registry import get_algorithm
from benchmarks import baselines
from compressors import parse_spec
from problems.logreg_nonconvex import LogRegNonconvex

SHAPES = ((20, 1000, 100), (100, 1000, 100), (1000, 100, 20))
LAM = 0.1


def make_data(n: int, d: int, m_i: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n * m_i, d)) / np.sqrt(d)
    b = np.where(rng.random(n * m_i) < 0.5, -1.0, 1.0)
    return A, b


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_shape(n: int, d: int, m_i: int, iters: int, repeats: int) -> list[dict]:
    A, b = make_data(n, d, m_i)
    counts = np.full(n, m_i)
    problem = LogRegNonconvex(A, b, counts, lam=LAM, x0="zeros")
    A_nodes = [A[i * m_i : (i + 1) * m_i] for i in range(n)]
    b_nodes = [b[i * m_i : (i + 1) * m_i] for i in range(n)]
    x0 = np.zeros(d)
    k = max(1, d // 100)
    jobs: list[tuple[str, str, Callable, Callable]] = []
    for name, spec, opts in (
        ("ef21", f"topk:k={k}", {}),
        ("diana", f"randk:k={k}", {"init_mode": "zero"}),
    ):
        algo, _rec = get_algorithm(name).configure(problem, parse_spec(spec), **opts)

        def ours(algo=algo):
            comm = SimulatedComm(n, seed=0)
            state = algo.init(problem.x0, problem, comm)
            for _ in range(iters):
                state, _info = algo.step(state, problem, comm)
            return state.x

        if name == "ef21":

            def base(gamma=algo.gamma):
                return baselines.ef21_topk(A_nodes, b_nodes, x0, gamma, k, LAM, iters)
        else:

            def base(gamma=algo.gamma, alpha=algo.alpha):
                return baselines.diana_randk(A_nodes, b_nodes, x0, gamma, k, alpha, LAM, iters)

        jobs.append((name, spec, ours, base))
    for _name, _spec, ours, _base in jobs:
        ours()  # warm-up (lazy constants, allocator)
    t_ours = [_median_time(ours, repeats) / iters for _n, _s, ours, _b in jobs]
    time.sleep(0.5)
    t_base = [_median_time(base, repeats) / iters for _n, _s, _o, base in jobs]
    time.sleep(0.5)
    return [
        {
            "method": f"{name}+{spec}",
            "n": n,
            "d": d,
            "m_i": m_i,
            "compzoo_ms": 1e3 * to,
            "numpy_loop_ms": 1e3 * tb,
            "ratio": tb / to,
        }
        for (name, spec, _o, _b), to, tb in zip(jobs, t_ours, t_base, strict=True)
    ]


def run(quick: bool = False) -> list[dict]:
    iters, repeats = (10, 1) if quick else (40, 3)
    rows = []
    for n, d, m_i in SHAPES:
        rows += bench_shape(n, d, m_i, iters, repeats)
    return rows


def table(rows: list[dict]) -> str:
    head = "| method | n | d | m_i | compzoo ms/iter | NumPy loop ms/iter | speed-up |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['n']} | {r['d']} | {r['m_i']} | "
            f"{r['compzoo_ms']:.3f} | {r['numpy_loop_ms']:.3f} | {r['ratio']:.2f}x |"
        )
    threads = torch.get_num_threads()
    lines.append(f"\n(torch threads: {threads}; float64; ratio = NumPy loop time / compzoo time)")
    return "\n".join(lines)
