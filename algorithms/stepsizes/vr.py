"""Step sizes and parameters of the variance-reduced / unbiased-compression family: DIANA,
MARINA (and VR-/PP-MARINA), DASHA (and its PAGE, MVR and SYNC-MVR variants) and COMP-AMS.

Notation as in the theory sheet (THEORY.md §0): ``L`` smoothness of f, ``L_tilde = sqrt(mean
L_i^2)`` (DASHA's ``L_hat``), ``L_max = max_i L_i``, ``L_pm`` the Hessian variance, ``omega``
the variance of independent unbiased compressors, ``n`` nodes, ``p`` a synchronisation
probability, ``B`` a minibatch. ``calL`` is a mean-square per-sample smoothness (VR-MARINA's
``ℒ``; DASHA's ``L_max``/``L_sigma`` of the PAGE/MVR theorems). Every function states the
status of its formula: [V-code] (checked against the authors' code), [V-deriv] (re-derived),
[M] (recalled from the paper), [U] (uncertain: use with multipliers).
"""

from __future__ import annotations

import math

__all__ = [
    "ab_constants",
    "comp_ams",
    "dasha",
    "dasha_code",
    "dasha_derived",
    "dasha_momentum",
    "dasha_mvr",
    "dasha_page",
    "dasha_sync_mvr",
    "diana",
    "diana_alpha",
    "diana_nonconvex",
    "marina",
    "marina_ab",
    "marina_ab_pl",
    "marina_pl",
    "pp_marina",
    "vr_marina",
]


def _check_p(p: float) -> None:
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")


# ---------------------------------------------------------------------------------- DIANA
def diana_alpha(omega: float) -> float:
    """DIANA's shift step ``alpha = 1/(omega + 1)`` (Mishchenko et al. 2019, arXiv 1901.09269;
    Horváth et al. 2019, arXiv 1904.05115): the largest value the analyses allow."""
    return 1.0 / (omega + 1.0)


def diana(L: float, L_max: float, omega: float, n: int) -> float:
    """DIANA, strongly convex with full gradients: ``1/(L + 6 omega L_max / n)`` with
    ``alpha = 1/(omega+1)``; Lyapunov ``||x - x*||^2 + (4 omega/(n alpha)) gamma^2 H`` contracts
    by ``max(1 - gamma mu, 1 - alpha/2)`` (theory sheet §2.8, [V-deriv]; same form as Gorbunov,
    Hanzely & Richtárik 2020, arXiv 1905.11261). The constant 6 is this derivation's; FL_PyTorch
    uses ``1/(L_max (1 + 4 omega/n))`` (source not identified).

    Derivation (``f`` ``mu``-strongly convex, each ``f_i`` convex and ``L_i``-smooth,
    independent ``Q_i`` in ``U(omega)``, ``alpha <= 1/(omega+1)``): with ``u_i = grad f_i(x) -
    grad f_i(x*)``, ``e_i = h_i - grad f_i(x*)``, ``H = mean_i ||e_i||^2``, ``D_f = f(x) - f*``
    and ``Delta_i = grad f_i(x) - h_i = u_i - e_i``: (1) ``g = h + mean_i Q(Delta_i)`` is
    unbiased and, by independence, ``E||g||^2 <= ||grad f(x)||^2 + (omega/n^2) sum_i
    ||Delta_i||^2 <= 2 (L + 2 omega L_max/n) D_f + (2 omega/n) H``, using
    ``||Delta_i||^2 <= 2||u_i||^2 + 2||e_i||^2``, ``||grad f(x)||^2 <= 2 L D_f`` and
    ``mean_i ||u_i||^2 <= 2 L_max D_f``; (2) ``E||e_i^+||^2 = ||e_i||^2 + 2 alpha <e_i,
    Delta_i> + alpha^2 E||Q(Delta_i)||^2 <= ||e_i||^2 + alpha (2 <e_i, Delta_i> +
    ||Delta_i||^2) = (1 - alpha)||e_i||^2 + alpha ||u_i||^2`` (``alpha^2 (1 + omega) <=
    alpha``), so ``E H^+ <= (1 - alpha) H + 2 alpha L_max D_f``; (3) ``<grad f(x), x - x*> >=
    D_f + (mu/2)||x - x*||^2`` gives ``E||x^+ - x*||^2 <= (1 - gamma mu)||x - x*||^2 - 2 gamma
    D_f + gamma^2 E||g||^2``. With ``V = ||x - x*||^2 + M gamma^2 H``, ``M = 4 omega/(n
    alpha)``: the ``H`` coefficient is ``M gamma^2 (1 - alpha) + 2 gamma^2 omega/n = M gamma^2
    (1 - alpha/2)``; the ``D_f`` coefficient is ``-2 gamma + 2 gamma^2 (L + 2 omega L_max/n) +
    2 M gamma^2 alpha L_max = -2 gamma + 2 gamma^2 (L + 6 omega L_max/n)``, ``<= 0`` exactly
    when ``gamma <= 1/(L + 6 omega L_max/n)``. Hence ``E V^+ <= max(1 - gamma mu,
    1 - alpha/2) V``."""
    return 1.0 / (L + 6.0 * omega * L_max / n)


