"""EF-BV: error feedback and variance reduction in one method (Condat, Yi & Richtárik 2022)."""

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
    check_choice,
    initial_estimator,
    option,
    regime_option,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from compressors import Compressor

INITS = ("full", "compressed", "zero")


STEP_RULES = ("authors", "derived")
DERIVED = pv.derived(
    "algorithms.stepsizes.ef:ef_bv",
    "--ef-step derived, a deviation from the authors' step: EF21's Lyapunov argument in "
    "EF-BV's class C(eta, omega) (nonconvex)",
)
DERIVED_PL = pv.derived(
    "algorithms.stepsizes.ef:ef_bv_pl",
    "--ef-step derived, a deviation from the authors' step: EF21's PL argument in EF-BV's "
    "class C(eta, omega)",
)


def bv_class(compressor: Compressor, d: int, n: int) -> tuple[float, float, float]:
    """``(eta, omega, omega_av)`` of ``compressor`` in EF-BV's class ``C(eta, omega)``:
    ``||E C(x) - x|| <= eta ||x||``, ``E||C(x) - E C(x)||^2 <= omega ||x||^2``.

    The pair is the compressor's declared :meth:`~compressors.Compressor.bias_variance`:
    exact for the classes that declare it (Top-K, Rand-K, scaled/biased Rand-K, identity, ...),
    a bound from ``delta`` otherwise (``bias_variance_exact`` tells which).
    ``omega_av = omega/n`` for independent compressors (the authors' code), ``omega`` under
    shared randomness.
    """
    eta, omega = compressor.bias_variance(d)
    omega_av = omega if compressor.shared_randomness else omega / n
    return eta, omega, omega_av


@dataclass(frozen=True)
class EFBVState(State):
    h_i: torch.Tensor  # (m, d) node control variates
    h: torch.Tensor  # (d,) server's mean of h_i


