"""EF21-P + DIANA and EF21-P + DCGD: error feedback in the primal space for the downlink
(Gruntkowska, Tyurin & Richtárik 2023)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, option
from algorithms.bidirectional.bidirectional_common import (
    INITS,
    initial_memory,
    memory_step_option,
    uplink_with_memory,
)
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import effective_omega, need, need_independent_unbiased
from comm.base import Comm
from compressors import Compressor
from compressors.top_k import TopK
from streams import tags

PAPER = (
    "Gruntkowska, Tyurin & Richtárik 2023, 'EF21-P and Friends', ICML 2023 (PMLR 202:11761), "
    "arXiv 2209.15218"
)
CODE = (
    "the authors' code (Tyurin's distributed_optimization_library, as in "
    "k3nfalt/optimal-decentralized-optimization code/distributed_optimization_library/"
    "algorithm.py: DianaEF21PrimalMaster/NodeAlgorithm, DCGDEF21PrimalMaster/NodeAlgorithm)"
)
NO_THEOREM = (
    "the paper's theorems (their step constants) could not be read here, only its abstract; "
    "the authors' experiments tune the step over a grid of powers of two"
)


def default_down() -> Compressor:
    """Top-1, the downlink of the authors' Top-K experiments (config_libsvm_bidirectional_
    compression.py: ``compressor_master_name = top_k`` with one coordinate)."""
    return TopK(k=1)


def down_of(opts) -> Compressor:
    """The downlink compressor of ``opts`` (bound for the server's one row), or the default."""
    down = opts.get("down_compressor")
    return (default_down() if down is None else down).bind(1)


def need_contractive(name: str, down: Compressor, d: int) -> float:
    """``delta`` of a contractive downlink compressor, or a ValueError for the theory step."""
    if not down.contractive:
        raise ValueError(
            f"{name}'s step theory needs a contractive downlink compressor (delta), got "
            f"{down.spec()}: give --step FLOAT"
        )
    return down.delta(d)


def ef21_p_diana_step(L: float, L_max: float, omega: float, n: int, delta: float) -> float:
    """EF21-P + DIANA (and, with ``omega`` the uplink's, EF21-P + DCGD), strongly convex:
    ``gamma = delta / (8 (L + 6 omega L_max / n))``.

    Derivation (``f`` ``mu``-strongly convex and ``L``-smooth, each ``f_i`` convex and
    ``L_i``-smooth, uplink ``Q_i`` independent in ``U(omega)``, DIANA shift step ``a <=
    1/(omega+1)``, downlink ``C`` contractive with ``E||C(v) - v||^2 <= (1 - delta)||v||^2``):
    write ``e = x - w`` (the primal error), ``D = f(w) - f*``, ``H = mean_i ||h_i - grad
    f_i(x*)||^2``, ``L' = L + 6 omega L_max/n``. One round: ``g = h + mean_i Q(grad f_i(w) -
    h_i)``, ``x+ = x - gamma g``, ``w+ = w + C(x+ - w)``. (1) As in DIANA's derivation
    (:func:`algorithms.stepsizes.vr.diana`) at the point ``w``: ``E g = grad f(w)``, ``E||g||^2
    <= 2 (L + 2 omega L_max/n) D + (2 omega/n) H`` and ``E H+ <= (1 - a) H + 2 a L_max D``.
    (2) ``<grad f(w), x - x*> = <grad f(w), w - x*> + <grad f(w), e> >= D + (mu/2)||w - x*||^2
    - ||grad f(w)||^2/(4L) - L||e||^2 >= D/2 + (mu/4)||x - x*||^2 - (L + mu/2)||e||^2``
    (Young; ``||grad f(w)||^2 <= 2 L D``; ``||w - x*||^2 >= ||x - x*||^2/2 - ||e||^2``), so
    ``E||x+ - x*||^2 <= (1 - gamma mu/2)||x - x*||^2 - gamma D + 3 gamma L ||e||^2 + gamma^2
    E||g||^2`` (``mu <= L``). (3) ``e+ = (x+ - w) - C(x+ - w)`` and ``x+ - w = e - gamma g``:
    ``E||e+||^2 <= (1 - delta) E||e - gamma g||^2 <= (1 - delta/2)||e||^2 + (2/delta)
    gamma^2 E||g||^2`` (Young with ``1 + delta/2``). Take ``V = ||x - x*||^2 + A||e||^2 + B H``
    with ``A = 12 gamma L/delta`` (so ``3 gamma L + A (1 - delta/2) = A (1 - delta/4)``), ``K =
    1 + 2A/delta`` and ``B = 4 K gamma^2 omega/(n a)`` (so the ``H`` coefficient is ``B (1 -
    a/2)``). The ``D`` coefficient is ``-gamma + 2 K gamma^2 (L + 2 omega L_max/n) + 2 a B L_max
    = -gamma + 2 K gamma^2 L'``. At ``gamma = delta/(8 L')``: ``2A/delta = 24 gamma L/delta^2 <=
    3/delta``, so ``K <= 4/delta`` and ``2 K gamma L' <= 1``: the coefficient is ``<= 0``.
    Hence ``E V+ <= rho V`` with ``rho = max(1 - gamma mu/2, 1 - delta/4, 1 - a/2)``: ``x`` and
    ``w`` converge linearly to ``x*``. EF21-P + DCGD (``h = 0``, no ``H``): ``mean_i ||grad
    f_i(w)||^2 <= 4 L_max D + 2 sigma*^2`` with ``sigma*^2 = mean_i ||grad f_i(x*)||^2`` gives
    ``E||g||^2 <= 2 (L + 2 omega L_max/n) D + (2 omega/n) sigma*^2``, and the same steps give
    ``E V+ <= max(1 - gamma mu/2, 1 - delta/4) V + 2 K gamma^2 omega sigma*^2/n`` at any
    ``gamma <= delta/(8 (L + 2 omega L_max/n))``, in particular at this one: linear convergence
    to a neighbourhood that vanishes with ``omega sigma*^2``. The bound is multiplicative in
    ``1/delta`` and ``omega``, weaker than the paper's additive complexity
    ``L/(delta mu) + omega L_max/(n mu) + omega`` (as 2Direction, arXiv 2305.12379, quotes it).
    """
    return delta / (8.0 * (L + 6.0 * omega * L_max / n))


@dataclass(frozen=True)
class EF21PDCGDState(State):
    """``x`` is the server's model; ``w`` the model every node holds."""

    w: torch.Tensor  # (d,) the nodes' (compressed, error-fed-back) copy of x


@dataclass(frozen=True)
class EF21PDIANAState(EF21PDCGDState):
    h_i: torch.Tensor  # (m, d) DIANA shifts
    h: torch.Tensor  # (d,) server's mean of h_i


@dataclass(frozen=True)
class _EF21P(Algorithm):
    """The downlink of both methods: EF21-P (see :class:`EF21PDIANA`)."""

    down_compressor: Compressor | None = option(
        None,
        "downlink compressor C_down, contractive (--down-compressor; default topk:k=1, the "
        "authors' Top-K experiments)",
    )

    needs: ClassVar[str] = "unbiased"
    down_needs: ClassVar[str | None] = "contractive"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", default_down())

    @classmethod
    def _step_theory(cls, problem, compressor, opts, uplink: str) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased(cls.__name__, compressor, d)
        down = down_of(opts)
        delta = need_contractive(cls.__name__, down, d)
        if not problem.convex or problem.consts.mu is None:
            raise ValueError(
                f"{cls.__name__} has a derived step for strongly convex problems only (the "
                "paper's nonconvex theorem could not be read): give --step FLOAT"
            )
        k = need(problem, "L", "L_max", "mu")
        return Theory(
            gamma=ef21_p_diana_step(k["L"], k["L_max"], omega, n, delta),
            formula="delta_down / (8 (L + 6 omega L_max / n))",
            inputs={**k, "omega": omega, "n": n, "delta_down": delta},
            params={"alpha": 1.0 / (omega + 1.0)} if uplink == "diana" else {},
            source=f"{PAPER} (update as {CODE}); step derived here, {NO_THEOREM}",
        )

    def _downlink(self, x: torch.Tensor, w: torch.Tensor, comm: Comm, t: int) -> torch.Tensor:
        """``w + C_down(x - w)``: the server's one message, charged to every node."""
        CD = self.down_compressor
        packet = CD.encode((x - w)[None, :], comm.server_rng(t, tag=tags.EF21P_DOWN))
        return w + comm.broadcast(packet, CD)


DERIVED = pv.derived(
    "algorithms.bidirectional.ef21_p:ef21_p_diana_step",
    "a Lyapunov derivation written here for strongly convex f (the paper's theorems, arXiv "
    "2209.15218, could not be read; the authors' experiments tune the step); update as the "
    "authors' code",
)


@dataclass(frozen=True)
class EF21PDIANA(_EF21P):
    """EF21-P + DIANA: primal error feedback down, DIANA's shifts up.

    Gruntkowska, Tyurin & Richtárik 2023, "EF21-P and Friends: Improved Theoretical
    Communication Complexity for Distributed Optimization with Bidirectional Compression",
    ICML 2023, arXiv 2209.15218. The algorithm box could not be read (only the abstract); the
    update is the authors' code's (Tyurin's distributed_optimization_library,
    ``DianaEF21PrimalMasterAlgorithm`` / ``DianaEF21PrimalNodeAlgorithm``; a copy is in
    k3nfalt/optimal-decentralized-optimization).

    Update (round ``t``; the server holds ``x``, every node the same ``w``): node ``i`` sends
    ``D_i = Q(grad f_i(w) - h_i)`` and sets ``h_i += alpha D_i``; the server forms ``g = h +
    mean_i D_i`` (``h += alpha mean_i D_i``), steps ``x+ = x - gamma g`` and broadcasts
    ``c = C_down(x+ - w)`` (one message, charged to every node); everyone sets ``w+ = w + c``.
    So ``x - w`` is the error fed back in the primal space (EF21-P). ``w^0 = x^0``;
    ``h_i^0 = grad f_i(x^0)`` sent once uncompressed (``full``, the authors' code) or ``0``.
    ``Q`` unbiased and independent across nodes (``--compressor``), ``C_down`` contractive
    (``--down-compressor``, default Top-1 as the authors' Top-K experiments; their Rand-K
    experiments use the biased ``(k/d)``-scaled Rand-K down: ``scaled:randk``).

    Theory: the step ``delta_down/(8 (L + 6 omega L_max/n))`` and ``alpha = 1/(omega + 1)``
    (the authors' code's) for a strongly convex ``f`` with convex ``f_i``, derived here
    (:func:`ef21_p_diana_step`: linear convergence of ``x`` and ``w`` to ``x*``); not the
    paper's theorem, whose constants could not be read. Nonconvex: no step (give ``--step``).
    Reports ``E = ||x - w||^2`` (the primal error) and ``H = mean_i ||grad f_i(w) - h_i||^2``.
    """

    alpha: float | None = memory_step_option("DIANA shift step alpha (default 1/(omega+1))")
    init_mode: str = option(
        "full", "shifts h_i^0: full (sent once, 32 d; the authors' code) | zero", choices=INITS,
        flag="init",
    )  # fmt: skip

    reports: ClassVar[tuple[str, ...]] = ("E", "H")
    provenance: ClassVar[Provenance] = DERIVED

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return cls._step_theory(problem, compressor, opts, "diana")

    def init(self, x0, problem, comm: Comm) -> EF21PDIANAState:
        h_i, h = initial_memory(self.init_mode, problem, x0, comm)
        return EF21PDIANAState(x=x0.clone(), t=0, w=x0.clone(), h_i=h_i, h=h)

    def _step(self, state: EF21PDIANAState, problem, comm: Comm):
        t = state.t
        a = self.alpha
        if a is None:
            a = 1.0 / (effective_omega(self.compressor, problem.d) + 1.0)
        up = uplink_with_memory(self.compressor, problem.grad(state.w), state.h_i, state.h, a,
                                comm, t)  # fmt: skip
        x = state.x - self.gamma * up.g
        w = self._downlink(x, state.w, comm, t)
        E = float(((x - w) ** 2).sum())
        new = EF21PDIANAState(x=x, t=t + 1, w=w, h_i=up.h_i, h=up.h)
        return new, {"E": E, "H": up.H}


@dataclass(frozen=True)
class EF21PDCGD(_EF21P):
    """EF21-P + DCGD: primal error feedback down, compressed gradients up.

    Gruntkowska, Tyurin & Richtárik 2023, arXiv 2209.15218 (ICML 2023); the algorithm box could
    not be read, the update is the authors' code's (``DCGDEF21PrimalMasterAlgorithm`` /
    ``DCGDEF21PrimalNodeAlgorithm`` of Tyurin's distributed_optimization_library).

    Update (round ``t``): node ``i`` sends ``Q(grad f_i(w))``; the server steps ``x+ = x -
    gamma mean_i Q(grad f_i(w))``, broadcasts ``c = C_down(x+ - w)`` and everyone sets
    ``w+ = w + c`` (``w^0 = x^0``). The authors' code compresses ``x - w`` at the start of the
    next round; the sequence of models is the same.

    Theory: the paper's result for this method is nonconvex and could not be read; for a
    strongly convex ``f`` the step ``delta_down/(8 (L + 6 omega L_max/n))`` is derived here
    (:func:`ef21_p_diana_step`, its DCGD paragraph): linear convergence to a neighbourhood of
    size ``O(omega sigma*^2/n)``, ``sigma*^2 = mean_i ||grad f_i(x*)||^2`` (exact convergence
    with the identity uplink). Nonconvex: no step (give ``--step``). Reports ``E = ||x - w||^2``.
    """

    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = DERIVED

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return cls._step_theory(problem, compressor, opts, "dcgd")

    def init(self, x0, problem, comm: Comm) -> EF21PDCGDState:
        return EF21PDCGDState(x=x0.clone(), t=0, w=x0.clone())

    def _step(self, state: EF21PDCGDState, problem, comm: Comm):
        C, t = self.compressor, state.t
        g = comm.reduce(C.encode(problem.grad(state.w), comm.rng_for(C, t)), C)
        x = state.x - self.gamma * g
        w = self._downlink(x, state.w, comm, t)
        return EF21PDCGDState(x=x, t=t + 1, w=w), {"E": float(((x - w) ** 2).sum())}
