"""Step sizes and parameters of the accelerated unbiased-compression family: ADIANA, CANITA.

ADIANA: Li, Kovalev, Qian & Richtárik 2020, "Acceleration for Compressed Gradient Descent in
Distributed and Federated Optimization", ICML 2020, arXiv 2002.11364, Algorithm 2 and its
strongly convex theorem. The formulas below are those of the coauthors' group's reference
implementation (Rustem-Islamov/FedNL-Public, ``methods.py::adiana``, [V-code]); the theorem's
own statement could not be read here ([U] whether it states exactly these constants). Notation:
``omega`` the variance of independent unbiased compressors, ``n`` nodes, ``L`` the smoothness
of every ``f_i`` (the paper assumes one ``L`` for all nodes: ``L_max``), ``mu`` the strong
convexity of ``f``; the library's step ``gamma`` is the paper's ``eta`` and the paper's
``gamma`` (the step of the ``z`` sequence) is called ``gamma_z``.
"""

from __future__ import annotations

import math

__all__ = ["adiana_alpha", "adiana_eta", "adiana_momentum", "adiana_p", "canita_theta1"]


def _check_omega_n(omega: float, n: int) -> None:
    if not omega >= 0:
        raise ValueError(f"omega must be >= 0, got {omega}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")


def adiana_alpha(omega: float) -> float:
    """The shift step ``alpha = 1/(omega + 1)`` (as DIANA's)."""
    if not omega >= 0:
        raise ValueError(f"omega must be >= 0, got {omega}")
    return 1.0 / (omega + 1.0)


def adiana_p(omega: float, n: int) -> float:
    """The probability of the anchor refresh ``w <- y``:
    ``p = min(1, max(alpha/2, (alpha/2)(sqrt(n/(32 omega)) - 1)))`` with ``alpha = 1/(omega+1)``;
    ``p = 1`` without compression (``omega = 0``)."""
    _check_omega_n(omega, n)
    if omega == 0:
        return 1.0
    half = 0.5 * adiana_alpha(omega)
    return min(1.0, max(half, half * (math.sqrt(n / (32.0 * omega)) - 1.0)))


def adiana_eta(L: float, omega: float, n: int, p: float) -> float:
    """The gradient step ``eta = min(1/(2L), n/(64 omega L (2 p (omega+1) + 1)^2))``;
    ``1/(2L)`` without compression."""
    _check_omega_n(omega, n)
    if not L > 0:
        raise ValueError(f"L must be > 0, got {L}")
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if omega == 0:
        return 0.5 / L
    return min(0.5 / L, n / (64.0 * omega * L * (2.0 * p * (omega + 1.0) + 1.0) ** 2))


def adiana_momentum(
    eta: float, mu: float, p: float, theta1: float | None = None, gamma_z: float | None = None
) -> tuple[float, float, float]:
    """The momentum parameters for a step ``eta``: ``theta1 = min(1/4, sqrt(eta mu/p))``,
    ``gamma_z = eta/(2 (theta1 + eta mu))`` and ``beta = 1 - gamma_z mu``, each from the ones
    before it (a given ``theta1`` or ``gamma_z`` is used in place of its formula); returns
    ``(theta1, gamma_z, beta)``."""
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta}")
    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if theta1 is None:
        theta1 = min(0.25, math.sqrt(eta * mu / p))
    if gamma_z is None:
        gamma_z = eta / (2.0 * (theta1 + eta * mu))
    return theta1, gamma_z, 1.0 - gamma_z * mu


def canita_theta1(t: int, p: float, t0: float = 4.0) -> float:
    """CANITA's coupling as reconstructed here ([U]: the paper's schedule not read):
    ``theta1_t = min(1/2, 2/(p t + t0))``, Katyusha^ns's ``2/(s + 4)`` with the epoch count
    ``s`` replaced by the expected number ``p t`` of anchor refreshes after ``t`` rounds."""
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t}")
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    return min(0.5, 2.0 / (p * t + t0))
