"""Adam on a gradient average compressed both ways with error feedback (BytePS-Compress)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_decay,
    check_positive,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.bidirectional.bidirectional_common import down_option
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import need
from comm.base import Comm
from compressors import Compressor
from streams import tags

SOURCE = (
    "Zhong, Xie, Zheng & Lin, Compressed communication for distributed training: adaptive "
    "methods and system, 2021, arXiv 2105.07829 (abstract read; algorithm box and theorem not "
    "read); the two-way error feedback as bytedance/byteps byteps/common/compressor/ "
    "(error_feedback.cc, impl/vanilla_error_feedback.cc, compressor_registry.cc, "
    "byteps/server/server.cc)"
)
ADAM_LR = 1e-3
MOMENTS = ("adam", "amsgrad")
PRACTICAL = pv.practical(
    "torch.optim.Adam's default lr 1e-3 (BytePS wraps the framework's own optimizer); the "
    "paper's theorem could not be read (--step theory: COMP-AMS's step form, borrowed)"
)
BORROWED = pv.borrowed(
    "comp-ams",
    "the closest analysed Adam-type method with error feedback (Li, Karimi & Li, arXiv "
    "2205.05632), its horizon-free step form with the preconditioner bound 1/sqrt(eps) "
    "replaced by this update's 1/eps (eps outside the root) and q^2 = 1 - min(delta_up, "
    "delta_down); this paper's theorem could not be read",
)


def two_way_ef(g_i, e_i, e, C: Compressor, CD: Compressor, comm: Comm, t: int, worker=True,
               server=True):  # fmt: skip
    """The compressed average of BytePS-Compress with error feedback on both sides: node ``i``
    sends ``c_i = C(g_i + e_i)`` and keeps ``e_i <- g_i + e_i - c_i``; the server forms
    ``q = mean_i c_i + e``, broadcasts ``c = CD(q)`` and keeps ``e <- q - c``. Returns
    ``(c, e_i, e)``. ``worker=False`` / ``server=False`` drop one side's memory (the
    checks' broken variants: the error is then discarded, never sent)."""
    p_i = g_i + e_i if worker else g_i
    packet = C.encode(p_i, comm.rng_for(C, t))
    c_i = C.decode(packet)
    q = comm.reduce(packet, C, decoded=c_i)
    if server:
        q = q + e
    down = CD.encode(q[None], comm.server_rng(t, tag=tags.BYTEPS_ADAM_DOWN))
    c = comm.broadcast(down, CD)
    e_i = p_i - c_i if worker else e_i
    e = q - c if server else e
    return c, e_i, e


@dataclass(frozen=True)
class BytePSAdamState(State):
    e_i: torch.Tensor  # (m, d) worker error-feedback memories
    e: torch.Tensor  # (d,) server error-feedback memory
    m: torch.Tensor  # (d,) first moment (the same at every node)
    v: torch.Tensor  # (d,) second moment
    v_max: torch.Tensor  # (d,) running maximum of v (used with moment = amsgrad)


