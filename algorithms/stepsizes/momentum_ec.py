"""Step sizes of the momentum / error-compensation methods for deep nets (GMC, LIEC-SGD).

Neither paper's theorem could be read from the sources available here (arXiv 1905.12948,
arXiv 2402.11857: abstracts only; LIEC-SGD's authors' code has no step rule, it uses
``lr = 0.1`` on ResNets). Both steps below are this library's choices and say so in the
step record of every run; each reduces to a known step in the cases where the method reduces
to a known method. Neither comes with a written derivation (no convergence argument for the
method at that step is given here): both are built on EF21's Theorem 1 step, so the methods
declare their step's provenance as borrowed from it (:mod:`algorithms.provenance`).
"""

from __future__ import annotations

import math

from algorithms.stepsizes.ef import ef21_theta_beta


def gmc(gamma_ef: float, beta: float) -> float:
    """GMC's step ``(1 - beta) gamma_EF`` (a deviation: GMC's theorem was not available).

    ``gamma_EF`` is the step this library gives EF-SGD for the same compressor (EF21's
    Theorem 1 step, arXiv 2106.05203, as in the EF21 experiments). Heavy ball with momentum
    ``beta`` and step ``gamma`` moves ``gamma/(1 - beta)`` per unit gradient when the gradient
    is constant, so this step keeps GMC's effective step at EF-SGD's (the rule of
    :func:`algorithms.stepsizes.ef21_hb`). ``beta = 0`` is EF-SGD's step exactly; with the
    identity compressor it is ``(1 - beta)/L``, inside heavy ball's stability region
    ``gamma < 2 (1 + beta)/L`` on quadratics."""
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    if not gamma_ef > 0:
        raise ValueError(f"gamma_ef must be > 0, got {gamma_ef}")
    return (1.0 - beta) * gamma_ef


def liec_sgd(L: float, L_tilde: float, delta_up: float, delta_down: float, period: int) -> float:
    """LIEC-SGD's step ``1/(L + [H > 1] L_tilde (sqrt(beta_M/theta_M) + (H - 1) sqrt(1 -
    delta_up)))`` (this library's choice, not derived; LIEC-SGD's theorem was not available).

    The virtual iterate ``x~ = mean_i x_i - gamma e`` takes exact gradient steps
    ``x~ <- x~ - gamma mean_i g_i`` at the nodes' own models ``x_i``, which sit off it by the
    server's error ``gamma e`` and by the local compensations accumulated since the last
    average (at most ``H - 1`` terms ``gamma (g_i - C(g_i))``, each at most
    ``sqrt(1 - delta_up)`` times the node's gradient). The descent lemma then asks
    ``gamma L_tilde`` times that amplification to stay below one: the server error enters as
    in EF21's Theorem 1 (``sqrt(beta/theta)`` at ``alpha = delta_down``, which is about
    ``2 sqrt(1 - delta)/delta``), the local drift as in local SGD (linear in ``H``). Not a
    theorem: the constants are ours. Cases: identity compressors, or ``H = 1`` (every round
    averages, so nothing is compressed), give ``1/L``, the step of the distributed GD the
    method then is."""
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"period must be a positive integer, got {period!r}")
    for name, value in (("delta_up", delta_up), ("delta_down", delta_down)):
        if not 0 < value <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {value}")
    if period == 1:
        return 1.0 / L
    theta, beta = ef21_theta_beta(delta_down)
    drift = math.sqrt(beta / theta) + (period - 1) * math.sqrt(1.0 - delta_up)
    return 1.0 / (L + L_tilde * drift)
