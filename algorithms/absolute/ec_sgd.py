"""EC-SGD with an absolute compressor (Danilova & Gorbunov 2022, arXiv 2203.02383)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    minibatch,
    minibatch_option,
)
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import need
from comm.base import Comm
from comm.error_feedback import compensate_, ef14_send
from streams import tags

SOURCE = (
    "Danilova & Gorbunov 2022, arXiv 2203.02383 (EC-SGD with absolute compression); Sahu et "
    "al. 2021, arXiv 2108.00951 (absolute compressors); step and neighbourhood derived in "
    "algorithms.stepsizes.absolute (perturbed-iterate bound), not the paper's constants"
)


@dataclass(frozen=True)
class ECState(State):
    e_i: torch.Tensor  # (m, d) error memories, in model units


def ec_send(state_e_i: torch.Tensor, step_i: torch.Tensor, C, comm: Comm, t: int):
    """Error compensation's message: ``v_i = e_i + step_i`` (``step_i`` a fresh buffer, reused
    for ``e_i^{t+1}``), node ``i`` sends ``C(v_i)``. Returns ``(mean_i C(v_i), e_i^{t+1})``."""
    return ef14_send(C, comm, t, compensate_(step_i, state_e_i))


def ec_theory(problem, compressor, batch: int | None) -> tuple[dict, float | None]:
    """The constants EC-SGD's and EC-LSVRG's steps read: ``L``, ``mu``, ``n``, ``Delta^2``
    and, with minibatches, the per-sample smoothness ``calL`` (None where the problem has
    none: its noise is then taken as state-independent, e.g. the quadratics' additive noise)."""
    c = need(problem, "L", "mu")
    c["n"] = problem.n
    c["Delta_sq"] = compressor.abs_delta_sq(problem.d) if compressor.absolute else None
    fn = getattr(problem, "sample_smoothness", None)
    calL = float(fn()) if batch is not None and fn is not None else None
    if calL is not None:
        c["calL"], c["batch_size"] = calL, batch
    return c, calL


@dataclass(frozen=True)
class ECSGD(Algorithm):
    """EC-SGD: error-compensated SGD with an absolute compressor (arXiv 2203.02383).

    Danilova & Gorbunov 2022, arXiv 2203.02383, EC-SGD: error feedback in model units (as in
    Sahu et al. 2021, arXiv 2108.00951) analysed for absolute compressors; the update as in the
    code of Sahu et al. (sands-lab/rethinking-sparsification, ``logistic-regression/
    distrib_algs.py``, ``ec_sgd_const_stepsize`` and ``ec_l_svrg``).

    Update, ``e_i^0 = 0``: node ``i`` computes ``g_i^k`` (its full local gradient at ``x^k``, or
    a minibatch of ``batch_size``), forms ``v_i = e_i^k + gamma g_i^k``, sends ``C(v_i)`` and
    keeps ``e_i^{k+1} = v_i - C(v_i)``; the server steps ``x^{k+1} = x^k - (1/n) sum_i C(v_i)``
    and broadcasts ``x^{k+1}`` (uncompressed). Invariant: ``x^k - mean_i e_i^k`` follows
    ``x~^{k+1} = x~^k - gamma mean_i g_i^k``; ``||e_i^k||^2 <= Delta^2`` in expectation.

    Compressor: ``needs = "absolute"``: ``E||C(v) - v||^2 <= Delta^2`` whatever ``||v||``
    (``threshold``, ``round``), ``Delta^2`` from ``abs_delta_sq(d)``.

    Theory step (:func:`algorithms.stepsizes.absolute.ec_sgd`, for ``mu``-strongly convex ``f``):
    ``gamma = 1/(4 (L + 2 calL^2/(mu n b)))``, ``1/(4L)`` with full gradients; then
    ``E||x~^k - x*||^2 <= (1 - gamma mu/2)^k ||x^0 - x*||^2 + 2 (2L + mu) Delta^2/mu +
    4 gamma sigma_*^2/(mu n b)``: a neighbourhood whose compression part does not depend on
    ``gamma``. The derivation is in the stepsizes module; its constants are that derivation's,
    unchecked against the paper's theorem.

    Bits: uplink the compressor's payload of ``v_i`` (variable size for the absolute
    compressors, counted from each payload); downlink ``32 d`` (the model). Reports
    ``E = mean_i ||e_i||^2``.
    """

    batch_size: int | None = minibatch_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "absolute"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.absolute:ec_sgd",
        "a perturbed-iterate bound for error compensation with an absolute compressor "
        "(strongly convex f); the constants of Danilova & Gorbunov 2022, arXiv 2203.02383 were "
        "not read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        batch = opts.get("batch_size")
        c, calL = ec_theory(problem, compressor, batch)
        gamma = stepsizes.ec_sgd(c["L"], c["mu"], c["n"], calL, batch)
        formula = (
            "1/(4 (L + 2 calL^2/(mu n b)))" if calL is not None else "1/(4 L)"
        ) + "; neighbourhood 2 (2L + mu) Delta^2/mu in ||x~ - x*||^2, gamma-independent"
        return Theory(gamma=gamma, formula=formula, inputs=c, source=SOURCE)

    def init(self, x0, problem, comm: Comm) -> ECState:
        e_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        return ECState(x=x0.clone(), t=0, e_i=e_i)

    def _step(self, state: ECState, problem, comm: Comm):
        t = state.t
        comm.broadcast_full(problem.d)
        batch = minibatch(problem, comm, t, tags.EC_SGD_BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch).mul_(self.gamma)
        mean, e_i = ec_send(state.e_i, g_i, self.compressor, comm, t)
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return ECState(x=state.x - mean, t=t + 1, e_i=e_i), {"E": E}


__all__ = ["ECSGD", "ECState", "ec_send", "ec_theory"]
