"""MARINA: compressed gradient differences with rare full synchronisations (Gorbunov et al.)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Algorithm, State, Theory, check_unit, option, regime_option
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import (
    P_HELP,
    ab_kind,
    need,
    need_unbiased,
    resolved,
    support_ratio,
)
from comm.base import Comm
from streams import tags

SOURCE = "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845"


@dataclass(frozen=True)
class MARINAState(State):
    g: torch.Tensor  # (d,) server estimator of grad f(x)
    grad_i: torch.Tensor  # (m, d) each node's grad f_i(x^k), kept to form the next difference


@dataclass(frozen=True)
class MARINA(Algorithm):
    """MARINA: compressed gradient differences, rare full syncs (arXiv 2102.07845, Alg. 1).

    Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Algorithm 1.

    Update: ``x^{k+1} = x^k - gamma g^k``; a coin ``c_k ~ Bernoulli(p)`` shared by all nodes
    (shared randomness, free); if ``c_k = 1`` every node sends ``grad f_i(x^{k+1})``
    uncompressed (charged ``32 d``) and ``g^{k+1} = grad f(x^{k+1})``; otherwise node ``i`` sends
    ``Q(grad f_i(x^{k+1}) - grad f_i(x^k))`` and ``g^{k+1} = g^k + (1/n) sum_i Q(...)``.
    ``g^0 = grad f(x^0)``, sent uncompressed once (charged).

    ``p`` defaults to ``zeta_Q/d = support(d)/d`` (``K/d`` for RandK, ``1/n`` for PermK when
    ``n`` divides ``d``; 1, i.e. gradient descent, for dense quantizers such as natural
    compression: give ``--p``, e.g. ``1/(omega+1)``, for those).

    Theory (theory sheet §2.9): with the AB-inequality of the nodes' compressors (Szlendak,
    Tyurin & Richtárik 2021, arXiv 2110.03300; independent ``U(omega)``: ``A = omega/n, B = 0``;
    PermK: ``A = B = 1``; other shared-randomness compressors: ``A = omega, B = 0``), Thm 2.1
    (nonconvex, [V-code]) ``1/(L + sqrt(((1-p)/p)((A-B) L_tilde^2 + B L_pm^2)))`` and Thm 2.2
    (PL, [V-deriv]) ``min(1/(L + sqrt(2((1-p)/p)(...))), p/(2 mu))``; ``regime`` ``auto`` takes
    PL when the problem knows ``mu``. The paper states the steps with one ``L`` for all
    ``f_i``; the refined ``L, L_tilde`` form is the authors' later code's.
    Reported: ``sync`` (1 when the coin synchronised this round).
    """

    p: float | None = option(None, P_HELP, check=check_unit)
    regime: str = regime_option()

    needs: ClassVar[str] = "unbiased"
    batchable: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync",)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Theorem 2.1 "
        "(nonconvex) and Theorem 2.2 (PL), in the refined L, L_tilde form of the authors' "
        "later code; correlated compressors (PermK): the AB-inequality form of Szlendak, "
        "Tyurin & Richtárik 2021, arXiv 2110.03300"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_unbiased("MARINA", compressor, d)
        p = resolved(opts.get("p"), lambda: support_ratio(compressor, d))
        kind = ab_kind(compressor)
        A, B = stepsizes.ab_constants(omega, n, kind)
        k = need(problem, "L", "L_tilde", *(("L_pm",) if B > 0 else ()))
        inputs = {**k, "omega": omega, "n": n, "p": p, "A": A, "B": B, "compressors": kind}
        var = "(A - B) L_tilde^2 + B L_pm^2" if B > 0 else "A L_tilde^2"
        regime, mu = opts.get("regime", "auto"), problem.consts.mu
        if regime == "pl" or (regime == "auto" and mu is not None):
            if mu is None:
                raise ValueError("the PL step needs mu, which this problem does not know")
            gamma = stepsizes.marina_ab_pl(k["L"], k["L_tilde"], p, A, B, mu, k.get("L_pm"))
            return Theory(
                gamma=gamma,
                formula=f"min(1 / (L + sqrt(2 (1 - p) / p ({var}))), p / (2 mu))",
                inputs={**inputs, "mu": mu},
                params={"p": p},
                source=SOURCE + ", Thm 2.2 (PL); AB form of arXiv 2110.03300",
            )
        return Theory(
            gamma=stepsizes.marina_ab(k["L"], k["L_tilde"], p, A, B, k.get("L_pm")),
            formula=f"1 / (L + sqrt((1 - p) / p ({var})))",
            inputs=inputs,
            params={"p": p},
            source=SOURCE + ", Thm 2.1; AB form of arXiv 2110.03300",
        )

    def _p(self, d: int) -> float:
        return resolved(self.p, lambda: support_ratio(self.compressor, d))

    def init(self, x0, problem, comm: Comm) -> MARINAState:
        grad_i = problem.grad(x0)
        return MARINAState(x=x0.clone(), t=0, g=comm.reduce_full(grad_i), grad_i=grad_i)

    def _step(self, state: MARINAState, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        grad_i = problem.grad(x)
        sync = comm.coin(t, self._p(problem.d), tag=tags.COIN)
        if sync:
            g = comm.reduce_full(grad_i)
        else:
            g = state.g + comm.reduce(C.encode(grad_i - state.grad_i, comm.rng_for(C, t)), C)
        return MARINAState(x=x, t=t + 1, g=g, grad_i=grad_i), {"sync": float(sync)}
