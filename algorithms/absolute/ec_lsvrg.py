"""EC-LSVRG with an absolute compressor (Danilova & Gorbunov 2022, arXiv 2203.02383)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.absolute.ec_sgd import SOURCE, ECState, ec_send, ec_theory
from algorithms.base import Algorithm, Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.stepsizes.absolute import lsvrg_p
from algorithms.vr.vr_common import samples_per_node
from comm.base import Comm
from streams.tags import EC_LSVRG_BATCH as TAG_LSVRG_BATCH
from streams.tags import EC_LSVRG_COIN as TAG_LSVRG_COIN


@dataclass(frozen=True)
class ECLSVRGState(ECState):
    w_i: torch.Tensor  # (m, d) each node's reference point
    gw_i: torch.Tensor  # (m, d) its full local gradient at w_i


@dataclass(frozen=True)
class ECLSVRG(Algorithm):
    """EC-LSVRG: error compensation over the loopless-SVRG estimator (arXiv 2203.02383).

    Danilova & Gorbunov 2022, arXiv 2203.02383, EC-LSVRG with absolute compression; the
    estimator is loopless SVRG (Kovalev, Horváth & Richtárik 2019, arXiv 1901.08689),
    as in Gorbunov, Kovalev, Makarenko & Richtárik 2020 (arXiv 2010.12292, EC-LSVRG) and in the
    code of Sahu et al. (sands-lab/rethinking-sparsification, ``logistic-regression/
    distrib_algs.py::ec_l_svrg``: per-node refresh coins, the reference point set to ``x^k``).

    Update, ``e_i^0 = 0``, ``w_i^0 = x^0``: node ``i`` draws a minibatch ``B_i`` of
    ``batch_size`` and forms ``g_i = grad f_iB(x^k) - grad f_iB(w_i^k) + grad f_i(w_i^k)``
    (the difference on the same samples), ``v_i = e_i^k + gamma g_i``, sends ``C(v_i)`` and
    keeps ``e_i^{k+1} = v_i - C(v_i)``; the server steps ``x^{k+1} = x^k - (1/n) sum_i C(v_i)``
    and broadcasts it. Each node then flips its own coin: with probability ``p``,
    ``w_i^{k+1} = x^k`` and it recomputes ``grad f_i(w_i^{k+1})`` locally (nothing is sent).

    Compressor: ``needs = "absolute"`` (``threshold``, ``round``; ``Delta^2 = abs_delta_sq(d)``).

    Theory step (:func:`algorithms.stepsizes.absolute.ec_lsvrg`, ``mu``-strongly convex ``f``):
    ``gamma = 1/(4 (L + 6 calL^2/(mu n b)))`` with ``calL`` the mean-square per-sample
    smoothness (0 where the problem has none: its noise is state-independent and cancels in
    the difference); ``p = min(1, b/m)`` (``m`` samples per node; 1 when unknown). Then the
    Lyapunov function ``||x~ - x*||^2 + (4 gamma^2/(n b p)) D`` contracts by ``1 - min(gamma mu,
    p)/2`` up to ``2 (2L + mu) Delta^2/mu`` (when ``p >= gamma mu``): no stochastic term, the
    difference from EC-SGD. Derived in the stepsizes module; its constants are that
    derivation's, unchecked against the paper's theorem.

    Bits: uplink the compressor's payload of ``v_i``; downlink ``32 d`` (the model). The
    refreshes are local computation. Reports ``E = mean_i ||e_i||^2``.
    """

    batch_size: int = option(1, "minibatch per node (default 1)", check=check_count, required=True)
    p: float | None = option(
        None, "probability of a node's refresh of w_i (default: min(1, b/m))", check=check_unit
    )

    needs: ClassVar[str] = "absolute"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.absolute:ec_lsvrg",
        "the perturbed-iterate bound with the loopless-SVRG estimator and its Lyapunov term "
        "(strongly convex f); the constants of Danilova & Gorbunov 2022, arXiv 2203.02383 were "
        "not read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        batch = opts.get("batch_size") or 1
        c, calL = ec_theory(problem, compressor, batch)
        gamma = stepsizes.ec_lsvrg(c["L"], c["mu"], c["n"], calL or 0.0, batch)
        m = samples_per_node(problem)
        c["m"] = m
        formula = (
            "1/(4 (L + 6 calL^2/(mu n b)))" if calL is not None else "1/(4 L) (calL = 0)"
        ) + "; p = min(1, b/m); neighbourhood 2 (2L + mu) Delta^2/mu, no variance term"
        return Theory(
            gamma=gamma, formula=formula, inputs=c, params={"p": lsvrg_p(batch, m)}, source=SOURCE
        )

    def _p(self) -> float:
        return 1.0 if self.p is None else self.p

    def init(self, x0, problem, comm: Comm) -> ECLSVRGState:
        e_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        w_i = x0.expand(comm.m, problem.d).clone()
        return ECLSVRGState(x=x0.clone(), t=0, e_i=e_i, w_i=w_i, gw_i=problem.grad(x0))

    def _step(self, state: ECLSVRGState, problem, comm: Comm):
        t, x = state.t, state.x
        comm.broadcast_full(problem.d)
        batch = problem.sample(comm.rng(t, tag=TAG_LSVRG_BATCH), self.batch_size)
        g_i = problem.grad_diff(x.expand_as(state.w_i), state.w_i, batch).add_(state.gw_i)
        mean, e_i = ec_send(state.e_i, g_i.mul_(self.gamma), self.compressor, comm, t)
        refresh = comm.rng(t, tag=TAG_LSVRG_COIN).uniform(1)[:, 0].to(x.device) < self._p()
        w_i, gw_i = state.w_i, state.gw_i
        if bool(refresh.any()):
            w_i = torch.where(refresh[:, None], x, w_i)
            gw_i = torch.where(refresh[:, None], problem.grad(x), gw_i)
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        new = ECLSVRGState(x=x - mean, t=t + 1, e_i=e_i, w_i=w_i, gw_i=gw_i)
        return new, {"E": E}
