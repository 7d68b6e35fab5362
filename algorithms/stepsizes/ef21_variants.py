"""Step sizes of EF21's variants in "EF21 with Bells & Whistles" (Fatkhullin, Sokolov,
Gorbunov, Li & Richtárik 2021, arXiv 2110.03294): heavy ball, bidirectional compression,
stochastic gradients, partial participation. Where the paper's own constants could not be
established here, the function says so and gives the derivation it uses instead."""

from __future__ import annotations

import math

from algorithms.stepsizes.ef import ef21, ef21_pl, ef21_theta_beta


# ---------------------------------------------------------------- EF21-HB
def ef21_hb(L: float, L_tilde: float, alpha: float, eta: float, mu: float | None = None) -> float:
    """EF21-HB step ``(1 - eta) gamma_EF21`` (Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 6).

    Not the paper's theorem: its constants (Appendix H) could not be established from the
    sources available here. The step keeps heavy ball's effective step ``gamma/(1 - eta)``
    (the limit of ``x^t - x^{t+1}`` per unit ``g`` when ``g`` is constant) at EF21's Theorem 1
    step (Theorem 2 under PL when ``mu`` is given), which is what EF21's analysis covers; the
    authors' experiments instead use EF21's step unchanged, which oscillates for ``eta`` near 1.
    ``eta = 0`` is EF21's step exactly."""
    if not 0 <= eta < 1:
        raise ValueError(f"eta must be in [0, 1), got {eta}")
    base = ef21(L, L_tilde, alpha) if mu is None else ef21_pl(L, L_tilde, alpha, mu)
    return (1.0 - eta) * base


# ---------------------------------------------------------------- EF21-BC
def ef21_bc_c1_c2(L: float, L_tilde: float, alpha_w: float, alpha_M: float) -> tuple[float, float]:
    """The two constants of :func:`ef21_bc`: ``c1 = beta_w L_tilde^2/(2 theta_w)`` and
    ``c2 = (3 beta_M/(2 theta_M)) (beta_w L_tilde^2 (2 - theta_w)/theta_w + beta_w L_tilde^2
    + L^2)``, with EF21's ``theta, beta`` at ``alpha_w`` (uplink) and ``alpha_M`` (downlink)."""
    theta_w, beta_w = ef21_theta_beta(alpha_w)
    theta_M, beta_M = ef21_theta_beta(alpha_M)
    b = beta_w * L_tilde**2
    c1 = b / (2.0 * theta_w)
    c2 = 1.5 * beta_M / theta_M * (b * (2.0 - theta_w) / theta_w + b + L**2)
    return c1, c2


def ef21_bc(
    L: float, L_tilde: float, alpha_w: float, alpha_M: float, mu: float | None = None
) -> float:
    """EF21-BC step (Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 5), derived here (the
    paper's Appendix G constants were not available): nonconvex
    ``1/(L + sqrt(2) (sqrt(c1) + sqrt(c2)))``, PL (``mu`` given)
    ``min(1/(L + 2 (sqrt(c1) + sqrt(c2))), min(theta_w, theta_M)/(2 mu))``, with ``c1, c2`` of
    :func:`ef21_bc_c1_c2`.

    Derivation: with ``G_w = mean_i ||g~_i - grad f_i(x)||^2``, ``G_M = ||g - g~||^2`` and
    ``R = ||x^{t+1} - x^t||^2``, EF21's descent lemma has the error
    ``||g - grad f||^2 <= (1+u) G_M + (1+1/u) G_w``; the uplink gives EF21's
    ``E G_w^+ <= (1-theta_w) G_w + beta_w L_tilde^2 R``; the downlink
    ``E G_M^+ <= (1-theta_M) G_M + beta_M ||g~^+ - g~||^2`` with
    ``||g~^+ - g~||^2 <= 3 (G_w^+ + G_w + L^2 R)``. The Lyapunov function
    ``f + a G_w + b G_M`` with ``b = gamma (1+u)/(2 theta_M)``,
    ``a = (gamma (1+1/u)/2 + 3 b beta_M (2 - theta_w))/theta_w`` decreases by
    ``(gamma/2)||grad f||^2`` when ``1/gamma - L - 2 gamma K(u) >= 0``,
    ``K(u) = c1 (1 + 1/u) + c2 (1 + u)``, smallest at ``u = sqrt(c1/c2)``:
    ``K = (sqrt(c1) + sqrt(c2))^2``. Under PL the weights double (``G`` terms contract by
    ``1 - gamma mu`` when ``gamma mu <= theta/2``). ``alpha_M = 1`` (``c2 = 0``) is EF21's
    Theorem 1 (Theorem 2) step exactly; the complexity is ``O(1/(alpha_w alpha_M))`` as the
    paper's."""
    c1, c2 = ef21_bc_c1_c2(L, L_tilde, alpha_w, alpha_M)
    s = math.sqrt(c1) + math.sqrt(c2)
    if mu is None:
        return 1.0 / (L + math.sqrt(2.0) * s)
    theta = min(ef21_theta_beta(alpha_w)[0], ef21_theta_beta(alpha_M)[0])
    return min(1.0 / (L + 2.0 * s), theta / (2.0 * mu))


