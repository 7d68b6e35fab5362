"""LASER: PowerSGD's rank-r factors with error feedback over a noisy power-constrained channel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_count,
    check_nonnegative,
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

PAYLOADS = ("factors", "full")
EF_KINDS = ("ef14", "none")


@dataclass(frozen=True)
class LASERState(State):
    e_i: torch.Tensor  # (m, d) error memories (zero without error feedback or with payload=full)
    P: torch.Tensor  # (m1, r) the left factor every node and the server share
    Q: torch.Tensor  # (m2, r) the right factor every node and the server share


@dataclass(frozen=True)
class LASER(Algorithm):
    """LASER (Makkuva, Bondaschi, Vogels, Jaggi, Kim & Gastpar, "LASER: Linear Compression in
    Wireless Distributed Optimization", ICML 2024, arXiv 2310.13033), as the authors' code
    runs it (Bond1995/LASER, ``train.py`` with ``algorithm="powersgd"``, ``optimizer_step``;
    ``powersgd.py``, ``PowerSGD.update`` and ``set_grads``): rank-r PowerSGD factors with error
    feedback, one half power step per round, sent over a noisy analog channel that sums the
    nodes' signals (over-the-air computation) under a power constraint.

    Rows are viewed as ``m1 x m2`` matrices (:mod:`algorithms.lowrank.common`),
    ``r = min(rank, m2)``. Node ``i`` forms ``M_i = grad f_i(x^t) + e_i`` (``e_i = 0`` with
    ``ef=none``). Even ``t``: ``in = GS(P)`` (at ``t = 0`` a standard normal ``P`` from a stream
    all nodes share), node ``i`` sends ``out_i = M_i^T in`` (``m2 x r``) and keeps
    ``e_i = M_i - in out_i^T``; the server receives ``out``, sets ``Q = out``, and the step is
    ``x^{t+1} = x^t - gamma in out^T``. Odd ``t``: the same with the roles swapped,
    ``in = GS(Q)``, ``out_i = M_i in`` (``m1 x r``), ``e_i = M_i - out_i in^T``, ``P = out``,
    step ``out in^T``. ``GS``: Gram-Schmidt with ``1e-8`` added to each column norm.

    The channel (``power > 0``; ``power = 0`` is a noiseless channel, the authors'
    convention): the nodes learn ``c = max_i ||out_i||`` (one float each way), each scales its
    message by ``sqrt(power) / c`` (energy at most ``power``), the channel adds
    ``noise_std * z``, ``z ~ N(0, I)``, to their sum, and the server rescales by
    ``c / (n sqrt(power))``: ``out = mean_i out_i + (noise_std c / (n sqrt(power))) z``
    (``train.py``: ``alpha=c/(workers*torch.sqrt(p))``). ``z`` is drawn from a server stream,
    the same on every process, so a simulation and a torch.distributed run draw the same noise.
    The noise is not fed back (the errors are formed before the channel, as in the authors'
    code). ``payload=full`` sends ``out_i = grad f_i(x^t)`` itself over the same channel at the
    same power, without error feedback: the authors' Z-SGD baseline (``algorithm="sgd"``).

    Deviations: the authors split the power budget across a network's layers in proportion to
    their factors' norms (``norm`` allocation); a row here is one matrix, so the whole budget
    goes to the one factor sent each round. Their optimizer (momentum, weight decay) is not
    part of the method. ``power``'s default is ``train.py``'s ``power=1000``.

    Bits per node (an analog channel carries one value per entry: ``float_bits`` each, as for
    uncompressed rows): ``float_bits * r m2`` up and down at even steps, ``float_bits * r m1``
    at odd ones (``float_bits * d`` with ``payload=full``), plus ``float_bits`` each way for
    ``c`` when ``power > 0``.

    Theory: the paper's theorem could not be read; the step is EF14's (EF21's Theorem 1 at
    ``delta = r / m2``), :func:`algorithms.lowrank.common.borrowed_theory`. Reports
    ``E = mean_i ||e_i||^2`` and ``noise``, the squared norm of the channel's error this round.
    """

    rank: int = option(1, "rank r of the factors (capped at m2 of the m1 x m2 view)",
                       check=check_count)  # fmt: skip
    power: float = option(1000.0, "the channel's power budget per round (0: noiseless channel)",
                          check=check_nonnegative)  # fmt: skip
    noise_std: float = option(1.0, "std of the channel's additive Gaussian noise per entry",
                              check=check_nonnegative)  # fmt: skip
    norm_bound: float = option(0.0, "G > 0: every message clipped to norm G and scaled by the "
                               "fixed G; 0: by c = max_i ||out_i|| (the authors' code)",
                               check=check_nonnegative)  # fmt: skip
    payload: str = option("factors", "what the channel carries: factors (LASER) | full "
                          "(the uncompressed gradient: Z-SGD)", choices=PAYLOADS)  # fmt: skip
    ef: str = option("ef14", "error feedback: ef14 (residual memory) | none", choices=EF_KINDS)
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "none"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E", "noise")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF14",
        "LASER's theorem (arXiv 2310.13033) could not be read; EF14's step, EF21's Theorem 1 "
        "at delta = r/m2",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return borrowed_theory(problem, opts.get("rank", 1), "LASER")

    def init(self, x0: torch.Tensor, problem, comm: Comm) -> LASERState:
        d = problem.d
        (m1, m2), r = matrix_shape(d), rank_of(self.rank, d)
        kw = {"dtype": x0.dtype, "device": x0.device}
        return LASERState(x=x0.clone(), t=0, e_i=torch.zeros(comm.m, d, **kw),
                          P=torch.zeros(m1, r, **kw), Q=torch.zeros(m2, r, **kw))  # fmt: skip

    def _step(self, state: LASERState, problem, comm: Comm):
        t, d, m = state.t, problem.d, comm.m
        batch = minibatch(problem, comm, t, tags.LASER_BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch)
        if self.payload == "full":
            update, noise = self.channel(self.clip(g_i[:, :, None])[:, :, 0], comm, t)
            x = state.x - self.gamma * update
            new = LASERState(x=x, t=t + 1, e_i=state.e_i, P=state.P, Q=state.Q)
            return new, {"E": 0.0, "noise": noise}
        M_i = g_i + state.e_i if self.ef == "ef14" else g_i
        mats = as_matrices(M_i)
        P, Q = state.P, state.Q
        if t % 2 == 0:
            if t == 0:
                P = (
                    comm.rng(0, shared=True, tag=tags.LASER_P0)
                    .normal(*P.shape, dtype=M_i.dtype)[0]
                    .to(M_i.device)
                )
            P = gram_schmidt(P)
            out_i = self.clip(mats.transpose(1, 2) @ P)  # (m, m2, r)
            local = P @ out_i.transpose(1, 2)  # (m, m1, m2)
            out, noise = self.channel(out_i.reshape(m, -1), comm, t)
            Q = out.reshape(Q.shape)
            approx = P @ Q.T
        else:
            Q = gram_schmidt(Q)
            out_i = self.clip(mats @ Q)  # (m, m1, r)
            local = out_i @ Q.T
            out, noise = self.channel(out_i.reshape(m, -1), comm, t)
            P = out.reshape(P.shape)
            approx = P @ Q.T
        if self.ef == "ef14":
            e_i = M_i - unview(local, d)
        else:
            e_i = torch.zeros_like(M_i)
        x = state.x - self.gamma * unview(approx, d)
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return LASERState(x=x, t=t + 1, e_i=e_i, P=P, Q=Q), {"E": E, "noise": noise}

    def clip(self, out_i: torch.Tensor) -> torch.Tensor:
        """``out_i`` (``(m, a, b)``) with each node's message clipped to norm ``norm_bound``
        (unchanged when ``norm_bound = 0``)."""
        if self.norm_bound == 0:
            return out_i
        norms = torch.linalg.vector_norm(out_i, dim=(1, 2), keepdim=True)
        return out_i * torch.clamp(self.norm_bound / norms.clamp_min(1e-300), max=1.0)

    def channel(self, out_i: torch.Tensor, comm: Comm, t: int) -> tuple[torch.Tensor, float]:
        """What the server receives from the nodes' rows ``out_i`` (``(m, k)``): their mean plus
        the channel's rescaled noise; and the noise's squared norm."""
        k = out_i.shape[1]
        mean = comm.reduce_full(out_i)
        comm.broadcast_full(k)
        if self.power == 0:
            return mean, 0.0
        if self.norm_bound > 0:
            c = torch.tensor(self.norm_bound, dtype=out_i.dtype)
        else:
            nbits = torch.full((comm.m,), comm.float_bits, dtype=torch.int64)
            norms = torch.linalg.vector_norm(out_i, dim=1)[:, None]
            c = comm.gather_rows(norms, nbits).amax()  # every node's norm, then the largest
            comm.charge_down(comm.float_bits)
        z = comm.server_rng(t, tag=tags.LASER_NOISE).normal(k, dtype=out_i.dtype)[0]
        scale = self.noise_std * c / (comm.n * math.sqrt(self.power))
        noise = scale * z.to(out_i.device)
        return mean + noise, float((noise**2).sum())
