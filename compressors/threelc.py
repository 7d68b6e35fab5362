"""3LC's stateless core: 3-value quantization with sparsity multiplication, sent as quartic
bytes under zero-run encoding (the error feedback of 3LC lives in the method, not here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows
from streams import Streams

__all__ = [
    "ThreeLC",
    "ZERO_BYTE",
    "quartic_decode",
    "quartic_encode",
    "ternarize",
    "zre_decode",
    "zre_encode",
    "zre_lengths",
]

# The quartic byte of five zeros: digits (1, 1, 1, 1, 1) in base 3.
ZERO_BYTE = 121
_POW3 = (81, 27, 9, 3, 1)


def ternarize(x_i: torch.Tensor, s: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x_i`` (m, d) of finite values to ``q`` in ``{-1, 0, 1}`` (int8) and ``amax``
    (m,) = ``max_j |x_ij|``, with ``q = round(x / (s amax))`` (``x ~ q s amax``), computed as
    ``round((x / amax) / s)`` so that no intermediate leaves the range. Exact halves round to
    even (0). A zero row gives ``q = 0``."""
    amax = x_i.abs().amax(dim=1) if x_i.shape[1] else x_i.new_zeros(x_i.shape[0])
    den = torch.where(amax > 0, amax, torch.ones_like(amax))
    q = torch.round(x_i / den[:, None] / s).clamp_(-1, 1)
    return q.to(torch.int8), amax


