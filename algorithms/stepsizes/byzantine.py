"""Step sizes of the Byzantine-robust methods with compression.

``G = n - K`` honest nodes, ``delta = K/n`` the Byzantine fraction and ``c`` the constant of a
(delta, c)-robust aggregator (Gorbunov, Horváth, Richtárik & Gidel 2022, arXiv 2206.00529,
Def. 1.1; Karimireddy, He & Jaggi 2022, arXiv 2006.09365), ``omega`` of independent unbiased
compressors, ``p`` the synchronisation probability, ``b`` the minibatch, ``L`` the smoothness of
f, ``L_tilde = sqrt(mean L_i^2)`` (bounds the paper's ``L_pm``, the mean-square smoothness of
the nodes' gradient differences) and ``calL`` the mean-square per-sample smoothness (bounds the
paper's ``calL_pm``). Status marks as in :mod:`algorithms.stepsizes.vr`.
"""

from __future__ import annotations

import math

__all__ = ["byz_dasha_page", "byz_ef21", "byz_robust_factor", "byz_vr_marina", "byz_vr_marina_A"]


def byz_vr_marina_A(
    L_tilde: float, calL: float, p: float, omega: float, G: int, b: int, c: float, delta: float
) -> float:
    """[U] The constant ``A`` of Byz-VR-MARINA's Theorem 2.1 (arXiv 2206.00529, general
    nonconvex case), as recalled (its statement could not be read here):
    ``A = (6(1-p)/p) (4 c delta/p + 1/(2G)) (omega L_tilde^2 + (1 + omega) calL^2/b)``."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if G < 1:
        raise ValueError(f"the theory needs at least one honest node, got G = {G}")
    var = omega * L_tilde**2 + (1.0 + omega) * calL**2 / b
    return 6.0 * (1.0 - p) / p * (4.0 * c * delta / p + 1.0 / (2.0 * G)) * var


def byz_vr_marina(
    L: float,
    L_tilde: float,
    calL: float,
    p: float,
    omega: float,
    G: int,
    b: int,
    c: float,
    delta: float,
) -> float:
    """[U] Byz-VR-MARINA (arXiv 2206.00529, Thm 2.1): ``gamma = 1/(L + sqrt(A))`` with ``A`` of
    :func:`byz_vr_marina_A`; then ``E||grad f(xhat)||^2 <= 2 Phi_0/(gamma (T + 1)) + 24 c delta
    zeta^2/p`` (``zeta^2`` the honest nodes' gradient heterogeneity)."""
    return 1.0 / (L + math.sqrt(byz_vr_marina_A(L_tilde, calL, p, omega, G, b, c, delta)))


def byz_robust_factor(c: float, delta: float) -> float:
    """``1 + sqrt(8 c delta)``: how the robust aggregator's error inflates the compression
    term of Byz-EF21's step (coauthors' notebook, see :func:`byz_ef21`)."""
    return 1.0 + math.sqrt(8.0 * c * delta)


def byz_ef21(L: float, L_tilde: float, alpha: float, c: float, delta: float) -> float:
    """[V-code] Byz-EF21 (Rammal, Gruntkowska, Fedin, Gorbunov & Richtárik 2024, arXiv
    2310.09804): ``gamma = 1/(L + (2/alpha)(1 + sqrt(8 c delta)) L_tilde)``, as the coauthors'
    notebook computes it (Nikosimus/CC-for-BR-Learning ``Experiments.ipynb``,
    ``gamma_th_ef_f``: ``2 d/k`` for Top-k, i.e. ``2/alpha``, an upper bound of EF21's
    ``sqrt(beta/theta) + 1``); with ``K = 0`` it is EF21's step with that bound. The theorem
    itself could not be read here."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return 1.0 / (L + 2.0 / alpha * byz_robust_factor(c, delta) * L_tilde)


def byz_dasha_page(
    L: float,
    L_tilde: float,
    calL: float,
    omega: float,
    G: int,
    b: int,
    m: int,
    c: float,
    delta: float,
) -> float:
    """[V-code] Byz-DASHA-PAGE (arXiv 2310.09804): ``gamma = 1/(L + sqrt(R))`` with
    ``R = (12 omega (2 omega + 1)(L_tilde^2 + calL^2/b) + 2 (m/b) calL^2/b)
    (sqrt(1/G) + sqrt(8 c delta))^2``, as the coauthors' notebook computes it
    (``R_dp``; their per-sample constant is the worst ``L_ij``, here the mean-square
    ``calL``); ``a = 1/(2 omega + 1)`` and ``p = b/m`` alongside. The theorem itself could
    not be read here."""
    if G < 1:
        raise ValueError(f"the theory needs at least one honest node, got G = {G}")
    var = 12.0 * omega * (2.0 * omega + 1.0) * (L_tilde**2 + calL**2 / b)
    var += 2.0 * (m / b) * calL**2 / b
    R = var * (math.sqrt(1.0 / G) + math.sqrt(8.0 * c * delta)) ** 2
    return 1.0 / (L + math.sqrt(R))
