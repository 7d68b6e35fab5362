"""MARINA-P and M3: downlink compression with correlated per-worker compressors (Gruntkowska,
Li, Condat & Richtárik 2024)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_compressor, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import effective_omega, need, need_unbiased, resolved, support_ratio
from comm.base import Comm
from compressors import Compressor
from streams import tags

PAPER = (
    "Gruntkowska, Li, Condat & Richtárik 2024, 'Improving the Worst-Case Bidirectional "
    "Communication Complexity for Nonconvex Distributed Optimization under Function "
    "Similarity', NeurIPS 2024, arXiv 2402.06412"
)
CODE = (
    "the authors' code (Tyurin's distributed_optimization_library, as in "
    "k3nfalt/optimal-decentralized-optimization code/distributed_optimization_library/"
    "algorithm.py: M3MasterAlgorithm / M3NodeAlgorithm; MARINA-P is its run with the identity "
    "uplink, experiments/marina_p/config_libsvm.py 'm3_ind_rand')"
)
P_DOWN_HELP = (
    "probability of an uncompressed model broadcast (default zeta_C/d of the downlink "
    "compressor: 1/n for PermK, K/d for RandK, as the authors' code)"
)


def marina_p_step(L: float, L_max: float, omega: float, p: float) -> float:
    """MARINA-P, nonconvex: ``gamma = 1/(L + L_max sqrt(omega (1 - p)/p))``.

    Derivation (``f`` ``L``-smooth and bounded below, each ``f_i`` ``L_i``-smooth, each
    ``C_i`` unbiased with ``omega``, correlated or not; ``w_i^0 = x^0``): write ``W = mean_i
    ||w_i - x||^2`` and ``R = ||x+ - x||^2``. One round: ``g = mean_i grad f_i(w_i)``, ``x+ = x
    - gamma g``; with probability ``p`` every ``w_i+ = x+``, else ``w_i+ = w_i + C_i(x+ - x)``.
    (1) ``w_i+ - x+ = (w_i - x) + (C_i(x+ - x) - (x+ - x))`` and ``C_i`` is unbiased given the
    round's ``x+``: ``E W+ <= (1 - p)(W + omega R)``. (2) The smoothness lemma of PAGE/MARINA:
    ``f(x+) <= f(x) - (gamma/2)||grad f(x)||^2 - (1/(2 gamma) - L/2) R + (gamma/2)||g - grad
    f(x)||^2``, and ``||g - grad f(x)||^2 = ||mean_i (grad f_i(w_i) - grad f_i(x))||^2 <= mean_i
    L_i^2 ||w_i - x||^2 <= L_max^2 W`` (Jensen). (3) With ``Phi = f(x) - f* + (gamma L_max^2/(2
    p)) W``: ``E Phi+ <= Phi - (gamma/2)||grad f(x)||^2 - (1/(2 gamma) - L/2 - gamma L_max^2 (1
    - p) omega/(2 p)) R``; the bracket is ``>= 0`` when ``1/gamma - L - gamma c^2 >= 0``, ``c =
    L_max sqrt(omega (1 - p)/p)``, which ``gamma = 1/(L + c)`` meets (``1/gamma - L - gamma c^2
    = c L/(L + c)``). Telescoping: ``(1/T) sum_{t<T} E||grad f(x^t)||^2 <= 2 (f(x^0) - f*)/(gamma
    T)``. The bound is the worst case over the ``C_i``: it does not see the correlation of PermK,
    whose gain the paper expresses through a functional similarity constant (``L_A``, which
    this library's problems do not provide); with identical quadratic ``f_i`` and PermK,
    ``mean_i w_i = x`` and ``g = grad f(x)`` exactly (MARINA-P is gradient descent), which the
    theory check ``bidirectional.marina-p-permk`` tests.
    """
    return 1.0 / (L + L_max * math.sqrt(omega * (1.0 - p) / p))


def m3_beta(omega: float, omega_down: float, n: int) -> float:
    """M3's momentum ``beta = min(1, (n/(omega (omega + 1) omega_P))^(1/3))`` (1 when a
    compressor is exact), as the authors' code (``M3MasterAlgorithm.__init__``)."""
    if omega == 0 or omega_down == 0:
        return 1.0
    return min(1.0, (n / (omega * (omega + 1.0) * omega_down)) ** (1.0 / 3.0))


def downlink(CD: Compressor, x_new, x, w_i, comm: Comm, t: int, p: float):
    """MARINA-P's downlink: with probability ``p`` (one coin for all) every node gets ``x_new``
    uncompressed (``32 d`` each), else node ``i`` gets its own ``C_i(x_new - x)`` (its own
    payload charged to it) and adds it to ``w_i``. Every process computes the messages of the
    nodes it holds (a shared-randomness ``C_i`` such as PermK draws one permutation for all).
    Returns the new ``w_i`` and whether the model was sent uncompressed."""
    if comm.coin(t, p, tag=tags.MARINA_P_COIN):
        comm.broadcast_full(x.numel())
        return x_new.expand_as(w_i).clone(), True
    CD = CD.bind(comm.n)
    rows = (x_new - x).expand_as(w_i).clone()
    packet = CD.encode(rows, comm.rng_for(CD, t, tag=tags.MARINA_P_DOWN))
    comm.charge_down(packet.nbits.to(torch.int64))
    return w_i + CD.decode(packet), False


