"""Step sizes of CAFe and CAFe-S (compression against a shared predictor, no control variates).

The papers' theorems (Ortega, Huang, Li & Jafarkhani, arXiv 2412.04538 and 2512.22623) were not
available here beyond their abstracts, so both steps are derived for this library, under the
abstracts' assumptions (``f`` ``L``-smooth, possibly nonconvex; bounded gradient dissimilarity
``(1/n) sum_i ||grad f_i(x) - grad f(x)||^2 <= zeta2``; a contractive compressor,
``E||C(v) - v||^2 <= (1 - delta)||v||^2``). The derivations are in the functions' docstrings;
:mod:`theory_checks.cafe` checks the bounds they give.
"""

from __future__ import annotations

import math

from algorithms.stepsizes.ef import ef21_theta_beta


def cafe(L: float, delta: float) -> float:
    """CAFe's step ``1/(L (1 + sqrt(beta/theta)))`` (derived; ``theta``, ``beta`` of
    :func:`~algorithms.stepsizes.ef.ef21_theta_beta` at ``alpha = delta``).

    Derivation: with ``e^t = g^t - grad f(x^t)`` the server's error and
    ``v_i = grad f_i(x^{t+1}) - g^t`` what node ``i`` compresses, ``mean_i v_i`` splits into
    the dissimilarity (mean zero over nodes) and the common part
    ``grad f(x^{t+1}) - grad f(x^t) - e^t``, so by Jensen and Young
    ``||e^{t+1}||^2 <= (1 - theta)||e^t||^2 + beta L^2 ||x^{t+1} - x^t||^2 + (1 - delta) zeta2``:
    EF21's recursion (arXiv 2106.05203, Lemma 3) with ``L`` of ``f`` in place of ``L_tilde``
    (the predictor is one vector shared by all nodes) and one extra term. EF21's Lyapunov
    argument (its Theorem 1) then gives, for this step,
    ``(1/T) sum_t ||grad f(x^t)||^2 <= 2 Phi^0/(gamma T) + (1 - delta) zeta2 / theta`` with
    ``Phi^0 = f(x^0) - f_inf + (gamma/(2 theta)) ||e^0||^2``."""
    if not L > 0:
        raise ValueError(f"L must be > 0, got {L}")
    theta, beta = ef21_theta_beta(delta)
    return 1.0 / (L * (1.0 + math.sqrt(beta / theta)))


def cafe_s(L: float) -> float:
    """CAFe-S's step ``1/L`` (derived).

    Derivation: the predictor ``p = grad f_S(x^t)`` is computed afresh each round from the
    server's data, so the error ``e^t = mean_i (C(v_i) - v_i)`` with
    ``v_i = grad f_i(x^t) - p`` has no memory: ``||e^t||^2 <= (1 - delta)(zeta2 + zeta2_S)``
    with ``zeta2_S >= ||grad f(x) - grad f_S(x)||^2`` (how far the server's data is from the
    nodes'). The descent lemma at ``gamma <= 1/L`` gives
    ``(1/T) sum_t ||grad f(x^t)||^2 <= 2 (f(x^0) - f_inf)/(gamma T)
    + (1 - delta)(zeta2 + zeta2_S)``: the rate does not depend on ``delta``, the neighbourhood
    shrinks as the server's data become representative (``zeta2_S -> 0``)."""
    if not L > 0:
        raise ValueError(f"L must be > 0, got {L}")
    return 1.0 / L
