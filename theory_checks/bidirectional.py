"""Bidirectional compression with memory: DORE, Artemis and MCM reach the exact ``x*`` of a
strongly convex heterogeneous problem with full gradients, where their memoryless versions
stall.

Instance: the heterogeneous ridge of the theory sheet §3.6 (``n = 10``, ``d = 20``,
``zeta2 ~ 59``: the nodes' minimisers differ), ``x^0 = 0``, unbiased compressors both ways
(the downlink the same operator as the uplink, as the papers), each method at its theory
step and memory rates. Claim: linear convergence to ``x*`` (``||x^T - x*||^2 <= 1e-20``, the
float floor is ~1e-29; MCM's fast mode, whose conservative step converges more slowly, asks
``1e-12 ||x^0 - x*||^2`` after 1000 rounds); the paper's memoryless baseline (Artemis/DORE
with ``alpha = 0``, Bi-QSGD) stalls above ``1e-3``. MCM runs with a downlink coarser than its
uplink (Rand-K 5 of 20 down, QSGD 4 levels up), where the degraded update loses. Artemis
without memory stalls at a neighbourhood proportional to the heterogeneity ``zeta2`` (the
nodes' targets spread 1x and 3x: ``zeta2`` 59 -> 230, the plateau grows alike).

Power (``--power``): DORE without its gradient memory, DORE compressing the model instead of
its residual; Artemis without memory, Artemis under partial participation with the authors'
sampled aggregation (``(1/(p n)) sum_{i in S}(D_i + h_i)``, which keeps a heterogeneity
term); MCM degraded (the server's model replaced by the nodes' compressed copy), MCM without
the downlink memory (``alpha_down = 0``: the nodes' perturbation stays ``omega ||w||^2``) and
without the uplink memory; and, for each of the three, ``step/10`` (kind ``step-too-small``):
the method at a tenth of its theory step (memory rates unchanged), judged against the same
rate.

Rates (``rate=True``). Artemis's rate is the Lyapunov contraction derived in
:func:`algorithms.stepsizes.bidirectional.artemis`: ``E||x^T - x*||^2 <= E V^T <= rho^T V^0``,
``rho = max(1 - gamma mu, 1 - alpha p/2)``, ``V = ||x - x*||^2 + M gamma^2 H``, ``M = 4 (1 +
omega_dwn) omega_p/(n alpha p)``, ``H^0 = mean_i ||grad f_i(x*)||^2`` (``h_i^0 = 0``), computed
at the theory step, and checked at ``T`` or, where the bound falls below ``1e-20`` before ``T``
(full mode), at the last round where it does not (739 and 1098 of 2000): at ``T = 600`` the
bound is 9e-17 (``p = 1``) and 3e-11 (``p = 0.5``), the method reaches ~1e-29 and ~1e-24, the
step/10 run 5e-4 and 1e-2. DORE's Thm 1 factor and an MCM rate are not implemented here (MCM
takes Artemis's step as a conservative stand-in): for those two the rate checked is the check's
own budget, ``1e-20`` (fast MCM: ``1e-12 ||x^0 - x*||^2``) within ``T`` rounds at the theory
step, i.e. a mean contraction per round of ``(bound/||x^0 - x*||^2)^(1/T)``, not a theorem's
factor; at a tenth of the step DORE ends at ~1e-3 after 300 rounds and MCM at ~4e-2 after 1000.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from algorithms.bidirectional.artemis import Artemis
from algorithms.bidirectional.bidirectional_common import uplink_with_memory
from algorithms.bidirectional.dore import DORE, DOREState
from algorithms.bidirectional.mcm import MCM, MCMState
from compressors import parse_spec
from problems.least_squares import LeastSquares
from streams import tags
from theory_checks.base import Check, Outcome, Variant
from theory_checks.vr_problems import ridge, ridge_arrays, run, single_threaded, sq_dist

DORE_PAPER = "Liu, Li, Tang & Yan 2019, arXiv 1910.07561, Alg. 1, Thm 1 (linear rate to x*)"
ARTEMIS_PAPER = (
    "Philippenko & Dieuleveut 2020, arXiv 2006.14591, Alg. 1, Thm 1 (with memory: linear "
    "rate to x* with full gradients; without memory a neighbourhood ~ heterogeneity)"
)
MCM_PAPER = (
    "Philippenko & Dieuleveut 2021, arXiv 2102.12528 (MCM, Rand-MCM: the preserved model "
    "converges; the degraded update does not match it)"
)
EXACT = 1e-20  # far above the float floor (~1e-29), far below any plateau
STALL = 1e-3


def _finite(m: float) -> float:
    return m if math.isfinite(m) else -math.inf


def exact_outcome(
    setting: str, err: float, what: str, bound: float = EXACT, why: str = ""
) -> Outcome:
    """``||x^T - x*||^2 <= bound`` (``EXACT`` unless given)."""
    with np.errstate(all="ignore"):
        ok = bool(err <= bound)
    return Outcome(
        setting,
        f"{what}: linear convergence to the exact x*, ||x^T - x*||^2 <= {bound:.3g}{why}",
        f"{err:.3g}",
        ok,
        "far above the float floor ~1e-29, far below the memoryless plateau (~1e-1)",
        _finite(1.0 - err / bound),
    )


def stall_outcome(setting: str, tail: float, what: str) -> Outcome:
    """The memoryless baseline stalls: tail mean of ``||x - x*||^2 >= STALL``."""
    return Outcome(
        setting,
        f"{what} stalls: tail mean ||x - x*||^2 >= {STALL:g} (heterogeneous nodes)",
        f"{tail:.3g}",
        bool(tail >= STALL),
        "1e-3: the plateau is ~1e-1 here",
        _finite(tail / STALL - 1.0),
    )


#: The ``step-too-small`` variant of the three checks (the memory rates are left as theory's).
STEP_SMALL = Variant("step/10", "step-too-small", "a tenth of the theory step, memory rates "
                     "unchanged: it converges to x*, far slower than the claimed rate")  # fmt: skip


def at_step(algo, variant: str | None):
    """``algo``, or ``algo`` at a tenth of its step for the ``step/10`` variant."""
    return dataclasses.replace(algo, gamma=algo.gamma / 10.0) if variant == "step/10" else algo


def _distances(algo, p, T: int, seed: int = 0) -> np.ndarray:
    """``||x^t - x*||^2`` for ``t = 0..T``."""
    xs = p.x_star
    with np.errstate(all="ignore"):
        return run(algo, p, T, seed, lambda s, i, q: sq_dist(s.x, xs))[1]


def _final_and_tail(algo, p, T: int, seed: int = 0) -> tuple[float, float]:
    d2 = _distances(algo, p, T, seed)
    return float(d2[-1]), float(np.mean(d2[T // 2 :]))


# ------------------------------------------------------------------------ DORE
@dataclasses.dataclass(frozen=True)
class _DOREModelCompressed(DORE):
    """DORE broadcasting ``Q(x)``, the model itself, instead of its residual ``x - x_hat``
    (no model memory, no error compensation): the downlink noise ``omega ||x*||^2`` stays."""

    def _step(self, state: DOREState, problem, comm):
        C, CD, t = self.compressor, self.down_compressor, state.t
        alpha, _, _ = self._params(problem.d)
        up = uplink_with_memory(C, problem.grad(state.x), state.h_i, state.h, alpha, comm, t)
        x = state.x - self.gamma * up.g
        packet = CD.encode(x[None, :], comm.server_rng(t, tag=tags.DORE_DOWN))
        x_hat = comm.broadcast(packet, CD)
        return DOREState(x=x_hat, t=t + 1, h_i=up.h_i, h=up.h, e=state.e), {"H": up.H, "E": 0.0}


DORE_VARIANTS = (
    Variant("no-gradient-memory", "no-variance-reduction", "alpha = 0: the workers compress "
            "their gradients, not residuals to a learned memory; the heterogeneity stays"),
    Variant("model-not-residual", "other", "the server broadcasts Q(x) instead of the "
            "residual x - x_hat with error compensation: the model noise never vanishes"),
    STEP_SMALL,
)  # fmt: skip


def _dore(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = ridge()
    out = []
    settings = [("qsgd:levels=4", 300)] + ([] if fast else [("randk:k=5", 4000)])
    for spec, T in settings:
        algo, rec = DORE.configure(p, parse_spec(spec))
        if variant == "no-gradient-memory":
            algo = dataclasses.replace(algo, alpha=0.0)
        elif variant == "model-not-residual":
            algo = _DOREModelCompressed(**{f.name: getattr(algo, f.name) for f in
                                           dataclasses.fields(algo)})  # fmt: skip
        err, _ = _final_and_tail(at_step(algo, variant), p, T)
        setting = f"ridge §3.6, {spec} up and down, DORE theory gamma={rec['gamma']:.4g}, T={T}"
        out.append(exact_outcome(setting, err, "DORE"))
        base = dataclasses.replace(DORE.configure(p, parse_spec(spec))[0], alpha=0.0)
        _, tail = _final_and_tail(base, p, T)
        out.append(stall_outcome(setting, tail, "DORE without gradient memory (alpha = 0)"))
    return out


# ------------------------------------------------------------------------ Artemis
ARTEMIS_VARIANTS = (
    Variant("no-memory", "no-variance-reduction", "alpha = 0 (Bi-QSGD): compressed gradients "
            "with no memory; stalls at a neighbourhood ~ heterogeneity"),
    Variant("pp-sampled-aggregation", "other", "partial participation with the server "
            "averaging D_i + h_i over the sampled nodes only: the sampling variance keeps the "
            "nodes' gradients at x*"),
    STEP_SMALL,
)  # fmt: skip


def heterogeneous_ridge_scaled(s: float) -> LeastSquares:
    """The §3.6 ridge with each node's targets moved ``s`` times further from their mean
    over nodes (``s = 1``: the sheet's ridge), from ``x^0 = 0``: same ``A_i``, same ``L_i``,
    a heterogeneity ``zeta2`` growing with ``s``."""
    A, y = ridge_arrays()
    n, m, d = A.shape
    ys = y.mean(axis=0, keepdims=True) + s * (y - y.mean(axis=0, keepdims=True))
    return LeastSquares(A.reshape(n * m, d), ys.reshape(-1), np.full(n, m), lam=0.1, x0="zeros")


@functools.cache
def _memoryless_plateaus(spec: str, T: int, seeds: int) -> tuple[tuple[float, float], ...]:
    """``(zeta2, tail mean of ||x - x*||^2)`` of Artemis without memory on the ridge at
    heterogeneity scales 1 and 3 (the same for every variant: computed once)."""
    out = []
    for scale in (1.0, 3.0):
        q = heterogeneous_ridge_scaled(scale)
        base = dataclasses.replace(Artemis.configure(q, parse_spec(spec))[0], alpha=0.0)
        tails = [_final_and_tail(base, q, T, seed)[1] for seed in range(seeds)]
        out.append((float(q.consts.zeta2), float(np.mean(tails))))
    return tuple(out)


def proportional_outcome(setting: str, plateaus) -> Outcome:
    """The memoryless plateau grows like the heterogeneity: ratio of plateaus over ratio of
    ``zeta2`` in ``[1/2, 2]`` (a plateau free of heterogeneity gives ``1/ratio(zeta2)``)."""
    (z1, t1), (z3, t3) = plateaus
    r = (t3 / t1) / (z3 / z1)
    return Outcome(
        setting,
        "without memory the neighbourhood is proportional to the heterogeneity zeta2: "
        "(plateau ratio)/(zeta2 ratio) in [0.5, 2]",
        f"zeta2 {z1:.3g} -> {z3:.3g}, plateau {t1:.3g} -> {t3:.3g}, ratio of ratios {r:.3g}",
        bool(0.5 <= r <= 2.0),
        "factor 2: the bound is linear in zeta2, the plateau only roughly",
        _finite(min(r / 0.5 - 1.0, 1.0 - r / 2.0)),
    )


def artemis_lyapunov(p, rec: dict) -> tuple[float, float]:
    """``(rho, V^0)`` of the Lyapunov contraction derived in
    :func:`algorithms.stepsizes.bidirectional.artemis`, at the theory step ``rec['gamma']``:
    ``rho = max(1 - gamma mu, 1 - alpha p/2)``, ``V^0 = ||x^0 - x*||^2 + M gamma^2 H^0`` with
    ``M = 4 (1 + omega_dwn) omega_p/(n alpha p)`` and ``H^0 = mean_i ||h_i^0 - grad f_i(x*)||^2``,
    ``h_i^0 = 0``."""
    k, gamma = rec["theory"]["inputs"], rec["gamma"]
    part, alpha = k["p"], rec["theory"]["params"]["alpha"]
    omega_p = (1.0 + k["omega_up"]) / part - 1.0
    M = 4.0 * (1.0 + k["omega_dwn"]) * omega_p / (k["n"] * alpha * part)
    H0 = float((p.grad(p.x_star) ** 2).sum(1).mean())
    rho = max(1.0 - gamma * p.consts.mu, 1.0 - alpha * part / 2.0)
    return rho, sq_dist(p.x0, p.x_star) + M * gamma**2 * H0


def rate_outcome(setting: str, err: float, rho: float, V0: float, T: int) -> Outcome:
    """``||x^T - x*||^2 <= rho^T V^0``: the derived linear rate at the theory step."""
    bound = rho**T * V0
    with np.errstate(all="ignore"):
        ok = bool(err <= bound)
    return Outcome(
        setting,
        f"Artemis's derived Lyapunov rate at the theory step: ||x^T - x*||^2 <= rho^T V^0 = "
        f"{rho:.4f}^{T} x {V0:.4g} = {bound:.3g}",
        f"{err:.3g}",
        ok,
        "one seed against a bound on the expectation; the bound is far above the float floor",
        _finite(1.0 - err / bound),
    )


def _artemis(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = ridge()
    spec, T = "qsgd:levels=4", 600 if fast else 2000
    out = []
    for part in (1.0, 0.5):
        opts = {"participation": part}
        if variant == "pp-sampled-aggregation" and part < 1:
            opts["estimator"] = "sampled"
        algo, rec = Artemis.configure(p, parse_spec(spec), **opts)
        if variant == "no-memory":
            algo = dataclasses.replace(algo, alpha=0.0)
        d2 = _distances(at_step(algo, variant), p, T)
        setting = (f"ridge §3.6, {spec} up and down, participation {part:g}, theory "
                   f"gamma={rec['gamma']:.4g}, T={T}")  # fmt: skip
        out.append(exact_outcome(setting, float(d2[-1]), "Artemis"))
        rho, V0 = artemis_lyapunov(p, rec)
        # The rate at T, or at the last round whose bound is still >= EXACT (full mode: the
        # bound at T = 2000 would be ~1e-57, below the float floor the run stops at).
        t = min(T, int(math.log(EXACT / V0) / math.log(rho)))
        out.append(rate_outcome(setting, float(d2[t]), rho, V0, t))
    plateaus = _memoryless_plateaus(spec, T, 2 if fast else 4)
    setting = f"ridge §3.6 (targets spread x1 and x3), {spec}, alpha = 0, T={T}, tail {T // 2}.."
    out.append(stall_outcome(setting, plateaus[0][1], "Artemis without memory"))
    out.append(proportional_outcome(setting, plateaus))
    return out


# ------------------------------------------------------------------------ MCM
@dataclasses.dataclass(frozen=True)
class _DegradedMCM(MCM):
    """MCM whose server replaces its model by the nodes' compressed copy ``w_hat`` before
    stepping (``w = w_hat - gamma g``): the downlink compression then perturbs the model."""

    def _step(self, state: MCMState, problem, comm):
        C, CD, t = self.compressor, self.down_compressor, state.t
        a_up, a_dn = self._rates(problem.d)
        H = state.H_i[0]
        packet = CD.encode((state.x - H)[None, :], comm.server_rng(t, tag=tags.MCM_DOWN))
        omega = comm.broadcast(packet, CD)
        w_hat = H + omega
        up = uplink_with_memory(C, problem.grad(w_hat), state.h_i, state.h, a_up, comm, t)
        new = MCMState(x=w_hat - self.gamma * up.g, t=t + 1, h_i=up.h_i, h=up.h,
                       H_i=state.H_i + a_dn * omega)  # fmt: skip
        P = float(((w_hat - state.x) ** 2).sum())
        return new, {"H": up.H, "P": P, "participants": 1.0}


MCM_VARIANTS = (
    Variant("degraded", "other", "the server's model replaced by its compressed copy (the "
            "degraded update MCM is built to avoid)"),
    Variant("no-down-memory", "wrong-shift", "alpha_down = 0: the nodes' model is "
            "C(w), whose perturbation omega ||w||^2 does not vanish at x*"),
    Variant("no-up-memory", "no-variance-reduction", "alpha = 0: no uplink memory, the "
            "heterogeneity stays"),
    STEP_SMALL,
)  # fmt: skip


def _mcm(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = ridge()
    # A downlink coarser than the uplink (omega 3 vs 1.1): there the degraded update loses.
    up, down = parse_spec("qsgd:levels=4"), parse_spec("randk:k=5")
    T = 1000 if fast else 4000
    settings = [{}] + ([] if fast else [{"randomized": True, "participation": 0.5}])
    d0 = sq_dist(p.x0, p.x_star)
    bound, why = (1e-12 * d0, " = 1e-12 ||x^0 - x*||^2") if fast else (EXACT, "")
    out = []
    for opts in settings:
        algo, rec = MCM.configure(p, up, down_compressor=down, **opts)
        if variant == "degraded" and not opts:
            algo = _DegradedMCM(**{f.name: getattr(algo, f.name) for f in
                                   dataclasses.fields(algo)})  # fmt: skip
        elif variant == "no-down-memory":
            algo = dataclasses.replace(algo, alpha_down=0.0)
        elif variant == "no-up-memory":
            algo = dataclasses.replace(algo, alpha=0.0)
        err, _ = _final_and_tail(at_step(algo, variant), p, T)
        mode = ", Rand-MCM, participation 0.5" if opts else ""
        setting = (f"ridge §3.6, up {up.spec()}, down {down.spec()}{mode}, theory "
                   f"gamma={rec['gamma']:.4g}, T={T}")  # fmt: skip
        out.append(exact_outcome(setting, err, "MCM (preserved model)", bound, why))
    return out


CHECKS = [
    Check("bidirectional.dore-exact", DORE_PAPER, single_threaded(_dore), fast=True,
          variants=DORE_VARIANTS, rate=True),
    Check("bidirectional.artemis-memory", ARTEMIS_PAPER, single_threaded(_artemis), fast=True,
          variants=ARTEMIS_VARIANTS, rate=True),
    Check("bidirectional.mcm-preserved-model", MCM_PAPER, single_threaded(_mcm), fast=True,
          variants=MCM_VARIANTS, rate=True),
]  # fmt: skip
