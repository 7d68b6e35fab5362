"""DASHA-SYNC-MVR: DASHA-MVR with rare uncompressed synchronisations (Tyurin & Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms import stepsizes
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


def sync_p(compressor, problem, batch: int, mega_batch: int | None) -> float:
    """``min(zeta_C/d, B/(B + B'))`` with ``B'`` the mega-batch (``max_i m_i`` when the
    synchronisation uses full local gradients; ``zeta_C/d`` alone if that is unknown)."""
    p = support_ratio(compressor, problem.d)
    big = mega_batch if mega_batch is not None else samples_per_node(problem)
    return p if big is None else min(p, batch / (batch + big))


@dataclass(frozen=True)
class DASHASYNCMVR(DASHABase):
    """DASHA-SYNC-MVR: DASHA-MVR with rare uncompressed syncs (arXiv 2202.01268, Alg. 2).

    Tyurin & Richtárik 2022, arXiv 2202.01268, Algorithm 2.

    Update: ``x^{t+1} = x^t - gamma g^t``; a coin ``c ~ Bernoulli(p)`` shared by all nodes.
    ``c = 1``: ``h_i^{t+1}`` is a mega-batch gradient at ``x^{t+1}`` (``B' = mega_batch``
    samples; the exact local gradient when ``mega_batch`` is unset), ``g_i^{t+1} = h_i^{t+1}``
    is sent uncompressed (charged ``32 d``) and ``g^{t+1}`` is their mean. ``c = 0``:
    ``h_i^{t+1} = grad f_i(x^{t+1}; xi) + h_i^t - grad f_i(x^t; xi)`` (MVR with ``b = 0``, the
    same ``B = batch_size`` samples at both points), then DASHA's compressed momentum step (see
    :class:`algorithms.vr.dasha.DASHA`). ``init`` and ``momentum`` as DASHA.

    Parameters and step: a [U] choice of ours (the theory sheet does not give them):
    ``p = min(zeta_C/d, B/(B + B'))`` (``B' = max_i m_i`` for full local gradients), the form of
    online VR-MARINA's ``p``, so that synchronisations cost about as much as the compressed
    rounds; the step is DASHA-PAGE's [U] formula
    ``1/(L + sqrt(48 omega (2 omega + 1)/n (L_tilde^2 + (1 - p) calL^2/B)
    + 2 (1 - p) calL^2/(p n B)))`` with ``calL`` the mean-square per-sample smoothness
    (``problem.sample_smoothness()``; without it give ``--step``), since between
    synchronisations the estimator is PAGE's difference estimator. Reported: ``G`` and ``sync``.
    """

    batch_size: int = option(
        1, "minibatch B per node for the MVR differences", check=check_count, required=True
    )
    mega_batch: int | None = option(
        None,
        "mega-batch B' of a synchronisation (default: full local gradients)",
        check=check_count,
    )
    p: float | None = option(None, P_HELP, check=check_unit)

    batchable: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("G", "sync")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "DASHA-PAGE",
        "between synchronisations DASHA-SYNC-MVR runs MVR with b = 0, which is PAGE's "
        "difference estimator, and a synchronisation (probability p) resets h_i and g_i to a "
        "fresh gradient; the parameters of its own theorem (arXiv 2202.01268) are [U] and are "
        "not used",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        B = opts.get("batch_size") or 1
        mega = opts.get("mega_batch")
        return page_form_theory(
            "DASHA-SYNC-MVR",
            problem,
            compressor,
            B,
            lambda: resolved(opts.get("p"), lambda: sync_p(compressor, problem, B, mega)),
            "step: DASHA-PAGE's form, our choice [U]",
            step=stepsizes.dasha_sync_mvr,
        )

    def _step(self, state: DASHAState, problem, comm: Comm):
        t = state.t
        p = resolved(
            self.p, lambda: sync_p(self.compressor, problem, self.batch_size, self.mega_batch)
        )
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        if comm.coin(t, p, tag=tags.COIN):
            mega = None
            if self.mega_batch is not None:
                mega = problem.sample(comm.rng(t, tag=tags.MEGA), self.mega_batch)
            h_i = problem.grad(x, mega)
            g = comm.reduce_full(h_i)
            new = DASHAState(x=x, t=t + 1, g=g, g_i=h_i, h_i=h_i)
            return new, {"G": 0.0, "sync": 1.0}
        batch = problem.sample(comm.rng(t, tag=tags.BATCH), self.batch_size)
        h_i = problem.grad_diff(x, state.x, batch).add_(state.h_i)
        return self._compress(state, x, h_i, problem, comm, {"sync": 0.0})
