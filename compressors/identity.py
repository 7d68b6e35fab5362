"""The identity: no compression, the baseline every method reduces to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors.base import Compressor, Packet, check_float_bits
from compressors.bitpack import BitReader, BitWriter
from streams import Streams


@dataclass(frozen=True)
class Identity(Compressor):
    """``C(x) = x``: the uncompressed baseline (distributed GD; DCGD with it is GD,
    Khirirat, Feyzmahdavian & Johansson 2018, arXiv 1806.06573).

    Class: unbiased with ``omega = 0`` and contractive with ``delta = 1``.
    Encoding: the ``d`` values at ``float_bits`` each. Bits: ``float_bits * d``.

    Args:
        float_bits: wire width of one value (16, 32 or 64).
    """

    unbiased: ClassVar[bool] = True
    scaled_projection: ClassVar[bool] = True
    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True
    linear: ClassVar[bool] = True
    projection: ClassVar[bool] = True

    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)

    def omega(self, d: int) -> float:
        return 0.0

    def delta(self, d: int) -> float:
        return 1.0

    def bits(self, d: int) -> int:
        return self.float_bits * d

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        return self._packet(x_i, self.bits(x_i.shape[1]), {"values"}, values=x_i.clone())

    def _decode(self, packet: Packet) -> torch.Tensor:
        return packet.fields["values"]

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["values"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        values = rd.floats(like.d, like.fields["values"].dtype)
        return self._rebuilt(like, rd.r, self.bits(like.d), values=values)
