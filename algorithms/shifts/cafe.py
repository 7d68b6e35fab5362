"""CAFe and CAFe-S: compression against a predictor every node shares, with stateless nodes.

Ortega, Huang, Li & Jafarkhani, "Communication Compression for Distributed Learning without
Control Variates" (arXiv 2412.04538) and "... with Aggregate and Server-Guided Feedback"
(arXiv 2512.22623). The base algorithm is distributed gradient descent: node ``i``'s update is
one gradient step, and instead of compressing it (DCGD) it compresses its difference from a
predictor ``p^t`` that the server broadcasts and every node shares, so no node keeps a control
variate between rounds (error feedback and EF21 keep one per node):

    node i:  sends c_i = C(grad f_i(x^t) - p^t)
    server:  g^t = p^t + (1/n) sum_i c_i,   x^{t+1} = x^t - gamma g^t

CAFe's predictor is the previous round's aggregate, ``p^t = g^{t-1}`` (``p^0 = 0``: the first
round is DCGD); CAFe-S's is a candidate computed by the server on a small data set of its own,
``p^t = grad f_S(x^t)`` (the problem's ``server_grad``).

What could be read of the papers here is their abstracts; the algorithm boxes and theorems were
not. Deviations and assumptions, each labelled in the classes: (D1) one local gradient step per
round; (D2) messages in gradient units (the papers' updates are ``Delta_i = -gamma grad f_i``: for a
compressor with ``C(a v) = a C(v)`` for every real ``a``, given the same draws, such as TopK,
RandK, scaled sign or QSGD, the two are the same method; natural compression is not such a one);
(D3) theory steps derived for this library (:mod:`algorithms.stepsizes.cafe`), not the papers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory
from algorithms.provenance import Provenance
from algorithms.stepsizes.cafe import cafe as cafe_step
from algorithms.stepsizes.cafe import cafe_s as cafe_s_step
from comm.base import Comm

SOURCE = "Ortega, Huang, Li & Jafarkhani, arXiv 2412.04538 (CAFe) and 2512.22623 (CAFe-S)"


@dataclass(frozen=True)
class CAFeState(State):
    g: torch.Tensor  # (d,) the server's aggregate g^{t-1}: CAFe's next predictor


def predicted_round(C, target_i: torch.Tensor, p: torch.Tensor, comm: Comm, t: int):
    """One compressed round against the shared predictor ``p``: node ``i`` sends
    ``C(target_i - p)``, the server adds the mean of the messages to ``p``. Returns
    ``(g, resid)`` with ``resid = mean_i ||target_i - p||^2``, the energy the nodes compress.

    ``target_i`` is a fresh gradient owned by the caller and is overwritten."""
    diff = target_i.sub_(p)
    resid = comm.monitor_mean(torch.linalg.vector_norm(diff, dim=1) ** 2)
    g = p + comm.reduce(C.encode(diff, comm.rng_for(C, t)), C)
    return g, resid


@dataclass(frozen=True)
class CAFe(Algorithm):
    """CAFe: compression against the previous aggregate, stateless nodes (arXiv 2412.04538).

    Ortega, Huang, Li & Jafarkhani, "Communication Compression for Distributed Learning without
    Control Variates", arXiv 2412.04538 (presented again, with CAFe-S, in arXiv 2512.22623), on
    distributed gradient descent.

    Update: the server broadcasts ``x^t`` and the previous aggregate ``g^{t-1}``; node ``i``
    sends ``c_i = C(grad f_i(x^t) - g^{t-1})`` and keeps nothing; the server sets
    ``g^t = g^{t-1} + (1/n) sum_i c_i`` and ``x^{t+1} = x^t - gamma g^t``. ``g^{-1} = 0``, so
    round 0 is DCGD's. In the papers' units the node sends ``C(Delta_i^t - Delta^{t-1})`` and
    the server forms ``Delta^t = Delta^{t-1} + mean_i C(.)`` (abstract of 2512.22623: "the
    globally aggregated update from the previous round as a shared control variate").

    Deviations (the algorithm box was not available): (D1) one local step, no server step
    size; (D2) gradient units, the same method for positively homogeneous ``C``; (D3) the step
    is derived for this library, not the papers' theorem: ``gamma = 1/(L (1 + sqrt(beta/theta)))``
    with EF21's ``theta = 1 - sqrt(1 - delta)``, ``beta = (1 - delta)/theta``
    (:func:`algorithms.stepsizes.cafe.cafe`): under bounded gradient dissimilarity ``zeta2``
    it gives ``(1/T) sum_t ||grad f(x^t)||^2 <= 2 Phi^0/(gamma T) + (1 - delta) zeta2/theta``.
    It has ``L`` (of ``f``) where EF21 has ``L_tilde``: the predictor is one shared vector.

    Compressor: contractive (``needs``; ``delta``), biased ones included: the papers' point.
    Bits per round: up, each node its payload of ``C``; down, ``x^t`` and ``g^{t-1}``
    uncompressed, ``2 * 32 d`` (``32 d`` in round 0, where the predictor is zero by
    convention). Reports ``resid = mean_i ||grad f_i(x^t) - g^{t-1}||^2``, the energy the
    nodes compress (the papers' "compressibility of the client updates").
    """

    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("resid",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.cafe:cafe",
        "EF21's Lyapunov argument on the server's error, under bounded gradient dissimilarity; "
        "the theorem of Ortega, Huang, Li & Jafarkhani (arXiv 2412.04538) was not available "
        "beyond its abstract",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        L, delta = problem.consts.L, compressor.delta(problem.d)
        return Theory(
            gamma=cafe_step(L, delta),
            formula="1 / (L (1 + sqrt(beta / theta))), theta = 1 - sqrt(1 - delta), "
            "beta = (1 - delta) / theta (derived for this library)",
            inputs={"L": L, "delta": delta},
            source=SOURCE + "; step derived for this library (algorithms/stepsizes/cafe.py): "
            "the papers' theorem was not available",
        )

    def init(self, x0, problem, comm: Comm) -> CAFeState:
        return CAFeState(x=x0.clone(), t=0, g=torch.zeros_like(x0))

    def _step(self, state: CAFeState, problem, comm: Comm):
        t, d = state.t, problem.d
        comm.broadcast_full(d)  # the model x^t
        if t > 0:  # the predictor g^{t-1} (zero in round 0 by convention: nothing to send)
            comm.broadcast_full(d)
        g, resid = predicted_round(self.compressor, problem.grad(state.x), state.g, comm, t)
        return CAFeState(x=state.x - self.gamma * g, t=t + 1, g=g), {"resid": resid}


@dataclass(frozen=True)
class CAFeS(Algorithm):
    """CAFe-S: compression against a gradient of the server's own data (arXiv 2512.22623).

    Server-guided compressed aggregate feedback (Ortega, Huang, Li & Jafarkhani, arXiv
    2512.22623), on distributed gradient descent.

    Update: the server, which holds a small data set of its own (the problem's
    ``server_grad``: e.g. ``--problem-opt server_rows=K`` for the GLMs, ``server_zeta2`` for
    the quadratics), computes the candidate ``p^t = grad f_S(x^t)`` and broadcasts it with
    ``x^t``; node ``i`` sends ``c_i = C(grad f_i(x^t) - p^t)`` and keeps nothing; the server
    sets ``g^t = p^t + (1/n) sum_i c_i`` and ``x^{t+1} = x^t - gamma g^t`` (abstract: "a
    server-guided candidate update to be used as a more accurate predictor").

    Deviations (the algorithm box was not available): (D1) the server's candidate is one
    gradient step on its data, and so is each node's update; (D2) gradient units; (D3) the
    step is derived for this library, not the paper's theorem: ``gamma = 1/L``
    (:func:`algorithms.stepsizes.cafe.cafe_s`), which gives
    ``(1/T) sum_t ||grad f(x^t)||^2 <= 2 (f(x^0) - f_inf)/(gamma T)
    + (1 - delta)(zeta2 + zeta2_S)``, ``zeta2_S`` bounding ``||grad f - grad f_S||^2``: the
    abstract's "rate that improves as the server's data become more representative".

    Compressor: contractive (``needs``). Bits per round: up, each node its payload; down,
    ``x^t`` and ``p^t`` uncompressed, ``2 * 32 d``. Reports
    ``resid = mean_i ||grad f_i(x^t) - p^t||^2``.
    """

    needs: ClassVar[str] = "contractive"
    requires: ClassVar[tuple[str, ...]] = ("server_data",)
    reports: ClassVar[tuple[str, ...]] = ("resid",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.cafe:cafe_s",
        "the descent lemma with a memoryless compression error (the server's fresh predictor); "
        "the theorem of Ortega, Huang, Li & Jafarkhani (arXiv 2512.22623) was not available "
        "beyond its abstract",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        L, delta = problem.consts.L, compressor.delta(problem.d)
        return Theory(
            gamma=cafe_s_step(L),
            formula="1 / L (derived for this library)",
            inputs={"L": L, "delta": delta},
            source=SOURCE + "; step derived for this library (algorithms/stepsizes/cafe.py): "
            "the paper's theorem was not available",
        )

    def init(self, x0, problem, comm: Comm) -> State:
        return State(x=x0.clone(), t=0)

    def _step(self, state: State, problem, comm: Comm):
        t, d = state.t, problem.d
        comm.broadcast_full(d)  # the model x^t
        p = problem.server_grad(state.x)
        comm.broadcast_full(d)  # the server's predictor p^t
        g, resid = predicted_round(self.compressor, problem.grad(state.x), p, comm, t)
        return State(x=state.x - self.gamma * g, t=t + 1), {"resid": resid}