@dataclass(frozen=True)
class MARINAPState(State):
    """``x`` is the server's model."""

    w_i: torch.Tensor  # (m, d) each node's model, built from its own downlink messages


@dataclass(frozen=True)
class MARINAP(Algorithm):
    """MARINA-P: per-worker compressed model differences down, full gradients up.

    Gruntkowska, Li, Condat & Richtárik 2024, arXiv 2402.06412 (NeurIPS 2024). The algorithm
    box could not be read (only the abstract); the update is the authors' code's M3 with the
    identity uplink (``M3MasterAlgorithm`` / ``M3NodeAlgorithm`` with an exact uplink, so
    ``beta = 1`` and every round is a full gradient round).

    Update (round ``t``; the server holds ``x``, node ``i`` its ``w_i``, ``w_i^0 = x^0``):
    node ``i`` sends ``grad f_i(w_i)`` uncompressed, the server steps ``x+ = x - gamma mean_i
    grad f_i(w_i)``; with probability ``p`` (a coin shared by all) it broadcasts ``x+`` and
    every ``w_i+ = x+``; otherwise node ``i`` receives its own ``C_i(x+ - x)`` and sets ``w_i+
    = w_i + C_i(x+ - x)``. ``--compressor`` is the server's family ``C_i`` (the uplink is not
    compressed): PermK (``permk``, one shared permutation, node ``i`` its block) is the paper's
    correlated choice, with which the server-to-worker cost falls with ``n``; an independent
    one (``randk``) gives each node its own draw. Downlink bits: each node is charged its own
    message (``32 d`` in a broadcast round). ``p`` defaults to ``zeta_C/d`` (the authors'
    code: ``1/n`` for PermK when ``n`` divides ``d``).

    Theory: the step ``1/(L + L_max sqrt(omega (1 - p)/p))`` for ``L``-smooth ``f`` (nonconvex)
    is derived here (:func:`marina_p_step`); the paper's theorem, with its function similarity
    constant, could not be read. Reports ``W = mean_i ||w_i - x||^2`` (after the round) and
    ``sync`` (1 when the model went uncompressed).
    """

    p: float | None = option(None, P_DOWN_HELP, check=check_unit)

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("W", "sync")
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.bidirectional.marina_p:marina_p_step",
        "a PAGE/MARINA-style Lyapunov derivation written here (worst case over the C_i; the "
        "paper's theorem, arXiv 2402.06412, could not be read; the authors' experiments tune "
        "the step); update and p = zeta_C/d as the authors' code",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        d = problem.d
        omega = need_unbiased("MARINA-P", compressor, d)
        p = resolved(opts.get("p"), lambda: support_ratio(compressor, d))
        k = need(problem, "L", "L_max")
        return Theory(
            gamma=marina_p_step(k["L"], k["L_max"], omega, p),
            formula="1 / (L + L_max sqrt(omega (1 - p) / p))",
            inputs={**k, "omega": omega, "p": p, "n": problem.n},
            params={"p": p},
            source=f"{PAPER} (update as {CODE}); step derived here (nonconvex), the paper's "
            "theorem could not be read",
        )

    def init(self, x0, problem, comm: Comm) -> MARINAPState:
        return MARINAPState(x=x0.clone(), t=0, w_i=x0.expand(problem.m, -1).clone())

    def _step(self, state: MARINAPState, problem, comm: Comm):
        t, d = state.t, problem.d
        g = comm.reduce_full(problem.grad(state.w_i))
        x = state.x - self.gamma * g
        C = self.compressor.bind(comm.n)
        p = resolved(self.p, lambda: support_ratio(C, d))
        w_i, sync = downlink(C, x, state.x, state.w_i, comm, t, p)
        W = comm.monitor_mean(((w_i - x) ** 2).sum(dim=1))
        return MARINAPState(x=x, t=t + 1, w_i=w_i), {"W": W, "sync": float(sync)}


@dataclass(frozen=True)
class M3State(State):
    g: torch.Tensor  # (d,) server's MARINA estimator of mean_i grad f_i(z_i)
    w_i: torch.Tensor  # (m, d) each node's model from its downlink messages
    z_i: torch.Tensor  # (m, d) each node's momentum point, where it computes gradients
    grad_i: torch.Tensor  # (m, d) grad f_i(z_i), kept for the next difference


