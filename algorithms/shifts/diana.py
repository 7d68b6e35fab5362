"""DIANA: compressed gradient differences with learned shifts (Mishchenko et al. 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_unit,
    initial_estimator,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import (
    effective_omega,
    need,
    need_independent_unbiased,
)
from comm.base import Comm
from streams import tags

INITS = ("zero", "full")
SOURCE = (
    "Mishchenko, Gorbunov, Takáč & Richtárik 2019, arXiv 1901.09269, Alg. 1; Horváth et al. "
    "2019, arXiv 1904.05115; theory sheet §2.8"
)
STRONGLY_CONVEX = pv.derived(
    "algorithms.stepsizes.vr:diana",
    "DIANA's Lyapunov argument for a strongly convex f and convex f_i, in the form of Gorbunov, "
    "Hanzely & Richtárik 2020, arXiv 1905.11261; the constant 6 is this derivation's "
    "(FL_PyTorch uses 4, source not identified)",
)


@dataclass(frozen=True)
class DIANAState(State):
    h_i: torch.Tensor  # (m, d) node shifts
    h: torch.Tensor  # (d,) server shift, mean of h_i over all nodes
    grad_star_i: torch.Tensor | None = None  # (m, d) grad f_i(x*), for the report H only


@dataclass(frozen=True)
class DIANA(Algorithm):
    """DIANA: compressed gradient differences to learned shifts (arXiv 1901.09269, Alg. 1).

    Mishchenko, Gorbunov, Takáč & Richtárik 2019, arXiv 1901.09269, Algorithm 1; stochastic
    form: Horváth, Kovalev, Mishchenko, Stich & Richtárik 2019, arXiv 1904.05115.

    Update (no prox, no momentum): node ``i`` computes ``Delta_i = grad f_i(x^k) - h_i^k`` (or a
    minibatch gradient with ``batch_size``), sends ``Delta_hat_i = Q(Delta_i)`` and sets
    ``h_i^{k+1} = h_i^k + alpha Delta_hat_i``; the server forms
    ``g^k = h^k + (1/n) sum_i Delta_hat_i``, steps ``x^{k+1} = x^k - gamma g^k`` and sets
    ``h^{k+1} = h^k + alpha (1/n) sum_i Delta_hat_i``. Invariant: ``h = mean_i h_i``.

    ``init``: ``h_i^0 = 0`` (``zero``, the default: only compressed vectors are ever sent) or
    ``grad f_i(x^0)`` (``full``: sent once uncompressed, charged ``32 d``). ``alpha`` defaults to
    ``1/(omega + 1)``.

    Theory (independent unbiased ``Q``): when the problem is convex with known ``mu``, the
    strongly convex step ``1/(L + 6 omega L_max/n)`` (theory sheet §2.8, [V-deriv]; linear rate
    to ``x*`` of ``V = ||x - x*||^2 + (4 omega/(n alpha)) gamma^2 H``); otherwise the [U]
    nonconvex step ``1/(10 L sqrt(1 + omega/n)(omega + 2))`` (VR-DIANA's Thm 4 with ``m = 1``).
    With minibatches the rate holds up to a neighbourhood ``O(gamma sigma^2)``.
    Reported: ``H = mean_i ||h_i - grad f_i(x*)||^2`` (where ``x*`` is known).
    """

    alpha: float | None = option(
        None, "DIANA shift step alpha (default 1/(omega+1))", check=check_unit
    )
    init_mode: str = option("zero", "h_i^0: zero | full", choices=INITS, flag="init")
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "unbiased"
    stochastic: ClassVar[bool] = True
    batchable: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("H",)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Horváth, Kovalev, Mishchenko, Stich & Richtárik 2019, arXiv 1904.05115, Theorem 4 "
        "(VR-DIANA, nonconvex) with m = 1, which is DIANA, as FL_PyTorch uses it [U: constant "
        "not checked against the paper]; for a strongly convex f the step is derived here "
        "(see the run's record)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased("DIANA", compressor, d)
        alpha = stepsizes.diana_alpha(omega)
        c = problem.consts
        if problem.convex and c.mu is not None:
            k = need(problem, "L", "L_max")
            return Theory(
                gamma=stepsizes.diana(k["L"], k["L_max"], omega, n),
                formula="1 / (L + 6 omega L_max / n)",
                inputs={**k, "omega": omega, "n": n, "mu": c.mu},
                params={"alpha": alpha},
                source=SOURCE + " (strongly convex, [V-deriv])",
                provenance=STRONGLY_CONVEX,
            )
        k = need(problem, "L")
        return Theory(
            gamma=stepsizes.diana_nonconvex(k["L"], omega, n),
            formula="1 / (10 L sqrt(1 + omega / n) (omega + 2))",
            inputs={**k, "omega": omega, "n": n},
            params={"alpha": alpha},
            source=SOURCE + " (nonconvex, [U]: VR-DIANA Thm 4 with m = 1)",
        )

    def _alpha(self, d: int) -> float:
        if self.alpha is not None:
            return self.alpha
        return stepsizes.diana_alpha(effective_omega(self.compressor, d))

    def init(self, x0, problem, comm: Comm) -> DIANAState:
        if self.init_mode == "full":
            h_i, h = initial_estimator("full", problem.grad(x0), self.compressor, comm)
        else:
            h_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
            h = torch.zeros_like(h_i[0])
        x_star = problem.x_star
        star = None if x_star is None else problem.grad(x_star)
        return DIANAState(x=x0.clone(), t=0, h_i=h_i, h=h, grad_star_i=star)

    def _step(self, state: DIANAState, problem, comm: Comm):
        C, t = self.compressor, state.t
        alpha = self._alpha(problem.d)
        comm.broadcast_full(problem.d)
        batch = minibatch(problem, comm, t, tags.BATCH, self.batch_size)
        packet = C.encode(problem.grad(state.x, batch) - state.h_i, comm.rng_for(C, t))
        delta_i = C.decode(packet)
        delta = comm.reduce(packet, C, decoded=delta_i)
        x = state.x - self.gamma * (state.h + delta)
        h_i = torch.add(state.h_i, delta_i, alpha=alpha)
        h = state.h + alpha * delta
        extras = {}
        if state.grad_star_i is not None:
            err = torch.sub(h_i, state.grad_star_i, out=delta_i)
            extras["H"] = comm.monitor_mean(torch.linalg.vector_norm(err, dim=1) ** 2)
        return DIANAState(x=x, t=t + 1, h_i=h_i, h=h, grad_star_i=state.grad_star_i), extras
