"""Step-size table: every theory step the library computes, against what the papers state.

No row compares the library with a re-typed copy of its own formula. Each row is one of:

* **the theorem's inequality, evaluated directly**: the step conditions of EF21 Thm 1/2
  (arXiv 2106.05203), the 3PC theorems (arXiv 2202.00998) and MARINA/DASHA (arXiv 2102.07845,
  2202.01268) all read ``1 - a gamma - b gamma^2 >= 0`` (plus ``gamma <= A/(2 mu)`` for PL),
  with ``a, b`` the theorem's constants; the library's step must satisfy it with the true
  constants and equal, to rounding, the step the theorem states from them,
  ``min(1/(a + sqrt b), cap)`` (a wrong constant in either direction moves it off). For EF21
  the Young parameter ``s`` of Lemma 3 is optimised here numerically, not taken from the
  library's closed form.
* **independent worked numbers** of the theory sheet (P12, P15), at the printed precision.

Removed as self-comparisons (their steps are unverified, [U], and the library documents its
own formula): EF-SGD, EF21-SGD/BC/HB (EF21's borrowed step), EF21-PP's re-typed B&W Thm 7 (its
P12 worked numbers stay), EF-BV, 3PCv3/v4/v5 (derived constants), DIANA, DASHA-PAGE/MVR/
SYNC-MVR and COMP-AMS.

Variants (``--power``): ``overclaim``, the compressor declaring a too-large ``delta`` / a
too-small ``omega`` (the step grows past the condition); ``Lmax-for-Ltilde``, the problem
reporting ``L_max`` as ``L_tilde`` (the step falls below the theorem's); ``mean-Li-for-Ltilde``,
the problem reporting the mean ``L_i`` as ``L_tilde`` (the step exceeds the theorem's).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import torch

from algorithms.registry import get_algorithm
from compressors import parse_spec
from problems.base import Consts
from theory_checks.base import Check, Outcome, Variant
from theory_checks.compressor_checks import overclaiming
from theory_checks.ef_instances import beznosikov, heterogeneous_ridge, single_thread

__all__ = ["CHECKS", "compare", "quad_condition", "table_problem"]

# The constant table (n nodes, d coordinates; TopK/RandK keep K = 5 so alpha = 0.1, omega = 9).
N, D, K, M = 10, 50, 5, 100
L, LT, LMAX, LPM, MU, CALL = 2.0, 3.0, 4.0, 1.5, 0.5, 5.0
ALPHA, OMEGA = K / D, D / K - 1.0
TOPK, RANDK, PERMK = f"topk:k={K}", f"randk:k={K}", "permk"
ROUND = 1e-12

V_OVER = Variant("overclaim", "wrong-constant",
                 "the compressor declares half its omega / half its 1 - delta: the step is "
                 "computed from a too-small omega or too-large delta")  # fmt: skip
V_LMAX = Variant("Lmax-for-Ltilde", "wrong-constant",
                 "the problem reports L_max in place of L_tilde (a valid but loose constant): "
                 "the step falls below the theorem's")  # fmt: skip
V_MEAN = Variant("mean-Li-for-Ltilde", "wrong-constant",
                 "the problem reports the mean L_i in place of L_tilde = sqrt(mean L_i^2) (too "
                 "small on heterogeneous nodes): the step exceeds the theorem's")  # fmt: skip


def table_problem(mu: float | None = MU, convex: bool = True, variant: str | None = None):
    """A stand-in problem carrying only the fixed constants the theory reads. Its nodes are
    heterogeneous: half have ``L_i = sqrt 2``, half ``L_i = 4 = L_max``, so that
    ``L_tilde = sqrt(mean L_i^2) = 3`` is well above ``mean L_i = 2.707``. With the
    ``Lmax-for-Ltilde`` variant ``L_tilde`` is reported as ``L_max``; with
    ``mean-Li-for-Ltilde`` as the mean ``L_i``."""
    L_i = torch.tensor([math.sqrt(2.0), LMAX] * (N // 2), dtype=torch.float64)
    lt = {"Lmax-for-Ltilde": LMAX, "mean-Li-for-Ltilde": float(L_i.mean())}.get(variant, LT)
    consts = Consts(L=L, L_i=L_i, L_tilde=lt, L_max=LMAX, L_pm=LPM, mu=mu)
    return SimpleNamespace(
        n=N, d=D, consts=consts, convex=convex, counts=[M] * N, sample_smoothness=lambda: CALL
    )


def _with_variant(problem: Any, variant: str | None) -> Any:
    """A real problem whose constants report ``L_max`` (or the mean ``L_i``) as ``L_tilde``
    (the variants)."""
    if variant == "Lmax-for-Ltilde":
        c = dataclasses.replace(problem.consts, L_tilde=problem.consts.L_max)
    elif variant == "mean-Li-for-Ltilde":
        c = dataclasses.replace(problem.consts, L_tilde=float(problem.consts.L_i.mean()))
    else:
        return problem
    return SimpleNamespace(**{k: getattr(problem, k) for k in ("n", "d", "convex")}, consts=c)


def compare(setting: str, got: float, want: float, formula: str, rel: float) -> Outcome:
    """An outcome ``|got - want| <= rel |want|`` (``want`` an independent worked number)."""
    err = abs(got - want) / abs(want)
    return Outcome(setting, f"{formula} = {want:.8g}", f"library {got:.8g} (rel err {err:.1e})",
                   err <= rel, f"{rel:g} relative (as printed)", 1.0 - err / rel)  # fmt: skip


def quad_condition(setting: str, gamma: float, a: float, b: float, source: str,
                   cap: float = math.inf, rnd: float = ROUND) -> Outcome:  # fmt: skip
    """The theorem's condition ``1 - a gamma - b gamma^2 >= 0`` (and ``gamma <= cap``) at the
    library's ``gamma``, and ``gamma`` equal, to rounding ``rnd``, to the step the theorem
    states from it, ``g_thm = min(1/(a + sqrt b), cap)``: a constant the library gets wrong in
    either direction moves the step off ``g_thm`` (a too-small ``L_tilde``, such as the mean
    ``L_i`` in its place, makes it larger; ``L_max`` in its place, smaller), where the former
    test, ``gamma >= 0.809`` of the condition's root, passed any error that kept the step within
    19% of it."""
    g_thm = min(1.0 / (a + math.sqrt(b)), cap)
    lhs = 1.0 - a * gamma - b * gamma * gamma
    r = gamma / g_thm
    ok = lhs >= -rnd and gamma <= cap * (1 + rnd) and abs(r - 1.0) <= rnd
    return Outcome(setting, f"{source}: 1 - a g - b g^2 >= 0 (a={a:.4g}, b={b:.4g})"
                   + (f", g <= {cap:.4g}" if math.isfinite(cap) else "")
                   + f"; g = min(1/(a + sqrt b), cap) = {g_thm:.10g}",
                   f"g = {gamma:.10g}: 1 - a g - b g^2 = {lhs:.3g}, g/g_thm - 1 = {r - 1:.2e}",
                   ok, f"{rnd:g} relative (rounding)", 1.0 - abs(r - 1.0) / rnd)  # fmt: skip


def _gamma(method: str, spec: str, problem: Any, variant: str | None = None, **opts) -> float:
    cls = get_algorithm(method)
    c = parse_spec(spec)
    if variant == "overclaim":
        c = overclaiming(c)
    _, rec = cls.configure(problem, c, **opts)
    return float(rec["gamma_theory"])


# ---- the theorems' constants -----------------------------------------------------------------
def _golden_max(fn, lo: float, hi: float, iters: int = 200) -> float:
    """The maximiser of a unimodal ``fn`` on ``[lo, hi]`` (golden-section search)."""
    r = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    for _ in range(iters):
        c, d = b - r * (b - a), a + r * (b - a)
        if fn(c) >= fn(d):
            b = d
        else:
            a = c
    return 0.5 * (a + b)


def ef21_condition(setting: str, gamma: float, alpha: float, Lf: float, Lt: float,
                   mu: float | None = None) -> Outcome:  # fmt: skip
    """EF21 Thm 1 (``mu is None``: ``1 - L g - (beta/theta) L~^2 g^2 >= 0``) or Thm 2
    (``1 - L g - 2 (beta/theta) L~^2 g^2 >= 0`` and ``g <= theta/(2 mu)``) with Lemma 3's
    ``theta = 1 - (1 - alpha)(1 + s)``, ``beta = (1 - alpha)(1 + 1/s)`` at the ``s`` that
    maximises the admissible step, found numerically."""
    k = 1.0 if mu is None else 2.0

    def tb(s: float) -> tuple[float, float]:
        return 1.0 - (1.0 - alpha) * (1.0 + s), (1.0 - alpha) * (1.0 + 1.0 / s)

    def g_max(s: float) -> float:
        th, be = tb(s)
        b = k * be / th * Lt * Lt
        root = 2.0 / (Lf + math.sqrt(Lf * Lf + 4.0 * b))
        return root if mu is None else min(root, th / (2.0 * mu))

    if alpha >= 1.0:
        th, b = 1.0, 0.0
    else:
        s = _golden_max(lambda u: g_max(math.exp(u)), math.log(1e-9),
                        math.log(alpha / (1.0 - alpha)) - 1e-12)  # fmt: skip
        th, be = tb(math.exp(s))
        b = k * be / th * Lt * Lt
    cap = math.inf if mu is None else th / (2.0 * mu)
    thm = "EF21 Thm 1" if mu is None else "EF21 Thm 2"
    return quad_condition(setting, gamma, Lf, b, f"{thm} (s optimised)", cap, rnd=1e-9)


def _alpha(spec: str) -> float:
    return parse_spec(spec).delta(D)


# ---- the checks -----------------------------------------------------------------------------
def _ef21(fast: bool, variant: str | None = None) -> list[Outcome]:
    nc = table_problem(mu=None, convex=False, variant=variant)
    pl = table_problem(variant=variant)
    out = []
    for spec in (TOPK, "topk:k=1", "topk:k=25"):
        a = _alpha(spec)
        out.append(ef21_condition(f"ef21 {spec} nonconvex", _gamma("ef21", spec, nc, variant),
                                  a, L, LT))  # fmt: skip
        out.append(ef21_condition(f"ef21 {spec} PL", _gamma("ef21", spec, pl, variant), a, L,
                                  LT, MU))  # fmt: skip
    return out


def _three_pc(fast: bool, variant: str | None = None) -> list[Outcome]:
    """3PC nonconvex theorem: ``1 - L g - (B/A) L~^2 g^2 >= 0`` with the paper's ``(A, B)``
    (arXiv 2202.00998, Table 1 / Sec. 3-4); EF21's (A, B) at the optimal Young parameter."""
    s = 1.0 / math.sqrt(1.0 - ALPHA) - 1.0
    th, be = 1.0 - (1.0 - ALPHA) * (1.0 + s), (1.0 - ALPHA) * (1.0 + 1.0 / s)
    zeta = 0.7
    AB = {
        "ef21": (th, be, {}),
        "lag": (1.0, zeta, {"zeta": zeta}),
        "clag": (th, max(be, zeta), {"zeta": zeta}),
        "v1": (1.0, 1.0 - ALPHA, {}),
        "v2": (ALPHA, (1.0 - ALPHA) * OMEGA, {}),
    }
    nc = table_problem(mu=None, convex=False, variant=variant)
    out = []
    for mech, (A, B, extra) in AB.items():
        got = _gamma("3pc", TOPK, nc, variant, mechanism=mech, **extra)
        out.append(quad_condition(f"3pc {mech} (A={A:.4g}, B={B:.4g})", got, L, B / A * LT**2,
                                  "3PC nonconvex theorem"))  # fmt: skip
    got = _gamma("3pc", TOPK, table_problem(variant=variant), variant, mechanism="ef21")
    out.append(quad_condition("3pc ef21 PL", got, L, 2.0 * be / th * LT**2, "3PC PL theorem",
                              cap=th / (2.0 * MU)))  # fmt: skip
    return out


