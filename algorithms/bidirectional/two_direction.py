"""2Direction: accelerated distributed optimization with bidirectional compression and a bespoke
error feedback on the downlink (Tyurin & Richtárik 2023)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_fraction, check_unit, option
from algorithms.bidirectional.ef21_p import default_down, down_of, need_contractive
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import effective_omega, need, need_independent_unbiased
from comm.base import Comm
from compressors import Compressor
from streams import tags

PAPER = (
    "Tyurin & Richtárik 2023, '2Direction: Theoretically Faster Distributed Training with "
    "Bidirectional Communication Compression', NeurIPS 2023, arXiv 2305.12379"
)
CODE_REPO = "k3nfalt/optimal-decentralized-optimization"
CODE_FILE = (
    "code/distributed_optimization_library/algorithm.py: "
    "AcceleratedBidirectionalDianaMaster/NodeAlgorithm (Tyurin's distributed_optimization_library)"
)
FEEDBACKS = ("bespoke", "ef21-p", "none")


def two_direction_p(omega: float, alpha: float) -> float:
    """The probability ``p`` of a refresh of ``z`` and ``k``, as the authors' code:
    ``min(1, max(1/(omega+1), 1/((omega+1) sqrt(alpha omega))))``, 1 when ``omega = 0``."""
    if omega == 0:
        return 1.0
    return min(1.0, max(1.0 / (omega + 1.0), 1.0 / ((omega + 1.0) * math.sqrt(alpha * omega))))


def two_direction_tau(omega: float) -> float:
    """The averaging weight ``tau`` of ``v``, as the authors' code:
    ``min(1, omega^(-1/3) (omega+1)^(-2/3))``, 1 when ``omega = 0``."""
    if omega == 0:
        return 1.0
    return min(1.0, 1.0 / (omega ** (1.0 / 3.0) * (omega + 1.0) ** (2.0 / 3.0)))


def two_direction_lbar(L: float, L_max: float, omega: float, n: int, alpha: float, p: float):
    """The reconstructed ``Lbar = p (L (omega + 1)/alpha + L_max omega^2/n)`` (the step is
    ``1/Lbar``).

    Why this form: at large ``Gamma`` the coupling ``theta`` tends to ``sqrt(mu/(p Lbar))`` and
    each round contracts by ``1 - p theta = 1 - sqrt(p mu/Lbar)``, so the rounds grow like
    ``sqrt(Lbar/(p mu))``; with this ``Lbar`` that is ``sqrt(L (omega+1)/(alpha mu) + L_max
    omega^2/(n mu))``, the two square-root terms of the abstract's complexity (the other two,
    ``1/alpha + omega``, come from the cap ``theta <= (1/4) min(1, alpha/p, tau/p, beta/p)``).
    With exact messages (``omega = 0``, ``alpha = 1``: ``p = 1``) it is ``L``, Nesterov's step.
    The theorem's own ``Lbar`` (its constants) could not be read."""
    return p * (L * (omega + 1.0) / alpha + L_max * omega**2 / n)


def coefficients(
    s: float, Lbar: float, mu: float, p: float, cap: float, theta: float | None = None
) -> tuple[float, float, float, float, float]:
    """One round's scalars from ``s = 1/Gamma_t``: ``(theta, s_next, A, B, Cg)``.

    ``theta`` is the positive root of ``p Lbar Gamma theta^2 + p (Lbar + Gamma mu) theta -
    (Lbar + Gamma mu) = 0`` (divided by ``Gamma``, as written here) capped at ``cap``, or the
    given one; ``gamma_{t+1} = p theta Gamma_t/(1 - p theta)``, so ``Gamma_{t+1} = Gamma_t/(1 -
    p theta)`` and ``gamma_{t+1}/Gamma_{t+1} = p theta``. The step ``u+ = ((Lbar + Gamma_t mu) u
    + mu gamma y - gamma g)/(Lbar + Gamma_{t+1} mu)`` divided through by ``Gamma_{t+1}`` is ``u+
    = A u + B y - Cg g`` with ``A = (Lbar s' + (1 - p theta) mu)/D``, ``B = p theta mu/D``,
    ``Cg = p theta/D``, ``D = Lbar s' + mu`` and ``s' = s (1 - p theta)``: the same numbers,
    without ``Gamma``'s geometric growth (it would overflow after a few thousand rounds)."""
    c0 = Lbar * s + mu
    if theta is None:
        b = p * c0
        theta_bar = 2.0 * c0 / (b + math.sqrt(b * b + 4.0 * p * Lbar * c0)) if c0 > 0 else 0.0
        theta = min(theta_bar, cap)
    r = p * theta
    s_next = s * (1.0 - r)
    den = Lbar * s_next + mu
    return theta, s_next, (Lbar * s_next + (1.0 - r) * mu) / den, r * mu / den, r / den


