"""Run helpers shared by the error-feedback checks, and the exact instances they use from
:mod:`problems.instances`: :func:`beznosikov` (theory sheet §3.7, arXiv 2002.12410) and
:func:`heterogeneous_ridge` (theory sheet §3.6)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from comm import SimulatedComm
from problems.instances import BEZ_A, beznosikov, heterogeneous_ridge
from problems.least_squares import LeastSquares
from theory_checks.base import single_threaded

__all__ = [
    "BEZ_A",
    "DecayedEF14",
    "beznosikov",
    "f_gap",
    "heterogeneous_ridge",
    "run",
    "G_of",
    "G_sent",
    "single_thread",
    "tight_quadratic",
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


@dataclass(frozen=True)
class DecayedEF14:
    """EF14 with a decayed memory, ``e_i^{t+1} = keep (p_i - C(p_i))`` instead of ``p_i -
    C(p_i)``: a broken variant (not a method of the library), for the checks' power. The part
    ``(1 - keep)(p_i - C(p_i))`` is lost each step, so the virtual iterate no longer follows
    gradient descent and a bias like DCGD's (``O(gamma)``, not EF14's ``O(gamma^2)``) remains.
    Runs the library's EF14 step, then scales the memory it kept."""

    ef14: Any
    keep: float = 0.5

    @property
    def gamma(self) -> float:
        return self.ef14.gamma

    @property
    def compressor(self) -> Any:
        return self.ef14.compressor

    def init(self, x0: torch.Tensor, problem: Any, comm: Any) -> Any:
        return self.ef14.init(x0, problem, comm)

    def step(self, state: Any, problem: Any, comm: Any) -> tuple[Any, Any]:
        state, info = self.ef14.step(state, problem, comm)
        return replace(state, e_i=state.e_i * self.keep), info


def tight_quadratic(bottom: bool = False) -> LeastSquares:
    """A quadratic on which the descent-lemma part of the EF21/3PC proofs is exact.

    ``n = 2``, ``d = 4``, ``f_i(x) = (1/2)(x - c_i)^T diag(h_i) (x - c_i)`` (least squares with
    ``A_i = 2 diag(sqrt(h_i))``, ``m_i = 4``) with ``h_1 = (12, 3, 2, 1)``,
    ``h_2 = (8, 5, 2, 1)``: ``H = diag(10, 4, 2, 1)``, ``L = 10``, ``L_i = (12, 8)``; the start
    is ``x^0 = x* + e_1``, the top eigenvector. With an exact compressor (Top-``d``,
    ``alpha = 1``: ``theta = 1``, ``beta = 0``) EF21 is gradient descent at ``gamma = 1/L``,
    for which ``f(x^+) = f(x) - (gamma/2)||grad f(x)||^2`` holds with equality: the nonconvex
    bound and the one-step Lyapunov inequality are then tight, and any ``c/L``, ``c > 1``,
    breaks them.

    With ``bottom``: ``h_1 = (12, 9, 7, 6)``, ``h_2 = (8, 7, 5, 4)``, so ``H = diag(10, 8, 6,
    5)``, ``mu = L/2`` and the PL step ``min(1/L, theta/(2 mu))`` is ``1/L`` from both terms;
    ``x^0 = x* + e_1 + e_4``. A step ``c/L`` keeps the top mode at ``(1 - c)^2`` per step
    against the rate ``1 - c/2``: the PL theorem's bound fails for every ``c > 1.5``.

    Too small a step falls short of the theorems' rates *at the theory step* ``1/L`` (the
    step-too-small variants, ``c = 0.1``): on the top mode ``f - f*`` keeps ``(1 - c)^2`` per step
    (``0.81``), so it decreases by ``c (2 - c) < 1`` times the ``(gamma/2)||grad f||^2`` that the
    one-step inequality asks at ``gamma = 1/L``, the average ``||grad f||^2`` is about
    ``1/(c (2 - c))`` (5.3) times the nonconvex bound, and with ``bottom`` the contraction
    ``0.81 > 1 - gamma mu = 1/2`` misses the PL rate (every ``c < 1 - 1/sqrt(2)``).

    Built in float64 (explicitly): the bounds are attained here, so the checks' margins on the
    correct method are at rounding level (``1e-16``..``1e-12``); float32 or another BLAS could
    flip their sign without a bug."""
    if bottom:
        h = np.array([[12.0, 9.0, 7.0, 6.0], [8.0, 7.0, 5.0, 4.0]])
    else:
        h = np.array([[12.0, 3.0, 2.0, 1.0], [8.0, 5.0, 2.0, 1.0]])
    c = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 1.0, 2.5, -1.0]])
    A = np.concatenate([2.0 * np.diag(np.sqrt(hi)) for hi in h])
    b = np.concatenate([2.0 * np.sqrt(hi) * ci for hi, ci in zip(h, c, strict=True)])
    P = LeastSquares(A, b, np.full(2, 4), lam=0.0, x0="zeros", dtype=torch.float64)
    e = torch.zeros(4, dtype=P.x0.dtype)
    e[0] = 1.0
    e[3] = 1.0 if bottom else 0.0
    P.x0 = P.x_star + e
    return P


def G_sent(state: Any, problem: Any, compressor: Any) -> float:
    """``G`` of a state: :func:`G_of` for a method with estimators ``g_i``; for one without
    (DCGD), the error of what it sends at ``x``, ``(1/n) sum_i ||C(grad f_i(x)) - grad f_i(x)||^2``
    (its ``g_i`` is ``C(grad f_i(x))``)."""
    if hasattr(state, "g_i"):
        return G_of(state, problem)
    g = problem.grad(state.x)
    comm = SimulatedComm(problem.n, seed=0)
    c = compressor.decode(compressor.encode(g, comm.rng_for(compressor, state.t)))
    return float(((c - g) ** 2).sum(dim=1).mean())
