"""Extreme eigenvalues for the constants, exact and cheap.

Gram matrices ``A^T A`` are never eigendecomposed at large size: when ``min(rows, cols)`` is
small the smaller of ``A A^T`` and ``A^T A`` is formed densely and only its top eigenvalue is
computed (LAPACK ``syevr`` with an index range); otherwise ARPACK's Lanczos (``eigsh``) runs on
the operator ``v -> A^T (A v)`` to full working precision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh

__all__ = ["gram_top_eig", "sym_top_eig", "single_threaded", "DENSE_MAX"]

# Largest side of a dense symmetric matrix we eigendecompose (restricted to one eigenvalue).
DENSE_MAX = 2048


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run BLAS/LAPACK on one thread inside the block.

    The constants' matrices are small (``d <= DENSE_MAX``), where threaded OpenBLAS gains
    nothing and its spinning threads slow down by orders of magnitude when the cores are
    shared with other processes.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # scikit-learn's dependency; without it, keep the defaults
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _top_dense(G: np.ndarray) -> float:
    k = G.shape[0]
    return float(sla.eigvalsh(G, subset_by_index=[k - 1, k - 1])[0])


def gram_top_eig(A: np.ndarray | sp.spmatrix) -> float:
    """``lambda_max(A^T A)`` (the squared spectral norm of ``A``)."""
    rows, cols = A.shape
    k = min(rows, cols)
    if k == 0 or (sp.issparse(A) and A.nnz == 0):
        return 0.0
    if k <= DENSE_MAX:
        G = A @ A.T if rows < cols else A.T @ A
        return max(_top_dense(G.toarray() if sp.issparse(G) else np.asarray(G)), 0.0)
    At = A.T.tocsr() if sp.issparse(A) else A.T
    op = LinearOperator((cols, cols), matvec=lambda v: At @ (A @ v), dtype=np.float64)
    return float(eigsh(op, k=1, which="LA", tol=1e-14, return_eigenvectors=False)[0])


def sym_top_eig(S: np.ndarray | LinearOperator) -> float:
    """``lambda_max`` of a symmetric matrix (dense) or operator (Lanczos)."""
    if isinstance(S, np.ndarray) and S.shape[0] <= DENSE_MAX:
        return _top_dense(S)
    return float(eigsh(S, k=1, which="LA", tol=1e-14, return_eigenvectors=False)[0])
