"""Compression with data similarity on a strongly monotone game: linear convergence at a step set
by the operators' dissimilarity, not by their Lipschitz constant.

* ``vi.masha-sim-linear``: the quadratic game of :mod:`theory_checks.vi` (``n = 10`` nodes,
  ``x, y`` in ``R^10`` each, ``mu = 0.1``, ``ell = 1``, coupling 1, similarity
  ``delta = 0.1``, ``zeta2 = 100``, seed 0: ``L = 1.28``, ``L_pm = 0.067``), ``z^0 = 0``,
  MASHASim (:class:`algorithms.vi.masha_sim.MASHASim`) at its theory step with Rand-4
  (independent, ``omega = 4``, ``p = 1/5``, ``delta_Q^2 = delta^2 + (omega/n) 4 delta^2``,
  ``gamma = 1.96``) and with PermK (``p = 1/10``, ``delta_Q^2 = delta^2 + L_pm^2``,
  ``gamma = 1.86``): about nine times MASHA1's steps on the same game (0.209 and 0.174).
  Claim (derived here, :func:`algorithms.vi.masha_sim.masha_sim_step`; the paper's theorem,
  arXiv 2206.09446, could not be read): ``E Phi_k <= (1 - rho)^k Phi_0``,
  ``Phi = (1 - p) ||z - z*||^2 + ||w - z*||^2``, ``rho = min(p/4, gamma mu/2)`` (0.05 and
  0.025), at every ``k = T/8, ..., T``; the expectation estimated by the mean over seeds (2
  fast, 5 full); margin ``min_k (k log(1 - rho) - log(mean Phi_k / Phi_0))``, natural-log
  units. The derivation assumes an exact local solve; the run uses the default
  ``inner_steps`` (a contraction bound for a 1e-2 squared relative accuracy), so the check also
  tests that this inexactness is harmless. Measured (fast, ``T = 120``, 2 seeds): margins
  +0.48 (Rand-4) and +0.93 (PermK), both bound at the first checkpoint (``k = 15``).

Power (``--power``), each variant with the same constants and step:

* ``no-similarity``: nodes send ``C_i(F_i(u) - F_i(w))``, not relative to the server's
  ``F_1(u) - F_1(w)`` (the server subtracts it after): still unbiased, but the compressed
  vectors are of size ``L ||u - w||``, not ``delta ||u - w||``, and the similarity step is
  too long for that variance (with PermK the ``1/n`` cancellation of the partition saves it:
  only the Rand-4 outcome rejects it);
* ``no-vr``: the reference point is never refreshed (the coin never falls): the compressors'
  variance ``~ ||u - w^0||`` does not vanish and ``zbar`` keeps pulling towards ``w^0``;
* ``step-x8``: 8 times the derived step: the local problem is still solved, but the
  compressed correction's variance overwhelms the contraction.
"""

from __future__ import annotations

import functools
import math

import torch

from algorithms.vi.masha1 import masha1_rate
from algorithms.vi.masha_sim import MASHASim, MASHASimState, server_row
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags
from theory_checks.base import Check, Outcome, Variant, single_threaded
from theory_checks.vi import GAME, N, rate_outcome

PAPER = (
    "Beznosikov & Gasnikov, arXiv 2206.09446 (compression and data similarity for strongly "
    "monotone VIs, abstract); the rate E Phi_k <= (1 - rho)^k Phi_0 at the step "
    "sqrt(p/2)/delta_Q is derived here (algorithms.vi.masha_sim:masha_sim_step)"
)
SPECS = ("randk:k=4", "permk")

VARIANTS = (
    Variant("no-similarity", "other", "nodes compress F_i(u) - F_i(w) itself, not its "
            "difference to the server's F_1(u) - F_1(w): the compressed vectors scale with L, "
            "not delta, and the similarity step is too long for them"),
    Variant("no-vr", "no-variance-reduction", "the reference point w is never refreshed: the "
            "compression variance ~ ||u - w^0|| never vanishes"),
    Variant("step-x8", "step-too-large", "8x the derived step"),
)  # fmt: skip


