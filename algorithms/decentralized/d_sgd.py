"""D-SGD: decentralized (stochastic) gradient descent, uncompressed gossip: the baseline."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms.base import Theory, minibatch, minibatch_option
from algorithms.decentralized.base import Decentralized, DecState, averaged
from algorithms.provenance import Provenance
from comm import Comm
from streams import tags


@dataclass(frozen=True)
class DSGD(Decentralized):
    """Decentralized gradient descent / D-PSGD (Nedić & Ozdaglar 2009; Lian, Zhang, Zhang,
    Hsieh, Zhang & Liu 2017, arXiv 1705.09056, Algorithm 1), uncompressed.

    Update (every node at once, no server): ``x_i^{t+1} = sum_j W_ij x_j^t - gamma
    grad f_i(x_i^t)`` (or a minibatch gradient): node ``i`` sends its iterate to each
    neighbour (``float_bits * d`` bits per edge) and takes a local gradient step. It is
    CHOCO-SGD with the identity compressor and consensus step 1. With a constant step the
    nodes reach a neighbourhood of the optimum whose size grows with ``gamma`` and the data's
    heterogeneity and shrinks with the spectral gap.

    Step: ``gamma = (1 + lambda_n(W)) / (2 L_max)``, half the bound ``(1 + lambda_n(W)) / L_h``
    under which decentralized gradient descent's iterates stay bounded and converge to that
    neighbourhood (Yuan, Ling & Yin 2016, SIAM J. Optim. 26(3), arXiv 1310.7063; ``L_h`` the
    largest local smoothness, ``L_max`` here).
    """

    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "none"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.theorem(
        "Yuan, Ling & Yin 2016, arXiv 1310.7063: decentralized gradient descent converges to "
        "a neighbourhood for gamma < (1 + lambda_n(W))/L_h (theorem number not given here); "
        "the default is half that bound"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        top = cls.graph_of(problem.n, opts)
        lam_n = top.eigenvalues[-1]
        return Theory(
            gamma=(1.0 + lam_n) / (2.0 * problem.consts.L_max),
            formula="(1 + lambda_n(W)) / (2 L_max)",
            inputs={"L_max": problem.consts.L_max, **cls.graph_inputs(top)},
            source="Yuan, Ling & Yin 2016, arXiv 1310.7063 (DGD's step condition)",
        )

    def init(self, x0, problem, comm: Comm) -> DecState:
        self.graph(comm.n)  # a bad graph fails here, before the first step
        return DecState(x=x0.clone(), t=0, x_i=x0.expand(comm.m, -1).clone())

    def _step(self, state: DecState, problem, comm: Comm):
        t, top = state.t, self.graph(comm.n)
        batch = minibatch(problem, comm, t, tags.BATCH, self.batch_size)
        g_i = problem.grad(state.x_i, batch)
        x_i = comm.gossip_full(state.x_i, top) - self.gamma * g_i
        x_bar, consensus = averaged(comm, x_i)
        return dataclasses.replace(state, x=x_bar, x_i=x_i, t=t + 1), {"consensus": consensus}
