"""Natural compression: random rounding to a neighbouring power of two."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_quant
from compressors.base import Compressor, Packet, work_dtype
from compressors.bitpack import BitReader, BitWriter, bits_to_float, float_to_bits
from streams import Streams

# Exponent bits of the IEEE formats by total width: natural compression sends sign + exponent.
EXPONENT_BITS = {16: 5, 32: 8, 64: 11}
# (exponent, mantissa) bits of the dtype the magnitudes are stored in: the wire sends the
# exponent field of that dtype. A power of two is exactly its exponent field, except the
# subnormal ones (below 2**-126 in float32, 2**-1022 in float64), which the field cannot hold:
# they travel as 0.
MANTISSA_BITS = {torch.float32: (8, 23), torch.float64: (11, 52)}


def round_to_power_of_two(
    a: torch.Tensor, u: torch.Tensor, emax: int | None = None
) -> torch.Tensor:
    """Unbiased random rounding of ``a >= 0`` to ``2^e`` or ``2^(e+1)``, ``2^e <= a < 2^(e+1)``.

    Rounds down with probability ``(2^(e+1) - a) / 2^e``, using uniforms ``u``; zero stays zero,
    NaN and inf stay non-finite. With ``emax`` no result exceeds ``2^emax``: the top binade
    ``[2^emax, finfo.max]`` rounds down (saturation, see :mod:`compressors.nonfinite`).
    """
    mant, exp = torch.frexp(a)  # a = mant * 2^exp, mant in [0.5, 1); 0, inf, NaN keep theirs
    e = exp - (u < 2.0 - 2.0 * mant).to(exp.dtype)
    if emax is not None:
        e = e.clamp_(max=emax)
    # ceil(mant) is 1 for a > 0, 0 for a = 0, and inf or NaN for a non-finite ``a``
    return torch.ldexp(torch.ceil(mant), e)


@dataclass(frozen=True)
class Natural(Compressor):
    """Natural compression C_nat (Horváth, Ho, Horváth, Sahu, Canini & Richtárik 2019,
    arXiv 1905.10988, Sec. 3, eq. (5)).

    Each entry ``t != 0`` with ``2^a <= |t| < 2^(a+1)`` becomes ``sign(t) 2^a`` with probability
    ``(2^(a+1) - |t|) / 2^a`` and ``sign(t) 2^(a+1)`` otherwise; zero stays zero.

    Class: unbiased, ``omega = 1/8``, attained when every ``|t| = (4/3) 2^a`` (Theorem 1).
    Deviation at the top of the range: entries in the dtype's top binade ``[2^emax, max]``
    round down to ``2^emax`` (``2^(emax+1)`` is not finite), so there ``C`` is biased; NaN and
    inf entries come out non-finite (:mod:`compressors.nonfinite`).

    Bits: per entry the sign and the exponent of the float format, no mantissa:
    ``d * (1 + 8)`` bits for ``float_bits = 32`` (``1 + 5`` for 16, ``1 + 11`` for 64).
    On the wire (``to_bytes``) the exponent field of the dtype the magnitudes are stored in
    travels (8 bits for float32, 11 for float64); subnormal magnitudes, which that field cannot
    hold, arrive as 0.

    Args:
        float_bits: the float format whose exponent is sent (16, 32 or 64).
    """

    unbiased: ClassVar[bool] = True

    float_bits: int = 32

    def __post_init__(self) -> None:
        if self.float_bits not in EXPONENT_BITS:
            raise ValueError(f"float_bits must be 16, 32 or 64, got float_bits={self.float_bits!r}")

    def omega(self, d: int) -> float:
        return 1.0 / 8.0

    def bits(self, d: int) -> int:
        return d * (1 + EXPONENT_BITS[self.float_bits])

    def worst_case(self, d: int) -> torch.Tensor:
        signs = torch.where(torch.arange(d) % 2 == 0, 1.0, -1.0).double()
        return signs * (4.0 / 3.0) * torch.pow(2.0, torch.arange(d).double() % 7 - 3)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        w = work_dtype(x_i.dtype)
        x = x_i.to(w)
        emax = math.frexp(torch.finfo(x_i.dtype).max)[1] - 1  # 2^emax: the largest power of 2
        if compiled_quant.usable(x):  # the same bits in one pass
            signs, mag = compiled_quant.natural_encode(x, rng.keys, emax)
        else:
            signs = x < 0
            mag = round_to_power_of_two(x.abs(), rng.uniform(d, dtype=w), emax)
        return self._packet(x_i, self.bits(d), {"signs", "magnitudes"}, signs=signs, magnitudes=mag)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        if compiled_quant.usable(f["magnitudes"]):
            return compiled_quant.natural_decode(f["signs"], f["magnitudes"])
        return torch.where(f["signs"], -f["magnitudes"], f["magnitudes"])

    def _write(self, packet: Packet, w: BitWriter) -> None:
        mag = packet.fields["magnitudes"]
        e, mant = MANTISSA_BITS[mag.dtype]
        w.bools(packet.fields["signs"])
        w.uint(float_to_bits(mag) >> mant, e)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, dtype = like.d, like.fields["magnitudes"].dtype
        e, mant = MANTISSA_BITS[dtype]
        signs = rd.bools(d)
        mag = bits_to_float(rd.uint(d, e) << mant, dtype)
        return self._rebuilt(like, rd.r, self.bits(d), signs=signs, magnitudes=mag)
