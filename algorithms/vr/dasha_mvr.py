"""DASHA-MVR: DASHA with momentum variance-reduced stochastic gradients (Tyurin & Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.vr.dasha_common import SOURCE, DASHABase, DASHAState, dasha_inputs
from algorithms.vr.vr_common import (
    effective_omega,
    need,
    resolved,
    sample_smoothness,
)
from comm.base import Comm
from streams import tags


@dataclass(frozen=True)
class DASHAMVR(DASHABase):
    """DASHA-MVR: DASHA with momentum variance reduction (arXiv 2202.01268, Alg. 1).

    Tyurin & Richtárik 2022, arXiv 2202.01268, Algorithm 1 with the MVR estimator, for
    stochastic ``f_i(x) = E_xi f_i(x; xi)``.

    Update: as DASHA (see :class:`algorithms.vr.dasha.DASHA`) with
    ``h_i^{t+1} = grad f_i(x^{t+1}; xi) + (1 - b)(h_i^t - grad f_i(x^t; xi))`` on a fresh
    minibatch ``xi`` of ``B = batch_size`` samples per node (the same samples at both points).
    ``init`` ``full`` uses the exact local gradient ``grad f_i(x^0)`` for ``g_i^0 = h_i^0`` (what
    the paper's initial mega-batch estimates); ``zero`` as DASHA.

    ``b`` (flag ``--mvr-b``) defaults to ``1/(2 omega + 1)``, DASHA's momentum: a [U] choice, since
    the paper's ``b`` depends on the target accuracy and the noise; ``b = 1`` gives plain
    minibatch gradients. Theory [U] (theory sheet §2.10): ``1/(L + sqrt(48 omega (2 omega + 1)/n
    (L_tilde^2 + (1 - b)^2 calL^2/B) + 12 (1 - b)^2 calL^2/(b n B)))`` with ``calL`` the
    mean-square per-sample smoothness from ``problem.sample_smoothness()`` (the paper's
    ``L_sigma``; without it give ``--step``). With a constant ``b`` the method stalls at a floor
    proportional to ``b sigma^2/(n B)``. Reported: ``G = mean_i ||g_i - h_i||^2``.
    """

    batch_size: int = option(
        1, "minibatch B per node for the MVR estimator", check=check_count, required=True
    )
    b: float | None = option(
        None, "MVR momentum b in (0, 1] (default 1/(2 omega + 1))", flag="mvr-b", check=check_unit
    )

    batchable: ClassVar[bool] = True
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.theorem(
        "Tyurin & Richtárik 2022, arXiv 2202.01268, DASHA-MVR's nonconvex theorem (Section 6; "
        "its number not given here), constants as recalled [U]; b defaults to a = 1/(2 omega "
        "+ 1), the library's choice (the theorem's b is not given here)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        base = dasha_inputs("DASHA-MVR", problem, compressor)
        B = opts.get("batch_size") or 1
        b = resolved(opts.get("b"), lambda: base["a"])
        k = need(problem, "L", "L_tilde")
        calL = sample_smoothness(problem, "DASHA-MVR")
        gamma = stepsizes.dasha_mvr(k["L"], k["L_tilde"], calL, base["omega"], base["n"], b, B)
        return Theory(
            gamma=gamma,
            formula="1 / (L + sqrt(48 omega (2 omega + 1) / n (L_tilde^2 + (1 - b)^2 calL^2 / B)"
            " + 12 (1 - b)^2 calL^2 / (b n B)))",
            inputs={**k, **base, "calL": calL, "b": b, "B": B},
            params={"momentum": base["a"], "b": b},
            source=SOURCE + ", DASHA-MVR; theory sheet §2.10 [U]",
        )

    def _h_next(self, state: DASHAState, x, problem, comm: Comm):
        b = self.b
        if b is None:
            b = stepsizes.dasha_momentum(effective_omega(self.compressor, problem.d))
        batch = problem.sample(comm.rng(state.t, tag=tags.BATCH), self.batch_size)
        h_i = problem.grad(x, batch) + (1.0 - b) * (state.h_i - problem.grad(state.x, batch))
        return h_i, {}
