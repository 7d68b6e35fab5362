"""VR-MARINA: MARINA for finite sums, minibatch gradient differences (Gorbunov et al.)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Algorithm, State, Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import (
    P_HELP,
    minibatch_p,
    need,
    need_independent_unbiased,
    resolved,
    sample_smoothness,
)
from comm.base import Comm
from streams import tags

SOURCE = "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Alg. 2, Thm 3.1"


@dataclass(frozen=True)
class VRMARINAState(State):
    g: torch.Tensor  # (d,) server estimator of grad f(x)


@dataclass(frozen=True)
class VRMARINA(Algorithm):
    """VR-MARINA: MARINA with minibatch differences for finite sums (arXiv 2102.07845, Alg. 2).

    Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Algorithm 2, for
    ``f_i = (1/m_i) sum_j f_ij``.

    Update: ``x^{k+1} = x^k - gamma g^k``; shared coin ``c_k ~ Bernoulli(p)``; if ``c_k = 1``
    every node sends its full local gradient ``grad f_i(x^{k+1})`` uncompressed (charged
    ``32 d``) and ``g^{k+1}`` is their mean; otherwise node ``i`` draws a minibatch ``I`` of
    ``b' = batch_size`` samples (with replacement, from its own stream) and sends
    ``Q((1/b') sum_{j in I} (grad f_ij(x^{k+1}) - grad f_ij(x^k)))``, the same samples at both
    points, and ``g^{k+1} = g^k + (1/n) sum_i Q(...)``. ``g^0 = grad f(x^0)`` (sent
    uncompressed, charged).

    ``p`` defaults to ``min(zeta_Q/d, b'/(m + b'))`` with ``m = max_i m_i`` (the paper's
    ``b'/(m + b')`` for equal ``m_i``; ``zeta_Q/d`` alone when the problem has no sample counts,
    e.g. the quadratics, where a minibatch is additive noise that cancels in the difference).

    Theory (independent unbiased ``Q``; theory sheet §2.9, [V-code]):
    ``1/(L + sqrt(((1-p)/(p n))(omega L_tilde^2 + (1 + omega) calL^2/b')))`` with ``calL`` the
    mean-square per-sample smoothness from ``problem.sample_smoothness()`` (without it: give
    ``--step``). Only the nonconvex step is used. Reported: ``sync``.
    """

    batch_size: int = option(
        1, "minibatch b' per node for the gradient differences", check=check_count, required=True
    )
    p: float | None = option(None, P_HELP, check=check_unit)

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "unbiased"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("sync",)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Theorem 3.1 "
        "(VR-MARINA, nonconvex), in the refined L, L_tilde form of the authors' later code; "
        "p = min(zeta_Q/d, b'/(m + b'))"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d, b = problem.n, problem.d, opts.get("batch_size") or 1
        omega = need_independent_unbiased("VR-MARINA", compressor, d)
        p = resolved(opts.get("p"), lambda: minibatch_p(compressor, problem, b))
        k = need(problem, "L", "L_tilde")
        calL = sample_smoothness(problem, "VR-MARINA")
        return Theory(
            gamma=stepsizes.vr_marina(k["L"], k["L_tilde"], calL, p, omega, n, b),
            formula="1 / (L + sqrt((1 - p) / (p n) (omega L_tilde^2 + (1 + omega) calL^2 / b)))",
            inputs={**k, "calL": calL, "omega": omega, "n": n, "p": p, "b": b},
            params={"p": p},
            source=SOURCE + "; theory sheet §2.9",
        )

    def _p(self, problem) -> float:
        return resolved(self.p, lambda: minibatch_p(self.compressor, problem, self.batch_size))

    def init(self, x0, problem, comm: Comm) -> VRMARINAState:
        return VRMARINAState(x=x0.clone(), t=0, g=comm.reduce_full(problem.grad(x0)))

    def _step(self, state: VRMARINAState, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        sync = comm.coin(t, self._p(problem), tag=tags.COIN)
        if sync:
            g = comm.reduce_full(problem.grad(x))
        else:
            batch = problem.sample(comm.rng(t, tag=tags.BATCH), self.batch_size)
            diff_i = problem.grad_diff(x, state.x, batch)
            g = state.g + comm.reduce(C.encode(diff_i, comm.rng_for(C, t)), C)
        return VRMARINAState(x=x, t=t + 1, g=g), {"sync": float(sync)}
