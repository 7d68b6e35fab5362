"""MASHA1: extragradient with compressed operator differences and a loopless reference point."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Algorithm, State, Theory, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import ab_kind, need, need_unbiased, resolved
from comm.base import Comm
from streams import tags

SOURCE = (
    "Beznosikov, Richtárik, Diskin, Ryabinin & Gasnikov 2021, arXiv 2110.03313 (MASHA1; "
    "abstract read, algorithm box not)"
)
P_HELP = (
    "probability of a full synchronisation, which refreshes the reference point w and sends "
    "F_i(w) uncompressed (default: 1 / (omega + 1))"
)


def masha1_step(p: float, L_Q: float) -> float:
    """The step ``gamma = sqrt(p / 2) / L_Q``, at which ``E Phi`` contracts by
    ``1 - rho`` per round, ``rho = min(p / 4, gamma mu / 2)`` (:func:`masha1_rate`).

    Derivation (written here; the paper's theorem could not be read). Unconstrained VI with
    ``F`` ``mu``-strongly monotone, ``F(z*) = 0``. One round, ``alpha = 1 - p``:
    ``zbar = alpha z + p w``, ``z_h = zbar - gamma F(w)``, ``g = F(w) + Q`` with
    ``Q = (1/n) sum_i C_i(F_i(z_h) - F_i(w))``, ``E Q = F(z_h) - F(w)`` and, by the
    AB-inequality of the compressors (Szlendak, Tyurin & Richtárik 2021, arXiv 2110.03300),
    ``E||Q||^2 <= L_Q^2 ||z_h - w||^2`` with ``L_Q^2 = L^2 + (A - B) L_tilde^2 + B L_pm^2``
    (independent ``U(omega)``: ``L^2 + omega L_tilde^2 / n``); ``z+ = zbar - gamma g``;
    ``w+ = z+`` with probability ``p``, else ``w``.

    1. ``||z+ - z*||^2 = ||zbar - z*||^2 - ||z+ - zbar||^2 - 2 gamma <g, z+ - z*>``. Split
       ``z+ - z* = (z_h - z*) + (z+ - z_h)`` and ``z+ - zbar = (z+ - z_h) + (z_h - zbar)`` with
       ``z_h - zbar = -gamma F(w)``: the terms in ``z+ - z_h`` leave
       ``-||z+ - z_h||^2 - 2 gamma <Q, z+ - z_h> <= gamma^2 ||Q||^2``. In expectation over the
       compressors, ``E <g, z_h - z*> = <F(z_h) - F(z*), z_h - z*> >= mu ||z_h - z*||^2``, so
       ``E||z+ - z*||^2 <= ||zbar - z*||^2 - ||z_h - zbar||^2
       + gamma^2 L_Q^2 ||z_h - w||^2 - 2 gamma mu ||z_h - z*||^2``.
    2. For a convex combination, ``||u - zbar||^2 = alpha ||u - z||^2 + p ||u - w||^2
       - alpha p ||z - w||^2`` for every ``u``; at ``u = z*`` and ``u = z_h`` the last terms
       cancel: ``E||z+ - z*||^2 <= alpha ||z - z*||^2 + p ||w - z*||^2 - alpha ||z_h - z||^2
       - (p - gamma^2 L_Q^2) ||z_h - w||^2 - 2 gamma mu ||z_h - z*||^2``.
    3. The coin is independent of the compressors: ``E||w+ - z*||^2 = p E||z+ - z*||^2 +
       alpha ||w - z*||^2``. With ``Phi = alpha ||z - z*||^2 + ||w - z*||^2``,
       ``E Phi+ = E||z+ - z*||^2 + alpha ||w - z*||^2 <= Phi - S``,
       ``S = alpha ||z_h - z||^2 + (p - gamma^2 L_Q^2) ||z_h - w||^2 + 2 gamma mu ||z_h - z*||^2``.
    4. At ``gamma^2 L_Q^2 = p / 2``, ``||a + b||^2 <= 2||a||^2 + 2||b||^2`` on both terms of
       ``Phi`` gives ``rho Phi <= S`` for ``rho = min(1/2, p/4, gamma mu/(1 + alpha))``, and
       ``min(p/4, gamma mu/2)`` is below it: ``E Phi_k <= (1 - rho)^k Phi_0``, with
       ``Phi_0 = (1 + alpha) ||z^0 - z*||^2`` (``w^0 = z^0``) and ``||w_k - z*||^2 <= Phi_k``.
    With ``p = 1`` (the identity, ``omega = 0``) the round is extragradient at
    ``gamma = 1 / (sqrt(2) L)``.
    """
    if not 0 < p <= 1 or not L_Q > 0:
        raise ValueError(f"need 0 < p <= 1 and L_Q > 0, got p = {p}, L_Q = {L_Q}")
    return math.sqrt(p / 2) / L_Q


def masha1_rate(p: float, gamma: float, mu: float) -> float:
    """``rho = min(p / 4, gamma mu / 2)``: ``E Phi_k <= (1 - rho)^k Phi_0`` at the step of
    :func:`masha1_step` (or any smaller one, with its own ``gamma``)."""
    return min(p / 4.0, gamma * mu / 2.0)


def operator_noise(problem, compressor, omega: float) -> tuple[float, dict[str, float]]:
    """``L_Q = sqrt(L^2 + (A - B) L_tilde^2 + B L_pm^2)``, the mean-square Lipschitz constant
    of the compressed operator difference (:func:`masha1_step`), and the numbers it used."""
    n = problem.n
    kind = ab_kind(compressor)
    A, B = stepsizes.ab_constants(omega, n, kind)
    k = need(problem, "L", "L_tilde", *(("L_pm",) if B > 0 else ()))
    L_Q2 = k["L"] ** 2 + (A - B) * k["L_tilde"] ** 2 + B * (k.get("L_pm") or 0.0) ** 2
    return math.sqrt(L_Q2), {**k, "omega": omega, "n": n, "A": A, "B": B, "compressors": kind}


@dataclass(frozen=True)
class MASHA1State(State):
    w: torch.Tensor  # (d,) the reference point
    Fw: torch.Tensor  # (d,) server's F(w) = mean_i F_i(w), received uncompressed
    Fw_i: torch.Tensor  # (m, d) each node's F_i(w)


@dataclass(frozen=True)
class MASHA1(Algorithm):
    """MASHA1: extragradient with compressed differences ``F_i(z_h) - F_i(w)`` and a loopless
    reference point ``w`` (Beznosikov, Richtárik, Diskin, Ryabinin & Gasnikov, "Distributed
    Methods with Compressed Communication for Solving Variational Inequalities, with
    Theoretical Guarantees", NeurIPS 2022, arXiv 2110.03313, Algorithm MASHA1).

    For the VI ``find z*: F(z*) = 0``, ``F = (1/n) sum_i F_i`` (a saddle point
    ``min_x max_y``: ``F_i = (grad_x f_i, -grad_y f_i)``, what ``problem.grad`` returns), one
    round, with ``alpha = 1 - p``:

    * server: ``zbar = alpha z + p w``, ``z_h = zbar - gamma F(w)``; broadcasts ``z_h``
      (uncompressed, ``32 d`` bits down);
    * node ``i`` sends ``C_i(F_i(z_h) - F_i(w))``; server
      ``g = F(w) + (1/n) sum_i C_i(...)`` and ``z = zbar - gamma g``;
    * a coin shared by all, ``Bernoulli(p)``: on heads the server broadcasts ``w = z``
      (``32 d`` down) and every node sends ``F_i(w)`` uncompressed (``32 d`` up).
    ``F(w^0)`` is sent uncompressed once by ``init``. The iterate is ``z`` (``state.x``).
    With the identity compressor (``p = 1``) a round is extragradient.

    What could be read: the abstract (MASHA1 for unbiased compressors, "extragradient with
    bespoke variance reduction"; MASHA2 for contractive ones with error feedback). The
    algorithm box could not be read: the round above is a reconstruction, the loopless
    variance-reduced extragradient of Alacaoglu & Malitsky 2022 (arXiv 2102.08352) with the
    compressor in place of the sampled operator, as the abstract describes; the paper's ``tau``
    is ``1 - p`` here. Projections onto a set ``Z`` are left out (unconstrained VIs).

    Theory: the step ``sqrt(p / 2) / L_Q``, ``L_Q^2 = L^2 + (A - B) L_tilde^2 + B L_pm^2``
    (AB-inequality constants of the compressors; independent ``U(omega)``:
    ``L^2 + omega L_tilde^2 / n``), with ``E Phi_k <= (1 - rho)^k Phi_0``,
    ``rho = min(p/4, gamma mu/2)`` and ``Phi = (1 - p)||z - z*||^2 + ||w - z*||^2``:
    derived here (:func:`masha1_step`), not the paper's theorem. ``L``, ``L_i`` are Lipschitz
    constants of ``F``, ``F_i`` and ``mu`` the strong monotonicity of ``F``
    (``quadratic-game`` knows them; on a minimisation problem, the smoothness and strong
    convexity constants are those of the gradient field). Reported: ``sync``.
    """

    p: float | None = option(None, P_HELP, check=check_unit)

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "unbiased"
    solves_vi: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.vi.masha1:masha1_step",
        "a Lyapunov argument for the reconstructed round (loopless extragradient of Alacaoglu "
        "& Malitsky 2022, arXiv 2102.08352, with compressed operator differences); the "
        "MASHA1 theorem of arXiv 2110.03313 could not be read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        omega = need_unbiased("MASHA1", compressor, problem.d)
        p = resolved(opts.get("p"), lambda: 1.0 / (omega + 1.0))
        L_Q, inputs = operator_noise(problem, compressor, omega)
        gamma = masha1_step(p, L_Q)
        var = "L^2 + (A - B) L_tilde^2 + B L_pm^2" if inputs["B"] > 0 else "L^2 + A L_tilde^2"
        return Theory(
            gamma=gamma,
            formula=f"sqrt(p / 2) / L_Q, L_Q^2 = {var}",
            inputs={**inputs, "p": p, "L_Q": L_Q},
            params={"p": p},
            source=SOURCE + "; step derived here (algorithms.vi.masha1:masha1_step)",
        )

    def _p(self, d: int) -> float:
        return resolved(self.p, lambda: 1.0 / (self.compressor.omega(d) + 1.0))

    def init(self, x0: torch.Tensor, problem, comm: Comm) -> MASHA1State:
        Fw_i = problem.grad(x0)
        Fw = comm.reduce_full(Fw_i)  # F(w^0), uncompressed
        return MASHA1State(x=x0.clone(), t=0, w=x0.clone(), Fw=Fw, Fw_i=Fw_i)

    def _step(self, state: MASHA1State, problem, comm: Comm):
        C, t, gamma = self.compressor, state.t, self.gamma
        p = self._p(problem.d)
        zbar = (1.0 - p) * state.x + p * state.w
        z_h = zbar - gamma * state.Fw
        comm.broadcast_full(problem.d)  # the server sends z_{k+1/2}
        packet = C.encode(problem.grad(z_h) - state.Fw_i, comm.rng_for(C, t))
        g = state.Fw + comm.reduce(packet, C)
        z = zbar - gamma * g
        sync = comm.coin(t, p, tag=tags.MASHA_COIN)
        if sync:
            comm.broadcast_full(problem.d)  # the server sends w = z
            Fw_i = problem.grad(z)
            new = MASHA1State(x=z, t=t + 1, w=z.clone(), Fw=comm.reduce_full(Fw_i), Fw_i=Fw_i)
        else:
            new = MASHA1State(x=z, t=t + 1, w=state.w, Fw=state.Fw, Fw_i=state.Fw_i)
        return new, {"sync": float(sync)}
