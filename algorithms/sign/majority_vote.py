"""signSGD and Signum with majority vote: one bit per coordinate in both directions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_count,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from compressors.sign import Sign
from streams import tags

__all__ = ["SIGN", "SignSGDMV", "SignumMV", "majority_vote", "sign_mv_step"]

SOURCE_2018 = (
    "Bernstein, Wang, Azizzadenesheli & Anandkumar, signSGD: compressed optimisation for "
    "non-convex problems, ICML 2018, arXiv 1802.04434"
)
SOURCE_2019 = (
    "Bernstein, Zhao, Azizzadenesheli & Anandkumar, signSGD with majority vote is communication "
    "efficient and fault tolerant, ICLR 2019, arXiv 1810.05291"
)
STEP_RECALLED = pv.reconstruction(
    "the step delta = 1/sqrt(||L||_1 K) (minibatch K) of the signSGD and majority-vote "
    "theorems of arXiv 1802.04434 (Theorems 1 and 2), as recalled: the theorems' bodies could "
    "not be read here; ||L||_1 := d L (every coordinate smoothness L_j = L is valid for an "
    "L-smooth f)"
)
SIGNUM_BORROWED = pv.borrowed(
    "signsgd-mv",
    "Signum's own theorem (arXiv 1802.04434, the Signum section) could not be read; the "
    "signSGD step at the same horizon is used",
)

#: The 1-bit code of both directions: ``sign(0) := +1`` (the code has no zero).
SIGN = Sign()


def majority_vote(packet, comm: Comm) -> torch.Tensor:
    """The server's vote ``sign(sum_i s_i)`` over all nodes from the nodes' sign packets
    (charged ``d`` bits each uplink), sent back as ``d`` bits (charged downlink). A tie (a zero
    sum, possible for even ``n``) is decided as ``+1``: the downlink has one bit per
    coordinate, and ``+1`` is the code's ``sign(0)``, as on the uplink. The sum is recovered
    exactly from the reduced mean: ``n mean_i s_i`` is an integer, rounded off."""
    tally = torch.round(comm.reduce(packet, SIGN) * comm.n)  # exact: sum of n values +-1
    vote = torch.where(tally < 0, -1.0, 1.0).to(tally.dtype)
    down = SIGN.encode(vote[None], comm.server_rng(0))  # deterministic: draws nothing
    return comm.broadcast(down, SIGN)


def sign_mv_step(m_i: torch.Tensor, comm: Comm) -> torch.Tensor:
    """One round of the vote: node ``i`` sends ``sign(m_i)`` (``d`` bits), the server returns
    ``sign(sum_i sign(m_i))`` (``d`` bits)."""
    return majority_vote(SIGN.encode(m_i, comm.rng_for(SIGN, 0)), comm)


@dataclass(frozen=True)
class SignMVState(State):
    m_i: torch.Tensor  # (m, d) the nodes' momenta (zero for signSGD: beta = 0)


@dataclass(frozen=True)
class SignumMV(Algorithm):
    """Signum with majority vote (Bernstein, Wang, Azizzadenesheli & Anandkumar, ICML 2018,
    arXiv 1802.04434, Algorithms 1 and 3; Bernstein, Zhao, Azizzadenesheli & Anandkumar,
    ICLR 2019, arXiv 1810.05291, Algorithm 1).

    Update at round ``t``: node ``i`` computes ``g_i`` at ``x`` (a minibatch gradient with
    ``batch_size``, else its full local gradient), keeps ``m_i <- beta m_i + (1 - beta) g_i``
    (``m_i = 0`` at the start) and sends ``s_i = sign(m_i)`` (``d`` bits, the ``sign``
    compressor); the server returns ``vote = sign(sum_i s_i)`` (``d`` bits downlink) and every
    node steps ``x <- x - gamma vote``. ``beta = 0`` is signSGD with majority vote
    (``signsgd-mv``). Both directions use the 1-bit code with ``sign(0) := +1``: a zero
    momentum coordinate sends ``+1``, and a tie of the vote (a zero sum, possible for even
    ``n`` only) is decided as ``+1``. A three-symbol code (``sign(0) = 0``) would cost
    ``log2 3`` bits per coordinate; it is not used. Bits per round: ``d`` up and ``d`` down
    per node.

    Step (``--step theory``): ``gamma = 1/sqrt(||L||_1 K)`` with ``||L||_1 = d L`` and the
    horizon ``K`` (``--horizon``, default the run's ``--iters``), the step of the 2018 paper's
    signSGD and majority-vote theorems (which take a minibatch of ``K`` per node and step) as
    recalled, labelled a reconstruction: their bodies could not be read here (the stored
    pages hold the abstract and introduction; jxbz/signSGD holds the MXNet experiments of the
    2018 paper, no majority-vote code). The theorems assume the same objective at every node
    (unbiased stochastic gradients of ``f``) and, for the vote, unimodal symmetric noise;
    under heterogeneous ``f_i`` the vote is biased and the method stalls at a distance set by
    the heterogeneity.

    Signum's step is signSGD's (``borrowed``): its own theorem was not read. The momentum
    ``beta`` is the ``m`` of the papers' Signum (MXNet's ``signum`` default momentum is 0.9).
    """

    beta: float = option(0.9, "momentum beta in [0, 1): m_i <- beta m_i + (1 - beta) g_i")
    horizon: int | None = option(
        None, "horizon K of the step 1/sqrt(||L||_1 K) (default: --iters)", from_run="iters",
        check=check_count,
    )  # fmt: skip
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "none"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = SIGNUM_BORROWED

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must be in [0, 1), got {self.beta}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        L, d, K = problem.consts.L, problem.d, opts.get("horizon")
        if L is None:
            raise ValueError(f"{cls.__name__}'s step needs L, unknown here: give --step FLOAT")
        if K is None:
            raise ValueError(
                f"{cls.__name__}'s step 1/sqrt(||L||_1 K) needs the horizon K: give --horizon "
                "(the runner uses --iters)"
            )
        check_count("horizon", K)
        own = cls.provenance.kind != "borrowed"
        return Theory(
            gamma=1.0 / math.sqrt(d * L * K),
            formula="1 / sqrt(||L||_1 K), ||L||_1 = d L",
            inputs={"L": L, "d": d, "K": K, "L1": d * L},
            source=SOURCE_2018
            + ", Theorems 1-2 as recalled (bodies not read)"
            + ("" if own else "; signSGD's step, Signum's theorem not read"),
        )

    def init(self, x0, problem, comm: Comm) -> SignMVState:
        m_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
        return SignMVState(x=x0.clone(), t=0, m_i=m_i)

    def _step(self, state: SignMVState, problem, comm: Comm):
        t = state.t
        batch = minibatch(problem, comm, t, tags.SIGN_MV_BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch)
        m_i = g_i if self.beta == 0 else self.beta * state.m_i + (1.0 - self.beta) * g_i
        vote = sign_mv_step(m_i, comm)
        x = state.x - self.gamma * vote.to(state.x.dtype)
        return SignMVState(x=x, t=t + 1, m_i=m_i), {}


@dataclass(frozen=True)
class SignSGDMV(SignumMV):
    """signSGD with majority vote (Bernstein et al., ICML 2018, arXiv 1802.04434, Algorithm
    3; ICLR 2019, arXiv 1810.05291): Signum with majority vote at ``beta = 0``.

    Node ``i`` sends ``sign(g_i)`` (``d`` bits), the server returns ``sign(sum_i sign(g_i))``
    (``d`` bits; a tie is ``+1``), ``x <- x - gamma vote``. Everything else, the step
    ``1/sqrt(||L||_1 K)`` (a reconstruction: the theorem as recalled) included, as
    ``signum-mv``.
    """

    beta: float = option(0.0, "momentum beta in [0, 1) (0: signSGD)")

    provenance: ClassVar[Provenance] = STEP_RECALLED
