"""Constants of generalised linear models ``f_i(x) = (1/m_i) sum_j phi(a_j^T x, b_j) + R(x)``.

With ``c = sup |phi''|`` (1/4 for the logistic loss, 1 for least squares, 0.1540585701... for
the sigmoid-squared loss, :mod:`problems.sigmoid_squared`) and ``r = sup R''``
(``lam`` for ``(lam/2)||x||^2``, ``2 lam`` for ``lam sum_k x_k^2/(1+x_k^2)``; Richtarik et al.
2021, arXiv 2106.05203, Sec. 5), ``grad^2 f_i <= c A_i^T A_i / m_i + r I``, so
``L_i = c lambda_max(A_i^T A_i)/m_i + r`` and ``L = c lambda_max((1/n) sum_i A_i^T A_i/m_i) + r``,
the latter from the stacked data with row weights ``1/(n m_i)``, never the mean of the ``L_i``.
Both are attained at ``x = 0`` for the logistic loss (``sigma'(0) = 1/4``) and the nonconvex
regulariser (``R''(0) = 2 lam``), so they are tight.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from problems.linalg import DENSE_MAX, gram_top_eig, sym_top_eig

__all__ = ["smoothness", "ls_mu", "ls_L_pm", "node_grads"]


def _node_rows(A: sp.csr_matrix, offsets: np.ndarray, i: int) -> sp.csr_matrix:
    return A[offsets[i] : offsets[i + 1]]


def smoothness(
    A: sp.csr_matrix, offsets: np.ndarray, weights: np.ndarray, c: float, r: float
) -> tuple[np.ndarray, float]:
    """``(L_i, L)`` as in the module docstring; ``weights`` are the row weights ``1/(n m_i)``."""
    counts = np.diff(offsets)
    L_i = np.array(
        [c * gram_top_eig(_node_rows(A, offsets, i)) / counts[i] + r for i in range(counts.size)]
    )
    L = c * gram_top_eig(sp.diags(np.sqrt(weights)) @ A) + r
    return L_i, float(L)


def _weighted_gram(A: sp.csr_matrix, weights: np.ndarray) -> np.ndarray:
    At = sp.diags(np.sqrt(weights)) @ A
    return np.asarray((At.T @ At).toarray())


def ls_mu(A: sp.csr_matrix, weights: np.ndarray, lam: float) -> float | None:
    """Strong convexity (``lam > 0``) or PL constant (``lam = 0``) of least squares.

    ``f = (1/2)||W^(1/2)(A x - b)||^2 + (lam/2)||x||^2`` with Hessian ``H + lam I``,
    ``H = A^T W A``. For ``lam > 0`` this is ``lambda_min(H) + lam``; for ``lam = 0`` it is the
    smallest nonzero eigenvalue of ``H`` (f is then PL with that constant, Karimi, Nutini &
    Schmidt 2016, arXiv 1608.04636), counted as nonzero above ``d * eps * lambda_max(H)``. Needs a
    full eigendecomposition, so it is computed for ``d <= DENSE_MAX`` only: otherwise ``lam``
    for ``lam > 0`` (a valid lower bound) and None for ``lam = 0``.
    """
    d = A.shape[1]
    if d > DENSE_MAX:
        return lam if lam > 0 else None
    ev = np.linalg.eigvalsh(_weighted_gram(A, weights))
    if lam > 0:
        return float(max(ev[0], 0.0) + lam)
    nonzero = ev[ev > d * np.finfo(np.float64).eps * max(ev[-1], 0.0)]
    return float(nonzero[0]) if nonzero.size else None


def ls_L_pm(A: sp.csr_matrix, offsets: np.ndarray) -> float:
    """Hessian variance of least squares: ``sqrt(lambda_max(mean_i H_i^2 - Hbar^2))``.

    ``H_i = A_i^T A_i / m_i`` (the regulariser adds the same ``lam I`` to every ``H_i`` and
    cancels); Szlendak et al. 2021, arXiv 2110.03300, Sec. 2.
    """
    n, d = offsets.size - 1, A.shape[1]
    blocks = [_node_rows(A, offsets, i) for i in range(n)]
    counts = np.diff(offsets)
    if d <= DENSE_MAX:
        S = np.zeros((d, d))
        Hbar = np.zeros((d, d))
        for Ai, mi in zip(blocks, counts, strict=True):
            Hi = np.asarray((Ai.T @ Ai).toarray()) / mi
            S += Hi @ Hi
            Hbar += Hi
        Hbar /= n
        V = S / n - Hbar @ Hbar
        return float(np.sqrt(max(sym_top_eig((V + V.T) / 2), 0.0)))

    def matvec(v: np.ndarray) -> np.ndarray:
        v = np.ravel(v)
        hv = [Ai.T @ (Ai @ v) / mi for Ai, mi in zip(blocks, counts, strict=True)]
        hbar_v = sum(hv) / n
        sq = sum(Ai.T @ (Ai @ h) / mi for Ai, mi, h in zip(blocks, counts, hv, strict=True))
        hbar2_v = sum(Ai.T @ (Ai @ hbar_v) / mi for Ai, mi in zip(blocks, counts, strict=True))
        return sq / n - hbar2_v / n

    op = LinearOperator((d, d), matvec=matvec, dtype=np.float64)
    return float(np.sqrt(max(sym_top_eig(op), 0.0)))


def node_grads(A: sp.csr_matrix, offsets: np.ndarray, dphi_z: np.ndarray) -> np.ndarray:
    """``(n, d)``: row ``i`` is ``(1/m_i) sum_{j in node i} dphi_z[j] a_j`` (the data term)."""
    counts = np.diff(offsets)
    node = np.repeat(np.arange(counts.size), counts)
    S = sp.csr_matrix(
        (dphi_z / counts[node], (node, np.arange(node.size))), shape=(counts.size, node.size)
    )
    return np.asarray((S @ A).toarray())
