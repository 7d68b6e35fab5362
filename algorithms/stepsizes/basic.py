"""Step sizes of the uncompressed-style baselines."""

from __future__ import annotations

import math


def dcgd(L: float, L_max: float, omega: float, n: int) -> float:
    """DCGD with independent unbiased compressors: ``1/(L + 2 omega L_max / n)`` (the
    strongly convex analysis of Gorbunov, Hanzely & Richtárik 2020, arXiv 1905.11261, in the
    form of the theory sheet §2.1; also ``<= 1/L`` as the nonconvex analysis of Khaled &
    Richtárik 2020, arXiv 2002.03329, Thm 2, needs with ``B' = 1``)."""
    return 1.0 / (L + 2.0 * omega * L_max / n)


def dcgd_nonconvex(L: float, L_max: float, omega: float, n: int, T: int) -> float:
    """DCGD nonconvex step for a horizon of ``T`` iterations (Khaled & Richtárik 2020,
    arXiv 2002.03329, Thm 2, with the compressed gradient's ABC constants
    ``A' = omega L_max / n``, ``B' = 1``, ``C' = 2 omega L_max Delta_inf / n``; theory sheet
    §2.1): ``gamma = min(1/(L B'), 1/sqrt(L A' T))``. The second condition bounds
    ``(1 + L gamma^2 A')^T <= e``, so that
    ``min_{t<T} E||grad f(x^t)||^2 <= 6 Delta_0/(gamma T) + L C' gamma``. ``omega = 0`` gives
    ``1/L``."""
    if T < 1:
        raise ValueError(f"the horizon T must be >= 1, got {T}")
    A = omega * L_max / n
    return 1.0 / L if A == 0 else min(1.0 / L, 1.0 / math.sqrt(L * A * T))
