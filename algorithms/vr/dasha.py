"""DASHA: momentum-compressed gradient differences, no synchronisation (Tyurin & Richtárik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Theory
from algorithms.provenance import Provenance
from algorithms.vr.dasha_common import SOURCE, DASHABase, DASHAState, dasha_inputs
from algorithms.vr.vr_common import need
from comm.base import Comm


@dataclass(frozen=True)
class DASHA(DASHABase):
    """DASHA: momentum-compressed differences, no syncs (arXiv 2202.01268, Alg. 1).

    Tyurin & Richtárik 2022, arXiv 2202.01268 (ICLR 2023), Algorithm 1 with full gradients.

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` sets ``h_i^{t+1} = grad f_i(x^{t+1})``,
    sends ``m_i = C(h_i^{t+1} - h_i^t - a (g_i^t - h_i^t))`` and sets
    ``g_i^{t+1} = g_i^t + m_i``; the server sets ``g^{t+1} = g^t + (1/n) sum_i m_i``.
    Invariant: ``g = mean_i g_i``. Only compressed vectors are sent after the initialisation.

    ``init``: ``full`` (default; the paper and the Flower baseline): ``g_i^0 = h_i^0 =
    grad f_i(x^0)``, sent uncompressed once (charged ``32 d``); ``zero`` (the authors' code,
    "zero_marina"): ``g_i^0 = 0``, ``h_i^0 = grad f_i(x^0)``, nothing uncompressed is ever sent
    (with the identity compressor this lags gradient descent by one step: ``x^1 = x^0``).
    ``momentum`` ``a`` defaults to ``1/(2 omega + 1)``.

    Theory (independent unbiased ``C``): the published Thm 6.1 step
    ``1/(L + sqrt(16 omega (2 omega + 1)/n) L_tilde)`` ([M]), the smallest of the three versions
    of the theory sheet §2.10 (the authors' code uses ``1/(mean L_i + L_tilde sqrt(omega (4
    omega + 1)/n))`` and a re-derivation gives ``1/(L + L_tilde sqrt(2 omega (4 omega + 1)/n))``;
    see :mod:`algorithms.stepsizes.vr`). Reported: ``G = mean_i ||g_i - grad f_i(x)||^2``.
    """

    batchable: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.theorem(
        "Tyurin & Richtárik 2022, arXiv 2202.01268 (ICLR 2023), Theorem 6.1 (nonconvex), its "
        "constant 16 omega (2 omega + 1) as recalled, not checked [M] (the smallest of the "
        "known versions); momentum a = 1/(2 omega + 1)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        base = dasha_inputs("DASHA", problem, compressor)
        k = need(problem, "L", "L_tilde")
        return Theory(
            gamma=stepsizes.dasha(k["L"], k["L_tilde"], base["omega"], base["n"]),
            formula="1 / (L + sqrt(16 omega (2 omega + 1) / n) L_tilde)",
            inputs={**k, **base},
            params={"momentum": base["a"]},
            source=SOURCE + ", Thm 6.1; theory sheet §2.10",
        )

    def _h_next(self, state: DASHAState, x, problem, comm: Comm):
        return problem.grad(x), {}
