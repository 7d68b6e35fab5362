"""Bernoulli (lazy) compression: send the whole vector with probability p."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense
from compressors.base import Compressor, Packet, check_float_bits
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import NONFINITE, mark_rows, nonfinite_rows, saturate
from streams import Streams


@dataclass(frozen=True)
class Bernoulli(Compressor):
    """Bernoulli compressor (lazy aggregation; e.g. Khaled & Richtárik 2019, arXiv 1909.04716;
    the ``p``-sampling of MARINA's analysis, Gorbunov et al. 2021, arXiv 2102.07845).

    ``C(x) = (xi / p) x`` with ``xi ~ Bernoulli(p)`` per row.

    Class: unbiased, ``omega = 1/p - 1``, exact for every ``x``.

    Bits: ``1 + xi * float_bits * d`` (a flag, then the vector if sent); variable size with mean
    ``1 + p * float_bits * d``.

    Non-finite values (:mod:`compressors.nonfinite`): ``x / p`` saturates at the dtype's max; a
    row with a NaN or inf entry that is not sent is flagged in the in-process packet (a field
    that does not travel), so it decodes to NaN there, but to zero when rebuilt from bytes.

    Args:
        p: probability of sending, in ``(0, 1]``.
        float_bits: wire width of one value.
    """

    unbiased: ClassVar[bool] = True
    scaled_projection: ClassVar[bool] = True
    linear: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False
    nonfinite_on_wire: ClassVar[bool] = False

    p: float = 0.5
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if not 0 < self.p <= 1:
            raise ValueError(f"p must be in (0, 1], got p={self.p!r}")

    def omega(self, d: int) -> float:
        return 1.0 / self.p - 1.0

    def expected_bits(self, d: int) -> float:
        return 1.0 + self.p * self.float_bits * d

    def max_bits(self, d: int) -> int:
        return 1 + self.float_bits * d

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(p=0.1), cls(p=1.0)]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        d = x_i.shape[1]
        sent = rng.uniform(1, dtype=torch.float64)[:, 0] < self.p
        if compiled_dense.serves(x_i):  # the same payload and flags in one pass
            values, bad = compiled_dense.rows_or_zero(x_i, sent)
            bad = bad if bool(bad.any()) else None
        else:
            values = torch.where(sent[:, None], x_i, 0.0)
            bad = nonfinite_rows(x_i)
        nbits = 1 + sent.to(torch.int64) * (self.float_bits * d)
        fields = {"sent": sent, "values": values}
        if bad is not None:
            fields[NONFINITE] = bad & ~sent  # a sent row carries its NaN or inf itself
        return self._packet(x_i, nbits, {"sent", "values"}, {"scale": 1.0 / self.p}, **fields)

    def _decode(self, packet: Packet) -> torch.Tensor:
        values = packet.fields["values"]
        if compiled_dense.serves(values):  # the product and its finiteness test in one pass
            y, finite = compiled_dense.scale_rows(values, packet.meta["scale"])
            if not finite:
                y = saturate(y, values, packet.dtype)
        else:
            y = saturate(values * packet.meta["scale"], values, packet.dtype)
        return mark_rows(y, packet.fields)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        sent = packet.fields["sent"]
        w.bools(sent)
        w.floats(packet.fields["values"], count=sent.to(torch.int64) * packet.d)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        sent = rd.bools(1)[:, 0]
        values = rd.floats(like.d, like.fields["values"].dtype, count=sent.to(torch.int64) * like.d)
        nbits = 1 + sent.to(torch.int64) * (self.float_bits * like.d)
        return self._rebuilt(like, rd.r, nbits, {"scale": 1.0 / self.p}, sent=sent, values=values)
