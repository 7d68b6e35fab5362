"""Rounding to a grid of spacing ``h``: integer levels, Elias-coded (absolute compressor)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense
from compressors.base import Compressor, Packet, ceil_log2, check_float_bits
from compressors.bitpack import BitReader, BitWriter, read_elias_levels, write_elias_levels
from compressors.dithering import elias_payload_bits
from compressors.nonfinite import saturate
from streams import Streams

ROUNDINGS = ("deterministic", "random")
ESCAPE_BITS = 24  # levels with |l| >= 2^24 - 1 (and non-finite entries) travel as raw values
ESCAPE = 1 << ESCAPE_BITS  # the level code that marks a raw value


def _slots(n_esc: torch.Tensor, K: int) -> torch.Tensor:
    """``(m, K)``: True at the first ``n_esc[r]`` entries of row ``r``."""
    return torch.arange(K, device=n_esc.device)[None, :] < n_esc[:, None]


def _compact(values: torch.Tensor, n_esc: torch.Tensor) -> torch.Tensor:
    """The payload's ``raw``: ``(m, K)``, ``K = max n_esc``, row ``r`` holding its ``n_esc[r]``
    escaped values (``values``, all rows' in row-major order) first, then zeros."""
    K = int(n_esc.max()) if n_esc.numel() else 0
    raw = torch.zeros(n_esc.numel(), K, dtype=values.dtype, device=values.device)
    raw[_slots(n_esc, K)] = values
    return raw


@dataclass(frozen=True)
class GridRound(Compressor):
    """Rounding to the grid ``h Z``: ``C(x)_j = h l_j`` with an integer level ``l_j``.

    ``rounding="deterministic"``: ``l_j = round(x_j / h)`` (half to even); ``"random"``:
    ``l_j = floor(x_j/h) + 1`` with probability ``x_j/h - floor(x_j/h)``, else
    ``floor(x_j/h)``, from the row's stream (unbiased: ``E C(x) = x``). Rounding to a fixed grid
    is the absolute compressor of Danilova & Gorbunov 2022 (arXiv 2203.02383; the class of
    Sahu et al. 2021, arXiv 2108.00951); randomized rounding to ``h Z`` is the stochastic
    rounding of Gupta et al. 2015 (arXiv 1502.02551).

    Class: absolute, ``Delta^2 = d h^2 / 4``, for both roundings. Deterministic: ``|x_j - h l_j|
    <= h/2`` per entry. Random: with ``r = x_j/h - floor(x_j/h)``, ``E (x_j - h l_j)^2 = h^2 r
    (1 - r) <= h^2/4``. Both are attained at ``x_j = h (k + 1/2)`` (:meth:`abs_worst_case`:
    ``h/2`` in every entry). The bound holds for every ``x``: entries with ``|x_j/h| >= 2^24 - 1``
    (and non-finite ones) escape the grid and are sent exactly. The levels are computed in
    float64; the output's rounding to the input's dtype is outside the bound (as for every
    compressor, ``identity`` included).

    Bits (variable size, counted from the levels produced): a count of the escaped entries,
    ``ceil(log2(d + 1))`` bits, then their raw values (``float_bits`` each), then QSGD's Elias
    code of the non-zero levels (Alistarh et al. 2017, arXiv 1610.02132, Sec. 3.2): per
    non-zero entry ``gamma(gap) + 1 (sign) + gamma(|l_j|)``, an escaped entry coded as the level
    ``2^24`` (49 bits); ``gamma(v) = 2 floor(log2 v) + 1``. On the wire the raw values travel in
    the dtype they are stored in.

    Args:
        h: the grid spacing ``h > 0``, in the units of ``x``.
        rounding: ``deterministic`` | ``random``.
        float_bits: wire width of one escaped value.
    """

    absolute: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    h: float = 1e-3
    rounding: str = "deterministic"
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        h = self.h
        if isinstance(h, bool) or not isinstance(h, int | float) or not 0 < h < math.inf:
            raise ValueError(f"h must be a finite number > 0, got h={h!r}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(
                f"rounding must be deterministic or random, got rounding={self.rounding!r}"
            )

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        return self.rounding == "deterministic"

    # ---------------------------------------------------------------- theory and bits
    def abs_delta_sq(self, d: int) -> float:
        return d * float(self.h) ** 2 / 4.0

    def abs_worst_case(self, d: int) -> torch.Tensor:
        return torch.full((d,), float(self.h) / 2.0, dtype=torch.float64)

    def expected_bits(self, d: int) -> float | None:
        return None

    def max_bits(self, d: int) -> int:
        # every entry escaped, each at gap 1
        return ceil_log2(d + 1) + d * (1 + 1 + 2 * ESCAPE_BITS + 1 + self.float_bits)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(h=0.25, rounding="random")]

    # ---------------------------------------------------------------- the operator
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        if compiled_dense.serves(x_i):  # the same payload in one pass
            level, esc, raw, n_esc, elias = compiled_dense.round_encode(
                x_i, self.h, rng.keys, self.rounding == "random", ESCAPE
            )
            nbits = ceil_log2(d + 1) + n_esc * self.float_bits + elias
            return self._packet(
                x_i, nbits, {"levels", "escaped", "raw"}, levels=level, escaped=esc, raw=raw
            )
        q = x_i.to(torch.float64) / float(self.h)
        esc = ~(q.abs() < ESCAPE - 1)  # NaN and inf included
        q = torch.where(esc, 0.0, q)
        if self.rounding == "deterministic":
            level = torch.round(q)
        else:
            low = torch.floor(q)
            level = low + (rng.uniform(d, dtype=torch.float64) < q - low).to(torch.float64)
        level = level.to(torch.int32)  # |level| < 2^24
        n_esc = esc.sum(dim=1)
        raw = _compact(x_i[esc], n_esc)
        code = torch.where(esc, ESCAPE, level.abs())
        nbits = ceil_log2(d + 1) + n_esc * self.float_bits + elias_payload_bits(code)
        return self._packet(
            x_i, nbits, {"levels", "escaped", "raw"}, levels=level, escaped=esc, raw=raw
        )

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        if compiled_dense.serves(f["levels"], f["raw"].dtype):
            return compiled_dense.round_decode(f["levels"], f["escaped"], f["raw"], self.h)
        y64 = f["levels"].to(torch.float64) * float(self.h)
        y = saturate(y64.to(packet.dtype), y64, packet.dtype)
        esc, raw = f["escaped"], f["raw"]
        y[esc] = raw[_slots(esc.sum(dim=1), raw.shape[1])]
        return y

    # ---------------------------------------------------------------- the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        f, d = packet.fields, packet.d
        esc = f["escaped"]
        n_esc = esc.sum(dim=1)
        w.uint(n_esc[:, None], ceil_log2(d + 1))
        w.floats(f["raw"], count=n_esc)
        code = torch.where(esc, ESCAPE, f["levels"].abs())
        write_elias_levels(w, code, f["levels"] < 0)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r = like.d, rd.r
        dtype = like.fields["raw"].dtype
        n_esc = rd.uint(1, ceil_log2(d + 1))[:, 0]
        if r and bool((n_esc > d).any()):
            raise ValueError(f"a row claims more than d={d} escaped entries: corrupt data")
        raw = rd.floats(int(n_esc.max()) if r else 0, dtype, count=n_esc)
        code, neg = read_elias_levels(rd, d)
        esc = code == ESCAPE
        if r and bool((code > ESCAPE).any() or (esc.sum(dim=1) != n_esc).any()):
            raise ValueError("escaped entries do not match their count: corrupt data")
        level = torch.where(esc, 0, torch.where(neg, -code, code)).to(torch.int32)
        nbits = ceil_log2(d + 1) + n_esc * self.float_bits + elias_payload_bits(code)
        return self._rebuilt(like, r, nbits, levels=level, escaped=esc, raw=raw)
