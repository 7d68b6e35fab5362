"""Count sketch: an unbiased, linear sketch of a vector, summable across nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_sketch
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import saturate
from streams import Streams, tags


@dataclass(frozen=True)
class CountSketch(Compressor):
    """Count sketch (Charikar, Chen & Farach-Colton 2002), the compression of sketched
    distributed methods (FetchSGD, Rothchild et al. 2020, arXiv 2007.07682; SketchedAMSGrad,
    "Communication-Efficient Adam-Type Algorithms for Distributed Data Mining", 2022).

    ``rows`` independent hash rows ``j`` map coordinate ``i`` to bucket ``h_j(i)`` (uniform in
    ``[0, cols)``) with sign ``s_j(i)`` (Rademacher); the payload is the ``rows x cols`` table
    ``S_j[b] = sum_{i: h_j(i) = b} s_j(i) x_i``. The hashes are shared randomness (every node
    draws the same ones from the shared stream, so they cost no bits), which makes the sketch
    linear: the sum of the nodes' tables is the table of their sum, as an all-reduce needs.
    Decoding is the mean estimate ``xhat_i = (1/rows) sum_j s_j(i) S_j[h_j(i)]``.

    Class: unbiased, ``omega = (d - 1) / (rows cols)``, exact for every ``x``: row ``j``'s
    estimate is ``x_i`` plus ``sum_{k != i} s_j(i) s_j(k) x_k [h_j(k) = h_j(i)]``, of mean 0 and
    variance ``sum_{k != i} x_k^2 / cols``; the rows are independent. (The median estimate
    that heavy-hitter recovery uses is biased and not offered here.)

    Bits: ``rows cols float_bits`` (the table), fixed; with ``ratio`` the table holds about
    ``ratio d`` values: ``cols = max(1, round(ratio d / rows))``.

    Non-finite values: the table is summed in float64 with the entries scaled by a power of two
    that keeps any ``d`` finite values from overflowing (exact, except that subnormal inputs
    may lose low bits), then saturated at the dtype's max; a NaN or inf entry makes its buckets,
    and so its row's estimate, non-finite.

    Args:
        rows: hash rows ``r >= 1``.
        cols: buckets per row ``c >= 1`` (or ``ratio``).
        ratio: table size as a fraction of ``d`` (default 0.1 when ``cols`` is not given).
        float_bits: wire width of one table entry.
    """

    unbiased: ClassVar[bool] = True
    shared_randomness: ClassVar[bool] = True
    linear: ClassVar[bool] = True

    rows: int = 3
    cols: int | None = None
    ratio: float | None = None
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 1:
            raise ValueError(f"rows must be a positive integer, got rows={self.rows!r}")
        if self.cols is not None and self.ratio is not None:
            raise ValueError("give cols or ratio, not both")
        if self.cols is not None and (
            isinstance(self.cols, bool) or not isinstance(self.cols, int) or self.cols < 1
        ):
            raise ValueError(f"cols must be a positive integer, got cols={self.cols!r}")
        if self.ratio is not None and not (
            isinstance(self.ratio, int | float) and 0 < self.ratio <= 1
        ):
            raise ValueError(f"ratio must be in (0, 1], got ratio={self.ratio!r}")

    def width(self, d: int) -> int:
        """Buckets per row, ``cols`` or ``max(1, round(ratio d / rows))``."""
        if self.cols is not None:
            return self.cols
        ratio = 0.1 if self.ratio is None else self.ratio
        return max(1, round(ratio * d / self.rows))

    def omega(self, d: int) -> float:
        return (d - 1) / (self.rows * self.width(d))

    def bits(self, d: int) -> int:
        return self.rows * self.width(d) * self.float_bits

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)  # the variance is the same for every x

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(rows=1, cols=4), cls(rows=5, ratio=0.5)]

    def _hashes(self, rng: Streams, m: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Buckets ``(m, rows, d)`` int64 and signs ``(m, rows, d)`` in torch's default dtype,
        drawn once when every row holds the same key (the shared stream), else per row."""
        one = m > 1 and bool((rng.keys == rng.keys[0]).all())
        src = rng[:1] if one else rng
        c = self.width(d)
        buckets = src.split(tags.SKETCH_BUCKET).integers(c, self.rows, d)
        signs = torch.where(src.split(tags.SKETCH_SIGN).uniform(self.rows, d) < 0.5, -1.0, 1.0)
        if one:
            buckets, signs = buckets.expand(m, -1, -1), signs.expand(m, -1, -1)
        return buckets, signs

    @staticmethod
    def _keys(rng: Streams) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's keys of its bucket and sign streams (those :meth:`_hashes` draws from)."""
        return rng.split(tags.SKETCH_BUCKET).keys, rng.split(tags.SKETCH_SIGN).keys

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        c = self.width(d)
        shift = math.ldexp(1.0, -(math.ceil(math.log2(d)) + 1))  # no overflow of d entries
        meta = {"keys": rng.keys, "width": c}
        if compiled_sketch.serves(x_i, x_i.numel()):
            # the same numbers as below, the hashes drawn where they are used
            values = compiled_sketch.encode(x_i, *self._keys(rng), self.rows, c, shift)
            return self._packet(x_i, self.bits(d), {"values"}, meta, values=values)
        buckets, signs = self._hashes(rng, m, d)
        scaled = x_i.to(torch.float64)[:, None, :] * signs.to(x_i.device) * shift
        table = torch.zeros(m, self.rows, c, dtype=torch.float64, device=x_i.device)
        table.scatter_add_(2, buckets.to(x_i.device), scaled)
        table = table.reshape(m, -1)
        values = saturate((table / shift).to(x_i.dtype), table, x_i.dtype)
        return self._packet(x_i, self.bits(d), {"values"}, meta, values=values)

    def _decode(self, packet: Packet) -> torch.Tensor:
        m, d = packet.m, packet.d
        values = packet.fields["values"]
        rng = Streams(packet.meta["keys"].to(values.device), torch.zeros(m, dtype=torch.int64))
        fast = compiled_sketch.serves(values, m * d) and values.dtype == packet.dtype
        # the estimates' dtype: the table's times the signs' (torch's default dtype)
        work = torch.promote_types(work_dtype(values.dtype), torch.get_default_dtype())
        if fast and self.rows <= compiled_sketch.SUM_ROWS:
            return compiled_sketch.decode(values, *self._keys(rng), self.rows, d, work)
        if fast:
            est = compiled_sketch.estimates(values, *self._keys(rng), self.rows, d, work)
        else:
            buckets, signs = self._hashes(rng, m, d)
            table = values.to(work_dtype(values.dtype)).reshape(m, self.rows, packet.meta["width"])
            est = torch.gather(table, 2, buckets.to(values.device)) * signs.to(values.device)
        return saturate((est / self.rows).sum(dim=1).to(packet.dtype), est[:, 0], packet.dtype)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["values"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        width = like.meta["width"]
        values = rd.floats(self.rows * width, like.fields["values"].dtype)
        keys = like.meta["keys"][:1].to(rd.device).expand(rd.r).clone()
        meta = {"keys": keys, "width": width}
        return self._rebuilt(like, rd.r, self.bits(like.d), meta, values=values)