def diana_nonconvex(L: float, omega: float, n: int) -> float:
    """[U] DIANA, nonconvex: ``1/(10 L sqrt(1 + omega/n) (omega + 2))``, i.e. VR-DIANA's step
    (Horváth et al. 2019, arXiv 1904.05115, Thm 4) with one sample per node, ``m = 1``, as
    FL_PyTorch uses it for plain DIANA (theory sheet §2.8)."""
    return 1.0 / (10.0 * L * math.sqrt(1.0 + omega / n) * (omega + 2.0))


# ---------------------------------------------------------------------------------- MARINA
def ab_constants(omega: float, n: int, kind: str) -> tuple[float, float]:
    """The AB-inequality ``E||(1/n) sum_i C_i(a_i) - mean a||^2 <= A (1/n) sum_i ||a_i||^2 -
    B ||mean a||^2`` (Szlendak, Tyurin & Richtárik 2021, arXiv 2110.03300):

    * ``independent``: independent ``C_i`` in ``U(omega)``: ``A = omega/n, B = 0``;
    * ``partition``: PermK, the nodes keep disjoint parts of one shared permutation:
      ``A = B = 1``;
    * ``same``: every node draws the same randomness (e.g. RandK with a shared seed): by
      Jensen ``A = omega, B = 0`` (no ``1/n`` gain).
    """
    if kind == "independent":
        return omega / n, 0.0
    if kind == "partition":
        return 1.0, 1.0
    if kind == "same":
        return omega, 0.0
    raise ValueError(f"kind must be independent, partition or same, got {kind!r}")


def marina_ab(
    L: float, L_tilde: float, p: float, A: float, B: float, L_pm: float | None = None
) -> float:
    """MARINA, nonconvex, general AB-inequality (theory sheet §2.9, [V-code]):
    ``1/(L + sqrt(((1-p)/p) ((A-B) L_tilde^2 + B L_pm^2)))``. Independent compressors
    (``A = omega/n, B = 0``) give Gorbunov et al. 2021 (arXiv 2102.07845) Thm 2.1 in its refined
    ``L, L_tilde`` form; PermK (``A = B = 1``) gives ``1/(L + sqrt((1-p)/p) L_pm)``."""
    _check_p(p)
    if B > 0 and L_pm is None:
        raise ValueError("this step needs the Hessian variance L_pm, which the problem lacks")
    var = (A - B) * L_tilde**2 + (B * L_pm**2 if B > 0 else 0.0)
    return 1.0 / (L + math.sqrt((1.0 - p) / p * var))


def marina_ab_pl(
    L: float,
    L_tilde: float,
    p: float,
    A: float,
    B: float,
    mu: float,
    L_pm: float | None = None,
) -> float:
    """MARINA under PL: ``min(1/(L + sqrt(2 ((1-p)/p) ((A-B) L_tilde^2 + B L_pm^2))), p/(2 mu))``
    (Gorbunov et al. 2021, arXiv 2102.07845, Thm 2.2 form; theory sheet §2.9 [V-deriv] for
    independent compressors; the AB generalisation follows the same derivation)."""
    _check_p(p)
    if B > 0 and L_pm is None:
        raise ValueError("this step needs the Hessian variance L_pm, which the problem lacks")
    var = (A - B) * L_tilde**2 + (B * L_pm**2 if B > 0 else 0.0)
    return min(1.0 / (L + math.sqrt(2.0 * (1.0 - p) / p * var)), p / (2.0 * mu))


