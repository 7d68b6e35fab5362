"""Byz-DASHA-PAGE: DASHA-PAGE with a robust aggregator (Rammal, Gruntkowska, Fedin, Gorbunov &
Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import State, Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.robust.options import (
    BYZ_REPORTS,
    ByzantineAlgorithm,
    theory_counts,
)
from algorithms.stepsizes.byzantine import byz_dasha_page
from algorithms.vr.vr_common import (
    need,
    need_unbiased,
    resolved,
    sample_smoothness,
    samples_per_node,
    support_ratio,
)
from comm.base import Comm
from streams.tags import BYZ_DASHA_PAGE_BATCH as TAG_BDP_BATCH
from streams.tags import BYZ_DASHA_PAGE_COIN as TAG_BDP_COIN

SOURCE = (
    "Rammal, Gruntkowska, Fedin, Gorbunov & Richtárik 2024, arXiv 2310.09804 (Byz-DASHA-PAGE); "
    "step, a and p as the coauthors' notebook (Nikosimus/CC-for-BR-Learning Experiments.ipynb, "
    "R_dp, mom, p_d)"
)


def byz_page_p(compressor, problem, batch: int) -> float:
    """``b/m`` with ``m = max_i m_i`` (the notebook's ``p_d = batch_size/mul``); without sample
    counts (online problems) ``zeta_C/d``."""
    m = samples_per_node(problem)
    return support_ratio(compressor, problem.d) if m is None else min(1.0, batch / m)


@dataclass(frozen=True)
class ByzDASHAPAGEState(State):
    g_i: torch.Tensor  # (m, d) node i's DASHA estimator (the server holds the same rows)
    h_i: torch.Tensor  # (m, d) node i's PAGE estimator of grad f_i
    g: torch.Tensor  # (d,) the server's aggregate ARAgg(g_1, ..., g_n)


@dataclass(frozen=True)
class ByzDASHAPAGE(ByzantineAlgorithm):
    """Byz-DASHA-PAGE: DASHA-PAGE with a robust aggregator (arXiv 2310.09804).

    Rammal et al., AISTATS 2024; the coauthors' code Nikosimus/CC-for-BR-Learning
    ``byz_dasha_page.py`` (read, not copied).

    Update: ``x^{t+1} = x^t - gamma g^t`` (broadcast: ``32 d`` bits down); a shared coin
    ``c ~ Bernoulli(p)``; node ``i`` sets ``h_i^{t+1} = grad f_i(x^{t+1})`` if ``c = 1``, else
    ``h_i^t + grad f_{i,B}(x^{t+1}) - grad f_{i,B}(x^t)`` (``b`` samples with replacement from
    its stream, the same at both points); it sends
    ``m_i = C(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))`` every round (its payload's bits up; the
    coin changes computation only) and ``g_i^{t+1} = g_i^t + m_i``; the server keeps every
    ``g_i`` and forms ``g^{t+1} = ARAgg(g_1^{t+1}, ..., g_n^{t+1})``.
    ``g_i^0 = h_i^0 = grad f_i(x^0)`` (sent uncompressed, charged), ``g^0 = ARAgg(g_i^0)``.
    Byzantine nodes (the last ``K`` ids) make the server's copy of their rows what the attack
    computes from the honest rows (:mod:`algorithms.robust`).

    Theory ([V-code], the coauthors' notebook; the theorem could not be read):
    ``gamma = 1/(L + sqrt(R))``, ``R = (12 omega (2 omega + 1)(L_tilde^2 + calL^2/b) +
    2 (m/b) calL^2/b)(sqrt(1/G) + sqrt(8 c delta))^2``, ``a = 1/(2 omega + 1)``, ``p = b/m``
    (``m = max_i m_i``), ``G = n - K``, ``delta = K/n``, ``c = --agg-c`` (default ``256/15``).
    Compressor: unbiased (``needs``). Reported: ``sync``, ``f_honest``,
    ``grad_norm_sq_honest``.
    """

    batch_size: int = option(
        1, "minibatch b per node for the gradient differences", check=check_count, required=True
    )
    p: float | None = option(
        None, "probability p of the shared full-gradient coin (default b/m)", check=check_unit
    )
    momentum: float | None = option(None, "DASHA's a (default 1/(2 omega + 1))", check=check_unit)

    needs: ClassVar[str] = "unbiased"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync", *BYZ_REPORTS)
    provenance: ClassVar[Provenance] = pv.authors_code(
        "Nikosimus/CC-for-BR-Learning",
        "Experiments.ipynb, R_dp, mom and p_d",
        "the coauthors' notebook for Rammal et al. 2024, arXiv 2310.09804, with the "
        "mean-square calL in place of their worst per-sample L_ij; the theorem itself could "
        "not be read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        d, b = problem.d, opts.get("batch_size") or 1
        _, G, delta, c = theory_counts(problem, opts)
        omega = need_unbiased("Byz-DASHA-PAGE", compressor, d)
        k = need(problem, "L", "L_tilde")
        calL = sample_smoothness(problem, "Byz-DASHA-PAGE")
        m = samples_per_node(problem) or b
        p = resolved(opts.get("p"), lambda: byz_page_p(compressor, problem, b))
        a = resolved(opts.get("momentum"), lambda: 1.0 / (2.0 * omega + 1.0))
        return Theory(
            gamma=byz_dasha_page(k["L"], k["L_tilde"], calL, omega, G, b, m, c, delta),
            formula=(
                "1 / (L + sqrt((12 omega (2 omega + 1) (L_tilde^2 + calL^2 / b) + 2 (m / b) "
                "calL^2 / b) (sqrt(1 / G) + sqrt(8 c delta))^2))"
            ),
            inputs={**k, "calL": calL, "omega": omega, "b": b, "m": m, "G": G, "c": c,
                    "delta": delta},
            params={"p": p, "momentum": a},
            source=SOURCE,
        )  # fmt: skip

    def _p(self, problem) -> float:
        return resolved(self.p, lambda: byz_page_p(self.compressor, problem, self.batch_size))

    def _a(self, problem) -> float:
        omega = need_unbiased("Byz-DASHA-PAGE", self.compressor, problem.d)
        return resolved(self.momentum, lambda: 1.0 / (2.0 * omega + 1.0))

    def init(self, x0, problem, comm: Comm) -> ByzDASHAPAGEState:
        self.check_nodes(problem)
        g_i = self.data(problem).grad(x0)
        full = torch.full((comm.m,), comm.float_bits * problem.d, dtype=torch.int64)
        g = self.robust_aggregate(g_i, full, comm, -1)
        return ByzDASHAPAGEState(x=x0.clone(), t=0, g_i=g_i, h_i=g_i.clone(), g=g)

    def _step(self, state: ByzDASHAPAGEState, problem, comm: Comm):
        C, t, data = self.compressor, state.t, self.data(problem)
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        sync = comm.coin(t, self._p(problem), tag=TAG_BDP_COIN)
        if sync:
            h_i = data.grad(x)
        else:
            batch = data.sample(comm.rng(t, tag=TAG_BDP_BATCH), self.batch_size)
            h_i = state.h_i + data.grad_diff(x, state.x, batch)
        msg = h_i - state.h_i - self._a(problem) * (state.g_i - state.h_i)
        packet = C.encode(msg, comm.rng_for(C, t))
        g_i = state.g_i + C.decode(packet)
        g = self.robust_aggregate(g_i, packet.nbits, comm, t, center=state.g)
        extras = {"sync": float(sync), **self.honest_report(x, problem)}
        return ByzDASHAPAGEState(x=x, t=t + 1, g_i=g_i, h_i=h_i, g=g), extras
