"""1-bit Adam and 0/1 Adam: Adam whose momentum (or gradient) travels through a 1-bit all-reduce
with two-level error feedback, the variance frozen after a warm-up."""

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
    check_decay,
    check_positive,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags

__all__ = ["OneBitAdam", "ZeroOneAdam", "compressed_allreduce"]

DEEPSPEED_LR = 1e-3
MASKS = ("auto", "none")


def compressed_allreduce(p_i, e_i, e, C, comm: Comm, t: int):
    """The 1-bit all-reduce with two-level error feedback of DeepSpeed's ``compressed_allreduce``
    (``deepspeed/runtime/comm/nccl.py``), through the comm layer: node ``i`` sends
    ``c_i = C(p_i + e_i)`` and keeps ``e_i <- p_i + e_i - c_i``; the server forms
    ``q = mean_i c_i + e``, sends ``c = C(q)`` back and keeps ``e <- q - c``. Returns
    ``(c, e_i, e)``; ``c`` is what every node receives (charged downlink)."""
    w_i = p_i + e_i
    packet = C.encode(w_i, comm.rng_for(C, t))
    c_i = C.decode(packet)
    q = comm.reduce(packet, C, decoded=c_i) + e
    down = C.encode(q[None], comm.server_rng(t, tags.ONEBIT_DOWN))
    c = comm.broadcast(down, C)
    return c, w_i - c_i, q - c


def _masked(m: torch.Tensor, v: torch.Tensor, mask: str) -> torch.Tensor:
    """``m`` with the coordinates of zero variance set to zero (``mask = auto``)."""
    return torch.where(v > 0, m, torch.zeros_like(m)) if mask == "auto" else m


def _lr_theory(cls, file: str) -> Theory:
    return Theory(
        gamma=DEEPSPEED_LR,
        formula="1e-3 (the optimizer's default lr in the authors' code)",
        inputs={},
        source=f"microsoft/DeepSpeed {file} (default lr); no theorem's step was read",
    )


@dataclass(frozen=True)
class OneBitAdamState(State):
    m: torch.Tensor  # (d,) momentum, the same at every node (the 1-bit all-reduce's output)
    v: torch.Tensor  # (d,) second moment, frozen after the warm-up
    e_i: torch.Tensor  # (m, d) worker errors
    e: torch.Tensor  # (d,) server error


