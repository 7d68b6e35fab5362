"""Byz-VR-MARINA: VR-MARINA with a robust aggregator (Gorbunov, Horváth, Richtárik & Gidel)."""

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
from algorithms.stepsizes.byzantine import byz_vr_marina
from algorithms.vr.vr_common import (
    P_HELP,
    minibatch_p,
    need,
    need_unbiased,
    resolved,
    sample_smoothness,
)
from comm.base import Comm
from streams.tags import BYZ_VR_MARINA_BATCH as TAG_BYZ_BATCH
from streams.tags import BYZ_VR_MARINA_COIN as TAG_BYZ_COIN

SOURCE = (
    "Gorbunov, Horváth, Richtárik & Gidel 2022, arXiv 2206.00529, Alg. 1, Thm 2.1 (A recalled, "
    "[U]); p as VR-MARINA (arXiv 2102.07845, Cor. 3.1)"
)


@dataclass(frozen=True)
class ByzVRMARINAState(State):
    g: torch.Tensor  # (d,) the server's aggregate g^k = ARAgg(g_1^k, ..., g_n^k)


@dataclass(frozen=True)
class ByzVRMARINA(ByzantineAlgorithm):
    """Byz-VR-MARINA: VR-MARINA with a robust aggregator (arXiv 2206.00529, Algorithm 1).

    Update (Alg. 1): ``x^{k+1} = x^k - gamma g^k`` (the model, or ``g^k``, is
    broadcast: ``32 d`` bits down); a shared coin ``c_k ~ Bernoulli(p)``; node ``i`` forms
    ``g_i^{k+1} = grad f_i(x^{k+1})`` if ``c_k = 1`` (sent uncompressed, ``32 d`` bits up), else
    ``g_i^{k+1} = g^k + Q(Delta_i)`` with ``Delta_i`` the minibatch gradient difference
    ``(1/b) sum_{j in I_i} (grad f_ij(x^{k+1}) - grad f_ij(x^k))`` (``b`` samples with
    replacement from node ``i``'s stream, the same at both points), sending only ``Q(Delta_i)``
    (its payload's bits up; the server knows ``g^k``); the server forms every ``g_i^{k+1}``
    and ``g^{k+1} = ARAgg(g_1^{k+1}, ..., g_n^{k+1})``. ``g^0 = ARAgg(grad f_i(x^0))`` (full
    gradients sent, charged). The Byzantine nodes (the last ``K`` ids) send what the attack
    makes of the honest messages (:mod:`algorithms.robust`). The authors' code
    (SamuelHorvath/VR_Byzantine ``MarinaWorker``) adds ``Q(Delta_i)`` to the node's own buffer
    instead of ``g^k``; the coauthors' (Nikosimus/CC-for-BR-Learning ``byz_vr_marina.py``)
    uses ``g^k`` as here.

    Theory ([U], Thm 2.1 as recalled): ``gamma = 1/(L + sqrt(A))``,
    ``A = (6(1-p)/p)(4 c delta/p + 1/(2G))(omega L_tilde^2 + (1 + omega) calL^2/b)`` with
    ``G = n - K``, ``delta = K/n``, ``c = --agg-c`` (the aggregator's robustness constant;
    default ``256/15``, the coauthors' notebook's), ``L``/``L_tilde`` of the whole problem
    (upper bounds for the honest one's up to the share of the Byzantine data) and ``calL`` the
    per-sample smoothness;
    ``p = min(zeta_Q/d, b/(m + b))`` as VR-MARINA. The theorem then bounds
    ``E||grad f_G||^2`` by ``O(1/(gamma T)) + 24 c delta zeta^2/p``. Compressor: unbiased
    (``needs``). Reported: ``sync``, ``f_honest``, ``grad_norm_sq_honest``. The coauthors'
    notebook (``Experiments.ipynb``, ``R_m``) computes a cruder form of the same step:
    ``12 max(omega, m/b)`` in place of ``6(1-p)/p``, ``1/G + 8 c delta/p`` as here up to the
    factor 2, the worst per-sample ``L_ij`` for ``calL``, and an extra
    ``96 max(omega, m/b) c delta/p`` (a heterogeneity term); not used.
    """

    batch_size: int = option(
        1, "minibatch b per node for the gradient differences", check=check_count, required=True
    )
    p: float | None = option(None, P_HELP, check=check_unit)

    needs: ClassVar[str] = "unbiased"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync", *BYZ_REPORTS)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Gorbunov, Horváth, Richtárik & Gidel 2022, arXiv 2206.00529, Theorem 2.1 "
        "(nonconvex): gamma = 1/(L + sqrt(A)), A as recalled, the statement not read here "
        "[U]; p as VR-MARINA (arXiv 2102.07845, Cor. 3.1)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        d, b = problem.d, opts.get("batch_size") or 1
        _, G, delta, c = theory_counts(problem, opts)
        omega = need_unbiased("Byz-VR-MARINA", compressor, d)
        p = resolved(opts.get("p"), lambda: minibatch_p(compressor, problem, b))
        k = need(problem, "L", "L_tilde")
        calL = sample_smoothness(problem, "Byz-VR-MARINA")
        return Theory(
            gamma=byz_vr_marina(k["L"], k["L_tilde"], calL, p, omega, G, b, c, delta),
            formula=(
                "1 / (L + sqrt((6 (1 - p) / p) (4 c delta / p + 1 / (2 G)) "
                "(omega L_tilde^2 + (1 + omega) calL^2 / b)))"
            ),
            inputs={**k, "calL": calL, "omega": omega, "p": p, "b": b, "G": G, "c": c,
                    "delta": delta},
            params={"p": p},
            source=SOURCE,
        )  # fmt: skip

    def _p(self, problem) -> float:
        return resolved(self.p, lambda: minibatch_p(self.compressor, problem, self.batch_size))

    def init(self, x0, problem, comm: Comm) -> ByzVRMARINAState:
        self.check_nodes(problem)
        g_i = self.data(problem).grad(x0)
        full = torch.full((comm.m,), comm.float_bits * problem.d, dtype=torch.int64)
        g = self.robust_aggregate(g_i, full, comm, -1)
        return ByzVRMARINAState(x=x0.clone(), t=0, g=g)

    def _step(self, state: ByzVRMARINAState, problem, comm: Comm):
        C, t, data = self.compressor, state.t, self.data(problem)
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        sync = comm.coin(t, self._p(problem), tag=TAG_BYZ_COIN)
        if sync:
            rows = data.grad(x)
            nbits = torch.full((comm.m,), comm.float_bits * problem.d, dtype=torch.int64)
        else:
            batch = data.sample(comm.rng(t, tag=TAG_BYZ_BATCH), self.batch_size)
            diff_i = data.grad_diff(x, state.x, batch)
            packet = C.encode(diff_i, comm.rng_for(C, t))
            rows, nbits = state.g + C.decode(packet), packet.nbits
        g = self.robust_aggregate(rows, nbits, comm, t, center=state.g)
        extras = {"sync": float(sync), **self.honest_report(x, problem)}
        return ByzVRMARINAState(x=x, t=t + 1, g=g), extras
