"""DCGD+: distributed compressed gradient descent with smoothness-aware sparsification."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_choice, option
from algorithms.provenance import Provenance
from algorithms.shifts import smoothness_aware as sa
from algorithms.stepsizes import matrix_smoothness as steps
from comm.base import Comm

SOURCE = (
    "Safaryan, Hanzely & Richtárik 2021, arXiv 2106.03524 (DCGD+; matrix smoothness); step in "
    "the form of DCGD's (Gorbunov, Hanzely & Richtárik 2020, arXiv 1905.11261) with omega L_i "
    "replaced by the matrix constant, [V-deriv]; the paper's theorem constants [U]"
)


@dataclass(frozen=True)
class SmoothnessState(State):
    p_i: torch.Tensor  # (m, d) node i's sampling probabilities, from its L_i


def matrix_theory(name: str, problem, compressor, sampling: str) -> dict:
    """The constants DCGD+ and DIANA+ need, over all ``n`` nodes: ``tau``, ``calL_max``,
    ``p_min``, the uniform sampling's ``omega L_max`` for comparison, and whether some ``L_i``
    was indefinite (then ``|L_i|`` is used)."""
    check_choice("sampling", sampling, sa.SAMPLINGS)
    c = problem.consts
    if not problem.convex or c.mu is None or c.L is None:
        raise ValueError(
            f"{name}'s theory step is for a strongly convex f (known mu): {problem.name} has "
            "none; give --step FLOAT"
        )
    everyone = problem if problem.m == problem.n else problem.local(list(range(problem.n)))
    L = everyone.smoothness_matrices()
    if L is None:
        raise ValueError(
            f"{name}'s theory step needs the smoothness matrices L_i, which {problem.name} does "
            "not know: give --step FLOAT"
        )
    d = problem.d
    tau, _ = sa.budget(name, compressor, d)
    L, indefinite = sa.psd_matrices(L)
    p = sa.probabilities(torch.diagonal(L, dim1=1, dim2=2), tau, sampling)
    calL = sa.expected_smoothness(L, p)
    top = torch.linalg.eigvalsh(L)[:, -1]
    return {
        "L": c.L,
        "calL_max": float(calL.max()),
        "omega_L_max": float((d / tau - 1.0) * top.max()),
        "p_min": float(p[p > 0].min()),
        "tau": tau,
        "n": problem.n,
        "mu": c.mu,
        "sampling": sampling,
        "indefinite_L_i": indefinite,
    }


def node_probabilities(problem, compressor, sampling: str, name: str) -> torch.Tensor:
    """The held nodes' probabilities ``(m, d)``, each from its own ``L_i`` (as in theory)."""
    L = problem.smoothness_matrices()
    if L is None:
        raise ValueError(
            f"{name} builds its sampling from the smoothness matrices L_i, which "
            f"{problem.name} does not know"
        )
    tau, _ = sa.budget(name, compressor, problem.d)
    L, _ = sa.psd_matrices(L)
    p = sa.probabilities(torch.diagonal(L, dim1=1, dim2=2), tau, sampling)
    return p.to(problem.device, problem.dtype)


INDEFINITE_NOTE = (
    "; some L_i indefinite (nonconvex f_i): |L_i| used, a deviation (the analysis assumes "
    "convex f_i)"
)


@dataclass(frozen=True)
class DCGDPlus(Algorithm):
    """DCGD+: sparsification from each node's smoothness matrix (arXiv 2106.03524).

    Safaryan, Hanzely & Richtárik 2021: DCGD whose nodes sparsify with probabilities built from
    their smoothness matrices ``L_i``.

    Update: node ``i`` keeps coordinate ``j`` of ``grad f_i(x^k)`` with probability ``p_ij``
    (independently, from its own stream) and sends the kept ``grad_j / p_ij``
    (:func:`algorithms.shifts.smoothness_aware.sparsify`); the server steps
    ``x^{k+1} = x^k - gamma (1/n) sum_i S_i(grad f_i(x^k))`` and broadcasts ``x^{k+1}``.

    The compressor names the budget only: ``randk:k=TAU`` (class ``needs = "unbiased"``,
    an independent sparsifier) gives the expected ``tau`` coordinates per message and the value
    width; the coordinates are drawn with ``sampling`` (``--coord-sampling``; ``diag``:
    ``p_ij`` proportional to ``sqrt((L_i)_jj)``, water-filled; ``uniform``: ``tau/d``), not by
    Rand-K.

    Theory step (strongly convex ``f``, convex ``f_i``): ``gamma = 1/(L + 2 calL_max/n)`` with
    ``calL_max = max_i lambda_max(L_i^{1/2}(P_i^{-1} - I)L_i^{1/2})``
    (:func:`algorithms.stepsizes.matrix_smoothness.dcgd_plus`): linear rate ``1 - gamma mu``
    to a neighbourhood of ``x*``. The paper's exact constants are [U] (text not read).

    Bits: uplink ``ceil(log2(d+1)) + nnz_i (float_bits + ceil(log2 d))`` per node and round
    (kept coordinates, ``E nnz_i = tau``); downlink the model, ``32 d``.
    Reported: nothing beyond the runner's columns.
    """

    sampling: str = option(
        "diag",
        "coordinate probabilities: diag (from L_i) | uniform",
        choices=sa.SAMPLINGS,
        flag="coord_sampling",
    )

    needs: ClassVar[str] = "unbiased"
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.matrix_smoothness:dcgd_plus",
        "DCGD's strongly convex step gamma = 1/A (Gorbunov, Hanzely & Richtárik 2020, arXiv "
        "1905.11261) with A computed for the smoothness-aware sparsifier; the theorem "
        "constants of Safaryan, Hanzely & Richtárik 2021, arXiv 2106.03524 were not read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        k = matrix_theory("DCGD+", problem, compressor, opts.get("sampling", "diag"))
        return Theory(
            gamma=steps.dcgd_plus(k["L"], k["calL_max"], k["n"]),
            formula="1 / (L + 2 calL_max / n), calL_i = lambda_max(L_i^1/2 (P_i^-1 - I) L_i^1/2)",
            inputs=k,
            source=SOURCE + (INDEFINITE_NOTE if k["indefinite_L_i"] else ""),
        )

    def init(self, x0, problem, comm: Comm) -> SmoothnessState:
        p_i = node_probabilities(problem, self.compressor, self.sampling, "DCGD+")
        return SmoothnessState(x=x0.clone(), t=0, p_i=p_i)

    def _step(self, state: SmoothnessState, problem, comm: Comm):
        t = state.t
        _, float_bits = sa.budget("DCGD+", self.compressor, problem.d)
        comm.broadcast_full(problem.d)
        g_i = problem.grad(state.x)
        c_i, _, nbits = sa.sparsify(g_i, state.p_i, comm.rng(t, tag=sa.TAG_SAMPLE), float_bits)
        g = comm.reduce_rows(c_i, nbits)
        return dataclasses.replace(state, x=state.x - self.gamma * g, t=t + 1), {}
