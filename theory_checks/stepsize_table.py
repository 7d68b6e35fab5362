"""Step-size table: every registered method's theoretical step against the paper's formula.

For a fixed table of constants (``L, L_tilde, L_max, L_pm, mu, n, d``, the compressor's
``alpha``/``omega``, ``p``, minibatch sizes), each method's ``configure`` (the library's
theory step) is compared with the formula written out by hand here from the papers (theory
sheet §2), to ``1e-12`` relative. Methods whose step the sheet marks [U] are compared with the
formula their implementation documents, and the ``predicted`` column says so. The worked numbers
of the sheet's P15 (EF21 ``sqrt(beta/theta)`` at ``alpha = 0.1``; Beznosikov instance steps) and
P12 (EF21-PP on §3.6) are checked at the printed precision.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch

from algorithms.registry import get_algorithm
from compressors import parse_spec
from problems.base import Consts
from theory_checks.base import Check, Outcome
from theory_checks.ef_instances import beznosikov, heterogeneous_ridge, single_thread

__all__ = ["CHECKS", "compare", "table_problem"]

REL = 1e-12
TOL = "1e-12 relative (rounding of the same formula evaluated two ways)"

# The constant table (n nodes, d coordinates; TopK/RandK keep K = 5 so alpha = 0.1, omega = 9).
N, D, K, M = 10, 50, 5, 100
L, LT, LMAX, LPM, MU, CALL = 2.0, 3.0, 4.0, 1.5, 0.5, 5.0
ALPHA, OMEGA = K / D, D / K - 1.0
TOPK, RANDK, PERMK = f"topk:k={K}", f"randk:k={K}", "permk"


def table_problem(mu: float | None = MU, convex: bool = True) -> SimpleNamespace:
    """A stand-in problem carrying only the fixed constants the theory reads."""
    L_i = torch.full((N,), LT, dtype=torch.float64)
    consts = Consts(L=L, L_i=L_i, L_tilde=LT, L_max=LMAX, L_pm=LPM, mu=mu)
    return SimpleNamespace(
        n=N, d=D, consts=consts, convex=convex, counts=[M] * N, sample_smoothness=lambda: CALL
    )


def compare(setting: str, got: float, want: float, formula: str, rel: float = REL) -> Outcome:
    """An outcome ``|got - want| <= rel |want|``."""
    err = abs(got - want) / abs(want)
    return Outcome(setting, f"{formula} = {want:.12g}", f"library {got:.12g} (rel err {err:.1e})",
                   err <= rel, TOL if rel == REL else f"{rel:g} relative")  # fmt: skip


def _gamma(method: str, spec: str, problem: Any = None, **opts: Any) -> float:
    cls = get_algorithm(method)
    _, rec = cls.configure(problem or table_problem(), parse_spec(spec), **opts)
    return float(rec["gamma_theory"])


# ---- the papers' formulas, written out by hand ----------------------------------------------
def _tb(a: float) -> tuple[float, float]:
    """EF21 Lemma 3 at the optimal Young parameter: theta, beta (arXiv 2106.05203)."""
    s = 1.0 / math.sqrt(1.0 - a) - 1.0
    return 1.0 - (1.0 - a) * (1.0 + s), (1.0 - a) * (1.0 + 1.0 / s)


def _ef21_nc(a: float = ALPHA, Lf: float = L, Lt: float = LT) -> float:
    th, be = _tb(a)
    return 1.0 / (Lf + Lt * math.sqrt(be / th))


def _ef21_pl(a: float = ALPHA, Lf: float = L, Lt: float = LT, mu: float = MU) -> float:
    th, be = _tb(a)
    return min(1.0 / (Lf + Lt * math.sqrt(2.0 * be / th)), th / (2.0 * mu))


def _ef21_pp(p: float, a: float = ALPHA, Lf: float = L, Lt: float = LT) -> float:
    """B&W (arXiv 2110.03294) Thm 7 with p_min = p_max = p and rho = theta p/(2(1-p))."""
    th, be = _tb(a)
    if p == 1.0:
        return _ef21_nc(a, Lf, Lt)
    rho = th * p / (2.0 * (1.0 - p))
    th_p = rho * p + th * p - rho - (p - p)
    Bt = (be * p + (1.0 + 1.0 / rho) * (1.0 - p)) * Lt**2
    return 1.0 / (Lf + math.sqrt(Bt / th_p))


def _ab_3pc(A: float, B: float) -> float:
    return 1.0 / (L + LT * math.sqrt(B / A))


# ---- the checks -----------------------------------------------------------------------------
def _basic(fast: bool) -> list[Outcome]:
    nc = table_problem(mu=None, convex=False)
    out = [
        compare("dcgd randk", _gamma("dcgd", RANDK), 1.0 / (L + 2.0 * OMEGA * LMAX / N),
                "1/(L + 2 omega L_max/n) [§2.1]"),
        compare("ef-sgd topk (EF21 Thm 1 step)", _gamma("ef-sgd", TOPK),
                _ef21_nc(), "1/(L + L~ sqrt(beta/theta)) (EF21's step, as the EF21 experiments)"),
        compare("ef21 topk nonconvex", _gamma("ef21", TOPK, nc), _ef21_nc(),
                "EF21 Thm 1: 1/(L + L~ sqrt(beta/theta))"),
        compare("ef21 topk PL", _gamma("ef21", TOPK), _ef21_pl(),
                "EF21 Thm 2: min(1/(L + L~ sqrt(2 beta/theta)), theta/(2 mu))"),
    ]  # fmt: skip
    for m in ("ef21-sgd", "ef21-bc", "ef21-hb"):
        out.append(compare(f"{m} topk PL", _gamma(m, TOPK), _ef21_pl(),
                           "[U] documented: EF21 Thm 2 step (authors' code)"))  # fmt: skip
    for p in (1.0, 0.5, 0.1):
        out.append(compare(f"ef21-pp topk p={p}", _gamma("ef21-pp", TOPK, participation=p),
                           _ef21_pp(p), "B&W Thm 7: 1/(L + sqrt(B~/theta_p))"))  # fmt: skip
    return out


def _three_pc(fast: bool) -> list[Outcome]:
    th, be = _tb(ALPHA)
    zeta = 0.7
    abar = 1.0 - (1.0 - ALPHA) ** 2  # v4: C1 = C2 = TopK(K)
    th4, be4 = _tb(abar)
    thp, bep = _tb(ALPHA)  # v5: p defaults to alpha
    AB = {
        "ef21": (th, be, {}),
        "lag": (1.0, zeta, {"zeta": zeta}),
        "clag": (th, max(be, zeta), {"zeta": zeta}),
        "v1": (1.0, 1.0 - ALPHA, {}),
        "v2": (ALPHA, (1.0 - ALPHA) * OMEGA, {}),
        "v3": (th4, be4, {}),
        "v4": (th4, be4, {}),
        "v5": (thp, bep * (1.0 - ALPHA), {}),
    }
    nc = table_problem(mu=None, convex=False)
    out = []
    for mech, (A, B, extra) in AB.items():
        got = _gamma("3pc", TOPK, nc, mechanism=mech, **extra)
        out.append(compare(f"3pc {mech} (A={A:.4g}, B={B:.4g})", got, _ab_3pc(A, B),
                           "3PC nonconvex: 1/(L + L~ sqrt(B/A))"))  # fmt: skip
    A, B, _ = AB["ef21"]
    got = _gamma("3pc", TOPK, mechanism="ef21")
    want = min(1.0 / (L + LT * math.sqrt(2.0 * B / A)), A / (2.0 * MU))
    out.append(compare("3pc ef21 PL", got, want, "3PC PL: min(1/(L+L~ sqrt(2B/A)), A/(2 mu))"))
    return out


def _ef_bv(fast: bool) -> list[Outcome]:
    nc = table_problem(mu=None, convex=False)
    out = []
    # TopK: eta = sqrt(1 - alpha), omega = omega_av = 0 -> lambda* = nu* = 1, r = r_av = 1-alpha
    eta = math.sqrt(1.0 - ALPHA)
    r = eta**2
    want = 1.0 / (L + LT * math.sqrt(r) / (1.0 - math.sqrt(r)))
    out.append(
        compare(
            "ef-bv topk nonconvex",
            _gamma("ef-bv", TOPK, nc),
            want,
            "[U] documented: 1/(L + L~ sqrt(r_av)/(1 - sqrt r)) (= EF21 Thm 1 here)",
        )
    )
    out.append(compare("ef-bv topk = ef21 nonconvex", _gamma("ef-bv", TOPK, nc), _ef21_nc(),
                       "EF21 Thm 1 step (EF-BV with lambda = nu = 1 is EF21)"))  # fmt: skip
    # RandK: eta = 0, omega = 9, omega_av = omega/n
    lam = min(1.0 / (1.0 + OMEGA), 1.0)
    nu = min(1.0 / (1.0 + OMEGA / N), 1.0)
    r = (1.0 - lam) ** 2 + lam**2 * OMEGA
    r_av = (1.0 - nu) ** 2 + nu**2 * OMEGA / N
    want = 1.0 / (L + LT * math.sqrt(r_av) / (1.0 - math.sqrt(r)))
    out.append(
        compare(
            "ef-bv randk nonconvex",
            _gamma("ef-bv", RANDK, nc),
            want,
            "[U] documented, lambda*=1/(1+omega), nu*=1/(1+omega/n)",
        )
    )
    q = 1.0 - math.sqrt(r)
    want = min(1.0 / (L + LT * math.sqrt(2.0 * r_av) / q), q / (2.0 * MU))
    out.append(
        compare(
            "ef-bv randk PL",
            _gamma("ef-bv", RANDK),
            want,
            "[U] documented: min(1/(L+L~ sqrt(2 r_av)/(1-sqrt r)), (1-sqrt r)/(2mu))",
        )
    )
    return out  # fmt: skip


def _vr(fast: bool) -> list[Outcome]:
    nc = table_problem(mu=None, convex=False)
    p = K / D
    w, n = OMEGA, N
    out = [
        compare("diana randk strongly convex", _gamma("diana", RANDK),
                1.0 / (L + 6.0 * w * LMAX / n), "1/(L + 6 omega L_max/n) [§2.8, V-deriv]"),
        compare("diana randk nonconvex", _gamma("diana", RANDK, nc),
                1.0 / (10.0 * L * math.sqrt(1.0 + w / n) * (w + 2.0)),
                "[U] documented: 1/(10 L sqrt(1+omega/n)(omega+2)) (VR-DIANA Thm 4, m=1)"),
        compare("marina randk nonconvex", _gamma("marina", RANDK, nc),
                1.0 / (L + LT * math.sqrt((1.0 - p) * w / (p * n))),
                "MARINA Thm 2.1: 1/(L + L~ sqrt((1-p) omega/(p n))), p = K/d"),
        compare("marina randk PL", _gamma("marina", RANDK),
                min(1.0 / (L + LT * math.sqrt(2.0 * (1.0 - p) * w / (p * n))), p / (2.0 * MU)),
                "MARINA Thm 2.2: min(1/(L+L~ sqrt(2(1-p)omega/(pn))), p/(2mu))"),
        compare("marina permk nonconvex (AB: A=B=1)", _gamma("marina", PERMK, nc),
                1.0 / (L + math.sqrt((1.0 - 1.0 / n) / (1.0 / n)) * LPM),
                "PermK (arXiv 2110.03300): 1/(L + sqrt((1-p)/p) L_pm), p = 1/n"),
    ]  # fmt: skip
    b = 4
    pv = min(p, b / (M + b))
    want = 1.0 / (L + math.sqrt((1 - pv) / (pv * n) * (w * LT**2 + (1 + w) * CALL**2 / b)))
    out.append(compare(f"vr-marina randk b'={b}", _gamma("vr-marina", RANDK, nc, batch_size=b),
                       want, "VR-MARINA Thm 3.1: 1/(L + sqrt((1-p)/(pn)(omega L~^2 + "
                       "(1+omega) calL^2/b'))), p = min(K/d, b'/(m+b'))"))  # fmt: skip
    r = 5
    pp = p * r / n
    want = 1.0 / (L + LT * math.sqrt((1.0 - pp) * (1.0 + w) / (pp * r)))
    out.append(compare("pp-marina randk r=5", _gamma("pp-marina", RANDK, nc, participation=0.5),
                       want, "PP-MARINA Thm 4.1: 1/(L + L~ sqrt((1-p)(1+omega)/(p r))), "
                       "p = (K/d) r/n"))  # fmt: skip
    out.append(compare("dasha randk", _gamma("dasha", RANDK, nc),
                       1.0 / (L + math.sqrt(16.0 * w * (2.0 * w + 1.0) / n) * LT),
                       "DASHA Thm 6.1 [M]: 1/(L + sqrt(16 omega(2omega+1)/n) L^)"))  # fmt: skip
    B = 2
    pg = B / (B + M)
    c48 = 48.0 * w * (2.0 * w + 1.0) / n
    want = 1.0 / (L + math.sqrt(c48 * (LT**2 + (1 - pg) * CALL**2 / B)
                                + 2.0 * (1 - pg) * CALL**2 / (pg * n * B)))  # fmt: skip
    out.append(compare("dasha-page randk B=2", _gamma("dasha-page", RANDK, nc, batch_size=B),
                       want, "[U] documented (§2.10), p = B/(B+m)"))  # fmt: skip
    a = 1.0 / (2.0 * w + 1.0)
    want = 1.0 / (L + math.sqrt(c48 * (LT**2 + (1 - a) ** 2 * CALL**2 / B)
                                + 12.0 * (1 - a) ** 2 * CALL**2 / (a * n * B)))  # fmt: skip
    out.append(compare("dasha-mvr randk B=2", _gamma("dasha-mvr", RANDK, nc, batch_size=B),
                       want, "[U] documented (§2.10), b = a = 1/(2omega+1)"))  # fmt: skip
    ps = min(p, B / (B + M))
    want = 1.0 / (L + math.sqrt(c48 * (LT**2 + (1 - ps) * CALL**2 / B)
                                + 2.0 * (1 - ps) * CALL**2 / (ps * n * B)))  # fmt: skip
    out.append(compare("dasha-sync-mvr randk B=2",
                       _gamma("dasha-sync-mvr", RANDK, nc, batch_size=B), want,
                       "[U] documented: DASHA-PAGE's form, p = min(K/d, B/(B+m))"))  # fmt: skip
    q = math.sqrt(1.0 - ALPHA)
    want = math.sqrt(1e-8) / (L * (1.0 + 0.9 / 0.1 + 2.0 * q / (1.0 - q * q)))
    out.append(compare("comp-ams topk", _gamma("comp-ams", TOPK, nc), want,
                       "[U] documented: sqrt(eps)/(L(1 + b1/(1-b1) + 2q/(1-q^2)))"))  # fmt: skip
    return out


def _worked(fast: bool) -> list[Outcome]:
    out = []
    th, be = _tb(0.1)
    v = math.sqrt(be / th)
    out.append(
        Outcome(
            "P15 EF21 alpha=0.1",
            "sqrt(beta/theta) = 18.4868 <= 2/alpha - 1 = 19",
            f"{v:.6f}",
            abs(v - 18.4868) < 5e-5 and v <= 19.0,
            "4 decimals (as printed)",
        )
    )
    bz = beznosikov()
    out.append(
        compare(
            "P15 Beznosikov ef21 NC (Top-1)",
            _gamma("ef21", "topk:k=1", bz, regime="nonconvex"),
            0.0058591,
            "sheet P15: 0.0058591",
            rel=1e-5,
        )
    )
    out.append(
        compare(
            "P15 Beznosikov ef21 PL (Top-1)",
            _gamma("ef21", "topk:k=1", bz),
            0.0042688,
            "sheet P15: 0.0042688",
            rel=1e-5,
        )
    )
    c = bz.consts
    out.append(
        compare(
            "P15 Beznosikov by hand",
            _gamma("ef21", "topk:k=1", bz),
            _ef21_pl(1 / 3, 103 / 6, 34.5, 7 / 6),
            "EF21 Thm 2 with L=103/6, L~=34.5, mu=7/6, alpha=1/3",
            rel=1e-12,
        )
    )
    out.append(
        Outcome(
            "Beznosikov constants",
            "L_i = 34.5, L = 103/6, mu = 7/6",
            f"L~ = {c.L_tilde:.15g}, L = {c.L:.15g}, mu = {c.mu:.15g}",
            abs(c.L_tilde - 34.5) < 1e-12 * 34.5
            and abs(c.L - 103 / 6) < 1e-12 * 18
            and abs(c.mu - 7 / 6) < 1e-12,
            "1e-12 (eigenvalue rounding)",
        )
    )
    ridge = heterogeneous_ridge(x0="ones")
    for p, want, half in ((1.0, 0.0176, 5e-5), (0.5, 0.0070, 5e-5), (0.1, 0.00095, 5e-6)):
        got = _gamma("ef21-pp", "topk:k=2", ridge, participation=p)
        out.append(
            Outcome(
                f"P12 ridge ef21-pp K=2 p={p}",
                f"sheet P12: {want}",
                f"{got:.6g}",
                abs(got - want) <= half,
                f"+-{half:g} (half the printed digit)",
            )
        )
    return out  # fmt: skip


CHECKS: list[Check] = [
    Check(
        "steps.ef21-family",
        "EF21 Thm 1/2 (arXiv 2106.05203); B&W Thm 7 (arXiv 2110.03294); theory sheet §2.1-2.7",
        _basic,
    ),
    Check("steps.3pc", "3PC (arXiv 2202.00998) nonconvex / PL theorems, Sec. 3", _three_pc),
    Check("steps.ef-bv", "EF-BV (arXiv 2205.04180), step as documented [U]", _ef_bv),
    Check(
        "steps.vr-family",
        "DIANA, MARINA (2102.07845), DASHA (2202.01268), COMP-AMS; theory sheet §2.8-2.11",
        _vr,
    ),
    Check(
        "steps.worked-numbers",
        "theory sheet P12, P15 (EF21 2106.05203; B&W 2110.03294)",
        single_thread(_worked),
    ),
]
