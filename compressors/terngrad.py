"""TernGrad: ternary stochastic rounding against the max-norm."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compressors import compiled_quant
from compressors.base import Compressor
from compressors.dithering import QSGD, _Dithering


@dataclass(frozen=True)
class TernGrad(_Dithering):
    """TernGrad (Wen, Xu, Yan, Wu, Wang, Chen & Li 2017, arXiv 1705.07878, eq. (3)).

    ``C(x) = ||x||_inf sign(x) * b`` with ``b_j ~ Bernoulli(|x_j| / ||x||_inf)``: random
    dithering with ``p = inf`` and one level. The paper's layer-wise scaling and gradient
    clipping are training heuristics around the operator and are not part of it.

    Class: unbiased with the exact supremum ``omega = (sqrt(d) - 1) / 2``, attained at
    ``x = (1, 1/(sqrt(d)+1), ..., 1/(sqrt(d)+1))``: the variance is
    ``sum_{j>1} r_j (1 - r_j)`` over ``1 + sum_{j>1} r_j^2`` with ``r_j = |x_j|/||x||_inf``,
    maximised by equal ``r_j = 1/(sqrt(d)+1)``. (The generic dithering bound gives sqrt(d).)

    Bits: ``float_bits + 2 d`` (a fixed 2-bit code per entry; ``log2 3 d`` with arithmetic
    coding), or the Elias code of the non-zeros with ``coding="elias"``.

    Args:
        coding: ``fixed`` | ``elias``.
        float_bits: wire width of the scale ``||x||_inf``.
    """

    def __post_init__(self) -> None:
        self._check_common()

    @property
    def s(self) -> int:
        return 1

    @property
    def p(self) -> float:
        return math.inf

    def _as_qsgd(self) -> QSGD:
        return QSGD(levels=1, norm="inf", coding=self.coding, float_bits=self.float_bits)

    def omega(self, d: int) -> float:
        return self._as_qsgd().omega(d)

    def worst_case(self, d: int) -> torch.Tensor:
        return self._as_qsgd().worst_case(d)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(coding="elias")]

    def _round(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return (u < r).to(torch.int64)

    def _grid(self, level: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return level.to(dtype)

    def _kernel_grid(self) -> int | None:
        return compiled_quant.TERNGRAD
