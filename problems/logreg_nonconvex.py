"""Logistic regression with the nonconvex regulariser of the EF21 experiments."""

from __future__ import annotations

import torch

from problems.logreg import LogReg

__all__ = ["LogRegNonconvex"]


class LogRegNonconvex(LogReg):
    """``f_i(x) = (1/m_i) sum_j log(1 + exp(-b_j a_j^T x)) + lam sum_k x_k^2/(1 + x_k^2)``.

    The regulariser of Richtarik, Sokolov & Fatkhullin 2021 (EF21, arXiv 2106.05203, Sec. 5,
    ``lam = 0.1``). Its curvature ``lam (2 - 6t^2)/(1 + t^2)^3`` lies in ``[-lam/2, 2 lam]``, so
    ``L_i = lambda_max(A_i^T A_i)/(4 m_i) + 2 lam`` (the EF21 code adds ``2*la``), tight at
    ``x = 0``. ``f`` is nonconvex and bounded below by 0: ``mu``, ``f_star``, ``x_star``,
    ``zeta2`` and ``L_pm`` are None.
    """

    name = "logreg-nonconvex"
    description = "logistic regression + lambda sum x^2/(1+x^2) (EF21 nonconvex benchmark)"
    convex = False
    REG_CURV = 2.0
    KERNEL_REG = "nonconvex"

    @staticmethod
    def reg(X: torch.Tensor, lam: float) -> torch.Tensor:
        sq = X * X
        return lam * (sq / (1.0 + sq)).sum(1)

    @staticmethod
    def reg_grad(X: torch.Tensor, lam: float) -> torch.Tensor:
        return 2.0 * lam * X / (1.0 + X * X) ** 2

    @staticmethod
    def reg_hess_diag(x: torch.Tensor, lam: float) -> torch.Tensor:
        sq = x * x
        return lam * (2.0 - 6.0 * sq) / (1.0 + sq) ** 3

    def _extra_consts(self) -> dict[str, float | None]:
        return {}
