"""Gradient tracking over a graph: uncompressed (GT / DIGing), with EF21-style compressed
public copies of both the iterates and the trackers (BEER), and with momentum (MoTEF)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Theory, check_unit, minibatch, minibatch_option, option
from algorithms.decentralized.base import Decentralized, DecState, averaged
from algorithms.provenance import Provenance
from comm import Comm
from compressors import Compressor
from streams import tags


@dataclass(frozen=True)
class TrackState(DecState):
    """``v_i``: node ``i``'s gradient tracker; ``m_i``: its gradient estimate (the local
    gradient, or MoTEF's momentum) at ``x_i``; for the compressed methods ``h_i``, ``g_i``: the
    public copies of ``x_i`` and ``v_i`` that the neighbours hold too, and ``sh_i = sum_j W_ij
    h_j``, ``sg_i = sum_j W_ij g_j``."""

    v_i: torch.Tensor
    m_i: torch.Tensor
    h_i: torch.Tensor
    g_i: torch.Tensor
    sh_i: torch.Tensor
    sg_i: torch.Tensor


def _public(
    rows: torch.Tensor, copy: torch.Tensor, mixed: torch.Tensor, C: Compressor, comm: Comm,
    top, t: int, tag: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``copy += C(rows - copy)``, sent to the neighbours, and ``mixed += W C(rows - copy)``."""
    packet = C.encode(rows - copy, comm.rng_for(C, t, tag=tag))
    return copy + C.decode(packet), mixed + comm.gossip(packet, C, top)


