"""Scaled sign: the sign vector times the mean magnitude (EF-signSGD)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense, compiled_quant
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from streams import Streams


@dataclass(frozen=True)
class ScaledSign(Compressor):
    """Scaled sign (Karimireddy, Rebjock, Stich & Jaggi 2019, arXiv 1901.09847, Sec. 3).

    ``C(x) = (||x||_1 / d) sign(x)`` with ``sign(0) := +1`` (the 1-bit code has no zero).

    Class: contractive and deterministic: ``||C(x) - x||^2 = ||x||^2 - ||x||_1^2 / d``, so the
    contraction is ``||x||_1^2 / (d ||x||^2) >= 1/d``; ``delta = 1/d``, attained at ``e_1``.

    Bits: ``d + float_bits`` (one bit per sign, the scale as one float). A row with a NaN or
    inf entry has a NaN scale (:mod:`compressors.nonfinite`).

    Args:
        float_bits: wire width of the scale.
    """

    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True

    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)

    def delta(self, d: int) -> float:
        return 1.0 / d

    def bias_variance_exact(self, d: int) -> bool:
        # deterministic, and delta is attained (at worst_case): (sqrt(1 - delta), 0) is exact
        return True

    def bits(self, d: int) -> int:
        return d + self.float_bits

    def worst_case(self, d: int) -> torch.Tensor:
        x = torch.zeros(d, dtype=torch.float64)
        x[0] = 1.0
        return x

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        x = x_i.to(work_dtype(x_i.dtype))
        if compiled_dense.serves(x):  # |x| and the signs in one pass
            a, signs = compiled_dense.abs_signs(x)
        else:
            a, signs = x.abs(), x < 0
        scale = a.sum(dim=1) / x.shape[1]
        over = ~torch.isfinite(scale)  # an entry is not finite, or finite ones overflow the sum
        if bool(over.any()):
            top = a[over].amax(dim=1)
            mean = top * (a[over] / top[:, None]).mean(dim=1)  # NaN if an entry is not finite
            scale[over] = torch.where(torch.isfinite(top), mean, torch.nan)
        return self._packet(
            x_i, self.bits(x.shape[1]), {"scale", "signs"}, scale=scale, signs=signs
        )

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        if compiled_quant.usable(f["scale"][:, None]):
            return compiled_quant.select(f["signs"], -f["scale"], f["scale"])
        scale = f["scale"][:, None].expand(-1, packet.d)
        return torch.where(f["signs"], -scale, scale)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["scale"])
        w.bools(packet.fields["signs"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        signs = rd.bools(like.d)
        return self._rebuilt(like, rd.r, self.bits(like.d), scale=scale, signs=signs)
