"""PowerSGD+: PowerSGD whose warm-started query is refreshed periodically by an SVD."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_count,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.lowrank.common import (
    as_matrices,
    borrowed_theory,
    gram_schmidt,
    matrix_shape,
    rank_of,
    unview,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags

EF_KINDS = ("ef14", "none")


def check_period(name: str, value: int | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is an integer ``>= 0`` (0: never refresh)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0 (0: never refresh), got {value!r}")


@dataclass(frozen=True)
class PowerSGDPlusState(State):
    e_i: torch.Tensor  # (m, d) error memories (zero without error feedback)
    Q: torch.Tensor  # (m2, r) the query every node and the server share (zero before step 0)


@dataclass(frozen=True)
class PowerSGDPlus(Algorithm):
    """PowerSGD+ (Xie, Chen & Yuan 2025, "From PowerSGD to PowerSGD+: Low-Rank Gradient
    Compression for Distributed Optimization with Convergence Guarantees", arXiv 2509.11254):
    PowerSGD (Vogels, Karimireddy & Jaggi 2019, arXiv 1905.13727, Alg. 1 with error feedback)
    whose warm-started query is periodically replaced by the top right singular vectors of the
    averaged gradient matrix.

    What could be read: the abstract only (PowerSGD may fail to converge, shown by a
    counterexample; PowerSGD+ "periodically updates the projection subspace via singular value
    decomposition"). The algorithm box, the period, the error-feedback handling and the theorem
    could not be read: the update below is a labelled reconstruction, its open choices are
    options, and the refresh round follows GreedyLore (Chen, He, Li, Jia & Yuan 2025, arXiv
    2507.08784, same group; code yiran529/GreedyLore ``lore_hook.py``), whose semi-lazy
    refresh all-reduces the gradient uncompressed and takes its SVD.

    Update at step ``t``, rows viewed as ``m1 x m2`` matrices (:mod:`algorithms.lowrank.common`),
    ``r = min(rank, m2)``: node ``i`` forms ``M_i = grad f_i(x^t) + e_i`` (``e_i = 0`` with
    ``ef=none``; a minibatch gradient with ``batch_size``).

    * refresh (``period > 0`` and ``t % period == 0``, so step 0 is one): every node sends
      ``M_i`` uncompressed; the server forms ``Mbar = mean_i M_i``, steps
      ``x^{t+1} = x^t - gamma Mbar``, and every node sets ``Q`` to the top-``r`` right singular
      vectors of ``Mbar`` (``m2 x r``) and ``e_i = 0`` (all of ``M_i`` was sent).
    * otherwise, one PowerSGD step with the warm-started ``Q`` (at ``t = 0`` with ``period =
      0``: a standard normal ``Q`` from a stream all nodes share): ``Qo = GS(Q)``; node ``i``
      sends ``M_i Qo`` and the server averages, ``P = GS(mean_i M_i Qo)``; node ``i`` sends
      ``M_i^T P``, ``Q = mean_i M_i^T P``; ``x^{t+1} = x^t - gamma P Q^T`` (unpadded) and
      ``e_i = M_i - P Q^T`` (PyTorch's ``powerSGD_hook``: the local input less the global
      approximation; only ``mean_i e_i`` enters later steps). ``GS`` is Gram-Schmidt with
      ``1e-8`` added to each column norm, so a zero query stays zero.

    ``period = 0`` is PowerSGD itself (warm start and error feedback, one power step per
    round): the counterexample of :mod:`theory_checks.lowrank` shows it locked in a subspace
    the refresh leaves.

    Bits per node: a refresh ``float_bits * d`` up and down; a PowerSGD step
    ``float_bits * r (m1 + m2)`` up (``P`` and ``Q``) and the same down (the averaged factors).

    Theory: no theorem could be read; the step is EF14's (EF21's Theorem 1 at
    ``delta = r / m2``), see :func:`algorithms.lowrank.common.borrowed_theory`. Reports
    ``E = mean_i ||e_i||^2`` and ``refresh`` (1 at a refresh step).
    """

    rank: int = option(1, "rank r of the factors (capped at m2 of the m1 x m2 view)",
                       check=check_count)  # fmt: skip
    period: int = option(
        100,
        "steps between SVD refreshes of the query (0: never, i.e. PowerSGD; not read from the "
        "paper)",
        check=check_period,
    )
    ef: str = option("ef14", "error feedback: ef14 (residual memory) | none", choices=EF_KINDS)
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "none"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E", "refresh")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF14",
        "no PowerSGD+ theorem could be read (abstract of arXiv 2509.11254 only); EF14's step, "
        "EF21's Theorem 1 at delta = r/m2",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return borrowed_theory(problem, opts.get("rank", 1), "PowerSGD+")

    def init(self, x0: torch.Tensor, problem, comm: Comm) -> PowerSGDPlusState:
        d = problem.d
        e_i = torch.zeros(comm.m, d, dtype=x0.dtype, device=x0.device)
        Q = torch.zeros(matrix_shape(d)[1], rank_of(self.rank, d), dtype=x0.dtype,
                        device=x0.device)  # fmt: skip
        return PowerSGDPlusState(x=x0.clone(), t=0, e_i=e_i, Q=Q)

    def is_refresh(self, t: int) -> bool:
        """Whether step ``t`` refreshes the query."""
        return self.period > 0 and t % self.period == 0

    def _step(self, state: PowerSGDPlusState, problem, comm: Comm):
        t, d = state.t, problem.d
        batch = minibatch(problem, comm, t, tags.POWERSGD_PLUS_BATCH, self.batch_size)
        M_i = problem.grad(state.x, batch)
        if self.ef == "ef14":
            M_i = M_i + state.e_i
        Q0 = state.Q
        if t == 0:
            Q0 = (
                comm.rng(0, shared=True, tag=tags.POWERSGD_PLUS_Q0)
                .normal(*state.Q.shape, dtype=M_i.dtype)[0]
                .to(M_i.device)
            )
        if self.is_refresh(t):
            update, Q, e_i = self._refresh(M_i, Q0, comm, d)
        else:
            update, Q = self.power_step(M_i, Q0, comm, d)
            e_i = M_i - update
        if self.ef != "ef14":
            e_i = torch.zeros_like(M_i)
        x = state.x - self.gamma * update
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        new = PowerSGDPlusState(x=x, t=t + 1, e_i=e_i, Q=Q)
        return new, {"E": E, "refresh": float(self.is_refresh(t))}

    def _refresh(self, M_i: torch.Tensor, Q: torch.Tensor, comm: Comm, d: int):
        """The uncompressed round (``Q``, the query so far, is not used): ``(Mbar, the top-r
        right singular vectors of Mbar, e_i = 0)``."""
        mean = comm.reduce_full(M_i)
        comm.broadcast_full(d)
        Q = refresh_query(as_matrices(mean[None])[0], rank_of(self.rank, d))
        return mean, Q, torch.zeros_like(M_i)

    @staticmethod
    def power_step(M_i: torch.Tensor, Q: torch.Tensor, comm: Comm, d: int):
        """One PowerSGD round from the query ``Q``: ``(P Q'^T unpadded, Q')``."""
        m = M_i.shape[0]
        mats = as_matrices(M_i)
        m1, m2 = mats.shape[1:]
        r = Q.shape[1]
        Qo = gram_schmidt(Q)
        P = comm.reduce_full((mats @ Qo).reshape(m, m1 * r)).reshape(m1, r)
        comm.broadcast_full(m1 * r)
        P = gram_schmidt(P)
        Q = comm.reduce_full((mats.transpose(1, 2) @ P).reshape(m, m2 * r)).reshape(m2, r)
        comm.broadcast_full(m2 * r)
        return unview(P @ Q.T, d), Q


def refresh_query(mean: torch.Tensor, r: int) -> torch.Tensor:
    """The top-``r`` right singular vectors of ``mean`` (``m1 x m2``), as ``m2 x r``."""
    work = mean if mean.dtype == torch.float64 else mean.float()
    Vh = torch.linalg.svd(work, full_matrices=False).Vh
    return Vh[:r].T.to(mean.dtype).contiguous()