# ---------------------------------------------------------------- EF21-SGD
def ef21_sgd_constants(alpha: float) -> tuple[float, float, float]:
    """``(theta^, beta^, kappa)`` of EF21-SGD's estimator recursion (derived here):
    ``E G^+ <= (1 - theta^) G + beta^ L_tilde^2 ||x^+ - x||^2 + kappa V`` with ``V`` the
    minibatch gradient variance (mean over nodes), where ``1 - theta^ = (1+nu)(1-alpha)(1+s)``,
    ``beta^ = (1+nu)(1-alpha)(1+1/s)``, ``kappa = (1+nu)(1-alpha) + 1 + 1/nu``. Young
    parameters: ``s`` at EF21's optimum ``1/sqrt(1-alpha) - 1`` and ``nu = theta/(2(1-theta))``,
    so that ``theta^ = theta/2`` (``theta`` EF21's). ``alpha = 1``: ``(1, 0, 1)``."""
    if alpha == 1:
        return 1.0, 0.0, 1.0
    theta, beta = ef21_theta_beta(alpha)
    nu = theta / (2.0 * (1.0 - theta))
    return theta / 2.0, (1.0 + nu) * beta, (1.0 + nu) * (1.0 - alpha) + 1.0 + 1.0 / nu


def ef21_sgd(L: float, L_tilde: float, alpha: float, mu: float | None = None) -> float:
    """EF21-SGD step (Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 2), derived here for
    stochastic gradients with ``A_i = 0``, ``B_i = 1`` in the paper's Assumption 2 (bounded
    variance, Example 1): nonconvex ``1/(L + L_tilde sqrt(beta^/theta^))``, PL
    ``min(1/(L + L_tilde sqrt(2 beta^/theta^)), theta^/(2 mu))`` (:func:`ef21_sgd_constants`).

    The step does not depend on ``sigma^2``, which sets the noise floor only. Not the paper's
    Theorem (its Appendix D constants, with ``A_i > 0`` too, were not available here).

    Derivation: ``hat g_i`` is unbiased for ``grad f_i(x^+)`` with variance ``V_i =
    sigma_i^2/tau``; ``G = mean_i ||g_i - grad f_i(x)||^2``, ``R = ||x^+ - x||^2``. Split
    ``g_i^+ - grad f_i(x^+) = a + b``, ``a = g_i + C(hat g_i - g_i) - hat g_i``,
    ``b = hat g_i - grad f_i(x^+)``: Young with ``nu``, ``E||a||^2 <= (1 - alpha)
    E||hat g_i - g_i||^2 = (1 - alpha)(||grad f_i(x^+) - g_i||^2 + V_i)``, ``E||b||^2 = V_i``
    and ``||grad f_i(x^+) - g_i||^2 <= (1+s) ||g_i - grad f_i(x)||^2 + (1 + 1/s) L_i^2 R``
    give ``E G^+ <= (1 - theta^) G + beta^ L_tilde^2 R + kappa V`` with the constants of
    :func:`ef21_sgd_constants` (at EF21's ``s``, ``(1-alpha)(1+s) = 1 - theta``, so
    ``1 - theta^ = (1+nu)(1-theta) = 1 - theta/2`` at ``nu = theta/(2(1-theta))``).
    Nonconvex: EF21's descent lemma ``f(x^+) <= f(x) - (gamma/2)||grad f||^2 -
    (1/(2 gamma) - L/2) R + (gamma/2) G`` (``||g - grad f||^2 <= G`` by Jensen) and
    ``Psi = f - f_inf + (gamma/(2 theta^)) G`` give ``E Psi^+ <= Psi -
    (gamma/2)||grad f||^2 - (1/(2 gamma) - L/2 - gamma beta^ L_tilde^2/(2 theta^)) R +
    gamma kappa V/(2 theta^)``;
    the ``R`` term is ``<= 0`` for ``gamma <= 1/(L + L_tilde sqrt(beta^/theta^))`` (the
    theory sheet's lemma), so ``E||grad f(x^)||^2 <= 2 Psi^0/(gamma T) + kappa V/theta^``.
    PL: with the weight ``gamma/theta^`` the ``G`` terms are ``(gamma/theta^)(1 - theta^/2) G
    <= (1 - gamma mu)(gamma/theta^) G`` when ``gamma mu <= theta^/2``, the ``R`` term is
    ``<= 0`` for ``gamma <= 1/(L + L_tilde sqrt(2 beta^/theta^))``, and PL turns
    ``-(gamma/2)||grad f||^2`` into ``-gamma mu (f - f*)``: ``E Psi^+ <= (1 - gamma mu) Psi +
    gamma kappa V/theta^``."""
    theta_h, beta_h, _ = ef21_sgd_constants(alpha)
    if mu is None:
        return 1.0 / (L + L_tilde * math.sqrt(beta_h / theta_h))
    return min(1.0 / (L + L_tilde * math.sqrt(2.0 * beta_h / theta_h)), theta_h / (2.0 * mu))


