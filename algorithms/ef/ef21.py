"""EF21: error feedback by compressing gradient differences (Richtárik, Sokolov & Fatkhullin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    initial_estimator,
    option,
    regime_option,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from comm.error_feedback import ef21_update  # noqa: F401  (its variants import it here)

INITS = ("full", "compressed", "zero")


def ef21_init_option():
    """The ``init_mode`` option (``--init``) of EF21's estimators ``g_i^0``
    (:func:`algorithms.base.initial_estimator`)."""
    return option("full", "g_i^0: full | compressed | zero", choices=INITS, flag="init")


@dataclass(frozen=True)
class EF21State(State):
    g_i: torch.Tensor  # (m, d) node estimators
    g: torch.Tensor  # (d,) server estimator, mean of g_i over all nodes


def ef21_theory(problem, compressor, regime: str = "auto") -> Theory:
    """EF21's step: Theorem 1 (nonconvex) or Theorem 2 (PL, when ``mu`` is known), arXiv
    2106.05203, with ``theta``, ``beta`` at the optimal Young parameter."""
    c, d = problem.consts, problem.d
    alpha = compressor.delta(d)
    theta, beta = stepsizes.ef21_theta_beta(alpha)
    inputs = {"L": c.L, "L_tilde": c.L_tilde, "alpha": alpha, "theta": theta, "beta": beta}
    if regime == "pl" or (regime == "auto" and c.mu is not None):
        if c.mu is None:
            raise ValueError("the PL step needs mu, which this problem does not know")
        inputs["mu"] = c.mu
        return Theory(
            gamma=stepsizes.ef21_pl(c.L, c.L_tilde, alpha, c.mu),
            formula="min(1 / (L + L_tilde sqrt(2 beta / theta)), theta / (2 mu))",
            inputs=inputs,
            source="Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Theorem 2",
        )
    return Theory(
        gamma=stepsizes.ef21(c.L, c.L_tilde, alpha),
        formula="1 / (L + L_tilde sqrt(beta / theta))",
        inputs=inputs,
        source="Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Theorem 1",
    )


def borrowed_ef21_theory(problem, compressor, opts, method: str, note: str = "") -> Theory:
    """EF21's step for a variant whose own step constants are unverified (theory sheet §2.4,
    §2.6, §2.7 [U]), as the authors' experiments use it (Fatkhullin et al. 2021,
    arXiv 2110.03294): the formula and source say so."""
    th = ef21_theory(problem, compressor, opts.get("regime", "auto"))
    return Theory(
        gamma=th.gamma,
        formula=th.formula + f" (EF21's step{note})",
        inputs=th.inputs,
        source=th.source + f"; {method}'s own constants are unverified, arXiv 2110.03294",
    )


@dataclass(frozen=True)
class EF21Base(Algorithm):
    """What EF21, EF21-SGD and EF21-PP share: the start of the estimators ``g_i^0``
    (``--init``, see :func:`initial_estimator`) and the step ``x^{t+1} = x^t - gamma g^t``,
    after which the server broadcasts ``x^{t+1}`` uncompressed."""

    init_mode: str = ef21_init_option()

    def init(self, x0, problem, comm: Comm) -> EF21State:
        g_i, g = initial_estimator(self.init_mode, problem.grad(x0), self.compressor, comm)
        return EF21State(x=x0.clone(), t=0, g_i=g_i, g=g)

    def _descend(self, state: EF21State, problem, comm: Comm) -> torch.Tensor:
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        return x


@dataclass(frozen=True)
class EF21(EF21Base):
    """EF21 (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Algorithm 2).

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` sends
    ``c_i = C(grad f_i(x^{t+1}) - g_i^t)`` and sets ``g_i^{t+1} = g_i^t + c_i``; the server sets
    ``g^{t+1} = g^t + (1/n) sum_i c_i``. Invariant: ``g^t = mean_i g_i^t``.

    ``init``: ``g_i^0 = grad f_i(x^0)`` (``full``, the authors' code; sent uncompressed and
    charged here), ``C(grad f_i(x^0))`` (``compressed``, suggested by Fatkhullin et al. 2021,
    arXiv 2110.03294) or ``0`` (``zero``).

    Theory: contractive ``C`` with ``alpha = delta``; Theorem 1 step
    ``1/(L + L_tilde sqrt(beta/theta))``, Theorem 2 (PL) step
    ``min(1/(L + L_tilde sqrt(2 beta/theta)), theta/(2 mu))`` (``regime``: ``auto`` picks PL
    when the problem knows ``mu``). Lyapunov: ``Phi = f - f_inf + (gamma/(2 theta)) G`` with
    ``G = mean_i ||g_i - grad f_i(x)||^2``, reported as ``G`` each step.
    """

    regime: str = regime_option()

    needs: ClassVar[str] = "contractive"
    batchable: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("G",)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Theorem 1 (nonconvex) and "
        "Theorem 2 (PL)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return ef21_theory(problem, compressor, opts.get("regime", "auto"))

    def _step(self, state: EF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        g_i, g, G = ef21_update(C, problem.grad(x), state.g_i, state.g, comm, t)
        return EF21State(x=x, t=t + 1, g_i=g_i, g=g), {"G": G}