def _vr(fast: bool, variant: str | None = None) -> list[Outcome]:
    nc = table_problem(mu=None, convex=False, variant=variant)
    p, w, n = K / D, OMEGA, N
    out = [
        quad_condition("marina randk nonconvex", _gamma("marina", RANDK, nc, variant), L,
                       (1.0 - p) * w / (p * n) * LT**2, "MARINA Thm 2.1, p = K/d"),
        quad_condition("marina randk PL", _gamma("marina", RANDK, table_problem(variant=variant),
                                                 variant), L,
                       2.0 * (1.0 - p) * w / (p * n) * LT**2, "MARINA Thm 2.2", cap=p / (2 * MU)),
        quad_condition("marina permk nonconvex", _gamma("marina", PERMK, nc, variant), L,
                       (1.0 - 1.0 / n) * n * LPM**2, "PermK-MARINA (arXiv 2110.03300), p = 1/n"),
        quad_condition("dasha randk", _gamma("dasha", RANDK, nc, variant), L,
                       16.0 * w * (2.0 * w + 1.0) / n * LT**2, "DASHA Thm 6.1 [M]"),
    ]  # fmt: skip
    b = 4
    pv = min(p, b / (M + b))
    out.append(quad_condition(f"vr-marina randk b'={b}", _gamma("vr-marina", RANDK, nc, variant,
                                                                batch_size=b), L,
                              (1 - pv) / (pv * n) * (w * LT**2 + (1 + w) * CALL**2 / b),
                              "VR-MARINA Thm 3.1, p = min(K/d, b'/(m+b'))"))  # fmt: skip
    pp = p * 5 / n
    out.append(quad_condition("pp-marina randk r=5", _gamma("pp-marina", RANDK, nc, variant,
                                                            participation=0.5), L,
                              (1.0 - pp) * (1.0 + w) / (pp * 5) * LT**2,
                              "PP-MARINA Thm 4.1, p = (K/d) r/n"))  # fmt: skip
    return out


