"""LIEC-SGD: local immediate error compensation with bidirectional compression (Cheng et al.)."""

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
from algorithms.provenance import Provenance
from algorithms.stepsizes.momentum_ec import liec_sgd as liec_step
from comm.base import Comm
from compressors import Compressor, parse_spec
from streams import tags

SOURCE = (
    "Cheng, Shen, Xu, Qian, Wu, Zhou, Zhang, Tao & Chen, Communication-Efficient Distributed "
    "Learning with Local Immediate Error Compensation, arXiv 2402.11857 (abstract; algorithm "
    "box and theorem not available here); update from the authors' code, chengyif/LIEC-SGD "
    "main.py, method 'liec'"
)


@dataclass(frozen=True)
class LIECSGDState(State):
    x_i: torch.Tensor  # (m, d) the nodes' own models
    e: torch.Tensor  # (d,) the server's global error (what its downlink left unsent)


@dataclass(frozen=True)
class LIECSGD(Algorithm):
    """LIEC-SGD: bidirectional compression, local immediate error compensation (arXiv
    2402.11857).

    Cheng, Shen, Xu, Qian, Wu, Zhou, Zhang, Tao & Chen 2024, "Communication-Efficient
    Distributed Learning with Local Immediate Error Compensation", arXiv 2402.11857.

    Sources: the abstract (bidirectional compression; each node compensates its own
    compression error into its model update at once; only the server keeps an error
    variable; ``delta``-contraction; nonconvex rate with linear speedup) and the authors' code
    (repository chengyif/LIEC-SGD, ``main.py``, the ``method == 'liec'`` branch of ``train``),
    which gives the update below. The paper's algorithm box (its line numbers) and theorem
    could not be read.

    Update (the authors' code), with every ``x_i^0 = x^0``, ``e^0 = 0`` and period ``H``:
    node ``i`` computes ``g_i`` at its own model ``x_i^t`` (a minibatch gradient with
    ``batch_size``, else its full local gradient). In a round ``t`` with ``(t + 1) mod H != 0``
    it sends ``c_i = C(g_i)``; the server forms ``v = (1/n) sum_i c_i + e^t``, broadcasts
    ``b = C_M(v)`` and keeps ``e^{t+1} = v - b``; node ``i`` steps
    ``x_i^{t+1} = x_i^t - gamma (b + g_i - c_i)``: the broadcast plus its own compression error
    ``g_i - c_i`` (the local immediate compensation; no node keeps a memory). In a round with
    ``(t + 1) mod H = 0`` the nodes send their models and their gradients uncompressed; the
    server averages both and broadcasts them, adding its error to the gradient's average:
    every node sets ``x_i^{t+1} = mean_j x_j^t - gamma (mean_j g_j + e^t)``, and
    ``e^{t+1} = 0``. The code runs PyTorch SGD on this direction with momentum 0 (its default)
    and weight decay (here part of the problem).

    Bits per node: compressed rounds, up ``C``'s payload and down ``C_M``'s; averaging rounds
    ``64 d`` up and ``64 d`` down (the code sends the model and the gradient as two full
    vectors each way; one vector ``x_i - gamma g_i`` would carry the same information).

    Reported ``x``: the model the nodes share, ``x^{t+1} = x^t - gamma b`` (reset to the average
    at averaging rounds), so node ``i``'s model is ``x_i = x - a_i`` with ``a_i`` its
    compensations since the last average. After an averaging round (``t`` a multiple of ``H``)
    ``x`` is the average of the nodes' models, which the authors evaluate. Invariant: the
    virtual iterate ``mean_i x_i - gamma e`` follows ``x~ <- x~ - gamma mean_i g_i``.

    Theory (a deviation: the paper's theorem was not available): ``gamma = 1/(L + [H > 1]
    L_tilde (sqrt(beta_M/theta_M) + (H - 1) sqrt(1 - delta)))``
    (:func:`algorithms.stepsizes.momentum_ec.liec_sgd`, derived for this library; ``1/L``,
    distributed GD's step, where the method is distributed GD). ``H = 32`` by default, the
    README's CIFAR-10 setting (LIEC-SGD(32); the code's default is 100). Deep nets (no
    ``L``) use the problem's default step (the authors use ``lr = 0.1``). Compressor class:
    contractive both ways (the authors use a scaled sign: ``scaled-sign``); the downlink
    defaults to the uplink's compressor, as in their code. Reports ``E = ||e||^2`` and
    ``drift = mean_i ||x_i - x||^2``.
    """

    down_compressor: Compressor | None = option(
        None, "downlink compressor C_M (default: the uplink's, as the authors)"
    )
    period: int = option(
        32, "rounds H between model averages (LIEC-SGD(H))", check=check_count, required=True
    )
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    down_needs: ClassVar[str | None] = "contractive"
    down_like_up: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E", "drift")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF21",
        "Theorem 1's step (arXiv 2106.05203) at alpha = delta_down for the server's error "
        "feedback, its L_tilde term enlarged by (H - 1) sqrt(1 - delta_up) for the nodes' "
        "local compensations, a heuristic allowance (not derived); LIEC-SGD's theorem (arXiv "
        "2402.11857) was not available; 1/L where the method is distributed GD",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", parse_spec(self.compressor.spec()))

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        down = opts.get("down_compressor") or parse_spec(compressor.spec())
        period = opts.get("period", 32)
        delta_up, delta_down = compressor.delta(d), down.delta(d)
        inputs = {"L": c.L, "L_tilde": c.L_tilde, "delta_up": delta_up}
        inputs.update(delta_down=delta_down, H=period)
        return Theory(
            gamma=liec_step(c.L, c.L_tilde, delta_up, delta_down, period),
            formula="1 / (L + [H > 1] L_tilde (sqrt(beta_M / theta_M) + (H - 1) sqrt(1 - "
            "delta_up))), beta_M, theta_M: EF21's constants at alpha = delta_down",
            inputs=inputs,
            source=SOURCE + "; step derived for this library (see "
            "algorithms/stepsizes/momentum_ec.py)",
        )

    def init(self, x0, problem, comm: Comm) -> LIECSGDState:
        x_i = x0.expand(comm.m, problem.d).clone()
        return LIECSGDState(x=x0.clone(), t=0, x_i=x_i, e=torch.zeros_like(x0))

    def _step(self, state: LIECSGDState, problem, comm: Comm):
        C, CM, t, d = self.compressor, self.down_compressor, state.t, problem.d
        batch = minibatch(problem, comm, t, tags.LIEC_BATCH, self.batch_size)
        g_i = problem.grad(state.x_i, batch)
        if (t + 1) % self.period == 0:
            x_bar = comm.reduce_full(state.x_i)
            comm.broadcast_full(d)
            g_bar = comm.reduce_full(g_i)
            comm.broadcast_full(d)
            x = x_bar - self.gamma * (g_bar + state.e)
            x_i = x.expand(comm.m, d).clone()
            e = torch.zeros_like(state.e)
        else:
            packet = C.encode(g_i, comm.rng_for(C, t))
            c_i = C.decode(packet)
            v = comm.reduce(packet, C, decoded=c_i) + state.e
            down = CM.encode(v[None, :], comm.server_rng(t, tag=tags.LIEC_DOWN))
            b = comm.broadcast(down, CM)
            e = v - b
            x = state.x - self.gamma * b
            # the broadcast plus the node's own compression error, compensated at once
            x_i = state.x_i - self.gamma * (g_i - c_i + b)
        drift = comm.monitor_mean(torch.linalg.vector_norm(x_i - x, dim=1) ** 2)
        new = LIECSGDState(x=x, t=t + 1, x_i=x_i, e=e)
        return new, {"E": float((e**2).sum()), "drift": drift}
