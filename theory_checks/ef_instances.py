"""Small exact problems and run helpers shared by the error-feedback checks.

* :func:`beznosikov`: the counterexample of Beznosikov, Horváth, Richtárik & Safaryan 2020
  (arXiv 2002.12410), theory sheet §3.7: ``n = d = 3``,
  ``f_i(x) = <a_i, x>^2 + (1/4)||x||^2``, built as a least-squares problem with one row
  ``sqrt(2) a_i`` per node, target 0 and ridge ``lam = 1/2`` (so ``L_i = 34.5``,
  ``L = 103/6``, ``mu = 7/6``, ``f* = 0``, ``x* = 0``).
* :func:`hetero_ridge`: the small heterogeneous ridge of the theory sheet §3.6 (``n = 10``,
  ``d = 20``, ``m = 30``, ``lam = 0.1``, ``numpy.random.default_rng(1)``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from algorithms.comm import SimulatedComm
from problems.least_squares import LeastSquares

__all__ = ["BEZ_A", "beznosikov", "f_gap", "hetero_ridge", "run", "G_of", "single_thread"]


def single_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` with one intra-op thread: on these tiny problems (``d <= 30``) a thread pool
    only adds synchronisation, which on a loaded machine costs milliseconds per operation."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        old = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(old)

    return wrapper


BEZ_A = np.array([[-3.0, 2.0, 2.0], [2.0, -3.0, 2.0], [2.0, 2.0, -3.0]])


def beznosikov(x0: str = "ones") -> LeastSquares:
    """The §3.7 instance ``f_i(x) = <a_i, x>^2 + ||x||^2/4`` (arXiv 2002.12410)."""
    return LeastSquares(np.sqrt(2.0) * BEZ_A, np.zeros(3), np.ones(3, dtype=np.int64), lam=0.5,
                        x0=x0)  # fmt: skip


def hetero_ridge(x0: str = "ones") -> LeastSquares:
    """The §3.6 heterogeneous ridge: ``f_i = (1/(2m))||A_i x - y_i||^2 + (lam/2)||x||^2``."""
    n, d, m = 10, 20, 30
    rng = np.random.default_rng(1)
    A = [rng.standard_normal((m, d)) for _ in range(n)]
    y = [3.0 * rng.standard_normal(m) + 2.0 * i for i in range(n)]
    return LeastSquares(np.vstack(A), np.concatenate(y), np.full(n, m), lam=0.1, x0=x0)


def f_gap(problem: Any, x: torch.Tensor) -> float:
    """``f(x) - f*`` for a strongly convex quadratic, as ``(1/2)<x - x*, grad f(x)>`` (exact,
    without the cancellation of ``f(x) - f*`` near the optimum)."""
    return 0.5 * float((x - problem.x_star) @ problem.full_grad(x))


def G_of(state: Any, problem: Any, attr: str = "g_i") -> float:
    """``G = (1/n) sum_i ||g_i - grad f_i(x)||^2`` of a state (EF21/3PC ``g_i``, EF-BV ``h_i``)."""
    return float(((getattr(state, attr) - problem.grad(state.x)) ** 2).sum(dim=1).mean())


def run(
    algo: Any,
    problem: Any,
    T: int,
    seed: int = 0,
    observe: Callable[[Any], Any] | None = None,
) -> tuple[Any, list[Any]]:
    """Run ``T`` steps; returns the final state and ``observe(state)`` at ``t = 0..T``."""
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    obs = [observe(state)] if observe else []
    for _ in range(T):
        state, _ = algo.step(state, problem, comm)
        if observe:
            obs.append(observe(state))
    return state, obs
