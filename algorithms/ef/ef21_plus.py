"""EF21+: EF21 or a fresh compressed gradient, whichever is closer (Richtárik, Sokolov &
Fatkhullin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Theory, regime_option
from algorithms.ef.ef21 import EF21Base, EF21State, ef21_theory
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags


@dataclass(frozen=True)
class EF21Plus(EF21Base):
    """EF21+: EF21's update or a fresh compressed gradient, the closer (arXiv 2106.05203).

    Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, the EF21+ variant; the authors'
    code ``bdfg_plus_distributed_stable.py`` (``choose_estimator``) in
    ``IgorSokoloff/ef21_experiments_source_code``.

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` forms both the EF21 update
    ``a_i = g_i^t + C(grad f_i(x^{t+1}) - g_i^t)`` and the fresh compressed gradient
    ``b_i = C(grad f_i(x^{t+1}))``, keeps ``g_i^{t+1} = b_i`` if
    ``||b_i - grad f_i(x^{t+1})|| < ||a_i - grad f_i(x^{t+1})||`` and ``a_i`` otherwise (ties
    keep EF21's, as the authors' code), and sends the chosen message with a one-bit flag; the
    server adds ``(1/n) sum_i (g_i^{t+1} - g_i^t)`` to ``g``. Invariant: ``g = mean_i g_i``.

    Bits: per node and round, the chosen payload's bits plus 1 (the flag), charged by the comm
    layer (:meth:`Comm.reduce_choice`). The authors' code counts the payload only.

    Theory: node ``i``'s error ``||g_i^{t+1} - grad f_i(x^{t+1})||^2`` never exceeds that of
    EF21's candidate, so EF21's inequality ``E||g_i^{t+1} - grad f_i||^2 <= (1 - alpha)
    ||grad f_i - g_i^t||^2`` and with it EF21's theorems hold: the step is EF21's (Theorem 1,
    or Theorem 2 under PL when ``mu`` is known; the authors' logistic script uses the PL form).
    Reports ``G = mean_i ||g_i - grad f_i(x)||^2`` and ``fresh``, the fraction of nodes that
    sent ``C(grad f_i)``.
    """

    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G", "fresh")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Theorem 1 (nonconvex) and "
        "Theorem 2 (PL), which hold for EF21+: its per-node error never exceeds EF21's "
        "candidate's"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        th = ef21_theory(problem, compressor, opts.get("regime", "auto"))
        return Theory(
            th.gamma,
            th.formula,
            th.inputs,
            th.params,
            th.source + "; it holds for EF21+, whose error is at most EF21's",
        )

    def _step(self, state: EF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        grad_i = problem.grad(x)
        first = C.encode(grad_i - state.g_i, comm.rng_for(C, t))
        c_i = C.decode(first)
        a_i = c_i + state.g_i
        # The fresh candidate draws from its own streams (the EF21 candidate uses EF21's, so
        # that a round in which every node keeps the EF21 update is an EF21 round exactly).
        second = C.encode(grad_i, comm.rng_for(C, t, tag=tags.EF21_PLUS_FRESH))
        b_i = C.decode(second)
        err_a = torch.linalg.vector_norm(a_i - grad_i, dim=1) ** 2
        err_b = torch.linalg.vector_norm(b_i - grad_i, dim=1) ** 2
        pick = err_b < err_a
        g_i = torch.where(pick[:, None], b_i, a_i)
        # The server adds EF21's message c_i itself where it was kept (as EF21 does).
        delta_i = torch.where(pick[:, None], b_i - state.g_i, c_i)
        g = state.g + comm.reduce_choice(delta_i, first, second, pick)
        G = comm.monitor_mean(torch.minimum(err_a, err_b))
        fresh = comm.monitor_mean(pick.to(torch.float64))
        return EF21State(x=x, t=t + 1, g_i=g_i, g=g), {"G": G, "fresh": fresh}
