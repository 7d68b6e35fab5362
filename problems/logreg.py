"""Logistic regression with an L2 regulariser (strongly convex)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from problems.glm import GLM

__all__ = ["LogReg"]


class LogReg(GLM):
    """``f_i(x) = (1/m_i) sum_j log(1 + exp(-b_j a_j^T x)) + (lam/2)||x||^2``, ``b_j = +-1``.

    ``grad^2 f_i <= A_i^T A_i/(4 m_i) + lam I``, so ``L_i = lambda_max(A_i^T A_i)/(4 m_i) + lam``
    (tight at ``x = 0``, where ``sigma'(0) = 1/4``) and ``f`` is ``lam``-strongly convex,
    ``mu = lam``. ``L_pm`` is None: the Hessian varies
    with ``x`` and no cheap exact value exists (``sqrt(mean_i (L_i - lam)^2)`` bounds it).
    ``f_star`` and ``x_star`` are solved to ``||grad f|| <= 1e-10`` and cached.
    """

    name = "logreg"
    description = "logistic regression + (lambda/2)||x||^2 on binary data (strongly convex)"
    convex = True
    PHI_CURV = 0.25
    KERNEL_LOSS = "logistic"
    REG_CURV = 1.0

    @staticmethod
    def phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.softplus(-b * z)

    @staticmethod
    def dphi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return -b * torch.sigmoid(-b * z)

    @staticmethod
    def d2phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(b * z)
        return s * (1.0 - s)

    def _extra_consts(self) -> dict[str, float | None]:
        return {"mu": self.lam if self.lam > 0 else None}