def marina(L: float, L_tilde: float, p: float, omega: float, n: int) -> float:
    """MARINA, nonconvex, independent ``U(omega)`` compressors:
    ``1/(L + L_tilde sqrt((1-p) omega/(p n)))`` (Gorbunov et al. 2021, arXiv 2102.07845,
    Thm 2.1; refined form of theory sheet §2.9, [V-code])."""
    return marina_ab(L, L_tilde, p, omega / n, 0.0)


def marina_pl(L: float, L_tilde: float, p: float, omega: float, n: int, mu: float) -> float:
    """MARINA under PL: ``min(1/(L + L_tilde sqrt(2(1-p) omega/(p n))), p/(2 mu))``
    (Gorbunov et al. 2021, arXiv 2102.07845, Thm 2.2; theory sheet §2.9 [V-deriv])."""
    return marina_ab_pl(L, L_tilde, p, omega / n, 0.0, mu)


def vr_marina(
    L: float, L_tilde: float, calL: float, p: float, omega: float, n: int, b: int
) -> float:
    """VR-MARINA (finite sums, minibatch ``b'`` with the same samples at both points):
    ``1/(L + sqrt(((1-p)/(p n)) (omega L_tilde^2 + (1 + omega) calL^2 / b')))``
    (Gorbunov et al. 2021, arXiv 2102.07845, Thm 3.1; theory sheet §2.9 [V-code])."""
    _check_p(p)
    var = omega * L_tilde**2 + (1.0 + omega) * calL**2 / b
    return 1.0 / (L + math.sqrt((1.0 - p) / (p * n) * var))


def pp_marina(L: float, L_tilde: float, p: float, omega: float, r: int) -> float:
    """PP-MARINA (``r`` nodes sampled with replacement when the coin is 0):
    ``1/(L + L_tilde sqrt((1-p)(1+omega)/(p r)))`` (Gorbunov et al. 2021, arXiv 2102.07845,
    Thm 4.1 in the refined form of theory sheet §2.9, [V-3rd FL_PyTorch; V-deriv])."""
    _check_p(p)
    return 1.0 / (L + L_tilde * math.sqrt((1.0 - p) * (1.0 + omega) / (p * r)))


# ---------------------------------------------------------------------------------- DASHA
def dasha_momentum(omega: float) -> float:
    """DASHA's momentum ``a = 1/(2 omega + 1)`` (Tyurin & Richtárik 2022, arXiv 2202.01268,
    Thm 6.1; the authors' code default, [V-code])."""
    return 1.0 / (2.0 * omega + 1.0)


def dasha(L: float, L_hat: float, omega: float, n: int) -> float:
    """DASHA, published step (Tyurin & Richtárik 2022, arXiv 2202.01268, Thm 6.1, [M]):
    ``1/(L + sqrt(16 omega (2 omega + 1)/n) L_hat)``; the smallest of the three versions of
    the theory sheet §2.10, hence the safe choice."""
    return 1.0 / (L + math.sqrt(16.0 * omega * (2.0 * omega + 1.0) / n) * L_hat)


def dasha_code(L_mean: float, L_hat: float, omega: float, n: int) -> float:
    """DASHA, the authors' code (theory sheet §2.10, [V-code]):
    ``1/(mean_i L_i + L_hat sqrt(omega (4 omega + 1)/n))``."""
    return 1.0 / (L_mean + L_hat * math.sqrt(omega * (4.0 * omega + 1.0) / n))


def dasha_derived(L: float, L_hat: float, omega: float, n: int) -> float:
    """DASHA, re-derived with ``h_i = grad f_i`` (theory sheet §2.10, [V-deriv]):
    ``1/(L + L_hat sqrt(2 omega (4 omega + 1)/n))``."""
    return 1.0 / (L + L_hat * math.sqrt(2.0 * omega * (4.0 * omega + 1.0) / n))