@dataclass(frozen=True)
class M3(Algorithm):
    """M3: MARINA-P down, MARINA up, and a momentum step on the nodes' models.

    Gruntkowska, Li, Condat & Richtárik 2024, arXiv 2402.06412 (NeurIPS 2024). The algorithm
    box could not be read; the update is the authors' code's (``M3MasterAlgorithm`` /
    ``M3NodeAlgorithm`` of Tyurin's distributed_optimization_library).

    Update (round ``t``): ``x+ = x - gamma g``; the downlink of :class:`MARINAP` (with
    probability ``p_down`` ``w_i+ = x+`` uncompressed, else ``w_i+ = w_i + C_i(x+ - x)`` with
    the per-worker ``--down-compressor``); node ``i`` moves its momentum point ``z_i+ = beta
    w_i+ + (1 - beta) z_i``; with probability ``p`` (a second shared coin) it sends ``grad
    f_i(z_i+)`` uncompressed and ``g+ = mean_i grad f_i(z_i+)``, else it sends ``Q(grad
    f_i(z_i+) - grad f_i(z_i))`` and ``g+ = g + mean_i Q(...)`` (MARINA's estimator). ``w_i^0 =
    z_i^0 = x^0``, ``g^0 = mean_i grad f_i(x^0)`` sent uncompressed. Defaults as the authors'
    code: ``p = zeta_Q/d``, ``p_down = zeta_C/d``, ``beta = min(1, (n/(omega (omega + 1)
    omega_P))^(1/3))``. The downlink compressor defaults to the uplink's spec (bound to ``n``
    nodes); the paper's and the authors' experiments use ``--down-compressor permk``.

    Theory: the paper's theorem could not be read and the authors' experiments tune the step
    over a grid: no default step (give ``--step``). Reports ``W = mean_i ||w_i - x||^2``,
    ``Z = mean_i ||z_i - x||^2`` and the two coins (``sync_down``, ``sync_up``).
    """

    down_compressor: Compressor | None = option(
        None,
        "per-worker downlink compressor C_i, unbiased (--down-compressor; default: the "
        "uplink's spec; the paper's: permk)",
    )
    p: float | None = option(
        None, "probability of an uncompressed gradient round (default zeta_Q/d)", check=check_unit
    )
    p_down: float | None = option(None, P_DOWN_HELP, check=check_unit)
    beta: float | None = option(
        None,
        "momentum beta in (0, 1] (default min(1, (n/(omega (omega+1) omega_P))^(1/3)), the "
        "authors' code)",
        check=check_unit,
    )

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("W", "Z", "sync_down", "sync_up")
    provenance: ClassVar[Provenance] = pv.no_step(
        "the paper's theorem (arXiv 2402.06412) could not be read and the authors' experiments "
        "tune the step over a grid of powers of two: give --step; p, p_down and beta default "
        "to the authors' code's"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", self.compressor)

    @classmethod
    def configure(cls, problem, compressor, **kwargs):
        """The base's, with the downlink compressor bound to the ``n`` workers (each gets its
        own ``C_i``: PermK needs the node count) and checked to be unbiased."""
        down = kwargs.get("down_compressor") or compressor
        down = down.bind(problem.n)
        check_compressor("M3 (downlink)", "unbiased", down, problem.d, kwargs.get("force", False))
        return super().configure(problem, compressor, **{**kwargs, "down_compressor": down})

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        raise ValueError(
            "M3 has no theory step here (the paper's theorem could not be read; the authors "
            "tune the step): give --step FLOAT"
        )

    def _params(self, n: int, d: int) -> tuple[float, float, float]:
        Q, CD = self.compressor, self.down_compressor.bind(n)
        p = resolved(self.p, lambda: support_ratio(Q, d))
        p_down = resolved(self.p_down, lambda: support_ratio(CD, d))
        beta = resolved(
            self.beta, lambda: m3_beta(effective_omega(Q, d), effective_omega(CD, d), n)
        )
        return p, p_down, beta

    def init(self, x0, problem, comm: Comm) -> M3State:
        grad_i = problem.grad(x0)
        g = comm.reduce_full(grad_i)
        w_i = x0.expand(problem.m, -1).clone()
        return M3State(x=x0.clone(), t=0, g=g, w_i=w_i, z_i=w_i.clone(), grad_i=grad_i)

    def _step(self, state: M3State, problem, comm: Comm):
        Q, t = self.compressor, state.t
        p, p_down, beta = self._params(comm.n, problem.d)
        x = state.x - self.gamma * state.g
        w_i, sync_down = downlink(self.down_compressor, x, state.x, state.w_i, comm, t, p_down)
        z_i = beta * w_i + (1.0 - beta) * state.z_i
        grad_i = problem.grad(z_i)
        sync_up = comm.coin(t, p, tag=tags.M3_COIN)
        if sync_up:
            g = comm.reduce_full(grad_i)
        else:
            g = state.g + comm.reduce(Q.encode(grad_i - state.grad_i, comm.rng_for(Q, t)), Q)
        W = comm.monitor_mean(((w_i - x) ** 2).sum(dim=1))
        Z = comm.monitor_mean(((z_i - x) ** 2).sum(dim=1))
        new = M3State(x=x, t=t + 1, g=g, w_i=w_i, z_i=z_i, grad_i=grad_i)
        return new, {"W": W, "Z": Z, "sync_down": float(sync_down), "sync_up": float(sync_up)}