def quartic_encode(q: torch.Tensor) -> torch.Tensor:
    """Five ternary values per byte: digits ``q + 1`` in base 3, the first value most
    significant, the last group padded with zeros: ``ceil(n / 5)`` bytes in ``[0, 242]``. A
    1-D ``q`` gives 1-D bytes; rows ``(m, n)`` give ``(m, ceil(n / 5))``."""
    rows = q.reshape(-1, q.shape[-1]) if q.dim() > 1 else q.reshape(1, -1)
    m, n = rows.shape
    d = torch.ones(m, -(-n // 5) * 5, dtype=torch.uint8, device=q.device)
    d[:, :n] = (rows + 1).to(torch.uint8)
    w = torch.tensor(_POW3, dtype=torch.uint8, device=q.device)
    out = (d.view(m, -1, 5) * w).sum(dim=2, dtype=torch.uint8)
    return out if q.dim() > 1 else out[0]


def quartic_decode(b: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` ternary values (int8) of the quartic bytes ``b``."""
    w = torch.tensor(_POW3, dtype=torch.int16, device=b.device)
    d = (b.to(torch.int16)[:, None] // w) % 3
    return (d.view(-1)[:n] - 1).to(torch.int8)


def zre_encode(b: torch.Tensor) -> torch.Tensor:
    """Zero-run encoding of 1-D quartic bytes: each run of ``ZERO_BYTE`` is cut into pieces of
    at most 14; a piece of length ``l >= 2`` becomes the one byte ``241 + l`` (243..255, values
    quartic encoding never produces), a piece of length 1 stays ``ZERO_BYTE``. Never longer
    than its input."""
    n = b.numel()
    if n == 0:
        return b.clone()
    z = b == ZERO_BYTE
    if not bool(z.any()):
        return b.clone()
    f = torch.zeros(1, dtype=torch.bool, device=b.device)
    starts = z & ~torch.cat([f, z[:-1]])
    ends = z & ~torch.cat([z[1:], f])
    i = torch.arange(n, device=b.device)
    pos = i - torch.where(starts, i, -1).cummax(dim=0).values  # offset inside the run
    keep = ~z | (pos % 14 == 0)
    lengths = i[ends] - i[starts] + 1
    run = (torch.cumsum(starts.to(torch.int64), 0) - 1).clamp_(min=0)
    piece = torch.clamp(lengths[run] - (pos // 14) * 14, max=14)
    code = torch.where(piece == 1, ZERO_BYTE, 241 + piece)
    return torch.where(z, code, b.to(torch.int64))[keep].to(torch.uint8)


def zre_lengths(b: torch.Tensor) -> torch.Tensor:
    """``len(zre_encode(row))`` for each row of ``b`` (m, L), int64 (m,), without building the
    streams: the bytes that are not ``ZERO_BYTE`` plus one per piece of at most 14 zero bytes."""
    m, L = b.shape
    if L == 0:
        return torch.zeros(m, dtype=torch.int64, device=b.device)
    z = (b == ZERO_BYTE).reshape(-1)
    i = torch.arange(m * L, device=b.device)
    prev = torch.cat([torch.zeros(1, dtype=torch.bool, device=b.device), z[:-1]])
    starts = z & (~prev | (i % L == 0))
    pos = i - torch.where(starts, i, -1).cummax(dim=0).values
    return (~z | (pos % 14 == 0)).reshape(m, L).sum(dim=1)


def zre_decode(b: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`zre_encode`."""
    run = b >= 243
    reps = torch.where(run, b.to(torch.int64) - 241, 1)
    vals = torch.where(run, torch.full_like(b, ZERO_BYTE), b)
    return torch.repeat_interleave(vals, reps)


@dataclass(frozen=True)
class ThreeLC(Compressor):
    """3LC's quantizer (Lim, Andersen & Kaminsky, SysML 2019, arXiv 1802.07389): 3-value
    quantization with sparsity multiplication, quartic encoding and zero-run encoding, without
    the error feedback 3LC runs around it (wrap it in EF14/EF21 for that).

    ``C(x) = q s ||x||_inf`` with ``q = round(x / (s ||x||_inf))`` in ``{-1, 0, 1}``; ``s``
    in ``[1, 2)``; ``s = 1`` is plain ternary rounding at half the max, a larger ``s`` zeroes
    more entries. The paper's details not re-read (rounding of exact halves: to even; digit
    order in a byte: first value most significant; default ``s = 1``) are reconstructions.

    Class: deterministic and contractive with ``delta = s (2 - s) / d``. Proof: the largest
    entry maps to ``±s ||x||_inf`` (``1/s > 1/2``), error ``(s - 1)^2 ||x||_inf^2``; an entry
    with ``|x_j| >= s ||x||_inf / 2`` maps to ``±s ||x||_inf`` with error
    ``(s ||x||_inf - |x_j|)^2 <= x_j^2``; the others map to 0 with error ``x_j^2``. So
    ``||C(x) - x||^2 <= ||x||^2 - s (2 - s) ||x||_inf^2 <= (1 - s (2 - s) / d) ||x||^2``
    (``||x||_inf^2 >= ||x||^2 / d``). Attained at ``d = 1``; for ``d > 1`` a bound, not attained
    (``worst_case`` is None).

    Bits: the scale ``||x||_inf`` at ``float_bits`` (the receiver knows ``s``), then the
    zero-run encoded quartic stream, 8 bits a byte: ``float_bits + 8 len(zre(quartic(q)))``,
    at most ``float_bits + 8 ceil(d / 5)`` (zero-run encoding never lengthens a stream). The
    size depends on ``x``; nothing is assumed about its mean (``expected_bits`` is None).
    Non-finite rows: ``q = 0`` and the scale NaN, which travels, so they decode to NaN. The
    output saturates at ``±finfo.max`` (``s ||x||_inf`` can exceed it).

    Args:
        s: the sparsity multiplier, ``1 <= s < 2``.
        float_bits: wire width of the scale.
    """

    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    s: float = 1.0
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        s = self.s
        if isinstance(s, bool) or not isinstance(s, int | float) or not 1.0 <= s < 2.0:
            raise ValueError(f"s must be a number in [1, 2), got s={s!r}")

    def delta(self, d: int) -> float:
        return self.s * (2.0 - self.s) / d

    def expected_bits(self, d: int) -> float | None:
        return None

    def max_bits(self, d: int) -> int:
        return self.float_bits + 8 * math.ceil(d / 5)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(s=1.75)]

    def streams(self, q: torch.Tensor) -> list[torch.Tensor]:
        """Each row's zero-run encoded quartic bytes."""
        return [zre_encode(quartic_encode(row)) for row in q]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        x = x_i.to(work_dtype(x_i.dtype))
        if compiled_dense.serves(x):
            amax = compiled_dense.absmax(x)
            if bool(torch.isfinite(amax).all()):  # no non-finite row: the same payload, fused
                q, lens = compiled_dense.threelc_encode(x, amax, self.s)
                nbits = self.float_bits + 8 * lens
                return self._packet(x_i, nbits, {"q", "scale"}, q=q, scale=amax.to(x_i.dtype))
        bad = nonfinite_rows(x_i)
        if bad is not None:
            x = torch.where(bad[:, None], torch.zeros((), dtype=x.dtype), x)
        q, amax = ternarize(x, self.s)
        scale = amax.to(x_i.dtype)
        if bad is not None:
            scale = torch.where(bad, torch.nan, scale)
        nbits = self.float_bits + 8 * zre_lengths(quartic_encode(q))
        return self._packet(x_i, nbits, {"q", "scale"}, q=q, scale=scale)

    def _decode(self, packet: Packet) -> torch.Tensor:
        wd = work_dtype(packet.dtype)
        f = packet.fields
        big = torch.finfo(packet.dtype).max
        scale = f["scale"].to(wd)
        if compiled_dense.serves(scale[:, None].expand(-1, f["q"].shape[1])):
            return compiled_dense.threelc_decode(f["q"], scale, self.s, big)
        y = (f["q"].to(wd) * scale[:, None]) * self.s
        return y.clamp_(-big, big)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["scale"][:, None])
        streams = self.streams(packet.fields["q"])
        lens = torch.tensor([b.numel() for b in streams], dtype=torch.int64)
        L = int(lens.max()) if streams else 0
        buf = torch.zeros(packet.m, L, dtype=torch.int64)
        for j, b in enumerate(streams):
            buf[j, : b.numel()] = b.cpu().to(torch.int64)
        w.uint(buf.to(w.device), 8, count=lens.to(w.device))

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r = like.d, rd.r
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        left = (rd.limit - rd.cursor) // 8
        data = rd.uint(int(left.max()) if r else 0, 8, count=left)
        want = math.ceil(d / 5)
        q = torch.zeros(r, d, dtype=torch.int8, device=rd.device)
        for j in range(r):
            b = zre_decode(data[j, : int(left[j])].to(torch.uint8))
            if b.numel() != want:
                raise ValueError(
                    f"row {j} does not hold {want} quartic bytes of d={d} values: "
                    "wrong width or corrupt data"
                )
            q[j] = quartic_decode(b, d)
        return self._rebuilt(like, r, self.float_bits + 8 * left, q=q, scale=scale)