@dataclass(frozen=True)
class BEER(Decentralized):
    """BEER (Zhao, Li, Li, Richtárik & Chi, NeurIPS 2022, arXiv 2201.13320; authors' code
    liboyue/beer, ``beer/optim/BEER.py``): gradient tracking in which both the iterates and
    the trackers reach the neighbours through EF21-style compressed public copies.

    One round, as the code's "Original BEER" (``c`` the consensus step, ``eta`` the step):

    1. ``x_i^+ = x_i + c (sh_i - h_i) - eta v_i``, with ``sh_i = sum_j W_ij h_j``;
    2. ``h_i += C(x_i^+ - h_i)``, sent to each neighbour (``sh_i`` updated from theirs);
    3. ``v_i^+ = v_i + c (sg_i - g_i) + m_i^+ - m_i``, ``m_i`` the local gradient at ``x_i``;
    4. ``g_i += C(v_i^+ - g_i)``, sent to each neighbour (``sg_i`` updated).

    Two compressed messages per node and edge per round. Start: ``v_i^0 = m_i^0 = grad
    f_i(x^0)`` (local, nothing sent), ``h = g = 0``. The average tracker equals the average
    gradient estimate at every round (``W`` doubly stochastic), so the nodes' drift from
    heterogeneous data is corrected: BEER converges to a stationary point of ``f`` under any
    heterogeneity, where CHOCO-SGD at a constant step stops at a distance set by it.

    Steps: no theory step could be read (the paper's theorem states ``eta`` and ``c`` up to
    constants; the authors' runs use ``eta = 1e-4``, ``c = 0.01`` on MNIST): give ``--step``
    and ``--consensus``. CHOCO-Gossip's consensus step (:func:`choco_consensus_step`,
    recalled) is no default here: it is so small (0.0012 on a ring of 8 with Top-4 of 12) that
    BEER at a usual ``eta`` diverges with it (measured: ``eta = 0.1`` on the heterogeneous
    quadratic, ``||x - x*||^2`` 8e4 after 1500 rounds, against 4e-3 at ``c = 0.5``).
    """

    consensus: float | None = option(
        None, "consensus step c in (0, 1] (required: no theory value could be read)",
        check=check_unit, required=True,
    )  # fmt: skip
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.no_step(
        "BEER's theorem (arXiv 2201.13320) gives eta and the consensus step up to constants "
        "that could not be read; give --step and --consensus"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        raise ValueError(f"{cls.__name__} has no theory step here: give --step FLOAT")

    def _momentum(self) -> float:
        return 1.0

    def init(self, x0, problem, comm: Comm) -> TrackState:
        self.graph(comm.n)
        x_i = x0.expand(comm.m, -1).clone()
        batch = minibatch(problem, comm, 0, tags.TRACK_BATCH, self.batch_size)
        g0 = problem.grad(x_i, batch)
        zeros = torch.zeros_like(x_i)
        return TrackState(x=x0.clone(), t=0, x_i=x_i, v_i=g0, m_i=g0.clone(), h_i=zeros,
                          g_i=zeros.clone(), sh_i=zeros.clone(), sg_i=zeros.clone())  # fmt: skip

    def _c(self) -> float:
        return float(self.consensus)

    def _step(self, state: TrackState, problem, comm: Comm):
        C, t, top = self.compressor, state.t, self.graph(comm.n)
        c = self._c()
        x_i = state.x_i + c * (state.sh_i - state.h_i) - self.gamma * state.v_i
        h_i, sh_i = _public(x_i, state.h_i, state.sh_i, C, comm, top, t, tags.GOSSIP_X)
        batch = minibatch(problem, comm, t + 1, tags.TRACK_BATCH, self.batch_size)
        lam = self._momentum()
        m_i = problem.grad(x_i, batch)
        if lam != 1.0:
            m_i = (1 - lam) * state.m_i + lam * m_i
        v_i = state.v_i + c * (state.sg_i - state.g_i) + m_i - state.m_i
        g_i, sg_i = _public(v_i, state.g_i, state.sg_i, C, comm, top, t, tags.GOSSIP_V)
        x_bar, consensus = averaged(comm, x_i)
        new = dataclasses.replace(state, x=x_bar, x_i=x_i, v_i=v_i, m_i=m_i, h_i=h_i, g_i=g_i,
                                  sh_i=sh_i, sg_i=sg_i, t=t + 1)  # fmt: skip
        return new, {"consensus": consensus}


@dataclass(frozen=True)
class MoTEF(BEER):
    """MoTEF (Islamov, Gao & Stich 2024, arXiv 2405.20114; authors' code mlolab/MoTEF,
    ``MoTEF.py::BEER_Momentum.update``): BEER with a momentum gradient estimate,
    ``m_i^+ = (1 - momentum) m_i + momentum grad f_i(x_i^+; xi)``, tracked by ``v`` in place of
    the plain gradient; ``momentum = 1`` is BEER (the code's ``beerM`` says so). The momentum
    averages the sampling noise of stochastic gradients (``--batch-size``).

    Steps and momentum: the theorem's constants could not be read: give ``--step``,
    ``--consensus`` and ``--momentum``.
    """

    momentum: float | None = option(
        None, "momentum lambda in (0, 1] (required; 1 is BEER)", check=check_unit, required=True
    )

    provenance: ClassVar[Provenance] = pv.no_step(
        "MoTEF's theorem (arXiv 2405.20114) gives eta, the consensus step and the momentum up "
        "to constants that could not be read; give --step, --consensus and --momentum"
    )

    def _momentum(self) -> float:
        return float(self.momentum)


@dataclass(frozen=True)
class GradientTracking(BEER):
    """Gradient tracking, uncompressed (DIGing: Nedić, Olshevsky & Shi 2017, arXiv
    1607.03218; Qu & Li 2018, arXiv 1605.07112): ``x^+ = W x - eta v``, ``v^+ = W v + grad
    F(x^+) - grad F(x)``, ``v^0 = grad F(x^0)``. It is BEER with the identity compressor and
    consensus step 1 (the public copies are then the rows themselves): each node sends its
    iterate and its tracker to each neighbour, ``2 float_bits d`` bits per edge and round.
    Linear convergence to the exact optimum on strongly convex problems, under any
    heterogeneity, for a step small enough; the step bound's constants were not read here:
    give ``--step``.
    """

    consensus: float | None = option(
        None, "consensus step c in (0, 1] (default 1: plain gradient tracking)", check=check_unit
    )

    needs: ClassVar[str] = "none"
    provenance: ClassVar[Provenance] = pv.no_step(
        "DIGing's step condition (Nedić, Olshevsky & Shi 2017, arXiv 1607.03218) was not read "
        "here; give --step"
    )

    def _c(self) -> float:
        return 1.0 if self.consensus is None else float(self.consensus)