@dataclass(frozen=True)
class EFBV(Algorithm):
    """EF-BV: error feedback with bias and variance control (arXiv 2205.04180, Algorithm 1).

    Condat, Yi & Richtárik 2022; implemented without the proximal step (``R = 0``).

    Update: node ``i`` sends ``d_i = C(grad f_i(x^t) - h_i^t)`` and sets
    ``h_i^{t+1} = h_i^t + lam d_i``; the server sets ``d = (1/n) sum_i d_i``,
    ``g^{t+1} = h^t + nu d``, ``h^{t+1} = h^t + lam d`` and ``x^{t+1} = x^t - gamma g^{t+1}``.
    ``lam = nu = 1`` is EF21 (EF21's ``g^t`` is ``h^{t+1}`` here; with ``init=full`` the
    iterates coincide); ``nu = 1``, ``lam = 1/(1+omega)`` with unbiased ``C`` is DIANA.

    Parameters: ``lam``, ``nu`` default to ``lambda* = min((1-eta)/((1-eta)^2 + omega), 1)``
    and ``nu* = min((1-eta)/((1-eta)^2 + omega_av), 1)`` from the compressor's class
    (:func:`bv_class`). The theory sheet writes ``omega_av = omega`` for independent
    compressors; the variance of a mean of ``n`` independent messages is ``omega/n`` times
    the mean squared norm, so ``omega_av = omega/n`` here (the ``1/n`` gain the paper claims).

    Theory: the authors' step (their code ``WilliamYi96/EF-BV``; :func:`stepsizes.ef_bv_authors`)
    ``gamma = 1/(L + L_tilde sqrt(r_av/r)/s*)``, ``s* = sqrt((1+r)/(2r)) - 1``, for both the
    nonconvex and the PL regime (under PL the Lyapunov function contracts like
    ``max(1 - gamma mu, (1+r)/2)^t``), with ``r = (1-lam+lam eta)^2 + lam^2 omega`` and
    ``r_av = (1-nu+nu eta)^2 + nu^2 omega_av`` from the compressor's exact class constants
    (:func:`bv_class`). ``step_rule="derived"`` (``--ef-step derived``, a deviation) uses
    instead the step derived for this library (:func:`stepsizes.ef_bv`,
    :func:`stepsizes.ef_bv_pl`): ``1/(L + L_tilde sqrt(r_av)/(1 - sqrt(r)))`` (nonconvex) or
    ``min(1/(L + L_tilde sqrt(2 r_av)/(1 - sqrt(r))), (1 - sqrt(r))/(2 mu))`` (PL). Reports
    ``G = mean_i ||h_i^t - grad f_i(x^t)||^2`` of the state the step starts from (its
    gradients are the ones the step computes). Built directly (not by ``configure``),
    ``lam`` and ``nu`` default to 1.
    """

    lam: float | None = option(None, "EF-BV lambda in (0, 1] (default: lambda*)", flag="ef_lambda")
    nu: float | None = option(None, "EF-BV nu in (0, 1] (default: nu*)", flag="ef_nu")
    init_mode: str = option("full", "h_i^0: full | compressed | zero", choices=INITS, flag="init")
    regime: str = regime_option()
    step_rule: str = option(
        "authors",
        "EF-BV theory step: authors (their code) | derived (this library's, a deviation)",
        choices=STEP_RULES,
        flag="ef_step",
    )

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "any"
    reports: ClassVar[tuple[str, ...]] = ("G",)
    provenance: ClassVar[Provenance] = pv.authors_code(
        "WilliamYi96/EF-BV",
        "Logistic_regression_nonconvex/compTRk.py and Least_squares_PL-setting/compTRk.py",
        "gamma = 1/(L + L_tilde sqrt(r_av/r)/s*) in both regimes, omega_av = omega/n; Condat, "
        "Yi & Richtárik 2022, arXiv 2205.04180, whose theorem constants are [U]; --ef-step "
        "derived is derived here (see the run's record)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("lam", "nu"):
            v = getattr(self, name)
            if v is None:  # built directly: EF21's choice; configure() gives lambda*, nu*
                object.__setattr__(self, name, 1.0)
            elif not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        eta, omega, omega_av = bv_class(compressor, d, problem.n)
        lam_star, nu_star = stepsizes.ef_bv_lambda_nu(eta, omega, omega_av)
        lam = opts.get("lam") or lam_star
        nu = opts.get("nu") or nu_star
        r = stepsizes.ef_bv_r(lam, eta, omega)
        r_av = stepsizes.ef_bv_r(nu, eta, omega_av)
        if not r < 1:
            raise ValueError(
                f"lam={lam} gives r = {r:.4g}, but EF-BV's theory needs r < 1 for "
                f"{compressor.spec()} (eta={eta:.4g}, omega={omega:.4g}); the default "
                f"lambda* = {lam_star:.4g} minimises r"
            )
        inputs = {
            "L": c.L,
            "L_tilde": c.L_tilde,
            "eta": eta,
            "omega": omega,
            "omega_av": omega_av,
            "lam": lam,
            "nu": nu,
            "r": r,
            "r_av": r_av,
            "class_constants": "exact" if compressor.bias_variance_exact(d) else "bound",
        }
        regime = opts.get("regime", "auto")
        rule = opts.get("step_rule", "authors")
        check_choice("ef_step", rule, STEP_RULES)
        params = {"lam": lam_star, "nu": nu_star}
        if rule == "authors":
            pl = regime == "pl" or (regime == "auto" and c.mu is not None)
            if pl:
                if c.mu is None:
                    raise ValueError("the PL step needs mu, which this problem does not know")
                inputs["mu"] = c.mu
            return Theory(
                gamma=stepsizes.ef_bv_authors(c.L, c.L_tilde, r, r_av),
                formula="1 / (L + L_tilde sqrt(r_av / r) / s*), s* = sqrt((1 + r) / (2 r)) - 1",
                inputs=inputs,
                params=params,
                source="Condat, Yi & Richtárik 2022, arXiv 2205.04180; the authors' code "
                "WilliamYi96/EF-BV" + (" (PL: same step)" if pl else ""),
            )
        source = (
            "Condat, Yi & Richtárik 2022, arXiv 2205.04180 (method); step derived for this "
            "library (--ef-step derived, a deviation from the authors' step)"
        )
        if regime == "pl" or (regime == "auto" and c.mu is not None):
            if c.mu is None:
                raise ValueError("the PL step needs mu, which this problem does not know")
            inputs["mu"] = c.mu
            return Theory(
                gamma=stepsizes.ef_bv_pl(c.L, c.L_tilde, r, r_av, c.mu),
                formula="min(1 / (L + L_tilde sqrt(2 r_av) / (1 - sqrt(r))), "
                "(1 - sqrt(r)) / (2 mu))",
                inputs=inputs,
                params=params,
                source=source,
                provenance=DERIVED_PL,
            )
        return Theory(
            gamma=stepsizes.ef_bv(c.L, c.L_tilde, r, r_av),
            formula="1 / (L + L_tilde sqrt(r_av) / (1 - sqrt(r)))",
            inputs=inputs,
            params=params,
            source=source,
            provenance=DERIVED,
        )

    def init(self, x0, problem, comm: Comm) -> EFBVState:
        h_i, h = initial_estimator(self.init_mode, problem.grad(x0), self.compressor, comm)
        return EFBVState(x=x0.clone(), t=0, h_i=h_i, h=h)

    def _step(self, state: EFBVState, problem, comm: Comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        diff_i = problem.grad(state.x).sub_(state.h_i)  # in the fresh gradient's buffer
        G = comm.monitor_mean(torch.linalg.vector_norm(diff_i, dim=1) ** 2)
        packet = C.encode(diff_i, comm.rng_for(C, t))
        del diff_i
        d_i = C.decode(packet)
        d = comm.reduce(packet, C, decoded=d_i)
        g = state.h + self.nu * d
        h = state.h + self.lam * d
        h_i = d_i.mul_(self.lam).add_(state.h_i)
        x = state.x - self.gamma * g
        return EFBVState(x=x, t=t + 1, h_i=h_i, h=h), {"G": G}