@dataclass(frozen=True)
class BytePSAdam(Algorithm):
    """Adam on a gradient average compressed both ways with error feedback on both sides, a
    reconstruction of the compressed adaptive method of BytePS-Compress.

    Zhong, Xie, Zheng & Lin, "Compressed Communication for Distributed Training: Adaptive
    Methods and System", 2021, arXiv 2105.07829. Only the abstract could be read: a compressed
    adaptive method with an ``O(1/sqrt(T))`` nonconvex rate, and a system compressing the
    gradients both ways between workers and parameter servers. The algorithm box and the
    theorem were not read. The composition below is the authors' system, read in
    bytedance/byteps ``byteps/common/compressor/``: the worker wraps its compressor in error
    feedback (``error_feedback.cc``: ``p <- g + e``, ``c <- C(p)``, ``e <- p - C(p)``;
    ``vanilla_error_feedback.cc`` scales ``e`` by ``lr_prev/lr_cur``, 1 at a constant rate);
    the server sums the decompressed pushes and compresses the sum with the same compressor
    stack, error feedback included (``compressor_registry.cc`` builds ``ef_type`` and
    ``compressor_type`` on the server, not ``momentum_type``; ``server.cc`` compresses at
    ``ALL_RECV``); the workers decompress the pull and hand it to the framework's optimizer,
    here Adam. Whether the paper's method applies Adam there, or preconditions before
    compressing, could not be read.

    Update at round ``t`` (``s = t + 1``): node ``i`` computes ``g_i`` at ``x`` (a minibatch
    with ``batch_size``, else its full local gradient), sends ``c_i = C(g_i + e_i)`` and keeps
    ``e_i <- g_i + e_i - c_i``; the server forms ``q = mean_i c_i + e``, broadcasts
    ``c = C_down(q)`` and keeps ``e <- q - c``; every node runs Adam on ``c`` (as
    ``torch.optim.Adam``): ``m <- beta1 m + (1 - beta1) c``, ``v <- beta2 v + (1 - beta2) c^2``,
    ``x <- x - gamma (m / (1 - beta1^s)) / (sqrt(v_hat / (1 - beta2^s)) + eps)`` with
    ``v_hat = v`` (``moment = adam``) or ``v_hat = max_{r <= s} v_r`` (``amsgrad``, as torch's
    ``amsgrad=True``). ``e_i = e = m = v = 0`` at the start. Error identity (both sides):
    ``sum_r c_r + e + mean_i e_i = sum_r mean_i g_i``, so what the moments receive lags the
    summed gradients by bounded memories only. With identity compressors this is single-node
    Adam on ``grad f``.

    Compressors: contractive both ways (``scaled-sign`` is BytePS's ``onebit`` with scaling,
    ``topk`` its ``topk``); the downlink defaults to the uplink's spec, as BytePS builds the
    server's compressor from the worker's parameters. Not copied: BytePS's per-tensor
    (per-layer) compression (here one vector), its Nesterov momentum wrapper (worker-side,
    for SGD), fp16 handling.

    Step: the default is the labelled practical ``1e-3`` (``torch.optim.Adam``'s default
    lr). ``--step theory`` borrows COMP-AMS's horizon-free step form
    ``eps / (L (1 + beta1/(1 - beta1) + 2 q/(1 - q^2)))``, ``q^2 = 1 - min(delta_up,
    delta_down)`` (COMP-AMS's ``sqrt(eps)`` bound of its preconditioner becomes ``eps`` with
    ``eps`` outside the root): very conservative, a stand-in, not this paper's theorem.
    Reported: ``E = mean_i ||e_i||^2`` and ``E_server = ||e||^2``.
    """

    down_compressor: Compressor | None = down_option()
    beta1: float = option(0.9, "Adam first-moment decay beta1 in [0, 1)", check=check_decay)
    beta2: float = option(0.999, "Adam second-moment decay beta2 in [0, 1)", check=check_decay)
    eps: float = option(
        1e-8, "Adam eps > 0 (added to the bias-corrected sqrt(v))", check=check_positive
    )
    moment: str = option(
        "adam", "second moment: adam | amsgrad (its running maximum)", choices=MOMENTS
    )
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    down_needs: ClassVar[str | None] = "contractive"
    down_like_up: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E", "E_server")
    provenance: ClassVar[Provenance] = PRACTICAL
    #: Error feedback on each side (the theory check's broken variants switch one off).
    worker_ef: ClassVar[bool] = True
    server_ef: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", self.compressor.bind(1))

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        d = problem.d
        down = opts.get("down_compressor") or compressor
        delta = min(compressor.delta(d), down.delta(d))
        beta1, eps = opts.get("beta1", 0.9), opts.get("eps", 1e-8)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        k = need(problem, "L")
        # COMP-AMS's sqrt(eps) / (L C) times sqrt(eps): its bound 1/sqrt(eps) becomes 1/eps.
        gamma = stepsizes.comp_ams(k["L"], eps, beta1, delta) * math.sqrt(eps)
        return Theory(
            gamma=gamma,
            formula="eps / (L (1 + beta1/(1 - beta1) + 2 q/(1 - q^2))), "
            "q^2 = 1 - min(delta_up, delta_down)",
            inputs={**k, "eps": eps, "beta1": beta1, "delta": delta},
            source=SOURCE + "; COMP-AMS's step form, borrowed",
            provenance=BORROWED,
        )

    @classmethod
    def practical(cls, problem, compressor, opts) -> Theory:
        return Theory(
            gamma=ADAM_LR,
            formula="1e-3 (torch.optim.Adam's default learning rate)",
            inputs={},
            source=SOURCE + "; practical default, not a theorem's step",
            provenance=PRACTICAL,
        )

    def init(self, x0, problem, comm: Comm) -> BytePSAdamState:
        e_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
        z = torch.zeros_like(e_i[0])
        return BytePSAdamState(
            x=x0.clone(), t=0, e_i=e_i, e=z, m=z.clone(), v=z.clone(), v_max=z.clone()
        )

    def _step(self, state: BytePSAdamState, problem, comm: Comm):
        t, s, b1, b2 = state.t, state.t + 1, self.beta1, self.beta2
        batch = minibatch(problem, comm, t, tags.BYTEPS_ADAM_BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch)
        c, e_i, e = two_way_ef(
            g_i, state.e_i, state.e, self.compressor, self.down_compressor, comm, t,
            worker=self.worker_ef, server=self.server_ef,
        )  # fmt: skip
        m = b1 * state.m + (1.0 - b1) * c
        v = b2 * state.v + (1.0 - b2) * c * c
        v_max = torch.maximum(state.v_max, v)
        v_hat = v_max if self.moment == "amsgrad" else v
        denom = torch.sqrt(v_hat / (1.0 - b2**s)) + self.eps
        x = state.x - (self.gamma / (1.0 - b1**s)) * m / denom
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        new = BytePSAdamState(x=x, t=s, e_i=e_i, e=e, m=m, v=v, v_max=v_max)
        return new, {"E": E, "E_server": float((e**2).sum())}
