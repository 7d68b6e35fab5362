"""DORE: double residual compression (Liu, Li, Tang & Yan 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_unit, option
from algorithms.bidirectional.bidirectional_common import (
    down_omega,
    down_option,
    init_option,
    initial_memory,
    memory_step_option,
    uplink_with_memory,
)
from algorithms.provenance import Provenance
from algorithms.stepsizes import bidirectional as steps
from algorithms.vr.vr_common import effective_omega, need, need_unbiased
from comm.base import Comm
from compressors import Compressor
from streams import tags

SOURCE = (
    "Liu, Li, Tang & Yan 2019, arXiv 1910.07561 (AISTATS 2020), Alg. 1, Thm 1 (strongly "
    "convex); parameters as the FedNL-Public reimplementation (Rustem-Islamov/FedNL-Public "
    "methods.py, class DORE) takes them"
)


@dataclass(frozen=True)
class DOREState(State):
    """``x`` is the model every node holds, ``x_hat`` in the paper."""

    h_i: torch.Tensor  # (m, d) gradient memories
    h: torch.Tensor  # (d,) server's mean of h_i
    e: torch.Tensor  # (d,) server's model compression error


@dataclass(frozen=True)
class DORE(Algorithm):
    """DORE: gradient residuals up, model residuals with error compensation down.

    Liu, Li, Tang & Yan 2019, "A Double Residual Compression Algorithm for Efficient
    Distributed Learning", arXiv 1910.07561, Algorithm 1 (without its optional momentum and
    with full or minibatch-free gradients).

    Update (round ``k``; ``x_hat`` is the model held by everyone, ``State.x``): node ``i``
    sends ``D_i = Q(grad f_i(x_hat) - h_i)`` and sets ``h_i += alpha D_i``; the server forms
    ``g = h + mean_i D_i`` (``h += alpha mean_i D_i``), ``x = x_hat - gamma g``, the model
    residual ``q = x - x_hat + eta e``, broadcasts ``Q_down(q)`` (charged downlink from its
    payload), keeps ``e = q - Q_down(q)``, and everyone sets ``x_hat += beta Q_down(q)``.
    ``init``: ``h_i^0 = 0`` (default) or ``grad f_i(x^0)`` (sent once, charged ``32 d``).

    Theory (Thm 1; each ``f_i`` convex and ``L``-smooth, taken ``L = L_max``; ``f``
    ``mu``-strongly convex; unbiased ``Q`` with variance ``C_q``): linear convergence to
    ``x*`` (to an ``O(sigma^2)`` ball with stochastic gradients) for ``alpha, beta <=
    1/(C_q + 1)``, ``eta < min(eta_1, eta_2)`` and ``gamma`` in an interval
    (:func:`stepsizes.bidirectional.dore`). Defaults as the FedNL-Public code:
    ``alpha = 1/(2(omega_up+1))``, ``beta = 1/(2(omega_down+1))``, ``eta = min(eta_1, eta_2)``
    and ``gamma`` the midpoint of its interval. The paper's single ``C_q`` is split: the
    uplink's ``omega`` enters ``alpha`` and ``c``, the downlink's ``beta`` and ``eta_1``.
    Where the theory is unavailable (no ``mu``; ``--step FLOAT``), ``eta = 1`` unless given.
    Compressors: unbiased both ways; the downlink defaults to the uplink's compressor (the
    paper and that code use one operator). Reports ``H = mean_i ||grad f_i(x) - h_i||^2`` and
    ``E = ||e||^2``.
    """

    down_compressor: Compressor | None = down_option()
    alpha: float | None = memory_step_option(
        "gradient memory step alpha (default 1/(2(omega_up+1)))"
    )
    beta: float | None = option(
        None, "model memory step beta (default 1/(2(omega_down+1)))", check=check_unit
    )
    eta: float | None = option(None, "model error compensation weight eta (default: theory)")
    init_mode: str = init_option()

    needs: ClassVar[str] = "unbiased"
    down_needs: ClassVar[str | None] = "unbiased"
    down_like_up: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("H", "E")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Liu, Li, Tang & Yan 2019, arXiv 1910.07561, Theorem 1 (strongly convex): gamma the "
        "midpoint of its interval, eta = min(eta_1, eta_2), alpha = beta = 1/(2(omega + 1)), "
        "as the FedNL-Public reimplementation takes them (Rustem-Islamov/FedNL-Public "
        "methods.py, class DORE); the paper's single C_q is split into the up- and downlink's "
        "omega"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", self.compressor.bind(1))
        if self.eta is not None and not self.eta >= 0:
            raise ValueError(f"eta must be >= 0, got {self.eta!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        w_up = need_unbiased("DORE", compressor, d)
        w_dn = need_unbiased("DORE (downlink)", opts["down_compressor"], d)
        k = need(problem, "L_max", "mu")
        L, mu = k["L_max"], k["mu"]
        eta = steps.dore_eta(w_up, w_dn, n, L, mu)
        return Theory(
            gamma=steps.dore(w_up, w_dn, n, L, mu),
            formula="midpoint of [eta (mu + L)/(2 (1 + eta) mu L), 2/((1 + c alpha)(mu + L))], "
            "c = 4 omega_up (omega_up + 1)/n, L = L_max",
            inputs={"L_max": L, "mu": mu, "omega_up": w_up, "omega_down": w_dn, "n": n},
            params={
                "alpha": steps.memory_rate(w_up),
                "beta": steps.memory_rate(w_dn),
                "eta": eta,
            },
            source=SOURCE,
        )

    def _params(self, d: int) -> tuple[float, float, float]:
        w_up = effective_omega(self.compressor, d)
        w_dn = down_omega(self.down_compressor, d)
        alpha = steps.memory_rate(w_up) if self.alpha is None else self.alpha
        beta = steps.memory_rate(w_dn) if self.beta is None else self.beta
        # Without constants (a run with --step FLOAT on a problem without mu) eta = 1.
        eta = 1.0 if self.eta is None else self.eta
        return alpha, beta, eta

    def init(self, x0, problem, comm: Comm) -> DOREState:
        h_i, h = initial_memory(self.init_mode, problem, x0, comm)
        return DOREState(x=x0.clone(), t=0, h_i=h_i, h=h, e=torch.zeros_like(x0))

    def _step(self, state: DOREState, problem, comm: Comm):
        C, CD, t = self.compressor, self.down_compressor, state.t
        alpha, beta, eta = self._params(problem.d)
        up = uplink_with_memory(C, problem.grad(state.x), state.h_i, state.h, alpha, comm, t)
        q = eta * state.e - self.gamma * up.g  # x - x_hat + eta e, with x = x_hat - gamma g
        packet = CD.encode(q[None, :], comm.server_rng(t, tag=tags.DORE_DOWN))
        q_hat = comm.broadcast(packet, CD)
        e = q - q_hat
        x = state.x + beta * q_hat
        new = DOREState(x=x, t=t + 1, h_i=up.h_i, h=up.h, e=e)
        return new, {"H": up.H, "E": float((e**2).sum())}
