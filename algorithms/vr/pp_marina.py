"""PP-MARINA: MARINA with partial participation (Gorbunov et al.)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Algorithm, Theory, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.marina import MARINAState
from algorithms.vr.vr_common import (
    P_HELP,
    need,
    need_independent_unbiased,
    resolved,
    support_ratio,
)
from comm.base import Comm
from streams import tags

SOURCE = "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Alg. 4, Thm 4.1"


def participants(participation: float, n: int) -> int:
    """``r = max(1, round(participation * n))``, the number of draws per round."""
    return max(1, round(participation * n))


@dataclass(frozen=True)
class PPMARINA(Algorithm):
    """PP-MARINA: MARINA with partial participation (arXiv 2102.07845, Alg. 4).

    Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Algorithm 4.

    Update: ``x^{k+1} = x^k - gamma g^k``, broadcast to every node (so a sampled node knows
    ``x^k`` as well); shared coin ``c_k ~ Bernoulli(p)``. If ``c_k = 1`` all ``n`` nodes send
    ``grad f_i(x^{k+1})`` uncompressed and ``g^{k+1} = grad f(x^{k+1})``. Otherwise the server
    draws ``r = max(1, round(participation n))`` nodes uniformly **with replacement** (a shared
    stream); a drawn node sends one message ``Q(grad f_i(x^{k+1}) - grad f_i(x^k))``, weighted
    by its multiplicity, and ``g^{k+1} = g^k + (1/r) sum_{draws} Q(...)``; nodes not drawn send
    nothing. The expected fraction of distinct senders is ``1 - (1 - 1/n)^r``
    (``<= participation``). ``g^0 = grad f(x^0)``, sent uncompressed (charged).

    ``p`` defaults to ``zeta_Q r/(d n)`` (the paper's suggestion, theory sheet §2.9 [M];
    FL_PyTorch uses ``(r/n)/(1 + omega)``). Theory (independent unbiased ``Q``): Thm 4.1 in the
    refined form ``1/(L + L_tilde sqrt((1-p)(1+omega)/(p r)))`` ([V-3rd FL_PyTorch; V-deriv]).
    Reported: ``sync`` and ``participation`` (fraction of nodes that sent this round).
    """

    participation: float = option(
        1.0,
        "fraction of nodes sampled per round (r = round(participation n))",
        check=check_unit,
        required=True,
    )
    p: float | None = option(None, P_HELP, check=check_unit)

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("sync", "participation")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Gorbunov, Burlachenko, Li & Richtárik 2021, arXiv 2102.07845, Theorem 4.1 "
        "(PP-MARINA, nonconvex), in the refined L_tilde form (as FL_PyTorch); p = zeta_Q "
        "r/(d n), the paper's suggestion as recalled [M]"
    )

    @staticmethod
    def default_p(compressor, d: int, n: int, r: int) -> float:
        return support_ratio(compressor, d) * r / n

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased("PP-MARINA", compressor, d)
        r = participants(opts.get("participation") or 1.0, n)
        p = resolved(opts.get("p"), lambda: cls.default_p(compressor, d, n, r))
        k = need(problem, "L", "L_tilde")
        return Theory(
            gamma=stepsizes.pp_marina(k["L"], k["L_tilde"], p, omega, r),
            formula="1 / (L + L_tilde sqrt((1 - p) (1 + omega) / (p r)))",
            inputs={**k, "omega": omega, "n": n, "r": r, "p": p},
            params={"p": p},
            source=SOURCE + "; theory sheet §2.9",
        )

    def init(self, x0, problem, comm: Comm) -> MARINAState:
        grad_i = problem.grad(x0)
        return MARINAState(x=x0.clone(), t=0, g=comm.reduce_full(grad_i), grad_i=grad_i)

    def _step(self, state: MARINAState, problem, comm: Comm):
        C, t, n = self.compressor, state.t, comm.n
        r = participants(self.participation, n)
        p = resolved(self.p, lambda: self.default_p(C, problem.d, n, r))
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        grad_i = problem.grad(x)
        if comm.coin(t, p, tag=tags.COIN):
            g = comm.reduce_full(grad_i)
            return MARINAState(x=x, t=t + 1, g=g, grad_i=grad_i), {
                "sync": 1.0,
                "participation": 1.0,
            }
        draws = comm.server_rng(t, tag=tags.PP_NODES).integers(n, r)[0]
        counts = torch.bincount(draws.cpu(), minlength=n).to(grad_i.dtype)
        weight = (counts / r)[comm.nodes.cpu()].to(grad_i.device)
        packet = C.encode(grad_i - state.grad_i, comm.rng_for(C, t))
        g = state.g + comm.reduce(packet, C, weight=weight)
        frac = float((counts > 0).sum()) / n
        return MARINAState(x=x, t=t + 1, g=g, grad_i=grad_i), {"sync": 0.0, "participation": frac}
