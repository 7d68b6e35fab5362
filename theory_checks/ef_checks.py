"""Main theorems of the error-feedback family, checked along runs at the theoretical step.

* EF21 (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203): Theorem 1 (nonconvex
  average-gradient bound), Theorem 2 (PL: ``Psi^t <= (1 - gamma mu)^t Psi^0``), and the
  descent of its Lyapunov function ``Phi = f - f_inf + (gamma/(2 theta)) G`` used in the proof.
* 3PC (Richtárik et al. 2022, arXiv 2202.00998): the three-point inequality of every mechanism
  along a run (Definition 3.1), the nonconvex bound ``2 Delta0/(gamma T) + G0/(A T)`` and the
  Lyapunov descent with weight ``gamma/(2A)``.
* EF14 (Seide et al. 2014; Karimireddy et al. 2019, arXiv 1901.09847): exact convergence when
  the gradients agree at the optimum, a plateau scaling like ``gamma^2`` otherwise (theory
  sheet §2.2, P7).
* EF-BV (Condat, Yi & Richtárik 2022, arXiv 2205.04180): convergence at the documented step with
  the documented PL contraction ``max(1 - gamma mu, (1 + r)/2)``, and the identity with EF21 at
  ``lambda = nu = 1``.

**Power.** Each check names the broken variants it rejects (``python -m theory_checks
--power``), run through the same code: ``no-ef`` (DCGD with the same Top-K at the method's
step; rejected on the arXiv 2002.12410 instance, where it diverges, or at rest for the
three-point inequality), ``step-x1.01`` / ``step-x1.6`` (rejected on
:func:`~theory_checks.ef_instances.tight_quadratic`, where the nonconvex bound and the one-step
Lyapunov inequality are exact at the theory step: every ``c > 1`` is rejected there, and
every ``c > 1.5`` for the PL rate), ``A-x2`` (a mechanism declaring twice its ``A``; rejected
at the worst-case inputs where Definition 3.1 is exact), ``memory-x0.5`` (EF14 keeping half its
error: a DCGD-like ``O(gamma)`` bias), ``lam=0.5`` and ``nu=0.5`` (EF-BV off EF21).

**Rates.** The checks of a rate (``rate=True``: the nonconvex ``O(1/T)`` bound and the
Lyapunov descent with the theorem's constants, the PL rate, EF-BV's documented contraction)
also reject ``step/10``: the method at a tenth of its theory step, the prediction still
evaluated at the theory step (:func:`pred_gamma`), as the theorems state their rates for it.
A smaller step meets each theorem's bound at its *own* step; at the theory step's constants it
falls short on the tight quadratic (by ``1/(c(2 - c))`` = 5.3x for the nonconvex bound, a
decrease ``c(2 - c)`` = 0.19 of the asked one for the Lyapunov step, ``0.81`` per step against
the PL rate ``1/2``) and on most other runs too (margins in each check's docstring). The
three-point inequality (a definition with constants ``A, B``), the EF14 checks (EF14 has no
theorem at this step: "exact" and "plateau ~ gamma^2" are a plateau level and its scaling, with
thresholds of this library, not a theorem's rate) and the EF-BV identity are not rate claims.

**Rounding-level margins.** The nonconvex bound and the Lyapunov descent are attained on the
tight quadratic (margins ``2e-16`` and a relative excess ``-4e-16``), and the Lyapunov descent
also on the runs that converge to a stationary point (EF21 K=3, LAG, V1, V3, V4 on logreg:
``Phi`` stalls at ``f(x^inf) > f_inf = 0`` and ``||grad f|| -> 0``, the sides agree to
``1e-16`` relative); the
three-point inequality is attained at its worst-case inputs, at rest (``0 <= 0``) and along
LAG's run (a skip right after a send has ``h = y``, so ``||x - h||^2 = B||x - y||^2``). These
instances are built in float64 explicitly; float32 or another BLAS could flip such a margin
without a bug, which is why the comparisons allow ``1e-12`` (``1e-9`` for the three-point
inequality) relative.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from algorithms.ef import three_pc_mechanisms as mech
from algorithms.ef.ef14 import EF14
from algorithms.ef.ef21 import EF21
from algorithms.ef.ef_bv import EFBV
from algorithms.ef.three_pc import ThreePC, second_compressor
from algorithms.shifts.dcgd import DCGD
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from theory_checks.base import Check, Outcome, Variant
from theory_checks.ef_instances import (
    DecayedEF14,
    G_sent,
    beznosikov,
    f_gap,
    heterogeneous_ridge,
    run,
    single_thread,
    tight_quadratic,
)

__all__ = ["CHECKS", "descent_violations", "nonconvex_bound", "pl_ratio"]

ROUND = 1e-12  # relative rounding allowance of a deterministic inequality
DET_MECHS = ("ef21", "lag", "clag", "v1", "v3", "v4")
RAND_MECHS = ("v2", "v5")
PHI_FLOOR = 1e-20  # Lyapunov steps with Phi^t below this fraction of Phi^0 are not compared
G_FLOOR = 1e-12  # three-point states with both sides below this (x mean||grad f_i||^2) skipped
STEP_C, PL_C = 1.01, 1.6  # the step-too-large multiples (nonconvex/Lyapunov, PL)
SMALL = "step/10"  # the step-too-small variant: a tenth of the theory step


# ---- the bounds, as pure functions (the tests feed them wrong constants) ---------------------
def nonconvex_bound(
    gn2: list[float], f0: float, f_inf: float, gamma: float, G0: float, A: float
) -> tuple[float, float]:
    """EF21 Thm 1 / 3PC nonconvex theorem: ``(1/T) sum_{t<T} ||grad f(x^t)||^2`` (lhs) and
    ``2 (f(x^0) - f_inf)/(gamma T) + G^0/(A T)`` (rhs), with ``A = theta`` for EF21."""
    T = len(gn2)
    return float(np.mean(gn2)), 2.0 * (f0 - f_inf) / (gamma * T) + G0 / (A * T)  # fmt: skip


def pl_ratio(psi: list[float], gamma: float, mu: float, floor: float = 1e-12) -> float:
    """``max_{t >= 1} Psi^t / ((1 - gamma mu)^t Psi^0)`` over the ``t`` with ``Psi^t > floor``
    (EF21 Thm 2 / 3PC PL theorem: at most 1); ``inf`` when ``Psi`` is not finite."""
    if not all(math.isfinite(p) for p in psi):
        return math.inf
    q = 1.0 - gamma * mu
    live = [p / (q**t * psi[0]) for t, p in enumerate(psi) if t >= 1 and p > floor]
    return max(live, default=0.0)


def descent_violations(
    f: list[float],
    gn2: list[float],
    G: list[float],
    f_inf: float,
    gamma: float,
    A: float,
    floor: float = PHI_FLOOR,
) -> tuple[int, float, int]:
    """Steps where ``Phi^{t+1} > Phi^t - (gamma/2)||grad f(x^t)||^2 + ROUND Phi^t`` with
    ``Phi = f - f_inf + (gamma/(2A)) G`` (the EF21 Thm 1 / 3PC proof's one-step inequality),
    compared only at the ``t`` with ``Phi^t > floor Phi^0`` (below, rounding dominates);
    returns the count, the largest excess relative to ``Phi^t`` and the comparisons made."""
    phi = [fi - f_inf + gamma / (2.0 * A) * g for fi, g in zip(f, G, strict=True)]
    if not all(math.isfinite(p) for p in phi):
        return 1, math.inf, 1
    bad, worst, made = 0, -math.inf, 0
    for t in range(len(phi) - 1):
        if phi[t] <= floor * phi[0]:
            continue
        excess = (phi[t + 1] - phi[t] + 0.5 * gamma * gn2[t]) / phi[t]
        worst, made = max(worst, excess), made + 1
        bad += excess > ROUND
    return bad, worst, made  # fmt: skip


def _margin_le(lhs: float, rhs: float) -> float:
    """Signed room of ``lhs <= rhs``: ``1 - lhs/rhs`` (``-inf`` when ``lhs`` is not finite)."""
    return 1.0 - lhs / rhs if math.isfinite(lhs) else -math.inf


# ---- problems, methods and their broken variants -------------------------------------------
@lru_cache(maxsize=2)
def _nonconvex(fast: bool):
    """Logistic regression + nonconvex regulariser (theory sheet §3.2; f >= 0, so f_inf = 0)."""
    if fast:
        return make_problem("logreg-nonconvex", nodes=8, lam=0.1, samples=160, features=10,
                            seed=3, x0="randn", dtype=torch.float64)  # fmt: skip
    return make_problem("logreg-nonconvex", nodes=20, lam=0.1, samples=1000, features=30,
                        seed=3, x0="randn", dtype=torch.float64)  # fmt: skip


@lru_cache(maxsize=8)
def _problem(name: str, fast: bool):
    """``logreg`` (f_inf := 0 <= inf f), ``bez`` (arXiv 2002.12410; f* = 0), ``tight`` (the
    exact-descent quadratic, x0 = x* + e_1) and ``tight-pl`` (x0 = x* + e_1 + e_4)."""
    if name == "logreg":
        return _nonconvex(fast)
    if name == "bez":
        return beznosikov()
    return tight_quadratic(bottom=name == "tight-pl")


def _gap(P, x) -> float:
    return float(P.loss(x)) if P.consts.f_star is None else f_gap(P, x)


V_NO_EF = Variant("no-ef", "no-error-feedback",
                  "DCGD with the same Top-K at the method's step: no error feedback (diverges "
                  "on the arXiv 2002.12410 instance)")  # fmt: skip
V_STEP = Variant(f"step-x{STEP_C:g}", "step-too-large",
                 f"the theory step x {STEP_C:g}: beyond gamma <= 1/(L + L~ sqrt(B/A)), and on the "
                 "tight quadratic (Top-d, gamma = 1/L) the inequality is exact, so any c > 1 "
                 "breaks it")  # fmt: skip
V_SMALL = Variant(SMALL, "step-too-small",
                  "a tenth of the theory step, judged against the theorem at the theory step: "
                  "on the tight quadratic GD at 1/(10 L) keeps 0.81 of f - f* per step, short "
                  "of the exact descent (and of the PL rate 1/2) that 1/L attains")  # fmt: skip
V_STEP_PL = Variant(f"step-x{PL_C:g}", "step-too-large",
                    f"the PL step x {PL_C:g}: on the tight quadratic (L = 10, mu = 5, step 1/L) "
                    "the top mode contracts by (1-c)^2 > 1 - c/2 per step, for every c > 1.5"
                    )  # fmt: skip


def build(pname: str, method: str, K: int, init: str, regime: str, variant: str | None,
          fast: bool):  # fmt: skip
    """The method (``EF21`` or a 3PC mechanism) at its theory step, or the named broken
    variant; returns ``(problem, algo, A, B, gamma)`` with the method's (not the variant's)
    ``A, B`` and theory step ``gamma``."""
    P = _problem(pname, fast)
    spec = parse_spec(f"topk:k={K}")
    if method == "EF21":
        algo, rec = EF21.configure(P, spec, init_mode=init, regime=regime)
        A, B = rec["theory"]["inputs"]["theta"], rec["theory"]["inputs"]["beta"]
    else:
        algo, rec = ThreePC.configure(P, spec, mechanism=method, init_mode=init, regime=regime)
        A, B = rec["theory"]["inputs"]["A"], rec["theory"]["inputs"]["B"]
    gamma = algo.gamma
    if variant == "no-ef":
        algo = DCGD.configure(P, spec, step=algo.gamma, force=True)[0]
    elif variant == SMALL:
        algo = replace(algo, gamma=algo.gamma / 10.0)
    elif variant is not None and variant.startswith("step-x"):
        algo = replace(algo, gamma=algo.gamma * float(variant[len("step-x") :]))
    return P, algo, A, B, gamma


def pred_gamma(variant: str | None, run_gamma: float, theory_gamma: float) -> float:
    """The step the theorem's prediction is evaluated at: the step run, except for the
    step-too-small variant, judged against the rate the theorem states for the theory step (a
    smaller step meets the theorem's weaker bound at its own step; a larger one is outside the
    theorem, whose formula at that step is what the step-too-large variants break)."""
    return theory_gamma if variant == SMALL else run_gamma


def _observe(P, C):
    def obs(s) -> tuple[float, float, float, torch.Tensor, torch.Tensor | None]:
        gf = P.full_grad(s.x)
        gi = getattr(s, "g_i", None)
        return (_gap(P, s.x), float(gf @ gf), G_sent(s, P, C), P.grad(s.x),
                None if gi is None else gi.clone())  # fmt: skip

    return obs


@lru_cache(maxsize=256)
def _trajectory(pname: str, method: str, K: int, init: str, fast: bool, seed: int = 0,
                variant: str | None = None, regime: str = "nonconvex"
                ) -> dict[str, Any]:  # fmt: skip
    """A run at the theory step (or of a variant); ``f`` is ``f - f*`` (``f`` on logreg);
    ``gamma`` is the step run, ``gamma_pred`` the one the prediction uses (:func:`pred_gamma`)."""
    P, algo, A, B, gamma_th = build(pname, method, K, init, regime, variant, fast)
    T = {"logreg": 300 if fast else 2000, "bez": 300}.get(pname, 60)
    _, obs = run(algo, P, T, seed=seed, observe=_observe(P, algo.compressor))
    f, gn2, G, y, h = (list(v) for v in zip(*obs, strict=True))
    return {"f": f, "gn2": gn2, "G": G, "y": y, "h": h, "gamma": algo.gamma, "A": A, "B": B,
            "T": T, "algo": algo, "gamma_pred": pred_gamma(variant, algo.gamma, gamma_th)
            }  # fmt: skip


def _bound_outcome(label: str, r: dict[str, Any], Aname: str) -> Outcome:
    lhs, rhs = nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma_pred"], r["G"][0],
                               r["A"])  # fmt: skip
    return Outcome(label, f"(1/T) sum ||grad f||^2 <= 2 (f(x0) - f_inf)/(gamma T) + "
                   f"G0/({Aname} T) = {rhs:.4g}", f"{lhs:.4g}", lhs <= rhs * (1 + ROUND),
                   "1e-12 relative (deterministic; f_inf = f* or 0 <= inf f)",
                   _margin_le(lhs, rhs))  # fmt: skip


def _descent_outcome(label: str, r: dict[str, Any], Aname: str) -> Outcome:
    bad, worst, made = descent_violations(r["f"], r["gn2"], r["G"], 0.0, r["gamma_pred"],
                                          r["A"])  # fmt: skip
    return Outcome(label, f"Phi^{{t+1}} <= Phi^t - (gamma/2)||grad f(x^t)||^2, Phi = f - f_inf + "
                   f"gamma G/(2 {Aname})", f"{bad} violations in {made} comparisons; max "
                   f"relative excess {worst:.2e}", bad == 0 and made > 0,
                   f"1e-12 relative; steps with Phi^t <= {PHI_FLOOR:g} Phi^0 skipped (rounding)",
                   ROUND - worst)  # fmt: skip


# ---- EF21 ---------------------------------------------------------------------------------
def _ef21_nonconvex(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF21 Theorem 1 along runs (logreg-nonconvex, arXiv 2002.12410, tight quadratic). A rate:
    the ``O(1/T)`` bound with the theorem's constant at the theory step. The tight quadratic
    attains it (margin ``2.2e-16``, rounding level in float64; float32 or another BLAS could
    flip it without a bug); ``step/10`` exceeds the bound at the theory step on three of the
    four runs (tight: 5.3x, margin -4.3; bez -0.68; logreg K=3 -0.52)."""
    runs = [("logreg", 1, "full"), ("logreg", 3, "compressed"), ("bez", 1, "full"),
            ("tight", 4, "full")] + ([] if fast else [("logreg", 10, "full")])  # fmt: skip
    out = []
    for pname, K, init in runs:
        r = _trajectory(pname, "EF21", K, init, fast, variant=variant)
        out.append(_bound_outcome(f"{pname} TopK K={K} g0={init} T={r['T']}", r, "theta"))
    return out