class _NoSync(SimulatedComm):
    """Simulated nodes whose shared coin never falls (the ``no-vr`` variant)."""

    def coin(self, t: int, p: float, tag: int = tags.DEFAULT) -> bool:
        return False


@functools.cache
def game():
    """The instance of the module docstring (the game of :mod:`theory_checks.vi`)."""
    return make_problem("quadratic-game", nodes=N, seed=0, **GAME)


def _phi(state: MASHASimState, zs: torch.Tensor, p: float) -> float:
    return (1.0 - p) * float(((state.x - zs) ** 2).sum()) + float(((state.w - zs) ** 2).sum())


def _no_similarity_step(algo: MASHASim, state: MASHASimState, prob, comm) -> MASHASimState:
    """The round with ``C_i(a_i)`` sent instead of ``C_i(a_i - a_1)``."""
    C, t, gamma = algo.compressor, state.t, algo.gamma
    p = algo._p(prob.d)
    zbar = (1.0 - p) * state.x + p * state.w
    u = server_row(comm, algo.solve_local(zbar, state.Fw - state.F1w, prob))
    A = prob.grad(u) - state.Fw_i
    a1 = server_row(comm, A)
    z = u - gamma * (comm.reduce(C.encode(A, comm.rng_for(C, t)), C) - a1)
    if comm.coin(t, p, tag=tags.MASHA_COIN):
        Fw_i = prob.grad(z)
        return MASHASimState(x=z, t=t + 1, w=z.clone(), Fw=comm.reduce_full(Fw_i), Fw_i=Fw_i,
                             F1w=server_row(comm, Fw_i))  # fmt: skip
    return MASHASimState(x=z, t=t + 1, w=state.w, Fw=state.Fw, Fw_i=state.Fw_i, F1w=state.F1w)


def trajectory(spec: str, variant: str | None, T: int, seed: int) -> tuple[list[float], float]:
    """``Phi_k`` for ``k = 1..T`` of MASHASim (or the named variant) and ``Phi_0``."""
    prob = game()
    algo, _ = MASHASim.configure(
        prob, parse_spec(spec), step_mult=8.0 if variant == "step-x8" else 1.0
    )
    p, zs = algo._p(prob.d), prob.x_star
    comm = (_NoSync if variant == "no-vr" else SimulatedComm)(prob.n, seed=seed)
    state = algo.init(prob.x0.clone(), prob, comm)
    phi0, out = _phi(state, zs, p), []
    for _ in range(T):
        if variant == "no-similarity":
            state = _no_similarity_step(algo, state, prob, comm)
        else:
            state, _ = algo.step(state, prob, comm)
        phi = _phi(state, zs, p)
        out.append(phi)
        if not math.isfinite(phi) or phi > 1e12 * phi0:
            out += [math.inf] * (T - len(out))  # diverged: the rest counts as the worst
            break
    return out, phi0


def _masha_sim_linear(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 120 if fast else 400
    prob = game()
    outcomes = []
    for spec in SPECS:
        algo, _ = MASHASim.configure(prob, parse_spec(spec))
        p = algo._p(prob.d)
        rho = masha1_rate(p, algo.gamma, prob.consts.mu)
        seeds = 2 if fast else 5
        runs = [trajectory(spec, variant, T, s) for s in range(seeds)]
        inner = algo._local_solve(algo.gamma, prob, None, None)[0]
        setting = (
            f"quadratic-game n={N}, d={prob.d}, mu={GAME['mu']}, delta={GAME['similarity']}, "
            f"{spec} (p={p:.3g}, gamma={algo.gamma:.4g}, inner_steps={inner}), T={T}, "
            f"{seeds} seeds"
        )
        outcomes.append(rate_outcome(runs, T, rho, setting))
    return outcomes


CHECKS = (
    Check("vi.masha-sim-linear", PAPER, single_threaded(_masha_sim_linear), variants=VARIANTS),
)  # fmt: skip
