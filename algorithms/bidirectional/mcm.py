"""MCM: bidirectional compression that preserves the central model (Philippenko & Dieuleveut
2021)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, option
from algorithms.bidirectional.bidirectional_common import (
    artemis_theory,
    down_omega,
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
    "Philippenko & Dieuleveut 2021, arXiv 2102.12528 (NeurIPS 2021), MCM and Rand-MCM; "
    "update and memory rates 1/(2(omega+1)) as the authors' code (philipco/artemis-"
    "bidirectional-compression: GradientUpdateMethod.DownCompressModelUpdate, LocalUpdate."
    "LocalDownCompressModelUpdate); step: Artemis's (derived, conservative), the paper's "
    "theorem constants were not available here"
)


@dataclass(frozen=True)
class MCMState(State):
    """``x`` is the server's preserved model ``w``."""

    h_i: torch.Tensor  # (m, d) uplink memories
    h: torch.Tensor  # (d,) server's mean of h_i
    H_i: torch.Tensor  # (m, d) downlink memories (all rows equal unless randomized)


@dataclass(frozen=True)
class MCM(Algorithm):
    """MCM: the server keeps the exact model; only the nodes' copies are compressed.

    Philippenko & Dieuleveut 2021, "Preserved central model for faster bidirectional
    compression in distributed settings", arXiv 2102.12528 (MCM; Rand-MCM with
    ``randomized``).

    Update (round ``k``, server model ``w``): the server broadcasts
    ``Omega = C_dwn(w - H)``; the nodes' model is ``w_hat = H + Omega`` and everyone sets
    ``H += alpha_dwn Omega``; a node (taking part with probability ``participation``) sends
    ``D_i = C_up(grad f_i(w_hat) - h_i)``, ``h_i += alpha_up D_i``; the server forms
    ``g = h + (1/(p n)) sum_{i in S} D_i`` (``estimator`` as Artemis) and updates its
    **uncompressed** model ``w -= gamma g`` (the authors' ``non_degraded`` flag: the
    downlink compression only perturbs the points where gradients are computed).
    ``randomized`` (Rand-MCM): node ``i`` gets its own ``Omega_i = C_dwn(w - H_i)``, drawn
    independently for each node (the server's draw for node ``i`` uses a stream keyed by
    ``(seed, t, i)`` and a tag of its own, so each process draws its own nodes' messages and a
    simulation and torchrun agree), its own memory ``H_i``, and is charged its own payload;
    only participants receive one. Without ``randomized`` one ``Omega`` goes to every node
    each round (all charged; its memory stays common). ``H^0 = x^0`` (known to all).

    Theory: memory rates ``1/(2(omega + 1))`` both ways [authors' code]. Step: Artemis's
    ``1/(2 L_max (1 + omega_dwn)(1 + 4 omega_p/n))`` (derived and conservative; MCM's own
    theorem, whose point is a rate free of ``omega_dwn`` in the leading term, was not
    available here). With full gradients ``w`` converges linearly to the exact ``x*``.
    Reports ``H`` (uplink memory error), ``P = mean_i ||w_hat_i - w||^2`` (the nodes'
    perturbation) and ``participants``.
    """

    down_compressor: Compressor | None = down_option()
    alpha: float | None = memory_step_option("uplink memory step alpha (default 1/(2(omega_up+1)))")
    alpha_down: float | None = memory_step_option(
        "downlink memory step alpha_down (default 1/(2(omega_dwn+1)))"
    )
    randomized: bool = option(False, "Rand-MCM: an independent downlink draw per node")
    participation: float = participation_option()
    estimator: str = estimator_option()
    init_mode: str = init_option()

    needs: ClassVar[str] = "unbiased"
    down_needs: ClassVar[str | None] = "unbiased"
    down_like_up: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("H", "P", "participants")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "Artemis",
        "MCM's own theorem (Philippenko & Dieuleveut 2021, arXiv 2102.12528) was not "
        "available; Artemis's step is used as a conservative stand-in (not derived for MCM, "
        "whose point is a rate free of omega_dwn in its leading term); memory rates "
        "1/(2(omega + 1)) as the authors' code",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", self.compressor.bind(1))
        if not isinstance(self.randomized, bool):
            raise ValueError(f"randomized must be true or false, got {self.randomized!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        th = artemis_theory(
            cls.__name__, problem, compressor, opts, SOURCE, " (Artemis's, conservative)"
        )
        w_dn = th.inputs["omega_dwn"]
        return dataclasses.replace(th, params={**th.params, "alpha_down": steps.memory_rate(w_dn)})

    def _rates(self, d: int) -> tuple[float, float]:
        a_up = self.alpha
        if a_up is None:
            a_up = steps.memory_rate(effective_omega(self.compressor, d))
        a_dn = self.alpha_down
        if a_dn is None:
            a_dn = steps.memory_rate(down_omega(self.down_compressor, d))
        return a_up, a_dn

    def init(self, x0, problem, comm: Comm) -> MCMState:
        h_i, h = initial_memory(self.init_mode, problem, x0, comm)
        H_i = x0.expand(problem.m, -1).clone()
        return MCMState(x=x0.clone(), t=0, h_i=h_i, h=h, H_i=H_i)

    def _step(self, state: MCMState, problem, comm: Comm):
        C, CD, t, p = self.compressor, self.down_compressor, state.t, self.participation
        a_up, a_dn = self._rates(problem.d)
        mask = participation_mask(comm, t, p)
        if self.randomized:
            packet = CD.encode(state.x[None, :] - state.H_i, comm.rng(t, tag=tags.MCM_DOWN_I))
            omega_i = CD.decode(packet)
            nbits = packet.nbits if mask is None else torch.where(mask.cpu(), packet.nbits, 0)
            comm.charge_down(nbits.to(torch.int64))
            if mask is not None:
                omega_i = omega_i * mask.to(omega_i.device)[:, None].to(omega_i.dtype)
        else:
            packet = CD.encode(
                (state.x - state.H_i[0])[None, :], comm.server_rng(t, tag=tags.MCM_DOWN)
            )
            omega_i = comm.broadcast(packet, CD).expand_as(state.H_i)
        w_hat_i = state.H_i + omega_i
        H_i = state.H_i + a_dn * omega_i
        up = uplink_with_memory(
            C, problem.grad(w_hat_i), state.h_i, state.h, a_up, comm, t,
            mask=mask, p=p, estimator=self.estimator,
        )  # fmt: skip
        P = comm.monitor_mean(((w_hat_i - state.x) ** 2).sum(dim=1))
        x = state.x - self.gamma * up.g
        share = 1.0 if mask is None else comm.monitor_mean(mask.to(torch.float64))
        new = MCMState(x=x, t=t + 1, h_i=up.h_i, h=up.h, H_i=H_i)
        return new, {"H": up.H, "P": P, "participants": share}
