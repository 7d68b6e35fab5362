"""Natural dithering: random dithering on the grid of powers of two."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compressors import compiled_quant
from compressors.base import Compressor
from compressors.dithering import _LevelDithering


@dataclass(frozen=True)
class NaturalDithering(_LevelDithering):
    """Natural dithering (Horváth, Ho, Horváth, Sahu, Canini & Richtárik 2019,
    arXiv 1905.10988, Sec. 4, Theorem 7).

    As random dithering, but ``|x_j| / ||x||_p`` is rounded at random, unbiasedly, to one of
    its two neighbours in the grid ``{0, 2^(1-s), 2^(2-s), ..., 1/2, 1}``.

    Class: unbiased, ``omega = 1/8 + d^(1/r) 2^(1-s) min(1, d^(1/r) 2^(1-s))`` with
    ``r = min(p, 2)``; entries on the powers-of-two part of the grid contribute at most 1/8 of
    their square (as natural compression), those below ``2^(1-s)`` the second term.

    Bits: ``float_bits + d (1 + ceil(log2(s + 1)))`` (sign and level index, ``coding="fixed"``),
    or the Elias code of the non-zeros (``coding="elias"``).

    Args:
        levels: ``s >= 1``, the number of non-zero levels.
        norm: ``2`` or ``inf``.
        coding: ``fixed`` | ``elias``.
        float_bits: wire width of the norm.
    """

    levels: int = 8
    norm: str = "2"

    def omega(self, d: int) -> float:
        t = d ** (1.0 / min(self.p, 2.0)) * 2.0 ** (1 - self.s)
        return 1.0 / 8.0 + t * min(1.0, t)

    def bits(self, d: int) -> int:
        if self.coding != "fixed":
            return super().bits(d)
        return self.float_bits + d * (1 + math.ceil(math.log2(self.s + 1)))

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(levels=1), cls(levels=3, norm="inf"), cls(levels=4, coding="elias")]

    def _round(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        s = self.s
        mant, exp = torch.frexp(r)  # r = mant 2^exp, so 2^(exp-1) <= r < 2^exp
        e = (exp - 1).clamp(min=1 - s)
        low = torch.ldexp(torch.ones_like(r), e)
        big = r >= 2.0 ** (1 - s)
        low_idx = torch.where(big, e + s, 0).to(torch.int64)
        low_val = torch.where(big, low, 0.0)
        width = torch.where(big, low, 2.0 ** (1 - s))
        up = u < (r - low_val) / width
        return (low_idx + up.to(torch.int64)).clamp(max=s)

    def _grid(self, level: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        val = torch.ldexp(torch.ones(level.shape, dtype=dtype, device=level.device), level - self.s)
        return torch.where(level > 0, val, 0.0)

    def _kernel_grid(self) -> int | None:
        return compiled_quant.NATURAL if compiled_quant.natural_levels_ok(self.s) else None
