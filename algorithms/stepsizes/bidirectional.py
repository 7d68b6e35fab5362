"""Step sizes and parameters of the bidirectional methods with memory (DORE, Artemis, MCM)."""

from __future__ import annotations

import math


def memory_rate(omega: float) -> float:
    """``1/(2(omega + 1))``: the memory step of DORE's ``alpha``/``beta`` (Liu et al. 2019,
    arXiv 1910.07561, Thm 1 needs ``<= 1/(omega + 1)``; the FedNL-Public reimplementation
    uses half of it) and of Artemis/MCM (Philippenko & Dieuleveut, authors' code:
    ``1/(2(omega_c + 1))`` for the up and the down memory)."""
    return 1.0 / (2.0 * (omega + 1.0))


def dore_eta(omega_up: float, omega_down: float, n: int, L: float, mu: float) -> float:
    """DORE's model error-compensation weight ``eta`` (arXiv 1910.07561, Thm 1): the largest
    value its two conditions allow, ``min(eta_1, eta_2)`` with
    ``eta_1 = (-C + sqrt(C^2 + 4(1 - (C + 1) beta)))/(2 C)`` (``C = omega_down``,
    ``beta = 1/(2(C+1))``; infinite when ``C = 0``) and
    ``eta_2 = 4 mu L/((mu + L)^2 (1 + c alpha) - 4 mu L)``, ``c = 4 omega_up(omega_up+1)/n``,
    ``alpha = 1/(2(omega_up+1))``. The single ``C_q`` of the paper is split here: ``eta_1``
    comes from the model (downlink) compression, ``c alpha`` from the gradient (uplink) one."""
    C, beta = omega_down, memory_rate(omega_down)
    eta1 = (
        math.inf if C == 0 else (-C + math.sqrt(C * C + 4.0 * (1.0 - (C + 1.0) * beta))) / (2 * C)
    )
    c, alpha = 4.0 * omega_up * (omega_up + 1.0) / n, memory_rate(omega_up)
    eta2 = 4.0 * mu * L / ((mu + L) ** 2 * (1.0 + c * alpha) - 4.0 * mu * L)
    return min(eta1, eta2)


def dore(omega_up: float, omega_down: float, n: int, L: float, mu: float) -> float:
    """DORE's step (arXiv 1910.07561, Thm 1, strongly convex): ``gamma`` in
    ``[eta(mu + L)/(2(1 + eta) mu L), 2/((1 + c alpha)(mu + L))]``, the midpoint of the
    interval, as the FedNL-Public reimplementation takes it (``eta`` from :func:`dore_eta`)."""
    eta = dore_eta(omega_up, omega_down, n, L, mu)
    c, alpha = 4.0 * omega_up * (omega_up + 1.0) / n, memory_rate(omega_up)
    hi = 2.0 / ((1.0 + c * alpha) * (mu + L))
    lo = hi if math.isinf(eta) else eta * (mu + L) / (2.0 * (1.0 + eta) * mu * L)
    return 0.5 * (min(lo, hi) + hi)


def participation_omega(omega_up: float, p: float) -> float:
    """``(1 + omega)/p - 1``: the variance of ``(xi/p) C(x)`` with ``xi ~ Bernoulli(p)``
    independent of ``C`` (a node that takes part with probability ``p``, weighted ``1/p``)."""
    return (1.0 + omega_up) / p - 1.0


def artemis(L_max: float, omega_up: float, omega_down: float, n: int, p: float = 1.0) -> float:
    """``1/(2 L_max (1 + omega_down)(1 + 4 omega_p / n))``, ``omega_p`` from
    :func:`participation_omega`: DIANA's strongly convex step shape (``E||C_dwn(g)||^2 <=
    (1 + omega_down)||g||^2`` multiplies the second moment of the uplink estimate, whose
    compression-and-sampling variance is ``omega_p/n^2 sum_i ||grad f_i - h_i||^2``), the form
    of Artemis's Thm 1 (Philippenko & Dieuleveut 2020, arXiv 2006.14591) as recalled; used for
    Artemis and, conservatively, for MCM.

    Derivation (Artemis with ``estimator=memory``; ``f`` ``mu``-strongly convex, each ``f_i``
    convex and ``L_i``-smooth, ``L <= L_max``; independent unbiased ``C_up``, ``C_dwn``; each
    node takes part independently with probability ``p``; memory rate ``alpha <= 1/(omega_up +
    1)``): DIANA's argument (:func:`algorithms.stepsizes.vr.diana`, same notation ``u_i``,
    ``e_i``, ``H``, ``D_f``) with two changes. (1) The uplink message ``(xi_i/p) C_up(Delta_i)``
    is unbiased with ``E||.||^2 = ((1 + omega_up)/p) ||Delta_i||^2``, i.e. variance ``omega_p
    ||Delta_i||^2``, so ``E||g||^2 <= 2 (L + 2 omega_p L_max/n) D_f + (2 omega_p/n) H``;
    ``Omega = C_dwn(g)`` is unbiased with ``E||Omega||^2 <= (1 + omega_dwn) E||g||^2``, and
    since ``grad f(x*) = 0`` this is the whole second moment of the step:
    ``E||w^+ - x*||^2 <= (1 - gamma mu)||w - x*||^2 - 2 gamma D_f + gamma^2 (1 + omega_dwn)
    E||g||^2``. (2) Only participants move their memory: ``E||e_i^+||^2 <= ||e_i||^2 +
    alpha p (2 <e_i, Delta_i> + ||Delta_i||^2) = (1 - alpha p)||e_i||^2 + alpha p ||u_i||^2``,
    so ``E H^+ <= (1 - alpha p) H + 2 alpha p L_max D_f``. With ``V = ||w - x*||^2 + M gamma^2
    H``, ``M = 4 (1 + omega_dwn) omega_p/(n alpha p)``: the ``H`` coefficient is
    ``M gamma^2 (1 - alpha p/2)``; the ``D_f`` coefficient is ``-2 gamma + 2 gamma^2
    (1 + omega_dwn)(L + 6 omega_p L_max/n)``, ``<= 0`` for ``gamma <= 1/((1 + omega_dwn)
    (L + 6 omega_p L_max/n))``. This step, ``1/((1 + omega_dwn)(2 L_max + 8 omega_p
    L_max/n))``, is below that bound (``L <= 2 L_max``, ``6 <= 8``), so ``E V^+ <=
    max(1 - gamma mu, 1 - alpha p/2) V``: linear convergence to ``x*``. (The ``sampled``
    estimator adds the memories' sampling noise; at ``p = 1`` both coincide.)"""
    return 1.0 / (
        2.0 * L_max * (1.0 + omega_down) * (1.0 + 4.0 * participation_omega(omega_up, p) / n)
    )
