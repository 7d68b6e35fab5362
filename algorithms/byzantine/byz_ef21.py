"""Byz-EF21: EF21 with a robust aggregator (Rammal, Gruntkowska, Fedin, Gorbunov & Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import State, Theory
from algorithms.provenance import Provenance
from algorithms.robust.options import (
    BYZ_REPORTS,
    ByzantineAlgorithm,
    theory_counts,
)
from algorithms.stepsizes.byzantine import byz_ef21
from algorithms.vr.vr_common import need
from comm.base import Comm

SOURCE = (
    "Rammal, Gruntkowska, Fedin, Gorbunov & Richtárik 2024, arXiv 2310.09804 (Byz-EF21); step "
    "as the coauthors' notebook (Nikosimus/CC-for-BR-Learning Experiments.ipynb, gamma_th_ef_f)"
)


@dataclass(frozen=True)
class ByzEF21State(State):
    g_i: torch.Tensor  # (m, d) node i's EF21 estimator (the server holds the same rows)
    g: torch.Tensor  # (d,) the server's aggregate ARAgg(g_1, ..., g_n)


@dataclass(frozen=True)
class ByzEF21(ByzantineAlgorithm):
    """Byz-EF21: EF21 with a robust aggregator (arXiv 2310.09804).

    Rammal et al., AISTATS 2024; the coauthors' code Nikosimus/CC-for-BR-Learning
    ``byz_ef21.py`` (read, not copied).

    Update: ``x^{t+1} = x^t - gamma g^t`` (broadcast: ``32 d`` bits down); node ``i`` sends
    ``c_i = C(grad f_i(x^{t+1}) - g_i^t)`` (its payload's bits up) and sets
    ``g_i^{t+1} = g_i^t + c_i``; the server, which keeps every node's ``g_i`` (it rebuilds
    ``g_i^{t+1}`` from ``c_i``), forms ``g^{t+1} = ARAgg(g_1^{t+1}, ..., g_n^{t+1})``.
    ``g_i^0 = grad f_i(x^0)`` (sent uncompressed, charged) and ``g^0 = ARAgg(g_i^0)``. The
    Byzantine nodes (the last ``K`` ids) make the server's copy of their rows whatever the attack
    computes from the honest rows (:mod:`algorithms.robust`); the coauthors' code applies the
    IPM/ALIE attacks to the stored rows the same way and bit flipping to the message
    (``g_i -= C(...)``), here to the row (``-g_i``).

    Theory ([V-code], the coauthors' notebook; the theorem could not be read):
    ``gamma = 1/(L + (2/alpha)(1 + sqrt(8 c delta)) L_tilde)``, ``alpha`` the compressor's
    ``delta``, ``delta = K/n`` the Byzantine fraction, ``c = --agg-c`` (default ``256/15``, the
    notebook's). Compressor: contractive (``needs``). Reported: ``f_honest``,
    ``grad_norm_sq_honest``.
    """

    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = BYZ_REPORTS
    provenance: ClassVar[Provenance] = pv.authors_code(
        "Nikosimus/CC-for-BR-Learning",
        "Experiments.ipynb, gamma_th_ef_f",
        "the coauthors' notebook for Rammal, Gruntkowska, Fedin, Gorbunov & Richtárik 2024, "
        "arXiv 2310.09804; the theorem itself could not be read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        _, G, delta, c = theory_counts(problem, opts)
        alpha = compressor.delta(problem.d)
        k = need(problem, "L", "L_tilde")
        return Theory(
            gamma=byz_ef21(k["L"], k["L_tilde"], alpha, c, delta),
            formula="1 / (L + (2 / alpha) (1 + sqrt(8 c delta)) L_tilde)",
            inputs={**k, "alpha": alpha, "G": G, "c": c, "delta": delta},
            source=SOURCE,
        )

    def init(self, x0, problem, comm: Comm) -> ByzEF21State:
        self.check_nodes(problem)
        g_i = self.data(problem).grad(x0)
        full = torch.full((comm.m,), comm.float_bits * problem.d, dtype=torch.int64)
        g = self.robust_aggregate(g_i, full, comm, -1)
        return ByzEF21State(x=x0.clone(), t=0, g_i=g_i, g=g)

    def _step(self, state: ByzEF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        packet = C.encode(self.data(problem).grad(x) - state.g_i, comm.rng_for(C, t))
        g_i = state.g_i + C.decode(packet)
        g = self.robust_aggregate(g_i, packet.nbits, comm, t, center=state.g)
        return ByzEF21State(x=x, t=t + 1, g_i=g_i, g=g), self.honest_report(x, problem)
