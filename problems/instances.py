"""Small exact instances that the theory papers and the theory sheet use as worked examples.

* :func:`heterogeneous_ridge`: the theory sheet's §3.6 ridge (``n = 10``, ``d = 20``,
  ``m = 30``, ``lam = 0.1``): ``f_i(x) = (1/(2m))||A_i x - y_i||^2 + (lam/2)||x||^2`` with
  ``rng = numpy.random.default_rng(1)``, all ``A_i ~ N(0, 1)^{m x d}`` drawn first, then all
  ``y_i = 3 N(0, 1) + 2 i``. Heterogeneous targets, so ``zeta2 > 0`` (about 59.3).
* :func:`beznosikov`: the counterexample of Beznosikov, Horváth, Richtárik & Safaryan 2020
  (arXiv 2002.12410, Example 1), theory sheet §3.7: ``n = d = 3``,
  ``f_i(x) = <a_i, x>^2 + (1/4)||x||^2``, built as least squares with one row ``sqrt(2) a_i``
  per node, target 0 and ``lam = 1/2`` (``L_i = 34.5``, ``L = 103/6``, ``mu = 7/6``,
  ``f* = 0``, ``x* = 0``). DCGD with Top-1 diverges on it for every step size.
"""

from __future__ import annotations

import numpy as np

from problems.least_squares import LeastSquares

__all__ = ["BEZ_A", "beznosikov", "heterogeneous_ridge", "ridge_arrays"]

BEZ_A = np.array([[-3.0, 2.0, 2.0], [2.0, -3.0, 2.0], [2.0, 2.0, -3.0]])


def ridge_arrays(n: int = 10, d: int = 20, m: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """The §3.6 data, ``A`` of shape ``(n, m, d)`` and ``y`` of shape ``(n, m)``."""
    rng = np.random.default_rng(1)
    A = np.stack([rng.standard_normal((m, d)) for _ in range(n)])
    y = np.stack([3.0 * rng.standard_normal(m) + 2.0 * i for i in range(n)])
    return A, y


def heterogeneous_ridge(
    x0: str = "zeros", lam: float = 0.1, copies: int = 1, identical: bool = False
) -> LeastSquares:
    """The §3.6 ridge.

    Args:
        x0: the start (``zeros``, ``ones``, ...).
        lam: the ridge ``lambda``.
        copies: repeat the ten nodes this many times: ``f``, ``x*``, ``L``, ``mu`` and
            ``zeta2`` are unchanged and only ``n`` grows (linear-speedup experiments).
        identical: give every node node 0's data (``zeta2 = 0``).
    """
    A, y = ridge_arrays()
    if identical:
        A[:], y[:] = A[0], y[0]
    n, m, d = A.shape
    A_all = np.concatenate([A.reshape(n * m, d)] * copies)
    y_all = np.concatenate([y.reshape(-1)] * copies)
    return LeastSquares(A_all, y_all, np.full(n * copies, m), lam=lam, x0=x0)


def beznosikov(x0: str = "ones") -> LeastSquares:
    """The §3.7 counterexample ``f_i(x) = <a_i, x>^2 + ||x||^2/4`` (arXiv 2002.12410)."""
    counts = np.ones(3, dtype=np.int64)
    return LeastSquares(np.sqrt(2.0) * BEZ_A, np.zeros(3), counts, lam=0.5, x0=x0)