@dataclass(frozen=True)
class OneBitAdam(Algorithm):
    """1-bit Adam (Tang et al., ICML 2021, arXiv 2102.02888), as in the authors' code
    (microsoft/DeepSpeed, ``deepspeed/runtime/fp16/onebit/adam.py::OnebitAdam``).

    Warm-up, the first ``freeze_step`` rounds: uncompressed Adam on the averaged gradient,
    ``g = mean_i g_i`` (``32 d`` bits up and down), ``m <- beta1 m + (1 - beta1) g``,
    ``v <- beta2 v + (1 - beta2) g^2``. Afterwards ``v`` is frozen; node ``i`` forms its local
    momentum ``beta1 m + (1 - beta1) g_i`` and the momenta are averaged by the 1-bit all-reduce
    with two-level error feedback (:func:`compressed_allreduce`: worker errors ``e_i``, server
    error ``e``); the result replaces ``m`` at every node. Every round steps
    ``x <- x - gamma m / (sqrt(v) + eps)``. ``m = v = 0``, ``e_i = e = 0`` at the start.

    Compressor: the method's ``compressor`` (contractive) on both sides; ``scaled-sign``
    (``||x||_1/d sign(x)``, ``d + 32`` bits) is 1-bit Adam's. Deviation: DeepSpeed scales the
    sign vector by ``||x||_2 / sqrt(d)`` (which keeps the norm but is not a contraction:
    ``||x - C(x)||^2 = 2 ||x||^2 (1 - ||x||_1/(sqrt(d) ||x||_2))``, above ``||x||^2`` for
    sparse ``x``); here the contractive ``||x||_1/d`` of ``scaled-sign``. DeepSpeed also
    splits the server's work into one chunk per worker, each with its own scale; here one
    server and one scale.

    As in the authors' code: no bias correction (its ``bias_correction`` flag is unused in the
    update); ``eps`` outside the root. ``mask`` is DeepSpeed's ``exp_avg_mask`` for momentum
    coordinates that are always zero (a 1-bit code cannot send a zero, so their error would
    keep the coordinate moving, divided by ``sqrt(v) + eps = eps``): with ``auto`` the
    coordinates whose frozen ``v`` is exactly zero (zero averaged gradient at every warm-up
    round) get ``m = 0``; DeepSpeed takes the mask from the user. Not copied: DeepSpeed's
    first call (a dummy round that compresses zeros), the padding of buffers, and the reset
    of the error buffers when a checkpoint is loaded (here a resumed run is the same run).

    Step: DeepSpeed's default ``lr = 1e-3`` (authors' code). The paper's theorem (error
    compensated momentum SGD with a fixed preconditioner) could not be read here. Reported:
    ``E = mean_i ||e_i||^2``.
    """

    beta1: float = option(0.9, "Adam first-moment decay beta1 in [0, 1)", check=check_decay)
    beta2: float = option(0.999, "Adam second-moment decay beta2 in [0, 1)", check=check_decay)
    eps: float = option(1e-8, "Adam eps > 0 (added to sqrt(v))", check=check_positive)
    freeze_step: int = option(
        100, "warm-up rounds of uncompressed Adam before v is frozen (DeepSpeed's default: "
        "100000, for BERT-scale runs)", check=check_count,
    )  # fmt: skip
    mask: str = option(
        "auto", "auto: zero momentum where the frozen v is zero | none", choices=MASKS
    )
    batch_size: int | None = minibatch_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.authors_code(
        "microsoft/DeepSpeed", "deepspeed/runtime/fp16/onebit/adam.py::OnebitAdam",
        "the optimizer's default lr = 1e-3; the paper's theorem was not read",
    )  # fmt: skip

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return _lr_theory(cls, "deepspeed/runtime/fp16/onebit/adam.py")

    def init(self, x0, problem, comm: Comm) -> OneBitAdamState:
        e_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
        z = torch.zeros_like(e_i[0])
        return OneBitAdamState(x=x0.clone(), t=0, m=z, v=z.clone(), e_i=e_i, e=z.clone())

    def _step(self, state: OneBitAdamState, problem, comm: Comm):
        t, b1, b2 = state.t, self.beta1, self.beta2
        batch = minibatch(problem, comm, t, tags.ONEBIT_BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch)
        e_i, e = state.e_i, state.e
        if t < self.freeze_step:
            g = comm.reduce_full(g_i)
            comm.broadcast_full(problem.d)  # the averaged gradient, back to every node
            m = b1 * state.m + (1.0 - b1) * g
            v = b2 * state.v + (1.0 - b2) * g * g
        else:
            v = state.v
            local = b1 * state.m + (1.0 - b1) * g_i
            m, e_i, e = compressed_allreduce(local, e_i, e, self.compressor, comm, t)
            m = _masked(m, v, self.mask)
        x = state.x - self.gamma * m / (torch.sqrt(v) + self.eps)
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return OneBitAdamState(x=x, t=t + 1, m=m, v=v, e_i=e_i, e=e), {"E": E}


@dataclass(frozen=True)
class ZeroOneState(State):
    x_i: torch.Tensor  # (m, d) the nodes' iterates (equal except between synchronisations)
    m_i: torch.Tensor  # (m, d) the nodes' momenta (equal except between synchronisations)
    u_i: torch.Tensor  # (m, d) the local model change since the last synchronisation
    v: torch.Tensor  # (d,) second moment (updated at the rounds of T_v only)
    e_i: torch.Tensor  # (m, d) worker errors
    e: torch.Tensor  # (d,) server error
    var_interval: int  # rounds between variance updates (doubles every kappa updates)
    var_counter: int
    local_interval: int  # rounds between synchronisations after the variance freezes
    local_counter: int
    since_sync: int  # local rounds since the last synchronisation


