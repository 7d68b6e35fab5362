"""DASHA-PAGE: DASHA with PAGE gradient estimators for finite sums (Tyurin & Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms.base import Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.dasha_common import DASHABase, DASHAState, page_form_theory
from algorithms.vr.vr_common import (
    P_HELP,
    resolved,
    samples_per_node,
    support_ratio,
)
from comm.base import Comm
from streams import tags


def page_p(compressor, problem, batch: int) -> float:
    """``B/(B + m)`` with ``m = max_i m_i`` (the authors' code default, [V-code]); for problems
    without sample counts (online, e.g. the quadratics) ``zeta_C/d``, as MARINA's ``p``."""
    m = samples_per_node(problem)
    return support_ratio(compressor, problem.d) if m is None else batch / (batch + m)


@dataclass(frozen=True)
class DASHAPAGE(DASHABase):
    """DASHA-PAGE: DASHA with PAGE estimators for finite sums (arXiv 2202.01268, Alg. 1).

    Tyurin & Richtárik 2022, arXiv 2202.01268, Algorithm 1 with the PAGE estimator, for
    ``f_i = (1/m_i) sum_j f_ij``.

    Update: as DASHA (see :class:`algorithms.vr.dasha.DASHA`) with
    ``h_i^{t+1} = grad f_i(x^{t+1})`` when a coin ``c ~ Bernoulli(p)`` shared by all nodes is 1,
    else ``h_i^t + (1/B) sum_{j in I_i} (grad f_ij(x^{t+1}) - grad f_ij(x^t))`` on a minibatch of
    ``B = batch_size`` samples (with replacement, from the node's stream; the same samples at
    both points). The coin changes computation only: every round sends one compressed vector.
    ``p`` defaults to ``B/(B + m)`` with ``m = max_i m_i`` ([V-code]; ``zeta_C/d`` for problems
    without sample counts); ``init`` and ``momentum`` as DASHA.

    Theory [U] (theory sheet §2.10): ``1/(L + sqrt(48 omega (2 omega + 1)/n (L_tilde^2 +
    (1 - p) calL^2/B) + 2 (1 - p) calL^2/(p n B)))`` with ``calL`` the mean-square per-sample
    smoothness from ``problem.sample_smoothness()`` (standing for the paper's ``L_max``; without
    it give ``--step``). Reported: ``G = mean_i ||g_i - h_i||^2`` and ``sync`` (the coin).
    """

    batch_size: int = option(
        1, "minibatch B per node for the PAGE differences", check=check_count, required=True
    )
    p: float | None = option(None, P_HELP, check=check_unit)

    batchable: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("G", "sync")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Tyurin & Richtárik 2022, arXiv 2202.01268, DASHA-PAGE's nonconvex theorem (Section 6; "
        "its number not given here), constants as recalled [U]; p = B/(B + m) as the authors' "
        "code"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        B = opts.get("batch_size") or 1
        return page_form_theory(
            "DASHA-PAGE",
            problem,
            compressor,
            B,
            lambda: resolved(opts.get("p"), lambda: page_p(compressor, problem, B)),
            "theory sheet §2.10 [U]",
        )

    def _h_next(self, state: DASHAState, x, problem, comm: Comm):
        t = state.t
        p = resolved(self.p, lambda: page_p(self.compressor, problem, self.batch_size))
        if comm.coin(t, p, tag=tags.COIN):
            return problem.grad(x), {"sync": 1.0}
        batch = problem.sample(comm.rng(t, tag=tags.BATCH), self.batch_size)
        h_i = problem.grad_diff(x, state.x, batch).add_(state.h_i)
        return h_i, {"sync": 0.0}
