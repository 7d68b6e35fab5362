"""What the DASHA family shares: the state, the initial estimators, the momentum compression
step ``m_i = C(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))`` and the common theory inputs
(Tyurin & Richtárik 2022, arXiv 2202.01268, Algorithm 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_unit,
    initial_estimator,
    option,
)
from algorithms.vr.vr_common import (
    effective_omega,
    need,
    need_independent_unbiased,
    resolved,
    sample_smoothness,
)
from comm.base import Comm

INITS = ("full", "zero")
SOURCE = "Tyurin & Richtárik 2022, arXiv 2202.01268 (ICLR 2023)"


@dataclass(frozen=True)
class DASHAState(State):
    g: torch.Tensor  # (d,) server estimator, mean of g_i over all nodes
    g_i: torch.Tensor  # (m, d) node estimators (what the server knows of each node)
    h_i: torch.Tensor  # (m, d) node gradient estimators (grad f_i, PAGE, MVR)


def dasha_inputs(name: str, problem, compressor) -> dict[str, float]:
    """``omega``, ``n`` and ``a = 1/(2 omega + 1)`` for the theory, refusing correlated
    compressors (the analyses need independent ``C_i``: the ``omega/n`` terms)."""
    omega = need_independent_unbiased(name, compressor, problem.d)
    return {"omega": omega, "n": problem.n, "a": stepsizes.dasha_momentum(omega)}


PAGE_FORMULA = (
    "1 / (L + sqrt(48 omega (2 omega + 1) / n (L_tilde^2 + (1 - p) calL^2 / B)"
    " + 2 (1 - p) calL^2 / (p n B)))"
)


def page_form_theory(
    name: str, problem, compressor, B: int, p_default, note: str, step=stepsizes.dasha_page
) -> Theory:
    """The step of DASHA-PAGE's form (``step``: :func:`stepsizes.dasha_page` or
    :func:`stepsizes.dasha_sync_mvr`), shared by DASHA-PAGE and DASHA-SYNC-MVR;
    ``p_default()`` gives the probability ``p``."""
    base = dasha_inputs(name, problem, compressor)
    p = p_default()
    k = need(problem, "L", "L_tilde")
    calL = sample_smoothness(problem, name)
    gamma = step(k["L"], k["L_tilde"], calL, base["omega"], base["n"], p, B)
    return Theory(
        gamma=gamma,
        formula=PAGE_FORMULA,
        inputs={**k, **base, "calL": calL, "p": p, "B": B},
        params={"momentum": base["a"], "p": p},
        source=f"{SOURCE}, {name}; {note}",
    )


@dataclass(frozen=True)
class DASHABase(Algorithm):
    """Base of DASHA and its variants: subclasses define ``_h_next`` (the new ``h_i``)."""

    momentum: float | None = option(
        None, "DASHA momentum a in (0, 1] (default 1/(2 omega + 1))", check=check_unit
    )
    init_mode: str = option(
        "full", "g_i^0: full (= h_i^0 = grad f_i) | zero", choices=INITS, flag="init"
    )

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("G",)

    def _a(self, d: int) -> float:
        return resolved(
            self.momentum, lambda: stepsizes.dasha_momentum(effective_omega(self.compressor, d))
        )

    def init(self, x0, problem, comm: Comm) -> DASHAState:
        h_i = problem.grad(x0)
        if self.init_mode == "full":
            g_i, g = initial_estimator("full", h_i, self.compressor, comm)
        else:
            g_i, g = torch.zeros_like(h_i), torch.zeros_like(h_i[0])
        return DASHAState(x=x0.clone(), t=0, g=g, g_i=g_i, h_i=h_i)

    def _h_next(self, state: DASHAState, x: torch.Tensor, problem, comm: Comm):
        """The new ``h_i`` at ``x = x^{t+1}`` and extras."""
        raise NotImplementedError

    def _step(self, state: DASHAState, problem, comm: Comm):
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        h_i, extras = self._h_next(state, x, problem, comm)
        return self._compress(state, x, h_i, problem, comm, extras)

    def _compress(self, state: DASHAState, x, h_i, problem, comm: Comm, extras: dict):
        C, t = self.compressor, state.t
        a = self._a(problem.d)
        # h_i - h_i^t - a (g_i^t - h_i^t), with one temporary (reused for the monitor)
        v = torch.sub(h_i, state.h_i, alpha=1.0 - a).sub_(state.g_i, alpha=a)
        packet = C.encode(v, comm.rng_for(C, t))
        m_i = C.decode(packet)
        g = state.g + comm.reduce(packet, C, decoded=m_i)
        g_i = m_i.add_(state.g_i)
        err = torch.sub(g_i, h_i, out=v)
        extras["G"] = comm.monitor_mean(torch.linalg.vector_norm(err, dim=1) ** 2)
        return DASHAState(x=x, t=t + 1, g=g, g_i=g_i, h_i=h_i), extras
