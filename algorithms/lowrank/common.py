"""What the low-rank methods share: the matrix view of a row, Gram-Schmidt, and the borrowed
step.

A row of ``d`` entries is zero-padded to ``m1 * m2`` and read row-major as an ``m1 x m2``
matrix, with the near-square shape of the rank-r compressor
(:func:`compressors.rank_r.matrix_shape`, ``m1 >= m2``); the rank is capped at ``m2``.
"""

from __future__ import annotations

import torch

from algorithms.base import Theory
from algorithms.ef.ef21 import ef21_theory
from compressors.rank_r import RankR, gram_schmidt_, matrix_shape

__all__ = ["as_matrices", "borrowed_theory", "gram_schmidt", "matrix_shape", "rank_of", "unview"]

#: Added to each column norm in Gram-Schmidt (PowerSGD's ``orthogonalize``, epfml/powersgd): a
#: zero column stays zero instead of becoming NaN.
GS_EPSILON = 1e-8


def rank_of(rank: int, d: int) -> int:
    """The rank used for rows of ``d`` entries: ``min(rank, m2)``."""
    return min(rank, matrix_shape(d)[1])


def as_matrices(x_i: torch.Tensor) -> torch.Tensor:
    """``(m, d)`` rows as ``(m, m1, m2)`` matrices (zero-padded, row-major); a new tensor."""
    m, d = x_i.shape
    m1, m2 = matrix_shape(d)
    return torch.nn.functional.pad(x_i, (0, m1 * m2 - d)).reshape(m, m1, m2)


def unview(mat: torch.Tensor, d: int) -> torch.Tensor:
    """The first ``d`` entries of an ``(m1, m2)`` matrix (or a batch of them), row-major."""
    return mat.reshape(*mat.shape[:-2], -1)[..., :d]


def gram_schmidt(a: torch.Tensor, epsilon: float = GS_EPSILON) -> torch.Tensor:
    """The columns of ``a`` (``(k, r)``) orthonormalized in order, each divided by its norm
    plus ``epsilon`` (:func:`compressors.rank_r.gram_schmidt_` on a copy); a new tensor."""
    return gram_schmidt_(a.clone(), epsilon)


def borrowed_theory(problem, rank: int, method: str) -> Theory:
    """EF14's step (EF21's Theorem 1, arXiv 2106.05203, at ``delta = r / m2``, the constant of
    the rank-r compressor with a fresh Gaussian query, :class:`compressors.rank_r.RankR`), as
    EF14 itself borrows it: no theorem of ``method`` could be read, and a warm-started query
    has no contraction constant of its own."""
    th = ef21_theory(problem, RankR(r=rank), "nonconvex")
    return Theory(
        gamma=th.gamma,
        formula=th.formula + " (EF21's step at delta = r/m2, as EF14 borrows it)",
        inputs={**th.inputs, "r": rank_of(rank, problem.d), "m2": matrix_shape(problem.d)[1]},
        source=th.source + f"; borrowed: no {method} theorem could be read",
    )
