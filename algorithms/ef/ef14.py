"""EF14 / EF-SGD: classical error feedback, the error kept in model units."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    minibatch,
    minibatch_option,
    regime_option,
)
from algorithms.ef.ef21 import ef21_theory
from algorithms.provenance import Provenance
from comm.base import Comm
from comm.error_feedback import compensate_, ef14_send
from streams import tags


@dataclass(frozen=True)
class EF14State(State):
    e_i: torch.Tensor  # (m, d) error memories, in model units


@dataclass(frozen=True)
class EF14(Algorithm):
    """EF14 / EF-SGD: classical error feedback, the error kept in model units.

    Seide et al. 2014 (Interspeech, "1-bit SGD"); Stich, Cordonnier & Jaggi 2018 (arXiv
    1809.07599, Alg. 1); Karimireddy et al. 2019 (arXiv 1901.09847, Alg. 2, EF-SGD);
    distributed as in the EF21 experiments (arXiv 2106.05203).

    Update, with ``e_i^0 = 0``: node ``i`` forms ``p_i = e_i^t + gamma grad f_i(x^t)`` (or
    ``gamma`` times a minibatch gradient when ``batch_size`` is set), sends
    ``v_i = C(p_i)`` and keeps ``e_i^{t+1} = p_i - v_i``; the server sets
    ``x^{t+1} = x^t - (1/n) sum_i v_i`` and broadcasts it. Seide's form
    (``v_i = C(g_i + e_i)``, ``x <- x - gamma mean v_i``) is the same method for a constant
    ``gamma`` with ``e`` rescaled by ``gamma``. EF-signSGD is this method with ``scaled-sign``.

    Invariant: the virtual iterate ``x^t - (1/n) sum_i e_i^t`` follows
    ``x~^{t+1} = x~^t - gamma (1/n) sum_i grad f_i(x^t)``.

    Theory: EF14 has no full-gradient theory comparable with EF21's (its known rates assume
    bounded gradients and decreasing steps); as in the EF21 experiments, the step is EF21's
    theoretical step for the same ``delta`` (Theorem 1 of arXiv 2106.05203 by default,
    ``regime`` picks it). On heterogeneous data (``zeta2 > 0``) EF14 with a constant step does
    not converge exactly: it plateaus at a level ``O(gamma^2)`` (theory sheet §2.2, P7).
    Reports ``E = mean_i ||e_i||^2``.
    """

    batch_size: int | None = minibatch_option()
    regime: str = regime_option("nonconvex")

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    batchable: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF21",
        "EF14 has no full-gradient theorem comparable with EF21's, so, as in the EF21 "
        "experiments (arXiv 2106.05203), EF21's Theorem 1 step (Theorem 2 with --regime pl) "
        "for the same delta",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        th = ef21_theory(problem, compressor, opts.get("regime", "nonconvex"))
        return Theory(
            gamma=th.gamma,
            formula=th.formula + " (EF21's step, as in the EF21 experiments)",
            inputs=th.inputs,
            source=th.source + "; used for EF14 as in the EF21 experiments (no EF14 theorem)",
        )

    def init(self, x0, problem, comm: Comm) -> EF14State:
        e_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        return EF14State(x=x0.clone(), t=0, e_i=e_i)

    def _step(self, state: EF14State, problem, comm: Comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        batch = minibatch(problem, comm, t, tags.EF14_BATCH, self.batch_size)
        # e_i + gamma grad f_i, built in the fresh gradient's buffer, which becomes e_i^{t+1}
        p_i = compensate_(problem.grad(state.x, batch).mul_(self.gamma), state.e_i)
        mean, e_i = ef14_send(C, comm, t, p_i)
        x = state.x - mean
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return EF14State(x=x, t=t + 1, e_i=e_i), {"E": E}
