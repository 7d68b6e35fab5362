"""Compression with data similarity for variational inequalities: extragradient sliding in which
the server solves a local problem with its own operator and the nodes send compressed
differences that are small because the operators are similar."""

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
    check_count,
    check_positive,
    check_unit,
    option,
)
from algorithms.provenance import Provenance
from algorithms.vi.masha1 import P_HELP, masha1_rate
from algorithms.vr.vr_common import ab_kind, need, need_unbiased, resolved
from comm.base import Comm
from streams import tags

SOURCE = (
    "Beznosikov & Gasnikov 2022, arXiv 2206.09446 (compression and data similarity for "
    "distributed VIs; abstract read, algorithm box not)"
)
#: The inner solve's target: ``||v_K - u||^2 <= INNER_TOL ||v_0 - u||^2`` by the contraction
#: bound of :func:`inner_steps`.
INNER_TOL = 1e-2


def similarity_noise(problem, compressor, omega: float) -> tuple[float, dict[str, float]]:
    """``delta_Q = sqrt(delta^2 + (A - B) (2 delta)^2 + B L_pm^2)``: the mean-square Lipschitz
    constant of the compressed correction (:func:`masha_sim_step`), and the numbers it used.

    ``delta`` is the problem's similarity constant (``||F_i' - F'|| <= delta`` for every node,
    so ``F - F_1`` is ``delta``-Lipschitz and each ``F_i - F_1`` is ``2 delta``-Lipschitz);
    ``A, B`` the AB-inequality constants of the compressors
    (:func:`algorithms.stepsizes.vr.ab_constants`); ``L_pm`` the operator variance
    (``(1/n) sum_i ||a_i - abar||^2 <= L_pm^2 ||u - w||^2`` for ``a_i = F_i(u) - F_i(w)``)."""
    delta = getattr(problem, "similarity", None)
    if delta is None:
        raise ValueError(
            "the theory step needs the similarity constant delta (max_i ||F_i' - F'||), which "
            "this problem does not know: give --step FLOAT"
        )
    n = problem.n
    kind = ab_kind(compressor)
    A, B = stepsizes.ab_constants(omega, n, kind)
    k = need(problem, *(("L_pm",) if B > 0 else ()))
    var = (A - B) * 4.0 * delta**2 + B * (k.get("L_pm") or 0.0) ** 2
    return math.sqrt(delta**2 + var), {
        **k,
        "delta": float(delta),
        "omega": omega,
        "n": n,
        "A": A,
        "B": B,
        "compressors": kind,
    }


def masha_sim_step(p: float, delta_Q: float) -> float:
    """The step ``gamma = sqrt(p / 2) / delta_Q``, at which ``E Phi`` contracts by ``1 - rho``
    per round, ``rho = min(p / 4, gamma mu / 2)`` (:func:`algorithms.vi.masha1.masha1_rate`),
    when the server's local problem is solved exactly.

    Derivation (written here; the paper's theorem could not be read). Unconstrained VI,
    ``F = (1/n) sum_i F_i`` ``mu``-strongly monotone, ``F(z*) = 0``; the server holds
    ``F_1`` (node 0), ``D = F - F_1``. One round, ``alpha = 1 - p``:
    ``zbar = alpha z + p w``; ``u`` solves ``u = zbar - gamma h``,
    ``h = F_1(u) - F_1(w) + F(w)``; ``Q = (1/n) sum_i C_i(b_i)``,
    ``b_i = (F_i(u) - F_i(w)) - (F_1(u) - F_1(w))``, so ``E Q = D(u) - D(w)``;
    ``z+ = u - gamma Q``, i.e. ``z+ = zbar - gamma g`` with ``g = h + Q`` and
    ``E g = F(u)``; ``w+ = z+`` with probability ``p``.

    ``E||Q||^2 = ||D(u) - D(w)||^2 + E||Q - E Q||^2 <= delta_Q^2 ||u - w||^2``: the first term
    by ``delta``-Lipschitz ``D``; the second by the AB-inequality,
    ``A (1/n) sum ||b_i||^2 - B ||mean b||^2 = (A - B)(1/n) sum ||b_i||^2 + B (1/n) sum
    ||b_i - bbar||^2`` with ``||b_i|| <= 2 delta ||u - w||`` and
    ``b_i - bbar = a_i - abar``.

    The rest is the argument of :func:`algorithms.vi.masha1.masha1_step` with ``z_h = u`` and
    ``L_Q = delta_Q``: from ``z+ = zbar - gamma g``,
    ``||z+ - z*||^2 = ||zbar - z*||^2 - ||z+ - zbar||^2 - 2 gamma <g, z+ - z*>``; splitting at
    ``u`` (``u - zbar = -gamma h``) the terms in ``z+ - u`` leave
    ``-||z+ - u||^2 - 2 gamma <Q, z+ - u> <= gamma^2 ||Q||^2``, and
    ``E <g, u - z*> = <F(u), u - z*> >= mu ||u - z*||^2``; so ``E||z+ - z*||^2 <=
    ||zbar - z*||^2 - ||u - zbar||^2 + gamma^2 delta_Q^2 ||u - w||^2 - 2 gamma mu ||u - z*||^2``,
    and with ``Phi = alpha ||z - z*||^2 + ||w - z*||^2`` the same steps give
    ``E Phi_k <= (1 - rho)^k Phi_0``. The step no longer involves ``L``: a round costs what
    the operators' dissimilarity costs, the server's local solve takes the rest.
    """
    if not 0 < p <= 1 or not delta_Q > 0:
        raise ValueError(f"need 0 < p <= 1 and delta_Q > 0, got p = {p}, delta_Q = {delta_Q}")
    return math.sqrt(p / 2) / delta_Q


