"""Step sizes and parameters of local training with compression (CompressedScaffnew).

Condat, Agarský & Richtárik, "CompressedScaffnew", arXiv 2210.13277. Notation: ``L`` the
smoothness of every ``f_i`` (``L_max``), ``mu`` strong convexity, ``kappa = L / mu``, ``n``
nodes, ``s`` the number of nodes that own each coordinate in a communication round.

Which of these were read where (see ``algorithms/local/compressed_scaffnew.py``): the paper's
theorem could not be read here. ``chi``'s range is the one the coauthors (Agarský, Malinovsky)
state for TAMUNA, the partial-participation extension, in their Flower baseline (adap/flower,
``baselines/tamuna/README.md``: the control-variate step ``eta = p chi`` must lie between
``p/2`` and ``p n (s - 1)/(s (n - 1))``, "usually works very well when simply set to the upper
bound"); ``p`` is derived [U] (see :func:`communication_p`).
"""

from __future__ import annotations

import math


def scaffnew_gamma(L_max: float) -> float:
    """``gamma = 1 / L_max``: Scaffnew's step (ProxSkip, Mishchenko et al. 2022, arXiv
    2202.09357: ``gamma <= 1/L`` with the rate ``1 - min(gamma mu, p^2)``; from memory, not
    re-read here), taken for CompressedScaffnew [U]: its theorem was not read."""
    if not L_max > 0:
        raise ValueError(f"L_max must be > 0, got {L_max}")
    return 1.0 / L_max


def chi_max(n: int, s: int) -> float:
    """The largest control-variate factor ``chi = n (s - 1) / (s (n - 1))`` (1 for ``n = 1``).

    The upper end of the coauthors' stated range for TAMUNA (module docstring; with all ``n``
    nodes participating), taken as the default as they advise. Why that value: the server's
    average of each coordinate over ``s`` of the ``n`` nodes, drawn
    without replacement, is an unbiased estimate of the mean with
    ``E||xbar - mean||^2 = ((n - s)/(s (n - 1))) (1/n) sum_i ||x_i - mean||^2``; ``chi`` is one
    minus that factor (``chi = 1``, Scaffnew, when ``s = n``)."""
    _check_ns(n, s)
    if n == 1:
        return 1.0
    return n * (s - 1) / (s * (n - 1))


def communication_p(kappa: float, n: int, s: int) -> float:
    """``p = min(1, sqrt((n - 1) / ((s - 1) kappa)))`` (``min(1, 1/sqrt(kappa))`` for
    ``s = n``, Scaffnew's choice).

    [U] derived: a node owns a coordinate in a round with probability ``s/n`` and its control
    variate moves there by the factor ``chi``, so the dual part of the rate is taken as
    ``1 - p^2 chi s / n = 1 - p^2 (s - 1)/(n - 1)`` at ``chi = chi_max``; ``p`` balances it
    with the primal ``1 - 1/kappa``, giving ``O(sqrt(kappa (n - 1)/(s - 1)))`` communication
    rounds per ``e``-fold, each sending ``~ s d / n`` values per node."""
    _check_ns(n, s)
    if not kappa >= 1:
        raise ValueError(f"kappa = L/mu must be >= 1, got {kappa}")
    if n == 1:
        return min(1.0, 1.0 / math.sqrt(kappa))
    return min(1.0, math.sqrt((n - 1) / ((s - 1) * kappa)))


def _check_ns(n: int, s: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not (min(2, n) <= s <= n):
        raise ValueError(f"s (--owners) must be in [{min(2, n)}, {n}] (n = {n} nodes), got {s}")
