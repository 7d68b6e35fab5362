"""RoSDHB: robust distributed heavy ball with coordinated compression (Gupta, Honsell, Xu, Gupta &
Neglia)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import State, Theory, minibatch_option, option
from algorithms.provenance import Provenance
from algorithms.robust.options import BYZ_REPORTS, ByzantineAlgorithm
from comm.base import Comm
from streams import tags


@dataclass(frozen=True)
class RoSDHBState(State):
    m_i: torch.Tensor  # (m, d) node i's momentum of its decoded messages (the server's copy)


@dataclass(frozen=True)
class RoSDHB(ByzantineAlgorithm):
    """RoSDHB: robust heavy ball with one global Rand-k mask (arXiv 2508.17129).

    "Reconciling Communication Compression and Byzantine-Robustness in Distributed Learning",
    AISTATS 2026; the authors' code antoniohonsell/CC-and-BR-in-Distributed-Learning
    ``src/train/*_train.py``, ``momentum_bank.py`` (read, not copied).

    Update (the authors' round, steps 1-7): the server draws one Rand-k mask for all nodes
    (a compressor with shared randomness, ``randk:k=K,shared=true``: the paper's coordinated
    compression) and broadcasts ``x^t`` (``32 d`` bits down); node ``i`` sends ``C(g_i)``,
    ``g_i = grad f_i(x^t)`` (or a minibatch gradient with ``--batch-size``), its payload's
    bits up; the server decodes ``tilde g_i = C(g_i)`` (scaled by ``d/k``), updates each node's
    momentum ``m_i^t = beta m_i^{t-1} + (1 - beta) tilde g_i`` (``m_i^{-1} = 0``) and steps
    ``x^{t+1} = x^t - gamma ARAgg(m_1^t, ..., m_n^t)`` (the authors aggregate by a trimmed
    mean; here any ``--aggregator``). A compressor without shared randomness runs too, but is
    not the paper's method, and no check covers it: ``byzantine.rosdhb_converges`` checks the
    coordinated masks only (``randk:k=2,shared=true``, IPM, ALIE and bit flipping).
    Byzantine nodes (the last ``K`` ids) set the server's copy of their momenta to what the attack
    computes from the honest momenta (a stronger attacker than one limited to the masked
    coordinates).

    Theory: the theorem's step could not be read here, so there is no default step (give
    ``--step``; the authors' MNIST runs use 0.8 with ``beta = 0.9``). ``beta = 0.9`` as the
    authors' ``MomentumBank``. Compressor: unbiased (``needs``). Reported: ``f_honest``,
    ``grad_norm_sq_honest``.
    """

    beta: float = option(0.9, "momentum coefficient beta of each node's momentum")
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = BYZ_REPORTS
    provenance: ClassVar[Provenance] = pv.no_step(
        "RoSDHB's theoretical step (Gupta, Honsell, Xu, Gupta & Neglia, arXiv 2508.17129) is "
        "not implemented: give --step (the authors' MNIST runs use 0.8 with beta 0.9)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.beta < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {self.beta!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        raise ValueError(
            "RoSDHB's theoretical step (arXiv 2508.17129) is not implemented: give --step FLOAT "
            "(the authors' MNIST runs use 0.8 with beta 0.9)"
        )

    def init(self, x0, problem, comm: Comm) -> RoSDHBState:
        self.check_nodes(problem)
        m_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        return RoSDHBState(x=x0.clone(), t=0, m_i=m_i)

    def _step(self, state: RoSDHBState, problem, comm: Comm):
        C, t, data = self.compressor, state.t, self.data(problem)
        comm.broadcast_full(problem.d)
        if self.batch_size is None:
            g_i = data.grad(state.x)
        else:
            g_i = data.grad(
                state.x, data.sample(comm.rng(t, tag=tags.ROSDHB_BATCH), self.batch_size)
            )
        packet = C.encode(g_i, comm.rng_for(C, t))
        m_i = self.beta * state.m_i + (1.0 - self.beta) * C.decode(packet)
        R = self.robust_aggregate(m_i, packet.nbits, comm, t)
        x = state.x - self.gamma * R
        return RoSDHBState(x=x, t=t + 1, m_i=m_i), self.honest_report(x, problem)
