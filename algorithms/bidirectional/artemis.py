"""Artemis: bidirectional compression with uplink memory and partial participation
(Philippenko & Dieuleveut 2020)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory
from algorithms.bidirectional.bidirectional_common import (
    artemis_theory,
    down_option,
    estimator_option,
    init_option,
    initial_memory,
    memory_step_option,
    participation_mask,
    participation_option,
    uplink_with_memory,
)
from algorithms.provenance import Provenance
from algorithms.stepsizes import bidirectional as steps
from algorithms.vr.vr_common import effective_omega
from comm.base import Comm
from compressors import Compressor
from streams import tags

SOURCE = (
    "Philippenko & Dieuleveut 2020, arXiv 2006.14591, Alg. 1 (Artemis); memory rate "
    "1/(2(omega_up+1)) as the authors' code (philipco/artemis-bidirectional-compression, "
    "GradientDescent.py); step: the form of Thm 1 as recalled, not checked against the text"
)


@dataclass(frozen=True)
class ArtemisState(State):
    h_i: torch.Tensor  # (m, d) uplink memories
    h: torch.Tensor  # (d,) server's mean of h_i


@dataclass(frozen=True)
class Artemis(Algorithm):
    """Artemis: compressed gradient residuals up (with memory), the compressed update down.

    Philippenko & Dieuleveut 2020, "Bidirectional compression in heterogeneous settings for
    distributed or federated learning with partial participation: tight convergence
    guarantees", arXiv 2006.14591, Algorithm 1, without downlink memory (as published: the
    authors' code has that memory behind a flag that the paper's Artemis leaves off).

    Update (round ``k``): each node takes part with probability ``participation`` (its own
    coin); a participant sends ``D_i = C_up(grad f_i(w) - h_i)`` and sets
    ``h_i += alpha D_i``; the server forms ``g = h + (1/(p n)) sum_{i in S} D_i``
    (``estimator=memory``; ``sampled``: ``(1/(p n)) sum_{i in S} (D_i + h_i)``, the authors'
    aggregation), broadcasts ``Omega = C_dwn(g)`` and everyone steps ``w -= gamma Omega``.
    The downlink is charged to every node each round (nodes that sat out also apply
    ``Omega``: a conservative count; the authors' code sends the missed ``Omega`` later).
    ``participation = 1`` is full participation; ``alpha = 0`` is Artemis without memory
    (Bi-QSGD), which stalls at a neighbourhood proportional to the heterogeneity.

    Theory (strongly convex, each ``f_i`` convex and ``L_max``-smooth, unbiased ``C_up``,
    ``C_dwn``): memory rate ``alpha = 1/(2(omega_up + 1))`` [authors' code];
    step ``1/(2 L_max (1 + omega_dwn)(1 + 4 omega_p/n))``, ``omega_p = (1 + omega_up)/p - 1``
    (:func:`stepsizes.bidirectional.artemis`): the shape of the paper's Thm 1 as recalled
    here, not checked against its text. With full gradients the iterates converge linearly to
    the exact ``x*``. The downlink defaults to the uplink's compressor, as the paper's
    experiments. Reports ``H = mean_i ||grad f_i(w) - h_i||^2`` and ``participants``.
    """

    down_compressor: Compressor | None = down_option()
    alpha: float | None = memory_step_option("uplink memory step alpha (default 1/(2(omega_up+1)))")
    participation: float = participation_option()
    estimator: str = estimator_option()
    init_mode: str = init_option()

    needs: ClassVar[str] = "unbiased"
    down_needs: ClassVar[str | None] = "unbiased"
    down_like_up: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("H", "participants")
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.bidirectional:artemis",
        "the shape of Thm 1 of Philippenko & Dieuleveut 2020, arXiv 2006.14591, as recalled "
        "(not checked against its text), shown safe here by DIANA's Lyapunov argument with "
        "partial participation and downlink compression; memory rate 1/(2(omega_up + 1)) as "
        "the authors' code",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", self.compressor.bind(1))

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return artemis_theory(cls.__name__, problem, compressor, opts, SOURCE)

    def _alpha(self, d: int) -> float:
        if self.alpha is not None:
            return self.alpha
        return steps.memory_rate(effective_omega(self.compressor, d))

    def init(self, x0, problem, comm: Comm) -> ArtemisState:
        h_i, h = initial_memory(self.init_mode, problem, x0, comm)
        return ArtemisState(x=x0.clone(), t=0, h_i=h_i, h=h)

    def _step(self, state: ArtemisState, problem, comm: Comm):
        C, CD, t, p = self.compressor, self.down_compressor, state.t, self.participation
        mask = participation_mask(comm, t, p)
        up = uplink_with_memory(
            C, problem.grad(state.x), state.h_i, state.h, self._alpha(problem.d), comm, t,
            mask=mask, p=p, estimator=self.estimator,
        )  # fmt: skip
        packet = CD.encode(up.g[None, :], comm.server_rng(t, tag=tags.ARTEMIS_DOWN))
        x = state.x - self.gamma * comm.broadcast(packet, CD)
        share = 1.0 if mask is None else comm.monitor_mean(mask.to(torch.float64))
        new = ArtemisState(x=x, t=t + 1, h_i=up.h_i, h=up.h)
        return new, {"H": up.H, "participants": share}
