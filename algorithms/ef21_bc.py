"""EF21-BC: EF21 with compressed uplink and downlink ("EF21 with Bells & Whistles")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from algorithms.base import Algorithm, Option, State, Theory, check_choice, check_compressor
from algorithms.comm.base import Comm
from algorithms.ef21 import INIT_OPTION, INITS, borrowed_ef21_theory, ef21_update
from compressors import Compressor
from compressors.identity import Identity

TAG_DOWN = 0xD0C1


@dataclass(frozen=True)
class EF21BCState(State):
    gt_i: torch.Tensor  # (m, d) node estimators g~_i (uplink EF21)
    gt: torch.Tensor  # (d,) server's g~ = mean_i g~_i
    g: torch.Tensor  # (d,) the direction held by the server and every node (downlink EF21)


@dataclass(frozen=True)
class EF21BC(Algorithm):
    """EF21-BC: EF21 with bidirectional compression (arXiv 2110.03294, Algorithm 5).

    Fatkhullin, Sokolov, Gorbunov, Li & Richtárik 2021, "EF21 with Bells & Whistles".

    Update: everyone sets ``x^{t+1} = x^t - gamma g^t`` (the nodes hold ``g``, so the model is
    never sent); node ``i`` sends ``c_i = C_w(grad f_i(x^{t+1}) - g~_i^t)`` and sets
    ``g~_i^{t+1} = g~_i^t + c_i``; the server sets ``g~^{t+1} = g~^t + (1/n) sum_i c_i``,
    broadcasts ``b = C_M(g~^{t+1} - g^t)`` and everyone sets ``g^{t+1} = g^t + b``. The
    downlink is charged from the server's payload (``down_compressor``, default identity,
    which makes the method EF21 exactly). ``init``: ``g~_i^0 = grad f_i(x^0)`` (``full``,
    charged), compressed, or zero; ``g^0 = g~^0`` is sent to the nodes uncompressed
    (charged downlink) unless it is zero.

    Theory: the paper's step constants are unverified here [U]; as in the authors'
    experiments the step is EF21's for the uplink ``alpha_w = delta(C_w)`` (Theorem 1, or 2
    under PL, of arXiv 2106.05203). Reports ``G = mean_i ||g~_i - grad f_i(x)||^2`` and
    ``G_down = ||g - g~||^2``.
    """

    down_compressor: Compressor = field(default_factory=Identity)
    init_mode: str = "full"
    regime: str = "auto"

    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G", "G_down")
    options: ClassVar[dict[str, Option]] = {
        "down_compressor": Option(Compressor, None, "downlink compressor C_M (--down-compressor)"),
        "init_mode": INIT_OPTION,
        "regime": Option(
            str, "auto", "theory step: auto | nonconvex | pl", ("auto", "nonconvex", "pl")
        ),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", Identity())
        if not isinstance(self.down_compressor, Compressor):
            raise ValueError(f"down_compressor must be a Compressor, got {self.down_compressor!r}")
        check_choice("init", self.init_mode, INITS)

    @classmethod
    def configure(cls, problem, compressor, *, force: bool = False, **opts: Any):
        down = opts.get("down_compressor")
        if down is not None:
            down = down.bind(1)
            check_compressor(f"{cls.__name__} (downlink)", "contractive", down, problem.d, force)
            opts["down_compressor"] = down
        return super().configure(problem, compressor, force=force, **opts)

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        th = borrowed_ef21_theory(problem, compressor, opts, "EF21-BC", " with alpha = alpha_w")
        down = opts.get("down_compressor") or Identity()
        try:
            alpha_M = down.delta(problem.d)
        except ValueError:
            alpha_M = None
        return dataclasses.replace(th, inputs={**th.inputs, "alpha_M": alpha_M})

    def init(self, x0, problem, comm: Comm) -> EF21BCState:
        C, grad_i = self.compressor, problem.grad(x0)
        if self.init_mode == "full":
            gt_i, gt = grad_i, comm.reduce_full(grad_i)
        elif self.init_mode == "compressed":
            packet = C.encode(grad_i, comm.rng_for(C, -1))
            gt_i = C.decode(packet)
            gt = comm.reduce(packet, C, decoded=gt_i)
        else:
            gt_i, gt = torch.zeros_like(grad_i), torch.zeros_like(x0)
        if self.init_mode != "zero":
            comm.broadcast_full(problem.d)
        return EF21BCState(x=x0.clone(), t=0, gt_i=gt_i, gt=gt, g=gt.clone())

    def _step(self, state: EF21BCState, problem, comm: Comm):
        C, CM, t = self.compressor, self.down_compressor, state.t
        x = state.x - self.gamma * state.g
        gt_i, gt, G = ef21_update(C, problem.grad(x), state.gt_i, state.gt, comm, t)
        down = CM.encode((gt - state.g)[None, :], comm.server_rng(t, tag=TAG_DOWN))
        g = state.g + comm.broadcast(down, CM)
        G_down = float(((g - gt) ** 2).sum())
        return EF21BCState(x=x, t=t + 1, gt_i=gt_i, gt=gt, g=g), {"G": G, "G_down": G_down}