# ---------------------------------------------------------------- EF21-PP
def ef21_pp(L: float, L_tilde: float, alpha: float, p: float) -> float:
    """EF21-PP nonconvex step (Fatkhullin et al. 2021, arXiv 2110.03294, Theorem 7, p. 47) with
    every node participating with probability ``p``:
    ``1/(L + sqrt(B_tilde/theta_p))``, ``theta_p = theta p - rho (1-p)``,
    ``B_tilde = (beta p + (1 + 1/rho)(1-p)) L_tilde^2``, at ``rho = theta p/(2(1-p))`` (so
    ``theta_p = theta p/2``); ``theta``, ``beta`` at EF21's optimal Young parameter.
    ``p = 1`` is EF21's Theorem 1 step exactly."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p == 1:
        return ef21(L, L_tilde, alpha)
    theta_p, B_tilde = ef21_pp_constants(L_tilde, alpha, p)
    return 1.0 / (L + math.sqrt(B_tilde / theta_p))


def ef21_pp_constants(L_tilde: float, alpha: float, p: float) -> tuple[float, float]:
    """Theorem 7's ``(theta_p, B~)`` with all ``p_i = p`` and ``rho = theta p/(2(1-p))``
    (:func:`ef21_pp`); ``p = 1`` gives EF21's ``(theta, beta L_tilde^2)``."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    theta, beta = ef21_theta_beta(alpha)
    if p == 1:
        return theta, beta * L_tilde**2
    rho = theta * p / (2.0 * (1.0 - p))
    theta_p = theta * p - rho * (1.0 - p)
    return theta_p, (beta * p + (1.0 + 1.0 / rho) * (1.0 - p)) * L_tilde**2


def ef21_pp_pl(L: float, L_tilde: float, alpha: float, p: float, mu: float) -> float:
    """EF21-PP PL step ``min(1/(L + sqrt(2 B~/theta_p)), theta_p/(2 mu))``.

    Derived here, not B&W's PL theorem for EF21-PP (not available in the sources at hand):
    EF21's Theorem 2 argument (arXiv 2106.05203) applied to the estimator recursion behind
    Theorem 7 (arXiv 2110.03294, p. 47; its step ``1/(L + sqrt(B~/theta_p))`` is that
    recursion's). ``p = 1`` is EF21's Theorem 2 step exactly.

    Derivation: with ``G = mean_i ||g_i - grad f_i(x)||^2`` and ``R = ||x^{t+1} - x^t||^2``, a
    node takes part with probability ``p`` (only this marginal is used, so Poisson and nice
    sampling alike). A participant's expected error is at most EF21's bound
    ``(1 - alpha)||grad f_i(x^{t+1}) - g_i||^2 <= (1 - theta) G_i + beta L_i^2 R``; another
    node's is ``||g_i - grad f_i(x^{t+1})||^2 <= (1 + rho) G_i + (1 + 1/rho) L_i^2 R``.
    Averaged: ``E G^{t+1} <= (1 - theta_p) G^t + B~ R`` with ``theta_p = theta p - rho (1 -
    p)`` and ``B~ = (beta p + (1 + 1/rho)(1 - p)) L_tilde^2`` (Theorem 7's constants;
    ``theta_p = theta p/2`` at ``rho = theta p/(2(1-p))``). EF21's descent lemma
    ``f(x^{t+1}) <= f(x^t) - (gamma/2)||grad f||^2 - (1/(2 gamma) - L/2) R + (gamma/2) G``
    and ``Psi = f - f* + (gamma/theta_p) G``: PL turns ``-(gamma/2)||grad f||^2`` into
    ``-gamma mu (f - f*)``; the ``G`` terms are ``(gamma/theta_p)(1 - theta_p/2) G``, at most
    ``(1 - gamma mu)`` times the weight when ``gamma <= theta_p/(2 mu)``; the ``R`` terms
    ``-(1/(2 gamma) - L/2) + gamma B~/theta_p`` are ``<= 0`` when ``1/gamma - L - 2 gamma
    B~/theta_p >= 0``, i.e. for ``gamma <= 1/(L + sqrt(2 B~/theta_p))`` (the theory sheet's
    lemma). Then ``E Psi^T <= (1 - gamma mu)^T Psi^0``."""
    if p == 1:
        return ef21_pl(L, L_tilde, alpha, mu)
    theta_p, B_tilde = ef21_pp_constants(L_tilde, alpha, p)
    return min(1.0 / (L + math.sqrt(2.0 * B_tilde / theta_p)), theta_p / (2.0 * mu))
