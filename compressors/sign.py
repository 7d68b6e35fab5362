"""Plain sign: one bit per coordinate, no scale (signSGD)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense, compiled_quant
from compressors.base import Compressor, Packet
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import NONFINITE, mark_rows, nonfinite_rows
from streams import Streams


@dataclass(frozen=True)
class Sign(Compressor):
    """Plain sign (Bernstein, Wang, Azizzadenesheli & Anandkumar 2018, arXiv 1802.04434).

    ``C(x) = sign(x)`` with ``sign(0) := +1``: the 1-bit code has no zero, so ``C(0)`` is the
    all-ones vector (``preserves_zero = False``).

    Class: neither unbiased nor contractive: ``C`` is not scale-equivariant (``C(x)`` has norm
    ``sqrt(d)`` whatever ``||x||``), so no ``omega`` or ``delta`` holds for all ``x``. Methods
    with guarantees need ``scaled-sign``; this one exists for signSGD-style heuristics.

    Bits: ``d``. The code has no symbol for NaN or inf: a row with such an entry is flagged in
    the in-process packet (a field that does not travel) and decodes to NaN there; rows
    rebuilt from bytes decode to their signs (``nonfinite_on_wire = False``).
    """

    deterministic: ClassVar[bool] = True
    preserves_zero: ClassVar[bool] = False
    nonfinite_on_wire: ClassVar[bool] = False

    def bits(self, d: int) -> int:
        return d

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        if compiled_dense.serves(x_i):  # the signs and the rows' finiteness in one pass
            signs, bad = compiled_dense.signs_rows(x_i)
            bad = bad if bool(bad.any()) else None
        else:
            signs, bad = x_i < 0, nonfinite_rows(x_i)
        fields = {"signs": signs}
        if bad is not None:
            fields[NONFINITE] = bad  # does not travel: the 1-bit code has no symbol for it
        return self._packet(x_i, self.bits(x_i.shape[1]), {"signs"}, **fields)

    def _decode(self, packet: Packet) -> torch.Tensor:
        signs = packet.fields["signs"]
        if compiled_quant.serves(signs.device, packet.dtype):
            one = torch.ones(packet.m, dtype=packet.dtype)
            return mark_rows(compiled_quant.select(signs, -one, one), packet.fields)
        return mark_rows(torch.where(signs, -1.0, 1.0).to(packet.dtype), packet.fields)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.bools(packet.fields["signs"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        return self._rebuilt(like, rd.r, self.bits(like.d), signs=rd.bools(like.d))
