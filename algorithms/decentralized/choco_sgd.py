"""CHOCO-SGD: decentralized SGD with compressed gossip of the change to public copies."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Theory, check_unit, minibatch, minibatch_option, option
from algorithms.decentralized.base import Decentralized, DecState, averaged
from algorithms.decentralized.d_sgd import DSGD
from algorithms.provenance import Provenance
from comm import Comm
from comm.topology import Topology
from compressors import Compressor
from streams import tags


@dataclass(frozen=True)
class ChocoState(DecState):
    """``xhat_i``: node ``i``'s public copy, which its neighbours hold too; ``s_i``: ``sum_j
    W_ij xhat_j``, node ``i``'s mix of its neighbours' public copies (and its own)."""

    xhat_i: torch.Tensor
    s_i: torch.Tensor


def choco_consensus_step(rho: float, beta: float, delta: float) -> float:
    """CHOCO-Gossip's consensus step ``gamma = rho^2 delta / (16 rho + rho^2 + 4 beta^2 +
    2 rho beta^2 - 8 rho delta)`` (Koloskova, Stich & Jaggi 2019, arXiv 1902.00340, the
    theorem on CHOCO-Gossip's linear rate, as recalled: its body was not read here), with
    ``rho`` the spectral gap, ``beta = ||I - W||_2`` and ``delta`` the compressor's
    contraction (the paper's ``omega``: 1 means no compression)."""
    return rho**2 * delta / (16 * rho + rho**2 + 4 * beta**2 + 2 * rho * beta**2 - 8 * rho * delta)


def choco_gossip(
    x_i: torch.Tensor,
    xhat_i: torch.Tensor,
    s_i: torch.Tensor,
    consensus: float,
    C: Compressor,
    comm: Comm,
    top: Topology,
    t: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round of CHOCO-Gossip (Koloskova, Stich & Jaggi 2019, Algorithm 1), CHOCO-SGD's
    communication: ``x_i += consensus (s_i - xhat_i)``; ``q_i = C(x_i - xhat_i)`` sent to each
    neighbour; ``xhat_i += q_i``; ``s_i += sum_j W_ij q_j``. Returns the new ``(x_i, xhat_i,
    s_i)``. The average of the ``x_i`` is preserved exactly (``W`` is doubly stochastic)."""
    x_i = x_i + consensus * (s_i - xhat_i)
    packet = C.encode(x_i - xhat_i, comm.rng_for(C, t))
    xhat_i = xhat_i + C.decode(packet)
    s_i = s_i + comm.gossip(packet, C, top)
    return x_i, xhat_i, s_i


def choco_eta(consensus: float, eta_dsgd: float) -> float:
    """CHOCO-SGD's default step ``eta = consensus * eta_DSGD``.

    Derivation. With exact public copies (``xhat = x``, no compression) a CHOCO-SGD round is
    D-SGD with the mixing matrix ``W_c = I + c (W - I)`` (``c`` the consensus step), whose
    spectral gap is ``c rho`` and whose smallest eigenvalue ``1 - c (1 - lambda_n(W))`` is
    at least ``lambda_n(W)`` for ``c <= 1``, so D-SGD's step condition still holds. At a
    constant step, decentralized gradient descent's distance to consensus scales as ``eta``
    over the spectral gap (Yuan, Ling & Yin 2016, arXiv 1310.7063), so the step that keeps
    D-SGD's neighbourhood at its default step is ``eta = c eta_DSGD``; with ``c = 1`` it is
    D-SGD's step, and CHOCO with the identity is D-SGD. Compression adds the public copies'
    lag on top, which the consensus step from theory bounds. With a larger ``eta`` and a small
    ``c`` the nodes drift towards their own minimizers (measured on the heterogeneous
    quadratic, ``n = 8``, ring and complete graphs, Top-4 of 12: ``f - f*`` grows from 3.6 to
    4e2 and 1e3 in 400 rounds at ``eta = eta_DSGD``, while ``eta = c eta_DSGD`` decreases).
    """
    return consensus * eta_dsgd


@dataclass(frozen=True)
class ChocoSGD(Decentralized):
    """CHOCO-SGD (Koloskova, Stich & Jaggi, ICML 2019, arXiv 1902.00340; authors' code
    epfml/ChocoSGD, ``convex_code/logistic.py``, method ``"choco"``).

    Each node keeps its iterate ``x_i``, a public copy ``xhat_i`` that its neighbours hold too,
    and ``s_i = sum_j W_ij xhat_j``. One round, in the order of the authors' convex code:

    1. ``x_i^+ = x_i - eta grad f_i(x_i)`` (a minibatch gradient with ``--batch-size``);
    2. ``x_i = x_i^+ + consensus (s_i - xhat_i)``: a gossip step on the public copies;
    3. ``q_i = C(x_i - xhat_i)``, the round's only message, sent to each neighbour;
    4. ``xhat_i += q_i`` and ``s_i += sum_j W_ij q_j`` (every neighbour applies the same ``q``).

    With the identity compressor and ``consensus = 1`` it is D-SGD (``x^{t+1} = W x^t - eta
    grad``). ``--step`` sets ``eta``; ``--consensus`` the gossip step (default: from theory).

    Steps: ``consensus`` from CHOCO-Gossip's theorem, ``rho^2 delta / (16 rho + rho^2 +
    4 beta^2 + 2 rho beta^2 - 8 rho delta)`` (:func:`choco_consensus_step`: recalled, the
    paper's body was not read here), or ``--consensus``; ``eta = consensus x`` D-SGD's step
    ``(1 + lambda_n(W)) / (2 L_max)`` (:func:`choco_eta`, derived here: the paper's theorems
    use decreasing steps ``4 / (mu (a + t))``). Both are conservative: the theory's consensus
    step is small (0.0012 on a ring of 8 with Top-4 of 12), so a default run moves slowly;
    the paper's experiments tune ``consensus`` and ``eta`` on a grid. Note the paper's
    ``omega`` is a contraction (``omega = 1``: no compression), this library's ``delta``.
    """

    consensus: float | None = option(
        None, "consensus (gossip) step gamma in (0, 1] (default: from theory)", check=check_unit
    )
    batch_size: int | None = minibatch_option()

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.decentralized.choco_sgd:choco_eta",
        "eta = consensus x D-SGD's step (Yuan, Ling & Yin 2016), derived here; the consensus "
        "step from CHOCO-Gossip's theorem as recalled (Koloskova, Stich & Jaggi 2019, arXiv "
        "1902.00340; the paper's body was not read here)",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        top = cls.graph_of(problem.n, opts)
        delta = compressor.delta(problem.d)
        dsgd = DSGD.theory(problem, compressor, opts)
        gamma_c = choco_consensus_step(top.rho, top.beta, delta)
        given = opts.get("consensus")
        c = gamma_c if given is None else float(given)
        return Theory(
            gamma=choco_eta(c, dsgd.gamma),
            formula=f"eta = consensus x {dsgd.formula}; consensus = rho^2 delta / (16 rho + "
            "rho^2 + 4 beta^2 + 2 rho beta^2 - 8 rho delta) unless given",
            inputs={**dsgd.inputs, "delta": delta, "consensus": c},
            source="Koloskova, Stich & Jaggi 2019, arXiv 1902.00340 (consensus step, recalled); "
            "eta: Yuan, Ling & Yin 2016, arXiv 1310.7063",
            params={"consensus": gamma_c},
        )

    def init(self, x0, problem, comm: Comm) -> ChocoState:
        self.graph(comm.n)
        zeros = torch.zeros(comm.m, x0.numel(), dtype=x0.dtype, device=x0.device)
        return ChocoState(x=x0.clone(), t=0, x_i=x0.expand(comm.m, -1).clone(),
                          xhat_i=zeros, s_i=zeros.clone())  # fmt: skip

    def _step(self, state: ChocoState, problem, comm: Comm):
        C, t, top = self.compressor, state.t, self.graph(comm.n)
        batch = minibatch(problem, comm, t, tags.BATCH, self.batch_size)
        x_i = state.x_i - self.gamma * problem.grad(state.x_i, batch)
        x_i, xhat_i, s_i = choco_gossip(
            x_i, state.xhat_i, state.s_i, self.consensus, C, comm, top, t
        )
        x_bar, consensus = averaged(comm, x_i)
        new = dataclasses.replace(state, x=x_bar, x_i=x_i, xhat_i=xhat_i, s_i=s_i, t=t + 1)
        return new, {"consensus": consensus}