def _worked(fast: bool, variant: str | None = None) -> list[Outcome]:
    out = []
    s = 1.0 / math.sqrt(0.9) - 1.0
    th, be = 1.0 - 0.9 * (1.0 + s), 0.9 * (1.0 + 1.0 / s)
    v = math.sqrt(be / th)
    out.append(Outcome("P15 EF21 alpha=0.1", "sqrt(beta/theta) = 18.4868 <= 2/alpha - 1 = 19",
                       f"{v:.6f}", abs(v - 18.4868) < 5e-5 and v <= 19.0,
                       "4 decimals (as printed)", 1.0 - abs(v - 18.4868) / 5e-5))  # fmt: skip
    bz = _with_variant(beznosikov(), variant)
    out.append(compare("P15 Beznosikov ef21 NC (Top-1)",
                       _gamma("ef21", "topk:k=1", bz, variant, regime="nonconvex"), 0.0058591,
                       "sheet P15", rel=1e-5))  # fmt: skip
    out.append(compare("P15 Beznosikov ef21 PL (Top-1)", _gamma("ef21", "topk:k=1", bz, variant),
                       0.0042688, "sheet P15", rel=1e-5))  # fmt: skip
    c = beznosikov().consts
    err = max(abs(c.L_tilde - 34.5) / 34.5, abs(c.L - 103 / 6) / 18, abs(c.mu - 7 / 6))
    out.append(Outcome("Beznosikov constants", "L_i = 34.5, L = 103/6, mu = 7/6",
                       f"L~ = {c.L_tilde:.15g}, L = {c.L:.15g}, mu = {c.mu:.15g}", err < 1e-12,
                       "1e-12 (eigenvalue rounding)", 1.0 - err / 1e-12))  # fmt: skip
    ridge = _with_variant(heterogeneous_ridge(x0="ones"), variant)
    for p, want, half in ((1.0, 0.0176, 5e-5), (0.5, 0.0070, 5e-5), (0.1, 0.00095, 5e-6)):
        got = _gamma("ef21-pp", "topk:k=2", ridge, variant, participation=p, regime="nonconvex")
        out.append(Outcome(f"P12 ridge ef21-pp K=2 p={p}", f"sheet P12: {want}", f"{got:.6g}",
                           abs(got - want) <= half, f"+-{half:g} (half the printed digit)",
                           1.0 - abs(got - want) / half))  # fmt: skip
    return out


CHECKS: list[Check] = [
    Check("steps.ef21", "EF21 Thm 1/2 and Lemma 3 (arXiv 2106.05203), conditions evaluated",
          _ef21, variants=(V_OVER, V_LMAX, V_MEAN)),
    Check("steps.3pc", "3PC (arXiv 2202.00998) nonconvex / PL theorems, conditions evaluated",
          _three_pc, variants=(V_OVER, V_LMAX, V_MEAN)),
    Check("steps.vr-family", "MARINA (2102.07845) Thm 2.1/2.2/3.1/4.1, PermK (2110.03300), "
          "DASHA (2202.01268) Thm 6.1: conditions evaluated", _vr,
          variants=(V_OVER, V_LMAX, V_MEAN)),
    Check("steps.worked-numbers", "theory sheet P12, P15 (EF21 2106.05203; B&W 2110.03294)",
          single_thread(_worked), variants=(V_OVER, V_LMAX, V_MEAN)),
]  # fmt: skip