@dataclass(frozen=True)
class TwoDirectionState(State):
    """``x = theta u + (1 - theta) z`` is the reported point. ``w``, ``z`` and ``k`` are held by
    every node (the same on all of them and on the server); ``u``, ``v`` by the server."""

    u: torch.Tensor  # (d,) the server's gradient-step sequence
    w: torch.Tensor  # (d,) the nodes' compressed copy of u
    z: torch.Tensor  # (d,) the anchor, refreshed to x with probability p
    k: torch.Tensor  # (d,) the anchor's gradient estimate (a snapshot of v)
    v: torch.Tensor  # (d,) the server's running gradient estimate at z
    h_i: torch.Tensor  # (m, d) DIANA shifts, learned at z
    h: torch.Tensor  # (d,) mean of h_i over all nodes
    s: float  # 1 / Gamma_t, Gamma_t the sum of the gamma's


@dataclass(frozen=True)
class TwoDirection(Algorithm):
    """2Direction: accelerated gradient method with unbiased uplink compression (DIANA shifts)
    and contractive downlink compression with a bespoke error feedback.

    Tyurin & Richtárik 2023, "2Direction: Theoretically Faster Distributed Training with
    Bidirectional Communication Compression", NeurIPS 2023, arXiv 2305.12379. What could be
    read: the abstract (accelerated; bidirectional compression; EF and EF21-P unsuitable for
    acceleration, hence a bespoke error feedback; strongly convex complexity ``O~(K (sqrt(L
    (omega + 1)/(alpha mu)) + sqrt(L_max omega^2/(n mu)) + 1/alpha + omega))``) and the authors'
    code (Tyurin's distributed_optimization_library in k3nfalt/optimal-decentralized-optimization,
    ``AcceleratedBidirectionalDianaMasterAlgorithm`` / ``...NodeAlgorithm``). The algorithm box
    and the theorems could not be read; the update is the code's, and so are ``p``, ``tau``,
    ``beta``, ``Gamma_0`` and the ``theta`` rule.

    Update (round ``t``; ``Lbar = 1/gamma``, the library's step; ``Gamma_0 = 1``; ``alpha`` the
    downlink's ``delta``; see :func:`coefficients` for ``theta``, ``gamma_{t+1}``):

    1. ``theta = min(theta_bar, (1/4) min(1, alpha/p, tau/p, beta/p))``, ``gamma_{t+1} = p theta
       Gamma_t/(1 - p theta)``, ``Gamma_{t+1} = Gamma_t + gamma_{t+1}``; ``y = theta w + (1 -
       theta) z`` (every node forms it);
    2. node ``i`` sends ``m_i = Q(grad f_i(y) - h_i)``; the server forms ``g = h + mean_i m_i``
       and ``u+ = ((Lbar + Gamma_t mu) u + mu gamma_{t+1} y - gamma_{t+1} g)/(Lbar + Gamma_{t+1}
       mu)``;
    3. the bespoke error feedback: ``q`` is the same step taken from ``w`` with the anchor's
       estimate ``k`` in place of ``g``; the server broadcasts ``c = C_down(u+ - q)``, and
       every node (which knows ``w``, ``k``, ``y`` and the scalars) forms ``q`` itself and
       sets ``w+ = q + c``;
    4. ``x+ = theta u+ + (1 - theta) z``; with probability ``p`` (a coin shared by all) ``k =
       v`` and ``z = x+``, both sent uncompressed (``2 x 32 d`` downlink);
    5. node ``i`` sends ``m'_i = Q(grad f_i(z) - h_i)`` (``z`` the new one) and sets ``h_i +=
       beta m'_i``; the server sets ``v = (1 - tau) v + tau (h + mean_i m'_i)`` and ``h += beta
       mean_i m'_i``.

    Parameters (authors' code): ``beta = 1/(omega + 1)``, ``p =``
    :func:`two_direction_p`, ``tau =`` :func:`two_direction_tau`, ``Gamma_0 = 1``. ``init``:
    ``full`` (the code's) sends ``h_i^0 = grad f_i(x^0)`` once up and ``k^0 = v^0 = h^0`` once
    down (``32 d`` each way); ``zero`` starts from ``h_i = 0`` and sends nothing.
    ``feedback`` replaces step 3 for ablations: ``ef21-p`` (``w+ = w + C_down(u+ - w)``) or
    ``none`` (``w+ = C_down(u+)``); ``theta`` fixes the coupling instead of the schedule.

    Bits per round and node: uplink ``2 bits(Q)``; downlink ``bits(C_down)``, plus ``2 x 32 d``
    in the rounds whose coin refreshes ``z`` and ``k``.

    Theory: ``Lbar = p (L (omega + 1)/alpha + L_max omega^2/n)`` (:func:`two_direction_lbar`), a
    reconstruction that reproduces the abstract's square-root terms, ``L`` for exact messages;
    the theorem's ``Lbar`` could not be read, and the authors' experiments tune ``1/Lbar`` over
    powers of two. ``mu``: the problem's (0 for a general convex one). Compressors: ``Q``
    unbiased and independent across nodes, ``C_down`` contractive (``--down-compressor``,
    default Top-1 as EF21-P's). Deviation: ``Gamma_t`` is carried as ``s = 1/Gamma_t`` (the
    same update, see :func:`coefficients`) so that its geometric growth cannot overflow.
    Reports ``refresh`` (1 when ``z``, ``k`` were refreshed) and ``E = ||u - w||^2`` (the
    downlink error).
    """

    down_compressor: Compressor | None = option(
        None,
        "downlink compressor C_down, contractive (--down-compressor; default topk:k=1, as "
        "ef21-p-diana)",
    )
    mu: float | None = option(
        None, "strong convexity used by the step rule (default: the problem's mu; 0 without one)"
    )
    p: float | None = option(
        None, "probability of refreshing z and k (default: the authors' code's)", check=check_unit
    )
    tau: float | None = option(
        None, "averaging weight tau of v (default: the authors' code's)", check=check_unit
    )
    beta: float | None = option(
        None, "DIANA shift step beta (default 1/(omega+1))", check=check_fraction
    )
    gamma_sum0: float = option(1.0, "Gamma_0, the initial sum of the gamma's (the code's 1)")
    theta: float | None = option(
        None, "a fixed coupling theta instead of the schedule (ablations; default: schedule)",
        check=check_unit,
    )  # fmt: skip
    feedback: str = option(
        "bespoke", "downlink error feedback: bespoke (2Direction) | ef21-p | none (ablations)",
        choices=FEEDBACKS,
    )  # fmt: skip
    init_mode: str = option(
        "full", "h_i^0: full (sent once up, k^0 once down; the authors' code) | zero",
        choices=("full", "zero"), flag="init",
    )  # fmt: skip

    needs: ClassVar[str] = "unbiased"
    down_needs: ClassVar[str | None] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("refresh", "E")
    provenance: ClassVar[Provenance] = pv.reconstruction(
        "Lbar = p (L (omega+1)/alpha + L_max omega^2/n), step 1/Lbar, reconstructed from the "
        f"abstract's complexity ({PAPER}; the theorem could not be read); update, p, tau, beta, "
        f"Gamma_0 and the theta rule from the authors' code ({CODE_REPO}, {CODE_FILE}), whose "
        "experiments tune the step"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", default_down())
        if self.mu is not None and not self.mu >= 0:
            raise ValueError(f"--mu must be >= 0, got {self.mu!r}")
        if not self.gamma_sum0 > 0:
            raise ValueError(f"--gamma-sum0 must be > 0, got {self.gamma_sum0!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased("2Direction", compressor, d)
        alpha = need_contractive("2Direction", down_of(opts), d)
        if not problem.convex:
            raise ValueError("2Direction's theory needs a convex problem: give --step FLOAT")
        k = need(problem, "L", "L_max")
        mu = opts.get("mu")
        if mu is None:
            mu = problem.consts.mu or 0.0
        p = opts.get("p") or two_direction_p(omega, alpha)
        tau = opts.get("tau") or two_direction_tau(omega)
        beta = opts.get("beta")
        beta = 1.0 / (omega + 1.0) if beta is None else beta
        Lbar = two_direction_lbar(k["L"], k["L_max"], omega, n, alpha, p)
        return Theory(
            gamma=1.0 / Lbar,
            formula="1 / Lbar, Lbar = p (L (omega + 1) / alpha + L_max omega^2 / n); p = min(1, "
            "max(1/(omega+1), 1/((omega+1) sqrt(alpha omega)))), tau = min(1, omega^(-1/3) "
            "(omega+1)^(-2/3)), beta = 1/(omega+1)",
            inputs={**k, "mu": mu, "omega": omega, "alpha_down": alpha, "n": n, "Lbar": Lbar},
            params={"p": p, "tau": tau, "beta": beta, "mu": mu},
            source=f"{PAPER} (update as the authors' code, {CODE_REPO}, {CODE_FILE}); Lbar "
            "reconstructed from the abstract's complexity, the theorem could not be read",
        )

    def resolved(self, d: int) -> dict[str, float]:
        """``p``, ``tau``, ``beta``, ``mu``, the downlink's ``alpha`` and the cap of ``theta``,
        those left ``None`` from the compressors (the authors' code's rules)."""
        omega = effective_omega(self.compressor, d)
        CD = self.down_compressor
        alpha = CD.delta(d) if CD.contractive else 1.0 / (effective_omega(CD, d) + 1.0)
        p = self.p if self.p is not None else two_direction_p(omega, alpha)
        tau = self.tau if self.tau is not None else two_direction_tau(omega)
        beta = self.beta if self.beta is not None else 1.0 / (omega + 1.0)
        cap = 0.25 * min(1.0, alpha / p, tau / p, beta / p)
        mu = 0.0 if self.mu is None else self.mu
        return {"p": p, "tau": tau, "beta": beta, "mu": mu, "alpha": alpha, "cap": cap}

    def init(self, x0, problem, comm: Comm) -> TwoDirectionState:
        if self.init_mode == "full":
            h_i = problem.grad(x0)
            h = comm.reduce_full(h_i)  # h_i^0 up, uncompressed
            comm.broadcast_full(problem.d)  # k^0 = h^0 down, uncompressed
        else:
            h_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
            h = torch.zeros_like(h_i[0])
        x = x0.clone()
        return TwoDirectionState(
            x=x, t=0, u=x.clone(), w=x.clone(), z=x.clone(), k=h.clone(), v=h.clone(),
            h_i=h_i, h=h, s=1.0 / self.gamma_sum0,
        )  # fmt: skip

    def _step(self, state: TwoDirectionState, problem, comm: Comm):
        C, CD, t = self.compressor, self.down_compressor, state.t
        q = self.resolved(problem.d)
        theta, s_next, A, B, Cg = coefficients(
            state.s, 1.0 / self.gamma, q["mu"], q["p"], q["cap"], self.theta
        )
        # 1-2: the uplink at y and the server's step
        y = theta * state.w + (1.0 - theta) * state.z
        at_y = C.encode(
            problem.grad(y) - state.h_i, comm.rng_for(C, t, tag=tags.TWO_DIRECTION_AT_Y)
        )
        g = state.h + comm.reduce(at_y, C)
        u = A * state.u + B * y - Cg * g
        # 3: the downlink, relative to what every node can predict
        if self.feedback == "bespoke":
            base = A * state.w + B * y - Cg * state.k  # q, formed by every node too
        elif self.feedback == "ef21-p":
            base = state.w
        else:
            base = torch.zeros_like(u)
        down = CD.encode((u - base)[None, :], comm.server_rng(t, tag=tags.TWO_DIRECTION_DOWN))
        w = base + comm.broadcast(down, CD)
        # 4: the new point; the anchor z and its estimate k refreshed with probability p
        x = theta * u + (1.0 - theta) * state.z
        refresh = comm.coin(t, q["p"], tag=tags.TWO_DIRECTION_COIN)
        if refresh:
            z, k = x, state.v
            comm.broadcast_full(problem.d)  # z
            comm.broadcast_full(problem.d)  # k
        else:
            z, k = state.z, state.k
        # 5: the uplink at z: shifts and the running estimate v
        at_z = C.encode(
            problem.grad(z) - state.h_i, comm.rng_for(C, t, tag=tags.TWO_DIRECTION_AT_Z)
        )
        mz_i = C.decode(at_z)
        mz = comm.reduce(at_z, C, decoded=mz_i)
        v = (1.0 - q["tau"]) * state.v + q["tau"] * (state.h + mz)
        h_i = state.h_i + q["beta"] * mz_i
        h = state.h + q["beta"] * mz
        E = float(((u - w) ** 2).sum())
        new = TwoDirectionState(
            x=x, t=t + 1, u=u, w=w, z=z, k=k, v=v, h_i=h_i, h=h, s=s_next
        )  # fmt: skip
        return new, {"refresh": float(refresh), "E": E}