def _ef21_pl(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF21 Theorem 2, ``Psi^t <= (1 - gamma mu)^t Psi^0`` at the PL step, along runs (ridge,
    arXiv 2002.12410, tight quadratic with ``mu = L/2``). A rate; the correct method keeps a
    margin of 0.098 (ridge Top-1); ``step/10``, with ``Psi``'s weight and the rate at the PL
    step, exceeds it on every run (ratio 2.9 on ridge Top-1 up to 8e14 on the tight one)."""
    T = 600 if fast else 3000
    out = []
    for pname, K in (("ridge", 1), ("ridge", 2), ("bez", 1), ("tight-pl", 4)):
        P = heterogeneous_ridge(x0="ones") if pname == "ridge" else _problem(pname, fast)
        spec = parse_spec(f"topk:k={K}")
        algo, rec = EF21.configure(P, spec, init_mode="compressed", regime="pl")
        th, g_th = rec["theory"]["inputs"]["theta"], algo.gamma
        if variant == "no-ef":
            algo = DCGD.configure(P, spec, step=algo.gamma, force=True)[0]
        elif variant == SMALL:
            algo = replace(algo, gamma=algo.gamma / 10.0)
        elif variant is not None:
            algo = replace(algo, gamma=algo.gamma * float(variant[len("step-x") :]))
        g = pred_gamma(variant, algo.gamma, g_th)

        def psi(s, th=th, g=g, P=P, C=algo.compressor) -> float:
            return f_gap(P, s.x) + g / th * G_sent(s, P, C)

        _, ps = run(algo, P, T if pname != "tight-pl" else 60, observe=psi)
        ratio = pl_ratio(ps, g, P.consts.mu)
        live = sum(p > 1e-12 for p in ps)
        out.append(
            Outcome(
                f"{pname} TopK K={K}, g0=C(grad), T={len(ps) - 1}",
                "Psi^t/((1-gamma mu)^t Psi^0) <= 1 at every t with Psi^t > 1e-12",
                f"max ratio {ratio:.4f} over {live - 1} steps, final Psi {ps[-1]:.2e}",
                ratio <= 1 + 1e-9,
                "1e-9 relative (rounding of Psi near the floor)",
                1.0 - ratio,
            )
        )
    return out  # fmt: skip


def _ef21_lyapunov(fast: bool, variant: str | None = None) -> list[Outcome]:
    """The one-step inequality of Theorem 1's proof, ``Phi^{t+1} <= Phi^t - (gamma/2)||grad
    f(x^t)||^2`` (the per-step form of the ``O(1/T)`` rate, so a rate claim). Rounding-level by
    design where it is attained (tight quadratic; converged logreg runs): see the module
    docstring. ``step/10`` misses the theory step's decrease at nearly every step of every run
    (excess 2e-3..8e-3 on logreg and bez, 0.81 on the tight quadratic)."""
    out = []
    for pname, K in (("logreg", 1), ("logreg", 3), ("bez", 1), ("tight", 4)):
        r = _trajectory(pname, "EF21", K, "compressed" if pname == "logreg" else "full", fast,
                        variant=variant)  # fmt: skip
        out.append(_descent_outcome(f"{pname} EF21 TopK K={K}, T={r['T']}", r, "theta"))
    return out


# ---- 3PC ----------------------------------------------------------------------------------
V_NO_EF_3P = Variant("no-ef", "no-error-feedback",
                     "the mechanism replaced by DCGD's estimator C(x), ignoring h and y: at rest "
                     "(h = y = x) it leaves the error ||C(x) - x||^2 > 0")  # fmt: skip
V_A2 = Variant("A-x2", "wrong-constant",
               "each mechanism declaring twice its A (e.g. alpha for EF21's theta ~ alpha/2): "
               "the worst-case inputs, where Def. 3.1 holds with equality, violate it")  # fmt: skip


def _mech(m: str, variant: str | None):
    """The mechanism ``(h, y, x, ctx) -> g_i`` applied by 3PC, or the no-ef variant's."""
    if variant == "no-ef":
        return lambda h, y, x, ctx: mech._compress(ctx.C, x, ctx, mech.TAG_MAIN)[0]
    return lambda h, y, x, ctx: mech.APPLY[m](h, y, x, ctx).g_i


def _ctx(algo, P, n: int, t: int, seed: int = 0):
    comm = SimulatedComm(n, seed=seed)
    C2 = second_compressor(algo, P.d, n)
    return mech.Ctx(algo.compressor.bind(n), C2, algo.zeta, algo.p, algo.inner_mechanism, comm, t)


def worst_inputs(m: str, A: float, B: float, alpha: float, zeta: float, d: int):
    """``(h, y, x)`` (one row) at which Def. 3.1 holds with equality for Top-K (ties: every
    ``|entry|`` equal, so ``||C(v) - v||^2 = (1 - alpha)||v||^2``): ``ef21``/``clag``:
    ``h - y = -u``, ``x - y = s u`` with ``s`` the Young parameter of ``(A, B)``; ``lag``:
    ``||x - h||^2`` just below ``zeta ||x - y||^2``; ``v1``: any ``x - y = u``. ``None`` for the
    mechanisms whose worst case is not of this form."""
    u = torch.ones(1, d, dtype=torch.float64)
    y = 0.5 * u
    if m in ("ef21", "clag") and A < 1:
        s = (1.0 - A) / (1.0 - alpha) - 1.0
        return y - u, y, y + s * u
    if m == "lag":
        return y + (1.0 - math.sqrt(zeta * (1 - 1e-9))) * u, y, y + u
    if m == "v1":
        return y - u, y, y + u
    return None


def _three_point(fast: bool, variant: str | None = None) -> list[Outcome]:
    """Not a rate (a definition, with the constants ``A, B`` of each mechanism). Def. 3.1 of
    arXiv 2202.00998, ``||M(h, y, x) - x||^2 <= (1 - A)||h - y||^2 +
    B||x - y||^2`` for every mechanism ``M``: (i) at the states of a run (h = g_i^t,
    y = grad f_i(x^t), x = grad f_i(x^{t+1})), (ii) at rest (h = y = x: the error must be 0),
    (iii) at the worst-case inputs (:func:`worst_inputs`), where it is exact. The margins of
    (ii), (iii) and of LAG's run are ``0`` by design (the inequality is attained; float64
    explicitly; float32 or another BLAS could flip them without a bug, hence the ``1e-9``
    relative allowance)."""
    out = []
    P = _nonconvex(fast)
    S = 40 if fast else 200
    for m in DET_MECHS + RAND_MECHS:
        r = _trajectory("logreg", m, 2, "compressed", fast)
        algo, A, B = r["algo"], r["A"], r["B"]
        A_decl = 2.0 * A if variant == "A-x2" else A
        M = _mech(m, variant)
        draws = 1 if m in DET_MECHS else S
        steps = range(r["T"]) if m in DET_MECHS else range(0, r["T"], r["T"] // 6)
        scale = float((r["y"][0] ** 2).sum(dim=1).mean())
        floor = G_FLOOR * scale
        bad, made, worst = 0, 0, -math.inf
        for t in steps:
            h, y, x = r["h"][t], r["y"][t], r["y"][t + 1]
            vals = [float(((M(h, y, x, _ctx(algo, P, P.n, t, seed=s)) - x) ** 2).sum(1).mean())
                    for s in range(draws)]  # fmt: skip
            lhs = float(np.mean(vals))
            se = float(np.std(vals, ddof=1) / math.sqrt(draws)) if draws > 1 else 0.0
            rhs = (1 - A_decl) * float(((h - y) ** 2).sum(1).mean()) + B * float(
                ((x - y) ** 2).sum(1).mean()
            )
            if max(lhs, rhs) <= floor:
                continue  # both at the float floor: no comparison (0/0)
            made += 1
            ex = (lhs - 3 * se - rhs) / max(abs(rhs), floor)
            worst, bad = max(worst, ex), bad + (ex > 1e-9)
        tol = "1e-9 relative" if draws == 1 else f"mean of {S} draws - 3 se"
        out.append(Outcome(
            f"3pc {m} TopK K=2 (A={A:.3g}, B={B:.3g}) along a run",
            "E||M(h,y,x)-x||^2 <= (1-A)||h-y||^2 + B||x-y||^2 at each state",
            f"{bad} violations in {made} comparisons; max relative excess {worst:.2e}",
            bad == 0 and made > 0, f"{tol}; states with both sides <= {G_FLOOR:g} "
            "mean||grad f_i(x0)||^2 skipped (float floor)", -worst))  # fmt: skip
        # at rest and at the worst case: one node, d coordinates
        d = P.d
        rest = torch.linspace(-1.0, 2.0, d, dtype=torch.float64)[None]
        err0 = float(((M(rest, rest, rest, _ctx(algo, P, 1, 0)) - rest) ** 2).sum())
        cases = [("at rest h=y=x", rest, rest, rest)]
        wi = worst_inputs(m, A, B, 2.0 / d, algo.zeta, d)
        if wi is not None:
            cases.append(("worst case", *wi))
        for name, h, y, x in cases:
            lhs = (
                err0
                if name.startswith("at rest")
                else float(((M(h, y, x, _ctx(algo, P, 1, 0)) - x) ** 2).sum())
            )
            rhs = (1 - A_decl) * float(((h - y) ** 2).sum()) + B * float(((x - y) ** 2).sum())
            ok = lhs <= rhs + 1e-9 * abs(rhs) + 1e-300
            out.append(Outcome(f"3pc {m} TopK K=2, {name}, d={d}",
                               f"||M(h,y,x)-x||^2 <= (1-A)||h-y||^2 + B||x-y||^2 = {rhs:.6g}",
                               f"{lhs:.6g}", ok, "1e-9 relative (exact in theory at the worst "
                               "case; 0 <= 0 at rest)", 1.0 - lhs / rhs if rhs > 0 else
                               (0.0 if lhs == 0 else -math.inf)))  # fmt: skip
    return out


def _three_pc_bound(fast: bool, variant: str | None = None) -> list[Outcome]:
    """The 3PC nonconvex theorem, ``(1/T) sum ||grad f||^2 <= 2 Delta0/(gamma T) + G0/(A T)``,
    for every deterministic mechanism and (in expectation, 3 seeds) V2, V5. A rate; the tight
    quadratic attains it (margin ``2.2e-16``, rounding level, float64 explicitly; float32 or
    another BLAS could flip it without a bug); ``step/10`` exceeds the bound at the theory step
    on all twelve runs (logreg -0.27..-0.82, bez -0.68, tight -4.3, V2/V5 -0.59/-0.33)."""
    out = []
    for m in DET_MECHS:
        r = _trajectory("logreg", m, 2, "compressed", fast, variant=variant)
        out.append(_bound_outcome(f"3pc {m} logreg TopK K=2, T={r['T']}", r, "A"))
    for pname, m, K in (("bez", "ef21", 1), ("bez", "clag", 1), ("tight", "ef21", 4),
                        ("tight", "v1", 4)):  # fmt: skip
        r = _trajectory(pname, m, K, "full", fast, variant=variant)
        out.append(_bound_outcome(f"3pc {m} {pname} TopK K={K}, T={r['T']}", r, "A"))
    seeds = 3 if fast else 8
    for m in RAND_MECHS:
        lhs_s, rhs = [], 0.0
        for s in range(seeds):
            r = _trajectory("logreg", m, 2, "compressed", fast, seed=s, variant=variant)
            lhs, rhs = nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma_pred"],
                                       r["G"][0], r["A"])  # fmt: skip
            lhs_s.append(lhs)
        mean, se = float(np.mean(lhs_s)), float(np.std(lhs_s, ddof=1) / math.sqrt(seeds))
        out.append(
            Outcome(
                f"3pc {m} TopK K=2, {seeds} seeds",
                f"E (1/T) sum ||grad f||^2 <= {rhs:.4g} (G0 deterministic: TopK init)",
                f"mean {mean:.4g} (se {se:.2g})",
                mean - 3 * se <= rhs,
                "mean over seeds minus 3 standard errors",
                _margin_le(mean - 3 * se, rhs),
            )
        )
    return out  # fmt: skip


def _three_pc_lyapunov(fast: bool, variant: str | None = None) -> list[Outcome]:
    """The one-step inequality of the 3PC nonconvex proof, weight ``gamma/(2A)`` (a rate claim,
    as for EF21). Rounding-level where attained (module docstring); ``step/10`` violates it on
    all ten runs (excess 5e-3..3e-2 on logreg and bez, 0.81 on the tight quadratic)."""
    out = []
    for pname, m, K in [("logreg", m, 2) for m in DET_MECHS] + [
        ("bez", "ef21", 1),
        ("bez", "clag", 1),
        ("tight", "ef21", 4),
        ("tight", "v1", 4),
    ]:
        init = "compressed" if pname == "logreg" else "full"
        r = _trajectory(pname, m, K, init, fast, variant=variant)
        out.append(_descent_outcome(f"3pc {m} {pname} TopK K={K}, T={r['T']}", r, "A"))
    return out  # fmt: skip


# ---- EF14 ---------------------------------------------------------------------------------
V_NO_EF_14 = Variant("no-ef", "no-error-feedback",
                     "DCGD with the same Top-K and step, no error kept: diverges on arXiv "
                     "2002.12410 and stalls at a gamma-independent point on the ridge")  # fmt: skip
V_DECAY_14 = Variant("memory-x0.5", "wrong-shift",
                     "EF14 keeping half its error, e_i <- (p_i - C(p_i))/2 (a decayed memory): "
                     "the dropped half leaves a DCGD-like O(gamma) bias, so no exact "
                     "convergence and no gamma^2 plateau")  # fmt: skip


def _ef14_or_dcgd(P, spec: str, variant: str | None, step="theory"):
    cls = DCGD if variant == "no-ef" else EF14
    if step == "theory":
        step = EF14.configure(P, parse_spec(spec))[0].gamma
    algo = cls.configure(P, parse_spec(spec), step=step, force=True)[0]
    return DecayedEF14(algo, 0.5) if variant == V_DECAY_14.name else algo


def _log_margin(value: float, limit: float) -> float:
    """Signed room of ``value <= limit`` in orders of magnitude, ``log(limit/value)/|log
    limit|``; ``-inf`` when ``value`` is not finite, ``inf`` when it is 0."""
    if not math.isfinite(value):
        return -math.inf
    return math.inf if value <= 0 else math.log(limit / value) / abs(math.log(limit))


def _dist(P):
    return lambda s: float(((s.x - P.x_star) ** 2).sum())


def _ef14_exact(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF14 converges to ``x*`` when every ``grad f_i(x*) = 0`` (no plateau). Not a rate claim:
    EF14 has no theorem at this (EF21's) step, and ``1e-10`` is a threshold of this library (the
    claim is a plateau level, zero); a step ten times smaller also converges exactly, only
    slower, so it is not named as a variant."""
    Q = make_problem("quadratic", nodes=10, lam=0.5, dim=20, L=1.0, zeta2=0.0, L_pm=0.1, seed=0)
    B = beznosikov()
    target = 1e-10 if fast else 1e-24
    out = []
    for label, P, spec in (("random quadratic zeta2=0 (n=10, d=20, mu=0.5), TopK K=2", Q,
                            "topk:k=2"), ("arXiv 2002.12410 (grad f_i(x*) = 0), Top-1", B,
                                          "topk:k=1")):  # fmt: skip
        T = (1000 if fast else 3000) * (1 if P is Q else 3)
        _, d = run(_ef14_or_dcgd(P, spec, variant), P, T, observe=_dist(P))
        rel = d[-1] / d[0]
        out.append(
            Outcome(
                f"{label}, T={T}",
                f"linear convergence to x*: ||x^T - x*||^2/||x^0 - x*||^2 <= {target:g}",
                f"{rel:.2e}",
                rel <= target,
                "threshold well above the float floor, below any plateau",
                _log_margin(rel, target),
            )
        )
    return out  # fmt: skip


def _ef14_plateau(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF14's plateau on heterogeneous data scales like ``gamma^2`` (ratio 16 for a step 4x
    smaller), and EF21 converges at the same step. Not a rate claim: a plateau level and its
    scaling in ``gamma``. ``no-ef`` and ``memory-x0.5`` plateau at a ``gamma``-independent level
    (ratios 1.00, 1.01)."""
    R = heterogeneous_ridge(x0="ones")
    g0 = EF21.configure(R, parse_spec("topk:k=2"), regime="nonconvex")[0].gamma
    burn, win = (1000, 1000) if fast else (2000, 3000)
    levels = {}
    for div in (1, 4):
        T = burn * div + win
        _, d = run(_ef14_or_dcgd(R, "topk:k=2", variant, g0 / div), R, T, observe=_dist(R))
        levels[div] = float(np.mean(d[-win:]))
    ratio = levels[1] / levels[4]
    algo, _ = EF21.configure(R, parse_spec("topk:k=2"), step=g0)
    T21 = 1500 if fast else 3000
    _, d21 = run(algo, R, T21, observe=_dist(R))
    m = 1.0 - abs(math.log2(ratio / 16.0)) if math.isfinite(ratio) else -math.inf
    return [
        Outcome(f"§3.6 ridge TopK K=2, gamma0 = EF21 step {g0:.4g} vs gamma0/4",
                "plateau of ||x - x*||^2 scales like gamma^2: ratio 16",
                f"tail means {levels[1]:.3g} / {levels[4]:.3g} = {ratio:.2f}",
                8 <= ratio <= 32, "factor 2 either way (gamma^2 is the leading order)", m),
        Outcome("§3.6 ridge, EF14 at gamma0 does not converge", "plateau > 0 (zeta2 = 59.3 > 0)",
                f"tail mean {levels[1]:.3g}", levels[1] > 1e-6, "plateau > 1e-6",
                _log_margin(1e-6, levels[1])),
        Outcome(f"§3.6 ridge, EF21 at gamma0, T={T21}", "exact linear convergence (no plateau)",
                f"||x - x*||^2 = {d21[-1]:.2e}", d21[-1] < 1e-16, "< 1e-16",
                _log_margin(d21[-1], 1e-16)),
    ]  # fmt: skip


# ---- EF-BV --------------------------------------------------------------------------------
V_NO_EF_BV = Variant("no-ef", "no-error-feedback",
                     "DCGD with the same compressor at EF-BV's step (no control variates): "
                     "stalls at a plateau on the heterogeneous ridge")  # fmt: skip
V_LAM = Variant("lam=0.5", "wrong-shift",
                "EF-BV with lambda = 0.5 (and nu = 1): no longer EF21's update")  # fmt: skip
V_NU = Variant("nu=0.5", "wrong-shift",
               "EF-BV with nu = 0.5 (and lambda = 1): the server adds half the mean message to "
               "g, no longer EF21's update")  # fmt: skip
V_SMALL_BV = Variant(SMALL, "step-too-small",
                     "a tenth of EF-BV's step, judged against the documented contraction at its "
                     "step: max(1 - gamma mu, (1+r)/2)^T is 2e-9 (Top-2) at T = 3000, the run at "
                     "gamma/10 keeps about exp(-2 gamma mu T/10) ~ 2e-2 of ||x - x*||^2"
                     )  # fmt: skip


def _ef_bv_conv(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF-BV at the authors' step on the heterogeneous ridge (Top-2, Rand-2): (i) exact
    convergence, ``||x^T - x*||^2/||x^0 - x*||^2 <= 1e-10`` (no plateau, unlike DCGD's at the same
    step); (ii) the documented PL contraction at that step, the Lyapunov function ``Psi =
    f - f* + c G`` contracting like ``q^t``, ``q = max(1 - gamma mu, (1 + r)/2)`` (the class
    docstring of :class:`~algorithms.ef.ef_bv.EFBV`; the paper's constants are [U]). With
    ``h_i^0 = grad f_i(x^0)`` (``G^0 = 0``) and ``f - f* >= (mu/2)||x - x*||^2`` it reads
    ``||x^T - x*||^2 <= (2/mu) q^T (f(x^0) - f*)``, whatever the weight ``c``. Rand-2 is one
    seed of a bound in expectation: the margins are orders of magnitude (``q^T`` is 1e-12,
    the run 1e-18). The step-too-small variant runs at ``gamma/10`` with ``q`` at ``gamma``."""
    R = heterogeneous_ridge(x0="ones")
    T = 3000 if fast else 6000
    target = 1e-10 if fast else 1e-24
    mu = R.consts.mu
    out = []
    for spec in ("topk:k=2", "randk:k=2"):
        algo, rec = EFBV.configure(R, parse_spec(spec))
        r = rec["theory"]["inputs"]["r"]
        q = max(1.0 - algo.gamma * mu, (1.0 + r) / 2.0)
        bound = 2.0 / mu * q**T * f_gap(R, R.x0) / float(((R.x0 - R.x_star) ** 2).sum())
        label = (f"§3.6 ridge {spec}, lambda={algo.lam:.3g}, nu={algo.nu:.3g}, "
                 f"gamma={algo.gamma:.4g}, T={T}")  # fmt: skip
        if variant == "no-ef":
            algo = DCGD.configure(R, parse_spec(spec), step=algo.gamma, force=True)[0]
        elif variant == SMALL:
            algo = replace(algo, gamma=algo.gamma / 10.0)
        _, d = run(algo, R, T, observe=_dist(R))
        rel = d[-1] / d[0]
        out += [
            Outcome(label, f"linear convergence to x*: ||x^T-x*||^2/||x^0-x*||^2 <= {target:g}",
                    f"{rel:.2e}", rel <= target, "threshold above the float floor",
                    _log_margin(rel, target)),
            Outcome(f"{label}, documented rate", f"||x^T-x*||^2/||x^0-x*||^2 <= (2/mu) q^T "
                    f"(f(x^0)-f*)/||x^0-x*||^2 = {bound:.2e}, q = max(1 - gamma mu, (1+r)/2) = "
                    f"{q:.6f}", f"{rel:.2e}", rel <= bound,
                    "exact bound (one seed for Rand-2: orders of magnitude of room)",
                    _log_margin(rel, bound)),
        ]  # fmt: skip
    return out


def _ef_bv_ef21(fast: bool, variant: str | None = None) -> list[Outcome]:
    """EF-BV with ``lambda = nu = 1`` is EF21: the same iterates (an identity, not a rate)."""
    P = _nonconvex(fast)
    lam = 0.5 if variant == V_LAM.name else 1.0
    nu = 0.5 if variant == V_NU.name else 1.0
    out = []
    for K in (1, 3):
        e21, _ = EF21.configure(P, parse_spec(f"topk:k={K}"), init_mode="full")
        ebv, _ = EFBV.configure(P, parse_spec(f"topk:k={K}"), step=e21.gamma, lam=lam, nu=nu,
                                init_mode="full")  # fmt: skip
        T = 200
        _, xa = run(e21, P, T, observe=lambda s: s.x)
        _, xb = run(ebv, P, T, observe=lambda s: s.x)
        err = max(float((a - b).abs().max()) for a, b in zip(xa, xb, strict=True))
        out.append(
            Outcome(
                f"logreg-nonconvex TopK K={K}, T={T}, h_i^0 = g_i^0 = grad f_i(x^0)",
                "EF-BV(lambda = nu = 1) iterates = EF21 iterates",
                f"max |x_EFBV - x_EF21| = {err:.1e}",
                err <= 1e-12,
                "1e-12 absolute",
                1.0 - err / 1e-12,
            )
        )
    return out  # fmt: skip


def _check(name: str, paper: str, fn, *variants: Variant, rate: bool = False) -> Check:
    return Check(name, paper, single_thread(fn), variants=variants, rate=rate)


CHECKS: list[Check] = [
    _check("ef21.nonconvex-bound", "EF21, arXiv 2106.05203, Theorem 1", _ef21_nonconvex,
           V_NO_EF, V_STEP, V_SMALL, rate=True),
    _check("ef21.pl-rate", "EF21, arXiv 2106.05203, Theorem 2 (theory sheet P5)", _ef21_pl,
           V_NO_EF, V_STEP_PL, V_SMALL, rate=True),
    _check("ef21.lyapunov-descent", "EF21, arXiv 2106.05203, proof of Theorem 1",
           _ef21_lyapunov, V_NO_EF, V_STEP, V_SMALL, rate=True),
    _check("3pc.three-point-inequality", "3PC, arXiv 2202.00998, Definition 3.1 and Sec. 3",
           _three_point, V_NO_EF_3P, V_A2),
    _check("3pc.nonconvex-bound", "3PC, arXiv 2202.00998, nonconvex theorem (G0/(A T))",
           _three_pc_bound, V_NO_EF, V_STEP, V_SMALL, rate=True),
    _check("3pc.lyapunov-descent", "3PC, arXiv 2202.00998, proof of the nonconvex theorem",
           _three_pc_lyapunov, V_NO_EF, V_STEP, V_SMALL, rate=True),
    _check("ef14.exact-when-homogeneous",
           "EF14 (Karimireddy et al. 2019, arXiv 1901.09847); theory sheet §2.2", _ef14_exact,
           V_NO_EF_14, V_DECAY_14),
    _check("ef14.plateau-gamma2", "theory sheet §2.2 / P7 (EF14 vs EF21, arXiv 2106.05203)",
           _ef14_plateau, V_NO_EF_14, V_DECAY_14),
    _check("ef-bv.convergence", "EF-BV, arXiv 2205.04180 (step and PL contraction as "
           "documented [U])", _ef_bv_conv, V_NO_EF_BV, V_SMALL_BV, rate=True),
    _check("ef-bv.reduces-to-ef21", "EF-BV, arXiv 2205.04180, special case lambda = nu = 1",
           _ef_bv_ef21, V_LAM, V_NU),
]  # fmt: skip
