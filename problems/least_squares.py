"""Least squares, optionally ridge-regularised."""

from __future__ import annotations

import numpy as np
import torch

from problems import glm_consts
from problems.glm import GLM

__all__ = ["LeastSquares"]


class LeastSquares(GLM):
    """``f_i(x) = (1/(2 m_i))||A_i x - b_i||^2 + (lam/2)||x||^2``.

    ``b`` is +-1 for two-class data and the raw targets otherwise. ``L_i =
    lambda_max(A_i^T A_i)/m_i + lam``; ``L_pm`` is exact, ``sqrt(lambda_max(mean_i H_i^2 -
    Hbar^2))`` (Szlendak et al. 2021, arXiv 2110.03300); ``mu`` is ``lambda_min(H) + lam`` for
    ``lam > 0`` and the PL constant (smallest nonzero eigenvalue of ``H``) for ``lam = 0``, both
    for ``d <= 2048`` (see :func:`problems.glm_consts.ls_mu`). The least-squares scripts of the
    EF21 experiments drop the 1/2 and divide ``mu`` differently (THEORY.md Sec. 3.4); this class
    follows DESIGN.md to the letter.
    """

    name = "least-squares"
    description = "least squares (1/(2 m_i))||A_i x - b_i||^2 + (lambda/2)||x||^2 (convex, PL)"
    convex = True
    default_lam = 0.0
    PHI_CURV = 1.0
    KERNEL_LOSS = "squared"
    REG_CURV = 1.0

    @classmethod
    def labels(cls, ds) -> np.ndarray:
        return ds.targets()

    @staticmethod
    def phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return 0.5 * (z - b) ** 2

    @staticmethod
    def dphi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return z - b

    @staticmethod
    def d2phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(z)

    def _extra_consts(self) -> dict[str, float | None]:
        return {
            "mu": glm_consts.ls_mu(self._A64, self._w64, self.lam),
            "L_pm": glm_consts.ls_L_pm(self._A64, self._offsets64),
        }
