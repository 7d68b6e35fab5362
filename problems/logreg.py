"""Logistic regression with an L2 regulariser (strongly convex)."""

from __future__ import annotations

import functools

import numpy as np
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

    def _dphi_times(self, Z: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``dphi(Z, b) * w`` as ``sigmoid(-b Z) * (-b w)``: three passes over the margins into
        one new tensor, where ``-b * sigmoid(-b Z) * w`` takes four into four (12 points: a9a
        on 2 threads 0.58 -> 0.50 ms, w8a on one 1.40 -> 1.12 ms, of a pass of many points
        that takes 1.7 and 5.3 ms). The numbers are the same: with labels in {-1, 0, 1}
        (signed labels; 0 on the rows that pad a node) the product ``-b sigmoid(.)`` is
        exact, so ``w`` may meet ``-b`` first. Other labels take the four passes."""
        if not self._signed_labels:
            return super()._dphi_times(Z, b, w)
        nb = -b
        return (Z * nb).sigmoid_().mul_(nb * w)

    def _dphi_times_of(self, b: torch.Tensor, w: torch.Tensor):
        """:meth:`_dphi_times` with ``-b`` and ``-b w`` computed once (the same numbers)."""
        if not self._signed_labels:
            return super()._dphi_times_of(b, w)
        nb = -b
        nbw = nb * w
        return lambda Z: (Z * nb).sigmoid_().mul_(nbw)

    def _dphi_times_numpy_of(self, b: torch.Tensor, w: torch.Tensor):
        """:meth:`_dphi_times_of` in place on the NumPy margins: the two products by NumPy
        (IEEE products, so the same bits as torch's) and the sigmoid by torch on a view of the
        same memory, one torch call where there were three."""
        if not self._signed_labels:
            return super()._dphi_times_numpy_of(b, w)
        nb = -b
        nb_, nbw = nb.numpy(), (nb * w).numpy()

        def weights(z: np.ndarray) -> np.ndarray:
            np.multiply(z, nb_, out=z)
            torch.from_numpy(z).sigmoid_()
            return np.multiply(z, nbw, out=z)

        return weights

    @functools.cached_property
    def _signed_labels(self) -> bool:
        """Whether every label is -1 or 1."""
        return bool(np.isin(self._b64, (-1.0, 1.0)).all())

    @staticmethod
    def d2phi(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(b * z)
        return s * (1.0 - s)

    def _extra_consts(self) -> dict[str, float | None]:
        return {"mu": self.lam if self.lam > 0 else None}
