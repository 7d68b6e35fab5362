"""EF21-BC: EF21 with compressed uplink and downlink ("EF21 with Bells & Whistles")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    option,
    regime_option,
)
from algorithms.ef.ef21 import ef21_init_option, ef21_update
from algorithms.provenance import Provenance
from comm.base import Comm
from compressors import Compressor
from compressors.identity import Identity
from streams import tags


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

    Theory: the paper's Appendix G constants were not available here, so the step is derived
    for this library (:func:`stepsizes.ef21_bc`, documented there) from
    ``alpha_w = delta(C_w)`` and ``alpha_M = delta(C_M)``: nonconvex
    ``1/(L + sqrt(2)(sqrt(c1) + sqrt(c2)))``, PL
    ``min(1/(L + 2(sqrt(c1) + sqrt(c2))), min(theta_w, theta_M)/(2 mu))``; with the identity
    downlink it is EF21's Theorem 1 (2) step, and it shrinks like ``alpha_w alpha_M`` as the
    paper's complexity ``O(1/(alpha_w alpha_M eps^2))`` does. The authors' experiments used
    EF21's step (uplink ``alpha_w``) times tuned factors: ``--step-mult`` reproduces them.
    Reports ``G = mean_i ||g~_i - grad f_i(x)||^2`` and
    ``G_down = ||g - g~||^2``.
    """

    down_compressor: Compressor = option(
        help="downlink compressor C_M (--down-compressor)", default_factory=Identity
    )
    init_mode: str = ef21_init_option()
    regime: str = regime_option()

    needs: ClassVar[str] = "contractive"
    down_needs: ClassVar[str | None] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G", "G_down")
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.ef21_variants:ef21_bc",
        "EF21's Lyapunov argument with an uplink and a downlink estimator error (nonconvex and "
        "PL); the Appendix G constants of Fatkhullin et al. 2021, arXiv 2110.03294 were not "
        "available; alpha_M = 1 gives EF21's step",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", Identity())

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        down = opts.get("down_compressor") or Identity()
        alpha_w, alpha_M = compressor.delta(d), down.delta(d)
        regime = opts.get("regime", "auto")
        pl = regime == "pl" or (regime == "auto" and c.mu is not None)
        if pl and c.mu is None:
            raise ValueError("the PL step needs mu, which this problem does not know")
        c1, c2 = stepsizes.ef21_bc_c1_c2(c.L, c.L_tilde, alpha_w, alpha_M)
        inputs = {"L": c.L, "L_tilde": c.L_tilde, "alpha_w": alpha_w, "alpha_M": alpha_M}
        inputs.update(c1=c1, c2=c2, **({"mu": c.mu} if pl else {}))
        formula = (
            "min(1 / (L + 2 (sqrt(c1) + sqrt(c2))), min(theta_w, theta_M) / (2 mu))"
            if pl
            else "1 / (L + sqrt(2) (sqrt(c1) + sqrt(c2)))"
        )
        return Theory(
            gamma=stepsizes.ef21_bc(c.L, c.L_tilde, alpha_w, alpha_M, c.mu if pl else None),
            formula=formula + ", c1 = beta_w L_tilde^2 / (2 theta_w), c2 = (3 beta_M / "
            "(2 theta_M)) (beta_w L_tilde^2 (2 - theta_w) / theta_w + beta_w L_tilde^2 + L^2)"
            " (derived; EF21's step when alpha_M = 1)",
            inputs=inputs,
            source="Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 5; step derived for this "
            "library (the paper's Appendix G constants were not available)",
        )

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
        down = CM.encode((gt - state.g)[None, :], comm.server_rng(t, tag=tags.EF21_BC_DOWN))
        g = state.g + comm.broadcast(down, CM)
        G_down = float(((g - gt) ** 2).sum())
        return EF21BCState(x=x, t=t + 1, gt_i=gt_i, gt=gt, g=g), {"G": G, "G_down": G_down}