def inner_steps(gamma: float, L1: float, mu1: float) -> int:
    """Extragradient steps for the server's solve of ``T(v) = v - zbar + gamma (F_1(v) + c) = 0``
    to ``||v_K - u||^2 <= INNER_TOL ||v_0 - u||^2``.

    ``T`` is ``L_T = 1 + gamma L1`` Lipschitz and ``mu_T = 1 + gamma mu1`` strongly monotone
    (``mu1 >= mu - delta``, the strong monotonicity of ``F`` less the similarity). Extragradient
    at ``eta = 1 / (2 L_T)`` contracts ``||v - u||^2`` by at least ``1 - mu_T / (4 L_T)``
    per step (the standard bound, e.g. Mokhtari, Ozdaglar & Pattathil 2020, arXiv 1901.08511),
    so ``K = ceil(4 (L_T / mu_T) ln(1 / INNER_TOL))``.
    """
    mu_T = 1.0 + gamma * mu1
    if not mu_T > 0:
        raise ValueError(
            f"the server's local problem is not strongly monotone: 1 + gamma (mu - delta) = "
            f"{mu_T:.3g} <= 0 (gamma = {gamma:.3g}); give a smaller --step"
        )
    return max(1, math.ceil(4.0 * (1.0 + gamma * L1) / mu_T * math.log(1.0 / INNER_TOL)))


@dataclass(frozen=True)
class MASHASimState(State):
    w: torch.Tensor  # (d,) the reference point
    Fw: torch.Tensor  # (d,) F(w) = mean_i F_i(w), received uncompressed
    Fw_i: torch.Tensor  # (m, d) each node's F_i(w)
    F1w: torch.Tensor  # (d,) the server's own F_1(w)


def server_row(comm: Comm, rows: torch.Tensor) -> torch.Tensor:
    """Node 0's row, ``(d,)``, on every process: the server holds node 0's operator, so what it
    computes with it is its own and costs no bits (one weighted reduction with weight 1 on node
    0 and 0 elsewhere; what the server then sends is charged where it sends it)."""
    weight = (comm.nodes == 0).to(rows.dtype)
    return comm.reduce_rows(rows, torch.zeros(rows.shape[0], dtype=torch.int64), weight)


