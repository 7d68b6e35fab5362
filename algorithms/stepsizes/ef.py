"""Step sizes of the error-feedback family (EF21 and its relatives)."""

from __future__ import annotations

import math


def ef21_theta_beta(alpha: float) -> tuple[float, float]:
    """EF21's ``theta = 1 - sqrt(1 - alpha)`` and ``beta = (1 - alpha)/(1 - sqrt(1 - alpha))``
    at the optimal Young parameter ``s* = 1/sqrt(1 - alpha) - 1`` (Richtárik, Sokolov &
    Fatkhullin 2021, arXiv 2106.05203, Lemma 3 and Remark). ``alpha = 1`` gives (1, 0)."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if alpha == 1:
        return 1.0, 0.0
    r = math.sqrt(1.0 - alpha)
    return 1.0 - r, (1.0 - alpha) / (1.0 - r)


def ef21(L: float, L_tilde: float, alpha: float) -> float:
    """EF21 nonconvex step, Theorem 1: ``1 / (L + L_tilde sqrt(beta/theta))``."""
    theta, beta = ef21_theta_beta(alpha)
    return 1.0 / (L + L_tilde * math.sqrt(beta / theta))


def ef21_pl(L: float, L_tilde: float, alpha: float, mu: float) -> float:
    """EF21 PL step, Theorem 2: ``min(1/(L + L_tilde sqrt(2 beta/theta)), theta/(2 mu))``."""
    theta, beta = ef21_theta_beta(alpha)
    return min(1.0 / (L + L_tilde * math.sqrt(2.0 * beta / theta)), theta / (2.0 * mu))


# ---------------------------------------------------------------- 3PC
def three_pc(L: float, L_tilde: float, A: float, B: float) -> float:
    """3PC nonconvex step for a 3PC(A, B) mechanism: ``1/(L + L_tilde sqrt(B/A))``
    (Richtárik et al. 2022, arXiv 2202.00998, nonconvex theorem; theory sheet §2.12)."""
    if not 0 < A <= 1 or B < 0:
        raise ValueError(f"need 0 < A <= 1 and B >= 0, got A={A}, B={B}")
    return 1.0 / (L + L_tilde * math.sqrt(B / A))


def three_pc_pl(L: float, L_tilde: float, A: float, B: float, mu: float) -> float:
    """3PC PL step: ``min(1/(L + L_tilde sqrt(2B/A)), A/(2 mu))`` (arXiv 2202.00998, PL
    theorem; theory sheet §2.12)."""
    if not 0 < A <= 1 or B < 0:
        raise ValueError(f"need 0 < A <= 1 and B >= 0, got A={A}, B={B}")
    return min(1.0 / (L + L_tilde * math.sqrt(2.0 * B / A)), A / (2.0 * mu))


def three_pc_AB(
    mechanism: str,
    alpha: float,
    *,
    zeta: float = 0.0,
    omega: float = 0.0,
    p: float = 1.0,
    alpha2: float = 1.0,
    inner: str = "ef21",
) -> tuple[float, float]:
    """The constants ``(A, B)`` of a 3PC mechanism (arXiv 2202.00998, Section 3 and the theory
    sheet's §2.12 table), every Young parameter at its optimum ``s* = 1/sqrt(a) - 1`` for a
    bound ``(1 - A) = a (1 + s)``.

    ``ef21``, ``lag``, ``clag``, ``v1``, ``v2``, ``v4`` and ``v5`` are the paper's constants.
    3PCv3's definition could not be checked (theory sheet §2.12 [U]); this library takes it to
    be ``C_{h,y}(x) = b + C(x - b)`` with ``b`` the output of an inner 3PC mechanism, and its
    constants are derived here.

    Derivation (3PCv3): a 3PC(A, B) mechanism satisfies ``E||C_{h,y}(x) - x||^2 <= (1 - A)
    ||h - y||^2 + B ||x - y||^2``. The outer ``C`` is ``alpha``-contractive with its own
    randomness, so conditionally on ``b``, ``E||b + C(x - b) - x||^2 <= (1 - alpha)
    ||x - b||^2``; with the inner mechanism's bound this gives ``1 - A = (1 - alpha)(1 - A1)``
    and ``B = (1 - alpha) B1``. Inner ``lag`` (``A1 = 1``, ``B1 = zeta``): ``A = 1``,
    ``B = (1 - alpha) zeta``. Inner ``ef21`` with ``C2``: ``E||b - x||^2 <= (1 - alpha2)
    ((1 + s)||h - y||^2 + (1 + 1/s)||x - y||^2)``, so with ``a = (1 - alpha)(1 - alpha2) =
    1 - alpha_bar``: ``1 - A = a (1 + s)``, ``B = a (1 + 1/s)``; at ``s = 1/sqrt(a) - 1``,
    ``A = 1 - sqrt(a)`` and ``B = a/(1 - sqrt(a))``, EF21's constants at ``alpha_bar`` (= v4's).
    Inner ``clag``: a skip leaves ``||h - x||^2 <= zeta ||x - y||^2`` and a send EF21's bound,
    so ``E||b - x||^2 <= (1 - alpha2)(1 + s)||h - y||^2 + max((1 - alpha2)(1 + 1/s), zeta)
    ||x - y||^2``; times ``1 - alpha`` at the same ``s``: ``A = 1 - r``, ``r = sqrt(a)``,
    ``B = (1 - alpha) max((1 - alpha2)/(1 - r), zeta)`` (``a = 0``: ``A = 1``,
    ``B = (1 - alpha) zeta``). The 3PC theorems (:func:`three_pc`, :func:`three_pc_pl`) then
    give the step.

    Args:
        mechanism: ``ef21``, ``lag``, ``clag``, ``v1``, ``v2``, ``v3``, ``v4`` or ``v5``.
        alpha: contraction of the main compressor ``C``.
        zeta: LAG/CLAG trigger.
        omega: variance of 3PCv2's unbiased ``Q``.
        p: 3PCv5's probability of a full send.
        alpha2: contraction of the second compressor (3PCv4's ``C2``, 3PCv3's inner EF21's).
        inner: 3PCv3's inner mechanism (``ef21``, ``lag`` or ``clag``).
    """
    for name, v in (("alpha", alpha), ("alpha2", alpha2), ("p", p)):
        if not 0 < v <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {v}")
    if zeta < 0 or omega < 0:
        raise ValueError(f"zeta and omega must be >= 0, got zeta={zeta}, omega={omega}")
    if mechanism == "ef21":
        return ef21_theta_beta(alpha)
    if mechanism == "lag":
        return 1.0, zeta
    if mechanism == "clag":
        theta, beta = ef21_theta_beta(alpha)
        return theta, max(beta, zeta)
    if mechanism == "v1":
        return 1.0, 1.0 - alpha
    if mechanism == "v2":
        return alpha, (1.0 - alpha) * omega
    if mechanism == "v4" or (mechanism == "v3" and inner == "ef21"):
        return ef21_theta_beta(1.0 - (1.0 - alpha) * (1.0 - alpha2))
    if mechanism == "v3":
        # b = inner 3PC(A1, B1) output, then C: E||b + C(x - b) - x||^2 <= (1 - alpha)
        # E||b - x||^2, so 1 - A = (1 - alpha)(1 - A1) and B = (1 - alpha) B1.
        if inner == "lag":
            return 1.0, (1.0 - alpha) * zeta
        if inner == "clag":
            a = (1.0 - alpha) * (1.0 - alpha2)
            if a == 0:
                return 1.0, (1.0 - alpha) * zeta
            r = math.sqrt(a)
            return 1.0 - r, (1.0 - alpha) * max((1.0 - alpha2) / (1.0 - r), zeta)
        raise ValueError(f"inner must be ef21, lag or clag, got {inner!r}")
    if mechanism == "v5":
        theta, beta = ef21_theta_beta(p)
        return theta, beta * (1.0 - alpha)
    raise ValueError(f"unknown 3PC mechanism {mechanism!r}")


# ---------------------------------------------------------------- EF-BV
def ef_bv_lambda_nu(eta: float, omega: float, omega_av: float) -> tuple[float, float]:
    """EF-BV's ``lambda* = min((1-eta)/((1-eta)^2 + omega), 1)`` and
    ``nu* = min((1-eta)/((1-eta)^2 + omega_av), 1)`` (Condat, Yi & Richtárik 2022,
    arXiv 2205.04180): the minimisers of ``r(lambda)`` and ``r_av(nu)``
    (:func:`ef_bv_r`)."""
    if not 0 <= eta < 1 or omega < 0 or omega_av < 0:
        raise ValueError(f"need 0 <= eta < 1, omega >= 0, omega_av >= 0; got {eta}, {omega}")
    a = 1.0 - eta
    lam = 1.0 if a * a + omega == 0 else min(a / (a * a + omega), 1.0)
    nu = 1.0 if a * a + omega_av == 0 else min(a / (a * a + omega_av), 1.0)
    return lam, nu


def ef_bv_r(weight: float, eta: float, omega: float) -> float:
    """``r = (1 - lambda + lambda eta)^2 + lambda^2 omega``: ``E||lambda C(v) - v||^2 <=
    r ||v||^2`` for ``C`` in the class ``C(eta, omega)`` (with ``nu`` and ``omega_av``, the
    same formula gives ``r_av``)."""
    return (1.0 - weight + weight * eta) ** 2 + weight**2 * omega


def ef_bv_authors(L: float, L_tilde: float, r: float, r_av: float) -> float:
    """EF-BV step of Condat, Yi & Richtárik 2022 (arXiv 2205.04180; the authors' code
    ``WilliamYi96/EF-BV``, e.g. ``Least_squares_PL-setting/compTRk.py``):
    ``1/(L + L_tilde sqrt(r_av/r)/s*)`` with ``s* = sqrt((1+r)/(2r)) - 1``, used for both the
    nonconvex and the PL theorems (under PL the Lyapunov function then contracts like
    ``max(1 - gamma mu, (1+r)/2)^t``). Needs ``r < 1``.

    Computed as ``sqrt(r_av)/(sqrt((1+r)/2) - sqrt(r))``, the same number (multiply ``s*`` by
    ``sqrt(r)``), which stays defined at ``r = 0`` (identity compressor, ``lam = 1``), where the
    step is ``1/(L + L_tilde sqrt(2 r_av))`` (``1/L`` when ``r_av = 0`` too).
    """
    if not 0 <= r < 1 or r_av < 0:
        raise ValueError(f"EF-BV needs 0 <= r < 1 and r_av >= 0, got r={r}, r_av={r_av}")
    return 1.0 / (L + L_tilde * math.sqrt(r_av) / (math.sqrt((1.0 + r) / 2.0) - math.sqrt(r)))


def ef_bv(L: float, L_tilde: float, r: float, r_av: float) -> float:
    """EF-BV nonconvex step ``1/(L + L_tilde sqrt(r_av)/(1 - sqrt(r)))`` (``--ef-step derived``,
    a deviation from the authors' step :func:`ef_bv_authors`), derived for this library (the
    paper's constants are unverified). Needs ``r < 1``. With ``r = r_av = 1 - alpha`` it is
    EF21's Theorem 1 step.

    Derivation: with ``G = mean_i ||h_i - grad f_i(x)||^2``, ``v_i = grad f_i(x) - h_i`` and
    ``R = ||x^+ - x||^2``: ``g^+ - grad f(x) = mean_i (nu C(v_i) - v_i)``, so (class
    ``C(eta, omega)``, averaged variance ``omega_av``) ``E||g^+ - grad f(x)||^2 <= r_av G``;
    ``h_i^+ - grad f_i(x^+) = (lam C(v_i) - v_i) + (grad f_i(x) - grad f_i(x^+))`` with
    ``E||lam C(v_i) - v_i||^2 <= r ||v_i||^2``, so by Young
    ``E G^+ <= (1+s) r G + (1 + 1/s) L_tilde^2 R``. The descent lemma
    ``f(x^+) <= f(x) - (gamma/2)||grad f||^2 - (1/(2 gamma) - L/2) R + (gamma/2)||g^+ -
    grad f||^2`` and the Lyapunov function ``f + (gamma r_av/(2 theta)) G``,
    ``theta = 1 - (1+s) r``, cancel the ``G`` terms and leave ``-(gamma/2)||grad f||^2`` plus
    ``R`` times ``-(1/(2 gamma) - L/2) + gamma r_av (1 + 1/s) L_tilde^2/(2 theta)``, which is
    ``<= 0`` when ``gamma <= 1/(L + L_tilde sqrt(r_av (1 + 1/s)/theta))`` (the theory sheet's
    lemma). At ``s = 1/sqrt(r) - 1``: ``theta = 1 - sqrt(r)``, ``1 + 1/s = 1/(1 - sqrt(r))``,
    so ``sqrt(r_av (1 + 1/s)/theta) = sqrt(r_av)/(1 - sqrt(r))``: the formula.
    """
    if not 0 <= r < 1 or r_av < 0:
        raise ValueError(f"EF-BV needs 0 <= r < 1 and r_av >= 0, got r={r}, r_av={r_av}")
    return 1.0 / (L + L_tilde * math.sqrt(r_av) / (1.0 - math.sqrt(r)))


def ef_bv_pl(L: float, L_tilde: float, r: float, r_av: float, mu: float) -> float:
    """EF-BV PL step ``min(1/(L + L_tilde sqrt(2 r_av)/(1 - sqrt(r))), (1 - sqrt(r))/(2 mu))``
    (derived as :func:`ef_bv` with the Lyapunov weight ``gamma r_av/theta``; the function
    ``f - f* + (gamma r_av/theta) G`` then contracts by ``1 - gamma mu``).

    Derivation: the recursions of :func:`ef_bv` at ``s = 1/sqrt(r) - 1`` (``theta = 1 -
    sqrt(r)``, ``1 + 1/s = 1/theta``), with ``Psi = f - f* + (gamma r_av/theta) G``: PL turns
    ``-(gamma/2)||grad f||^2`` into ``-gamma mu (f - f*)``; the ``G`` terms are
    ``(gamma r_av/2) G + (gamma r_av/theta)(1 - theta) G = (gamma r_av/theta)(1 - theta/2) G``,
    at most ``(1 - gamma mu)`` times the weight when ``gamma mu <= theta/2``; the ``R`` terms
    ``-(1/(2 gamma) - L/2) + (gamma r_av/theta)(1/theta) L_tilde^2`` are ``<= 0`` when
    ``1/gamma - L - 2 gamma r_av L_tilde^2/theta^2 >= 0``, i.e. for
    ``gamma <= 1/(L + L_tilde sqrt(2 r_av)/theta)``. Then ``E Psi^+ <= (1 - gamma mu) Psi``."""
    if not 0 <= r < 1 or r_av < 0:
        raise ValueError(f"EF-BV needs 0 <= r < 1 and r_av >= 0, got r={r}, r_av={r_av}")
    q = 1.0 - math.sqrt(r)
    return min(1.0 / (L + L_tilde * math.sqrt(2.0 * r_av) / q), q / (2.0 * mu))
