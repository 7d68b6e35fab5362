"""DIANA+: DIANA with smoothness-aware sparsification and per-coordinate shift steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_unit, option
from algorithms.provenance import Provenance
from algorithms.shifts import smoothness_aware as sa
from algorithms.shifts.dcgd_plus import INDEFINITE_NOTE, matrix_theory, node_probabilities
from algorithms.stepsizes import matrix_smoothness as steps
from comm.base import Comm

SOURCE = (
    "Safaryan, Hanzely & Richtárik 2021, arXiv 2106.03524 (DIANA+; matrix smoothness); step and "
    "shift steps alpha_ij = p_ij derived in the form of DIANA's (Mishchenko et al. 2019, arXiv "
    "1901.09269; theory sheet §2.8) with omega L_i replaced by the matrix constant, [V-deriv]; "
    "the paper's theorem constants [U]"
)


@dataclass(frozen=True)
class DIANAPlusState(State):
    p_i: torch.Tensor  # (m, d) node i's sampling probabilities, from its L_i
    h_i: torch.Tensor  # (m, d) node shifts
    h: torch.Tensor  # (d,) server shift, mean of h_i over all nodes
    grad_star_i: torch.Tensor | None = None  # (m, d) grad f_i(x*), for the report H only


@dataclass(frozen=True)
class DIANAPlus(Algorithm):
    """DIANA+: DIANA with sparsification from the smoothness matrices (arXiv 2106.03524).

    Safaryan, Hanzely & Richtárik 2021: DIANA whose nodes sparsify the gradient differences with
    probabilities built from their ``L_i``.

    Update (DIANA, arXiv 1901.09269, Alg. 1, with the sparsifier of
    :mod:`algorithms.shifts.smoothness_aware`): node ``i`` forms ``Delta_i = grad f_i(x^k) -
    h_i^k``, keeps coordinate ``j`` with probability ``p_ij`` from its own stream and sends the kept
    ``Delta_ij / p_ij``, i.e. ``c_i = S_i(Delta_i)``; it sets ``h_i^{k+1} = h_i^k + alpha_i o
    c_i`` with ``alpha_ij = p_ij`` by default (so a kept coordinate's shift becomes
    ``grad_j f_i(x^k)`` exactly, a dropped one stays). The server, which holds every node's
    ``p_i`` (sent once at ``init``, ``float_bits d`` uplink per node), forms
    ``g^k = h^k + (1/n) sum_i c_i``, steps ``x^{k+1} = x^k - gamma g^k`` and sets ``h^{k+1} =
    h^k + (1/n) sum_i alpha_i o c_i``. Invariant: ``h = mean_i h_i``. ``h_i^0 = 0``.

    Options: ``sampling`` (``--coord-sampling diag|uniform``, see DCGD+), ``alpha`` (one scalar
    shift step for every coordinate instead of ``p_ij``; with ``uniform`` sampling ``alpha =
    tau/d`` is DIANA's ``1/(omega+1)`` with independent Bernoulli sparsification).

    Theory step (strongly convex ``f``, convex ``f_i``): ``gamma = 1/(L + 6 calL_max/n)`` with
    ``calL_max = max_i lambda_max(L_i^{1/2}(P_i^{-1} - I)L_i^{1/2})``; the Lyapunov function of
    :func:`algorithms.stepsizes.matrix_smoothness.diana_plus` contracts by
    ``max(1 - gamma mu, 1 - p_min/2)`` per round: linear convergence to ``x*``. The paper's own
    constants are [U] (its text could not be read); this bound is derived.

    Bits: uplink ``ceil(log2(d+1)) + nnz_i (float_bits + ceil(log2 d))`` per node and round
    (``E nnz_i = tau``), plus ``float_bits d`` once for ``p_i``; downlink ``32 d`` (the model).
    Reported: ``H = mean_i ||h_i - grad f_i(x*)||^2`` (where ``x*`` is known).
    """

    sampling: str = option(
        "diag",
        "coordinate probabilities: diag (from L_i) | uniform",
        choices=sa.SAMPLINGS,
        flag="coord_sampling",
    )
    alpha: float | None = option(
        None, "one shift step for all coordinates (default: p_ij)", check=check_unit
    )

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("H",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.matrix_smoothness:diana_plus",
        "DIANA's strongly convex Lyapunov argument with per-coordinate shift steps alpha_ij = "
        "p_ij and the matrix constant calL_max; the theorem constants of Safaryan, Hanzely & "
        "Richtárik 2021, arXiv 2106.03524 were not read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        k = matrix_theory("DIANA+", problem, compressor, opts.get("sampling", "diag"))
        gamma = steps.diana_plus(k["L"], k["calL_max"], k["n"])
        rate = steps.diana_plus_rate(gamma, k["mu"], k["p_min"])
        return Theory(
            gamma=gamma,
            formula="1 / (L + 6 calL_max / n), calL_i = lambda_max(L_i^1/2 (P_i^-1 - I) L_i^1/2)",
            inputs={**k, "rate": rate},
            source=SOURCE + (INDEFINITE_NOTE if k["indefinite_L_i"] else ""),
        )

    def init(self, x0, problem, comm: Comm) -> DIANAPlusState:
        p_i = node_probabilities(problem, self.compressor, self.sampling, "DIANA+")
        comm.reduce_full(p_i)  # the server learns every node's probabilities once
        h_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
        star = None if problem.x_star is None else problem.grad(problem.x_star)
        return DIANAPlusState(
            x=x0.clone(), t=0, p_i=p_i, h_i=h_i, h=h_i[0].clone(), grad_star_i=star
        )

    def _step(self, state: DIANAPlusState, problem, comm: Comm):
        t, d = state.t, problem.d
        _, float_bits = sa.budget("DIANA+", self.compressor, d)
        comm.broadcast_full(d)
        delta_i = problem.grad(state.x) - state.h_i
        c_i, _, nbits = sa.sparsify(delta_i, state.p_i, comm.rng(t, tag=sa.TAG_SAMPLE), float_bits)
        a_i = state.p_i if self.alpha is None else self.alpha
        # One message per node: the server rebuilds both c_i and alpha_i o c_i from it.
        both = comm.reduce_rows(torch.cat([c_i, a_i * c_i], dim=1), nbits)
        delta, step_h = both[:d], both[d:]
        x = state.x - self.gamma * (state.h + delta)
        h_i = state.h_i + a_i * c_i
        extras = {}
        if state.grad_star_i is not None:
            err = torch.linalg.vector_norm(h_i - state.grad_star_i, dim=1) ** 2
            extras["H"] = comm.monitor_mean(err)
        new = DIANAPlusState(
            x=x, t=t + 1, p_i=state.p_i, h_i=h_i, h=state.h + step_h, grad_star_i=state.grad_star_i
        )
        return new, extras