@dataclass(frozen=True)
class MASHASim(Algorithm):
    """Compressed extragradient sliding under data similarity, for strongly monotone VIs
    (Beznosikov & Gasnikov, "Compression and Data Similarity: Combination of Two Techniques
    for Communication-Efficient Solving of Distributed Variational Inequalities", 2022, arXiv
    2206.09446).

    The server holds node 0's operator ``F_1`` and the operators are similar:
    ``||F_i'(z) - F'(z)|| <= delta`` (``quadratic-game``'s ``similarity``). One round, with
    ``alpha = 1 - p`` and ``c = F(w) - F_1(w)``:

    * server: ``zbar = alpha z + p w``; solves ``u + gamma (F_1(u) + c) = zbar`` with its own
      operator (``inner_steps`` extragradient steps from ``zbar``, step
      ``1 / (2 (1 + gamma server_lipschitz))``: local computation, no communication);
      broadcasts ``u`` and ``F_1(u) - F_1(w)`` (``2 x 32 d`` bits down);
    * node ``i`` sends ``C_i(b_i)``, ``b_i = (F_i(u) - F_i(w)) - (F_1(u) - F_1(w))``, of norm
      at most ``2 delta ||u - w||``: small because the operators are similar, whatever ``L``;
    * server: ``z = u - gamma (1/n) sum_i C_i(b_i)`` (the sliding correction
      ``F(u) - F_1(u) - F(w) + F_1(w)``, compressed);
    * a coin shared by all, ``Bernoulli(p)``: on heads the server broadcasts ``w = z`` (``32 d``
      down) and every node sends ``F_i(w)`` uncompressed (``32 d`` up).
    ``F(w^0)`` is sent uncompressed once by ``init``. Node 0 takes part as every node does and
    is charged its message (its ``b_1 = 0``): a conservative count, since in a deployment
    where the server holds node 0's data that message never leaves the machine.

    What could be read: the abstract (compression and data similarity combined for smooth
    strongly monotone VIs, better together than each alone). The algorithm box could not be
    read: the round above is a reconstruction, the similarity extragradient ("sliding": the
    server's local operator replaces ``F`` in the extrapolation, Kovalev, Beznosikov, Borodich,
    Gasnikov & Scutari 2022, arXiv 2205.15136, for VIs) with MASHA1's compressed,
    loopless-variance-reduced correction (:class:`algorithms.vi.masha1.MASHA1`), the
    compressed vectors taken relative to the server's so that their size is set by ``delta``.
    With identical operators (``delta = 0``) the correction is zero and a round is the
    server's proximal-point step.

    Theory: the step ``sqrt(p / 2) / delta_Q``,
    ``delta_Q^2 = delta^2 + (A - B)(2 delta)^2 + B L_pm^2``, with
    ``E Phi_k <= (1 - rho)^k Phi_0``, ``rho = min(p/4, gamma mu/2)``, for an exact local
    solve: derived here (:func:`masha_sim_step`), not the paper's theorem. Against MASHA1
    (``sqrt(p/2) / L_Q``, ``L_Q >= L``) a round is worth ``L / delta_Q`` times more when
    ``delta << L``. ``inner_steps`` (default :func:`inner_steps`, a contraction bound, not from
    the paper) and ``server_lipschitz`` (default ``L_max``) set the local solve. Reported:
    ``sync``.
    """

    p: float | None = option(None, P_HELP, check=check_unit)
    inner_steps: int | None = option(
        None,
        "extragradient steps of the server's local solve per round (default: enough for a "
        "1e-2 squared relative accuracy at the run's step, by the contraction bound "
        "1 - mu_T / (4 L_T))",
        check=check_count,
    )
    server_lipschitz: float | None = option(
        None,
        "a Lipschitz constant of the server's operator F_1, for the local solve's step "
        "1 / (2 (1 + gamma L)) (default: the problem's L_max)",
        check=check_positive,
    )

    needs: ClassVar[str] = "unbiased"
    solves_vi: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.vi.masha_sim:masha_sim_step",
        "a Lyapunov argument for the reconstructed round (similarity extragradient sliding "
        "with MASHA1's compressed, loopless-variance-reduced correction); the theorem of "
        "arXiv 2206.09446 could not be read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        omega = need_unbiased("MASHASim", compressor, problem.d)
        p = resolved(opts.get("p"), lambda: 1.0 / (omega + 1.0))
        delta_Q, inputs = similarity_noise(problem, compressor, omega)
        gamma = masha_sim_step(p, delta_Q)
        var = "(A - B) (2 delta)^2 + B L_pm^2" if inputs["B"] > 0 else "A (2 delta)^2"
        K, L1 = cls._local_solve(gamma, problem, opts.get("inner_steps"),
                                 opts.get("server_lipschitz"))  # fmt: skip
        mu = problem.consts.mu
        rho = masha1_rate(p, gamma, mu) if mu is not None else None
        return Theory(
            gamma=gamma,
            formula=f"sqrt(p / 2) / delta_Q, delta_Q^2 = delta^2 + {var}",
            inputs={
                **inputs,
                "p": p,
                "delta_Q": delta_Q,
                "rho": rho,
                "inner_steps": K,
                "server_lipschitz": L1,
            },  # fmt: skip
            params={"p": p},
            source=SOURCE + "; step derived here (algorithms.vi.masha_sim:masha_sim_step)",
        )

    @staticmethod
    def _local_solve(gamma, problem, K: int | None, L1: float | None) -> tuple[int, float]:
        """The local solve's ``inner_steps`` and ``server_lipschitz`` at step ``gamma``: as
        given, else ``L_max`` and :func:`inner_steps` with ``mu_1 >= min(0, mu - delta)``
        (``mu_1 >= 0`` assumed where the problem knows no ``delta`` or ``mu``)."""
        c = problem.consts
        if L1 is None:
            if c.L_max is None:
                raise ValueError(
                    "MASHASim's local solve needs a Lipschitz constant of the server's "
                    "operator, which this problem does not know: give --opt server_lipschitz=L"
                )
            L1 = c.L_max
        if K is None:
            delta = getattr(problem, "similarity", None)
            mu1 = min(0.0, c.mu - delta) if delta is not None and c.mu is not None else 0.0
            K = inner_steps(gamma, L1, mu1)
        return K, L1

    def _p(self, d: int) -> float:
        return resolved(self.p, lambda: 1.0 / (self.compressor.omega(d) + 1.0))

    def init(self, x0: torch.Tensor, problem, comm: Comm) -> MASHASimState:
        self._local_solve(self.gamma, problem, self.inner_steps, self.server_lipschitz)
        Fw_i = problem.grad(x0)
        Fw = comm.reduce_full(Fw_i)  # F(w^0), uncompressed
        return MASHASimState(
            x=x0.clone(), t=0, w=x0.clone(), Fw=Fw, Fw_i=Fw_i, F1w=server_row(comm, Fw_i)
        )

    def solve_local(self, zbar: torch.Tensor, c: torch.Tensor, problem) -> torch.Tensor:
        """``inner_steps`` extragradient steps from ``zbar`` on ``T(v) = v - zbar +
        gamma (F_i(v) + c)`` at every held row (row 0 of node 0 is the server's solve; the
        rows share the work of one batched operator call)."""
        gamma, m = self.gamma, problem.m
        K, L1 = self._local_solve(gamma, problem, self.inner_steps, self.server_lipschitz)
        eta = 1.0 / (2.0 * (1.0 + gamma * L1))
        V = zbar.expand(m, -1).clone()
        for _ in range(K):
            Vh = V - eta * (V - zbar + gamma * (problem.grad(V) + c))
            V = V - eta * (Vh - zbar + gamma * (problem.grad(Vh) + c))
        return V

    def _step(self, state: MASHASimState, problem, comm: Comm):
        C, t, gamma, d = self.compressor, state.t, self.gamma, problem.d
        p = self._p(d)
        zbar = (1.0 - p) * state.x + p * state.w
        u = server_row(comm, self.solve_local(zbar, state.Fw - state.F1w, problem))
        A = problem.grad(u) - state.Fw_i  # a_i = F_i(u) - F_i(w)
        a1 = server_row(comm, A)
        comm.broadcast_full(d)  # the server sends u
        comm.broadcast_full(d)  # and F_1(u) - F_1(w)
        packet = C.encode(A - a1, comm.rng_for(C, t))
        z = u - gamma * comm.reduce(packet, C)
        sync = comm.coin(t, p, tag=tags.MASHA_COIN)
        if sync:
            comm.broadcast_full(d)  # the server sends w = z
            Fw_i = problem.grad(z)
            new = MASHASimState(
                x=z, t=t + 1, w=z.clone(), Fw=comm.reduce_full(Fw_i), Fw_i=Fw_i,
                F1w=server_row(comm, Fw_i),
            )  # fmt: skip
        else:
            new = MASHASimState(
                x=z, t=t + 1, w=state.w, Fw=state.Fw, Fw_i=state.Fw_i, F1w=state.F1w
            )
        return new, {"sync": float(sync)}