def dasha_page(
    L: float, L_hat: float, calL: float, omega: float, n: int, p: float, B: int
) -> float:
    """[U] DASHA-PAGE (Tyurin & Richtárik 2022, arXiv 2202.01268, Sec. 6; theory sheet §2.10):
    ``1/(L + sqrt(48 omega (2 omega + 1)/n (L_hat^2 + (1-p) calL^2/B)
    + 2 (1-p) calL^2/(p n B)))``, ``calL`` standing for the paper's per-sample ``L_max``."""
    _check_p(p)
    inner = 48.0 * omega * (2.0 * omega + 1.0) / n * (L_hat**2 + (1.0 - p) * calL**2 / B)
    inner += 2.0 * (1.0 - p) * calL**2 / (p * n * B)
    return 1.0 / (L + math.sqrt(inner))


def dasha_mvr(L: float, L_hat: float, calL: float, omega: float, n: int, b: float, B: int) -> float:
    """[U] DASHA-MVR (Tyurin & Richtárik 2022, arXiv 2202.01268, Sec. 6; theory sheet §2.10):
    ``1/(L + sqrt(48 omega (2 omega + 1)/n (L_hat^2 + (1-b)^2 calL^2/B)
    + 12 (1-b)^2 calL^2/(b n B)))``, ``calL`` standing for the paper's ``L_sigma``. The method
    then converges to a floor proportional to ``b sigma^2/(n B)``."""
    if not 0 < b <= 1:
        raise ValueError(f"b must be in (0, 1], got {b}")
    inner = 48.0 * omega * (2.0 * omega + 1.0) / n * (L_hat**2 + (1.0 - b) ** 2 * calL**2 / B)
    inner += 12.0 * (1.0 - b) ** 2 * calL**2 / (b * n * B)
    return 1.0 / (L + math.sqrt(inner))


def dasha_sync_mvr(
    L: float, L_hat: float, calL: float, omega: float, n: int, p: float, B: int
) -> float:
    """[U] DASHA-SYNC-MVR: our choice, DASHA-PAGE's step (:func:`dasha_page`) with ``calL``
    the per-sample smoothness. Between synchronisations SYNC-MVR runs the MVR estimator with
    ``b = 0``, which is PAGE's difference estimator ``h + grad(x'; xi) - grad(x; xi)``, and a
    synchronisation (probability ``p``) resets ``h_i`` and ``g_i`` to a fresh (mega-batch)
    gradient, which PAGE's analysis covers with the mega-batch variance as an extra floor."""
    return dasha_page(L, L_hat, calL, omega, n, p, B)


# ---------------------------------------------------------------------------------- COMP-AMS
def comp_ams(L: float, eps: float, beta1: float, delta: float) -> float:
    """[U] COMP-AMS learning rate (Li, Karimi & Li, ICLR 2022, arXiv 2205.05632):
    ``eta = sqrt(eps) / (L (1 + beta1/(1 - beta1) + 2 q/(1 - q^2)))`` with ``q^2 = 1 - delta``.

    The paper's Theorem 1 asks ``eta <= sqrt(eps)/(C L)`` with a constant ``C`` growing with
    the momentum (``beta1/(1 - beta1)``) and the compression error (``q/(1 - q^2)``); its
    corollary then takes ``eta = Theta(sqrt(n/(T d)))``, which needs the horizon ``T``. This
    horizon-free choice keeps the form of the condition (the preconditioner
    ``1/sqrt(v_hat + eps)`` is at most ``1/sqrt(eps)``, so with ``beta1 = 0`` and no compression
    it is gradient descent's ``1/L`` in the worst case); the constant is ours, not checked
    against the paper. It is very conservative for ``eps = 1e-8``: tune with ``--step-mult``.
    """
    if not 0 <= beta1 < 1:
        raise ValueError(f"beta1 must be in [0, 1), got {beta1}")
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    q2 = 1.0 - delta
    C = 1.0 + beta1 / (1.0 - beta1) + 2.0 * math.sqrt(q2) / (1.0 - q2)
    return math.sqrt(eps) / (L * C)
