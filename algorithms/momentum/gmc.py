"""GMC: global momentum compression (Shi, Zhao, Xie, Gao & Li, arXiv 1905.12948)."""

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
    option,
)
from algorithms.ef.ef21 import ef21_theory
from algorithms.provenance import Provenance
from algorithms.stepsizes.momentum_ec import gmc as gmc_step
from comm.base import Comm
from comm.error_feedback import compensate_, ef14_send
from streams import tags

SOURCE = (
    "Shi, Zhao, Xie, Gao & Li, Global Momentum Compression for Sparse Communication in "
    "Distributed Learning, arXiv 1905.12948 (abstract only; algorithm box and theorem not "
    "available here)"
)


@dataclass(frozen=True)
class GMCState(State):
    e_i: torch.Tensor  # (m, d) memories (the unsent part), in model units
    x_prev: torch.Tensor  # (d,) x^{t-1}, held by every node (x^{-1} = x^0)


@dataclass(frozen=True)
class GMC(Algorithm):
    """GMC: error-feedback sparsification with a global momentum (arXiv 1905.12948).

    Shi, Zhao, Xie, Gao & Li, "Global Momentum Compression for Sparse Communication in
    Distributed Learning" (v2 title "... in Distributed SGD"), arXiv 1905.12948.

    What could be established: only the abstracts (of v2 and v3). GMC combines a memory gradient
    (error feedback, as in DGC and Stich et al.'s memory SGD) with momentum SGD, and, unlike
    DGC, whose momentum accumulates each worker's own gradients, its momentum is global: built
    from the model difference ``x^{t-1} - x^t``, which every node knows, so it costs no bits.
    The algorithm box (its line numbers), the theorem and GMC+ (v3, for aggressive
    compressors such as RBGS) could not be read; GMC+ is not implemented.

    Update as implemented (a reconstruction from that description, labelled as such in every
    run's step record): with ``e_i^0 = 0``, ``x^{-1} = x^0``, node ``i`` forms
    ``p_i = e_i^t + gamma g_i(x^t) + beta (x^{t-1} - x^t)`` (``g_i`` its full local gradient,
    or a minibatch gradient with ``batch_size``), sends ``v_i = C(p_i)`` and keeps
    ``e_i^{t+1} = p_i - v_i``; the server sets ``x^{t+1} = x^t - (1/n) sum_i v_i`` and
    broadcasts it (``32 d`` bits down, as EF-SGD is charged here; uplink: the compressor's
    payload, nothing for the momentum). The memory is in model units, as EF-SGD's here; the
    DGC form with ``gamma`` outside the memory is the same method for a constant ``gamma``.

    Invariants: ``beta = 0`` is EF-SGD (``ef-sgd``) exactly; with the identity compressor it
    is heavy-ball GD ``x^{t+1} = x^t - gamma grad f(x^t) + beta (x^t - x^{t-1})``; in general
    the virtual iterate ``x~ = x - mean_i e_i`` follows
    ``x~^{t+1} = x~^t - gamma mean_i g_i(x^t) + beta (x^t - x^{t-1})``.

    Theory (a deviation: the paper's theorem was not available): ``gamma = (1 - beta)
    gamma_EF`` (:func:`algorithms.stepsizes.momentum_ec.gmc`), with ``gamma_EF`` EF-SGD's step
    in this library (EF21's Theorem 1 step for ``delta``, arXiv 2106.05203): heavy ball's
    effective step ``gamma/(1 - beta)`` is kept at EF-SGD's. ``beta = 0.9`` by default, the
    usual momentum of the deep-net experiments this method targets [U: the paper's value was
    not read]. Deep nets (no ``L``) use the problem's default step. Compressor class:
    contractive (``delta``: Top-K, scaled sign, ...). Reports ``E = mean_i ||e_i||^2``.
    """

    beta: float = option(0.9, "GMC's global momentum beta in [0, 1)")
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF-SGD",
        "EF-SGD's step in this library (itself EF21's Theorem 1 step, arXiv 2106.05203) times "
        "(1 - beta), which keeps heavy ball's effective step gamma/(1 - beta) at it; GMC's "
        "algorithm box and theorem (Shi et al., arXiv 1905.12948) were not available, and no "
        "derivation for GMC is written here",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.beta, bool) or not 0 <= self.beta < 1:
            raise ValueError(f"beta must be in [0, 1), got {self.beta}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        beta = opts.get("beta", 0.9)
        ef = ef21_theory(problem, compressor, "nonconvex")
        return Theory(
            gamma=gmc_step(ef.gamma, beta),
            formula="(1 - beta) / (L + L_tilde sqrt(beta_EF / theta)) (EF-SGD's step in this "
            "library times 1 - beta; beta_EF, theta: EF21's constants at alpha = delta)",
            inputs={**ef.inputs, "beta_momentum": beta, "gamma_EF": ef.gamma},
            source=SOURCE + "; step derived for this library (heavy ball's effective step kept "
            "at EF-SGD's, " + ef.source + ")",
        )

    def init(self, x0, problem, comm: Comm) -> GMCState:
        e_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        return GMCState(x=x0.clone(), t=0, e_i=e_i, x_prev=x0.clone())

    def _step(self, state: GMCState, problem, comm: Comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        batch = minibatch(problem, comm, t, tags.GMC_BATCH, self.batch_size)
        # e_i + gamma g_i + beta (x^{t-1} - x^t), in the fresh gradient's buffer (-> e_i^{t+1})
        p_i = compensate_(problem.grad(state.x, batch).mul_(self.gamma), state.e_i)
        p_i.add_(state.x_prev - state.x, alpha=self.beta)
        mean, e_i = ef14_send(C, comm, t, p_i)
        x = state.x - mean
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return GMCState(x=x, t=t + 1, e_i=e_i, x_prev=state.x), {"E": E}