@dataclass(frozen=True)
class ZeroOneAdam(Algorithm):
    """0/1 Adam (Lu et al., arXiv 2202.06009), as in the authors' code (microsoft/DeepSpeed,
    ``deepspeed/runtime/fp16/onebit/zoadam.py::ZeroOneAdam``); the paper's algorithm box
    could not be read here (the stored pages hold its abstract), so the schedule is the
    code's.

    Rounds are counted from 1 (``s = t + 1``). Phase 1, ``s <= var_freeze_step``: at the
    rounds of ``T_v`` (``s`` a multiple of ``var_interval``, which starts at 1 and doubles
    after every ``var_update_scaler`` (kappa) variance updates) the gradient is averaged
    uncompressed (``32 d`` bits up and down) and updates both moments, ``m <- beta1 m +
    (1 - beta1) g``, ``v <- beta2 v + (1 - beta2) g^2``; at the other rounds it goes through the
    1-bit all-reduce with error feedback (:func:`compressed_allreduce`) and updates ``m`` only.
    Every round steps ``x <- x - gamma m / (sqrt(v) + eps)``.

    Phase 2, after ``var_freeze_step`` rounds (``v`` frozen; both error buffers reset, as the
    code does: they now hold a different quantity; DeepSpeed tests ``step > var_freeze_step``
    after the round, so its phase 1 has one round more): node ``i`` takes local steps,
    ``m_i <- beta1 m_i + (1 - beta1) g_i(x_i)``, ``x_i <- x_i - gamma m_i / (sqrt(v) + eps)``,
    and accumulates ``u_i`` (its model change). At the rounds of ``T_u`` (``s`` a multiple of
    ``local_interval``, which starts at 1 and doubles, up to ``local_step_clipper`` (H), every
    ``local_step_scaler`` rounds) the nodes synchronise: ``w_i = u_i (sqrt(v) + eps)`` (minus
    ``gamma`` times the sum of the momenta) goes through the 1-bit all-reduce, ``w``; every
    node restarts from the last synchronised point, ``x <- x_sync + w / (sqrt(v) + eps)``, and
    sets ``m = -w / (gamma k)`` over the ``k`` local rounds. Rounds between synchronisations
    send nothing. The reported iterate ``x`` is ``mean_i x_i`` (for logging; no bits).

    As 1-bit Adam (``onebit-adam``): the method's contractive ``compressor`` on both sides
    (``scaled-sign`` for the 1-bit code; DeepSpeed's scale ``||x||_2/sqrt(d)`` and per-chunk
    server scales are not copied), no bias correction, ``mask`` for zero-variance coordinates.
    Defaults differ from DeepSpeed's (``var_freeze_step = 100000``,
    ``local_step_scaler = 32678``), which are for BERT-scale runs: here 100 and 32, so that
    runs of a few hundred rounds reach the local steps. Not copied: the dummy first call, the
    ``lrs`` sum over a varying learning rate (the step is constant here), the buffers' reset
    on checkpoint load. Step: DeepSpeed's default ``lr = 1e-3`` (authors' code).
    """

    beta1: float = option(0.9, "Adam first-moment decay beta1 in [0, 1)", check=check_decay)
    beta2: float = option(0.999, "Adam second-moment decay beta2 in [0, 1)", check=check_decay)
    eps: float = option(1e-8, "Adam eps > 0 (added to sqrt(v))", check=check_positive)
    var_freeze_step: int = option(
        100, "the last round of phase 1, max T_v (DeepSpeed's default: 100000)",
        check=check_count,
    )  # fmt: skip
    var_update_scaler: int = option(
        16, "kappa: variance updates before their interval doubles", check=check_count
    )
    local_step_scaler: int = option(
        32, "rounds of phase 2 before the local-step interval doubles (DeepSpeed's: 32678)",
        check=check_count,
    )  # fmt: skip
    local_step_clipper: int = option(16, "H: the largest local-step interval", check=check_count)
    mask: str = option("auto", "auto: zero momentum where v is zero | none", choices=MASKS)
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.authors_code(
        "microsoft/DeepSpeed", "deepspeed/runtime/fp16/onebit/zoadam.py::ZeroOneAdam",
        "the optimizer's default lr = 1e-3; the paper's theorem was not read",
    )  # fmt: skip

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return _lr_theory(cls, "deepspeed/runtime/fp16/onebit/zoadam.py")

    def init(self, x0, problem, comm: Comm) -> ZeroOneState:
        x_i = x0.to(problem.dtype).expand(problem.m, -1).clone()
        z_i = torch.zeros_like(x_i)
        z = torch.zeros_like(x_i[0])
        return ZeroOneState(x=x0.clone(), t=0, x_i=x_i, m_i=z_i, u_i=z_i.clone(), v=z,
                            e_i=z_i.clone(), e=z.clone(), var_interval=1, var_counter=0,
                            local_interval=1, local_counter=0, since_sync=0)  # fmt: skip

    def _step(self, state: ZeroOneState, problem, comm: Comm):
        t, s, C = state.t, state.t + 1, self.compressor
        b1, b2 = self.beta1, self.beta2
        batch = minibatch(problem, comm, t, tags.ONEBIT_BATCH, self.batch_size)
        g_i = problem.grad(state.x_i, batch)
        v, e_i, e = state.v, state.e_i, state.e
        var_interval, var_counter = state.var_interval, state.var_counter
        local_interval, local_counter = state.local_interval, state.local_counter
        u_i, since = state.u_i, state.since_sync
        if s <= self.var_freeze_step:  # phase 1: the variance at T_v, 1-bit gradients between
            if s % var_interval == 0:
                g = comm.reduce_full(g_i)
                comm.broadcast_full(problem.d)
                v = b2 * v + (1.0 - b2) * g * g
                var_counter += 1
                if var_counter == self.var_update_scaler:
                    var_counter, var_interval = 0, 2 * var_interval
            else:
                g, e_i, e = compressed_allreduce(g_i, e_i, e, C, comm, t)
                g = _masked(g, v, self.mask)
            m_i = b1 * state.m_i + (1.0 - b1) * g
            x_i = state.x_i - self.gamma * m_i / (torch.sqrt(v) + self.eps)
            if s == self.var_freeze_step:  # the code resets both buffers at the switch
                e_i, e = torch.zeros_like(e_i), torch.zeros_like(e)
        else:  # phase 2: local steps, 1-bit synchronisation of the momentum at T_u
            root = torch.sqrt(v) + self.eps
            m_i = b1 * state.m_i + (1.0 - b1) * g_i
            step_i = self.gamma * m_i / root
            x_i, u_i, since = state.x_i - step_i, u_i - step_i, since + 1
            if s % local_interval == 0:
                w, e_i, e = compressed_allreduce(u_i * root, e_i, e, C, comm, t)
                w = _masked(w, v, self.mask)
                m_i = (-w / (self.gamma * since)).expand_as(m_i).clone()
                x_i = (x_i - u_i) + w / root
                u_i, since = torch.zeros_like(u_i), 0
            local_counter += 1
            if local_counter == self.local_step_scaler:
                local_counter = 0
                local_interval = min(self.local_step_clipper, 2 * local_interval)
        new = ZeroOneState(
            x=comm.monitor_average(x_i),
            t=s,
            x_i=x_i,
            m_i=m_i,
            u_i=u_i,
            v=v,
            e_i=e_i,
            e=e,
            var_interval=var_interval,
            var_counter=var_counter,
            local_interval=local_interval,
            local_counter=local_counter,
            since_sync=since,
        )
        return new, {}
