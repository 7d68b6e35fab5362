"""Step sizes of the uncompressed-style baselines."""

from __future__ import annotations


def dcgd(L: float, L_max: float, omega: float, n: int) -> float:
    """DCGD with independent unbiased compressors: ``1/(L + 2 omega L_max / n)`` (the
    strongly convex analysis of Gorbunov, Hanzely & Richtárik 2020, arXiv 1905.11261, in the
    form of the theory sheet §2.1; also ``<= 1/L`` as the nonconvex analysis of Khaled &
    Richtárik 2020, arXiv 2002.03329, Thm 2, needs with ``B' = 1``)."""
    return 1.0 / (L + 2.0 * omega * L_max / n)
