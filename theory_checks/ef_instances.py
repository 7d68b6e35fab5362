"""Run helpers shared by the error-feedback checks, and the exact instances they use from
:mod:`problems.instances`: :func:`beznosikov` (theory sheet §3.7, arXiv 2002.12410) and
:func:`heterogeneous_ridge` (theory sheet §3.6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from algorithms.comm import SimulatedComm
from problems.instances import BEZ_A, beznosikov, heterogeneous_ridge
from theory_checks.base import single_threaded

__all__ = [
    "BEZ_A",
    "beznosikov",
    "f_gap",
    "heterogeneous_ridge",
    "run",
    "G_of",
    "single_thread",
]


single_thread = single_threaded


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
