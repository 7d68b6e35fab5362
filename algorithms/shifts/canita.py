"""CANITA: compressed accelerated gradient for general convex problems (Li & Richtárik 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from algorithms import provenance as pv
from algorithms.base import Algorithm, Theory, check_unit, option
from algorithms.provenance import Provenance
from algorithms.shifts.adiana import (
    INITS,
    ADIANAState,
    accelerated_round,
    fill_resolved,
    init_state,
)
from algorithms.stepsizes.accelerated import adiana_alpha, adiana_eta, adiana_p, canita_theta1
from algorithms.vr.vr_common import effective_omega, need, need_independent_unbiased
from comm.base import Comm

SOURCE = (
    "Li & Richtárik 2021, arXiv 2107.09461 (NeurIPS 2021), Algorithm 1 (CANITA) and its "
    "general convex theorem: NOT read here [U]. Reconstruction: ADIANA's round (Li, Kovalev, "
    "Qian & Richtárik 2020; parameters of Rustem-Islamov/FedNL-Public methods.py::adiana "
    "[V-code]) with the strongly convex coupling replaced by Katyusha^ns's decaying one on the "
    "expected anchor count p t (Allen-Zhu 2017, theta1 = 2/(s + 4)) [U]"
)


@dataclass(frozen=True)
class CANITA(Algorithm):
    """CANITA as reconstructed here: DIANA shifts + loopless accelerated coupling with a decaying
    weight, for convex (not strongly convex) ``f``.

    Li & Richtárik 2021, "CANITA: Faster Rates for Distributed Convex Optimization with
    Communication Compression", NeurIPS 2021, arXiv 2107.09461. **The paper's Algorithm 1 and
    its theorem's parameter schedule could not be read here**: what is known of it (the
    abstract) is that it is ANITA's loopless acceleration (a ``z`` sequence, an anchor ``w``
    refreshed with a probability, a time-varying coupling) combined with DIANA's shifts, for
    general convex ``f``, with the rate ``O(sqrt((1 + sqrt(omega^3/n)) L/eps) + omega
    eps^(-1/3))`` rounds. This class is a reconstruction of that design, labelled as such
    everywhere it is reported:

    * the round is ADIANA's (:func:`algorithms.shifts.adiana.accelerated_round`; two compressed
      messages ``C(grad f_i(x^t) - h_i^t)`` and ``C(grad f_i(w^t) - h_i^t)``, shifts
      ``h_i += alpha C(grad f_i(w^t) - h_i^t)``, ``y^{t+1} = x^t - eta g^t``, the anchor coin
      ``w^{t+1} = y^t`` with probability ``p``, shared by every node);
    * ``x^t = theta1_t z^t + theta2 w^t + (1 - theta1_t - theta2) y^t`` with the decaying
      ``theta1_t = min(1/2, 2/(p t + t0))`` (Katyusha^ns's ``2/(s + 4)`` with the epoch count
      ``s`` replaced by the expected number of anchor refreshes ``p t``; ``t0 = 4``), and the
      ``z`` step ``z^{t+1} = z^t - gamma_z,t g^t`` with ``gamma_z,t = eta/(2 theta1_t)``
      (ADIANA's ``eta/(2(theta1 + eta mu))`` at ``mu = 0``; ``beta = 1``);
    * ``eta``, ``p``, ``alpha = 1/(omega+1)`` and ``theta2 = 1/2`` are ADIANA's (none of them
      involves ``mu``).

    Bits per round and node: uplink ``2 bits(C)``, downlink ``32 d`` (``g^t``; the coin is
    shared randomness). ``init``: ``h_i^0 = 0`` or ``grad f_i(x^0)`` (charged ``32 d``).
    ``theta1`` (an option) fixes the coupling instead of the schedule: ``theta1 = 0`` removes the
    acceleration (the broken variant of its theory check). Compressor class: independent
    unbiased. Reported: ``refresh``, ``theta1`` and ``H = mean_i ||h_i - grad f_i(x*)||^2``
    (where ``x*`` is known). Its check (:mod:`theory_checks.accelerated`) measures the
    accelerated rate on a general convex problem, not the paper's constants.
    """

    alpha: float | None = option(None, "shift step alpha (default 1/(omega+1))", check=check_unit)
    p: float | None = option(
        None, "probability p of the shared anchor coin (default ADIANA's)", check=check_unit
    )
    theta2: float | None = option(None, "weight of the anchor w in x (default 1/2)")
    t0: float = option(
        4.0, "offset of the coupling schedule theta1_t = min(1/2, 2/(p t + t0)) (default 4)"
    )
    theta1: float | None = option(
        None, "a constant coupling theta1 instead of the schedule (0 removes the acceleration)"
    )
    init_mode: str = option("zero", "h_i^0: zero | full", choices=INITS, flag="init")

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("refresh", "theta1", "H")
    provenance: ClassVar[Provenance] = pv.reconstruction(
        "CANITA's Algorithm 1 and theorem (Li & Richtárik 2021, arXiv 2107.09461) were not "
        "read: ADIANA's round, step eta and p (Rustem-Islamov/FedNL-Public methods.py::adiana) "
        "with Katyusha^ns's decaying coupling theta1_t = min(1/2, 2/(p t + t0)) (Allen-Zhu "
        "2017) [U]"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.t0 >= 4.0:
            raise ValueError(f"t0 must be >= 4 (theta1_0 <= 1/2), got {self.t0!r}")
        for name in ("theta1", "theta2"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")
        t2 = 0.5 if self.theta2 is None else self.theta2
        t1 = 0.5 if self.theta1 is None else self.theta1  # the schedule's largest value
        if t1 + t2 > 1:
            raise ValueError(f"theta1 + theta2 must be <= 1, got {t1} + {t2}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased("CANITA", compressor, d)
        if not problem.convex:
            raise ValueError("CANITA's theory needs a convex problem: give --step FLOAT")
        k = need(problem, "L_max")
        p = opts.get("p") or adiana_p(omega, n)
        return Theory(
            gamma=adiana_eta(k["L_max"], omega, n, p),
            formula="[U] reconstruction (the paper's theorem not read): ADIANA's "
            "eta = min(1 / (2 L), n / (64 omega L (2 p (omega + 1) + 1)^2)), L = L_max, and p; "
            "theta1_t = min(1/2, 2 / (p t + t0)), gamma_z_t = eta / (2 theta1_t)",
            inputs={**k, "omega": omega, "n": n},
            params={"alpha": adiana_alpha(omega), "p": p, "theta2": 0.5},
            source=SOURCE,
        )

    def resolved(self, n: int, d: int) -> dict[str, float]:
        """``alpha``, ``p`` and ``theta2``, the ones left ``None`` from theory (``configure``
        fills them, so a configured method's round computes nothing here)."""
        if None not in (self.alpha, self.p, self.theta2):
            return {"alpha": self.alpha, "p": self.p, "theta2": self.theta2}
        omega = effective_omega(self.compressor, d)
        return {
            "alpha": self.alpha if self.alpha is not None else adiana_alpha(omega),
            "p": self.p if self.p is not None else adiana_p(omega, n),
            "theta2": 0.5 if self.theta2 is None else self.theta2,
        }

    @classmethod
    def configure(cls, problem, compressor, **kw: Any):
        return fill_resolved(*super().configure(problem, compressor, **kw), problem)

    def coupling(self, t: int, p: float) -> float:
        """``theta1_t``: the constant ``theta1`` if given, else the schedule."""
        return self.theta1 if self.theta1 is not None else canita_theta1(t, p, self.t0)

    def init(self, x0, problem, comm: Comm) -> ADIANAState:
        return init_state(self.compressor, self.init_mode, x0, problem, comm)

    def _step(self, state: ADIANAState, problem, comm: Comm):
        q = self.resolved(problem.n, problem.d)
        th1 = self.coupling(state.t, q["p"])
        gamma_z = self.gamma / (2.0 * th1) if th1 > 0 else 0.0
        new, extras = accelerated_round(
            self.compressor, state, problem, comm, self.gamma, th1, q["theta2"], gamma_z, 1.0,
            q["alpha"], q["p"],
        )  # fmt: skip
        extras["theta1"] = th1
        return new, extras
