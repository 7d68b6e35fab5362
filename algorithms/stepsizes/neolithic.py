"""NEOLITHIC's parameters: the multi-step compression's contraction, its stage count ``R`` and
the step (Huang, Chen, Yin & Yuan 2022, arXiv 2206.03665; He, Huang, Chen, Yin & Yuan 2023,
arXiv 2305.07612).

What could be read of the papers here was their abstracts only; the theorem's own ``R`` and step
were not available. The contraction of the multi-step module is exact (one line of algebra,
:func:`msc_delta`); ``R`` and the step are this library's choices, documented as such in
:class:`algorithms.multistage.neolithic.NEOLITHIC`.
"""

from __future__ import annotations

import math

from algorithms.stepsizes.ef import ef21

__all__ = ["msc_delta", "neolithic", "neolithic_rounds", "nesterov_momentum"]


def msc_delta(delta: float, R: int) -> float:
    """The contraction of ``R`` stages of a ``delta``-contractive compressor applied to the
    successive residuals, ``delta_R = 1 - (1 - delta)^R``.

    Stage ``r`` compresses the residual ``x - v^(r)`` with fresh randomness, so conditionally
    on the past ``E||x - v^(r+1)||^2 <= (1 - delta) ||x - v^(r)||^2``; by the tower rule
    ``E||x - v^(R)||^2 <= (1 - delta)^R ||x||^2``. Equality holds in expectation for scaled
    Rand-K (a coordinate is missed by all ``R`` independent draws with probability
    ``(1 - k/d)^R``).
    """
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    if isinstance(R, bool) or not isinstance(R, int) or R < 1:
        raise ValueError(f"R must be a positive integer, got {R!r}")
    return 1.0 - (1.0 - delta) ** R


def neolithic_rounds(delta: float, tol: float) -> int:
    """The smallest ``R >= 1`` with ``(1 - delta)^R <= tol``: ``ceil(ln(1/tol) / -ln(1 -
    delta))``, about ``ln(1/tol)/delta`` (logarithmic in the accuracy, as the papers' ``R``;
    ``tol`` is this library's knob, not the theorem's expression). ``delta = 1`` gives 1."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1), got {tol}")
    if delta == 1:
        return 1
    R = max(1, math.ceil(math.log(tol) / math.log1p(-delta)))
    # guard the rounding of the logarithms at the boundary
    while (1.0 - delta) ** R > tol:
        R += 1
    return R


def neolithic(L: float, L_tilde: float, delta_R: float) -> float:
    """The step used for NEOLITHIC: EF21's nonconvex Theorem 1 step (arXiv 2106.05203)
    evaluated at the multi-step contraction ``delta_R`` (the library's convention for
    error-feedback methods without a step of their own, as for EF14):
    ``1 / (L + L_tilde sqrt(beta/theta))`` with ``theta = 1 - sqrt(1 - delta_R)``,
    ``beta = (1 - delta_R)/theta``. As ``delta_R -> 1`` it tends to ``1/L``, the step of the
    minibatch SGD that the method approaches."""
    return ef21(L, L_tilde, delta_R)


def nesterov_momentum(gamma: float, mu: float) -> float:
    """Nesterov's constant momentum for a ``mu``-strongly convex ``f`` at step ``gamma``:
    ``(1 - sqrt(gamma mu)) / (1 + sqrt(gamma mu))`` (``sqrt(L/mu)`` rate at ``gamma = 1/L``);
    ``gamma mu`` is clipped to 1 (no momentum)."""
    if not (gamma > 0 and mu > 0):
        raise ValueError(f"gamma and mu must be > 0, got {gamma}, {mu}")
    q = math.sqrt(min(1.0, gamma * mu))
    return (1.0 - q) / (1.0 + q)
