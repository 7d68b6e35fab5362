"""FastSGD: key-value gradients, values log-quantized to small integers, keys delta-coded."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_fastsgd
from compressors.base import Compressor, Packet, ceil_log2, check_float_bits
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows
from compressors.threshold import kept_first
from streams import Streams

SELECTOR_BITS = 2  # each key delta names one of four widths


def bit_length(v: torch.Tensor) -> torch.Tensor:
    """Binary digits of integers ``v >= 0`` (0 for ``v = 0``): int64, same shape."""
    return torch.frexp(v.to(torch.float64))[1].to(torch.int64)


def width_triples(B: int, device=None) -> torch.Tensor:
    """Every ``(w1, w2, w3)`` with ``0 <= w1 <= w2 <= w3 <= B``: int64 ``(K, 3)``."""
    w = torch.arange(B + 1, device=device)
    a, b, c = torch.meshgrid(w, w, w, indexing="ij")
    ok = (a <= b) & (b <= c)
    return torch.stack([a[ok], b[ok], c[ok]], dim=1)


def choose_widths(lengths: torch.Tensor, keep: torch.Tensor, B: int) -> torch.Tensor:
    """Per row the widths ``(w1, w2, w3)`` (with ``w4 = B``) that minimise the bits of the kept
    deltas, each sent at the smallest width that holds it: int64 ``(m, 3)``. Exhaustive over the
    ``O(B^3)`` triples from a histogram of the deltas' bit lengths (linear in ``d``); ties go to
    the first triple in lexicographic order."""
    m = lengths.shape[0]
    dev = lengths.device
    hist = torch.zeros(m, B + 1, dtype=torch.int64, device=dev)
    hist.scatter_add_(1, torch.where(keep, lengths, 0), keep.to(torch.int64))
    cum = torch.cumsum(hist, dim=1)  # cum[:, w]: kept deltas of at most w bits
    n = cum[:, B : B + 1]
    t = width_triples(B, dev)
    c1, c2, c3 = cum[:, t[:, 0]], cum[:, t[:, 1]], cum[:, t[:, 2]]
    cost = t[:, 0] * c1 + t[:, 1] * (c2 - c1) + t[:, 2] * (c3 - c2) + B * (n - c3)
    return t[torch.argmin(cost, dim=1)]


@dataclass(frozen=True)
class FastSGD(Compressor):
    """FastSGD's gradient coding (Yang, Chen, Zeng & Gao, "FastSGD: A Fast Compressed SGD
    Framework for Distributed Machine Learning", arXiv 2112.04291). Only the abstract could be
    read: the gradient as key-value pairs; values through a reciprocal mapper, a logarithmic
    quantization to small integers and a threshold filter; keys by an adaptive fine-grained
    delta encoding; linear time. The mapper, the rounding, the filter and the bit layout below
    are a reconstruction from those words, not the paper's definitions.

    Values (reconstruction): with ``M = max_j |x_j|``, the reciprocal mapper gives
    ``r_j = M / |x_j| >= 1``; the logarithmic quantization ``q_j = round(log_b r_j)`` (to
    nearest in the log domain, halves to even) is a small non-negative integer; the threshold
    filter keeps the pairs with ``q_j < levels`` (zeros have ``q_j = inf`` and are dropped).
    ``C(x)_j = sign(x_j) M b^(-q_j)`` for the kept keys, ``0`` elsewhere; the largest entry is
    sent exactly (``q = 0``). Deterministic: ``b^(-q)`` is the float64 nearest the exact power
    (one table, :func:`compressors.compiled_fastsgd.powers`), so a decoded row is the same
    number on every machine and thread count.

    Keys (reconstruction): the kept keys ascending, as deltas ``g = key - previous key - 1``
    (the first: the key itself). Each row chooses three widths ``w1 <= w2 <= w3 <= B``
    (``B = ceil(log2 d)``, the fourth width) minimising its total (exhaustive over the triples,
    from a histogram of the deltas' bit lengths); each delta is sent at the smallest of the four
    widths that holds it, named by a 2-bit selector. Width 0 sends a delta of 0 (adjacent keys)
    in no bits.

    Class: contractive, deterministic, with the exact supremum ``1 - delta(d)`` of
    ``||C(x) - x||^2 / ||x||^2``. With ``u_j = |x_j| / M`` and ``e(u)`` the squared error of an
    entry over ``M^2`` the ratio is ``sum_j e(u_j) / (1 + sum_j u_j^2)`` over the ``d - 1``
    entries other than the largest; by Dinkelbach's argument (each entry maximises
    ``e(u) - lambda u^2`` on its own) the supremum puts every entry at the same ``u``, so it is
    ``sup_u (d - 1) e(u) / (1 + (d - 1) u^2)``. On each rounding cell ``e(u) = (u - c)^2``
    (``c = b^-q``, or ``0`` below the filter's threshold ``t = b^-(levels - 1/2)``), and
    ``(u - c)^2 / (a + u^2)`` has no interior maximum, so the supremum is the largest value at
    the cells' ends (the log-midpoints ``b^-(q + 1/2)``, from both sides, and ``t`` from below):
    :meth:`delta` evaluates them. The base is at most 4, so a kept entry's error is at most its
    square and ``delta >= 1/d``. At ``d = 1000``, ``b = 2``, ``levels = 8``:
    ``1 - delta = 0.1712``, reached by the entries at ``u -> 2^-1/2`` rounded up to ``M``
    (:meth:`worst_case`).

    Bits (``n`` = keys kept, read off the row): the scale ``M`` (``float_bits``), the count
    (``ceil(log2(d + 1))``), the three widths (``ceil(log2(B + 1))`` each), then per kept key
    a 2-bit selector, its delta at the selected width, and the sign with the level
    (``1 + ceil(log2 levels)``). A variable-size payload, at most that with every delta at
    ``B`` bits; its mean is not assumed (``expected_bits`` is None). On the wire ``M`` travels
    in the dtype it is stored in. A row with a NaN or inf entry sends ``M = NaN`` and no keys;
    it decodes to a row of NaN.

    Args:
        base: the logarithm's base ``b``, ``1 < b <= 4``.
        levels: integers kept by the threshold filter, ``q in {0, ..., levels - 1}``
            (``1 <= levels <= 256``).
        float_bits: wire width of ``M``.
    """

    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    base: float = 2.0
    levels: int = 8
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        b = self.base
        if isinstance(b, bool) or not isinstance(b, int | float) or not 1.0 < b <= 4.0:
            raise ValueError(f"base must be a number in (1, 4], got base={b!r}")
        lv = self.levels
        if isinstance(lv, bool) or not isinstance(lv, int) or not 1 <= lv <= 256:
            raise ValueError(f"levels must be an integer in [1, 256], got levels={lv!r}")

    # ---------------------------------------------------------------- theory
    def _cell_ends(self) -> list[tuple[float, float]]:
        """``(u, c)`` pairs: the ends of the rounding cells and the value each side sends."""
        b, L = float(self.base), self.levels
        ends = []
        for q in range(L - 1):  # midpoint between levels q and q + 1
            u = b ** -(q + 0.5)
            ends += [(u, b**-q), (u, b ** -(q + 1))]
        t = b ** -(L - 0.5)  # the filter's threshold: kept at level L - 1 above, dropped below
        ends += [(t, b ** -(L - 1)), (t, 0.0)]
        return ends

    def _worst_end(self, d: int) -> tuple[float, float, float]:
        """``(ratio, u, c)`` at the cell end where the supremum is reached."""
        best = (0.0, 1.0, 1.0)
        for u, c in self._cell_ends():
            r = (d - 1) * (u - c) ** 2 / (1.0 + (d - 1) * u * u)
            if r > best[0]:
                best = (r, u, c)
        return best

    def delta(self, d: int) -> float:
        return 1.0 - self._worst_end(d)[0]

    def worst_case(self, d: int) -> torch.Tensor | None:
        ratio, u, c = self._worst_end(d)
        if ratio == 0.0:
            return None
        # just inside the cell that sends c: above the end if c > u, below it otherwise
        x = torch.full((d,), u * (1 + 1e-9 if c > u else 1 - 1e-9), dtype=torch.float64)
        x[0] = 1.0
        return x

    # ---------------------------------------------------------------- bits
    def _B(self, d: int) -> int:
        return ceil_log2(d)

    def _header_bits(self, d: int) -> int:
        return self.float_bits + ceil_log2(d + 1) + 3 * ceil_log2(self._B(d) + 1)

    def _value_bits(self) -> int:
        return 1 + ceil_log2(self.levels)

    def expected_bits(self, d: int) -> float | None:
        return None

    def max_bits(self, d: int) -> int:
        return self._header_bits(d) + d * (SELECTOR_BITS + self._B(d) + self._value_bits())

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(base=1.5, levels=20)]

    # ---------------------------------------------------------------- the operator
    def quantize(self, x_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(scale, q, keep)``: ``M`` per row in the input's dtype (NaN for a row with a NaN
        or inf), the integers ``q`` (int64, 0 where dropped) and the filter's mask."""
        x = x_i.to(torch.float64)
        bad = nonfinite_rows(x_i)
        if bad is not None:
            x = torch.where(bad[:, None], 0.0, x)
        a = x.abs()
        M = a.amax(dim=1) if x.shape[1] else a.new_zeros(x.shape[0])
        h = (torch.log(M)[:, None] - torch.log(a)) / math.log(self.base)  # log_b(M / |x_j|)
        q = torch.round(h)  # +inf for zeros (and everything in a zero row)
        keep = q < self.levels
        q = torch.where(keep, q, 0.0).to(torch.int64)
        scale = M.to(x_i.dtype)
        if bad is not None:
            scale = torch.where(bad, torch.nan, scale)
        return scale, q, keep

    def row_bits(
        self, keep: torch.Tensor, widths: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Bits of each row from its kept keys and chosen widths (``lengths``: the deltas' bit
        lengths, if known)."""
        d = keep.shape[1]
        sel_w = self._delta_widths(keep, widths, lengths)
        n = keep.sum(dim=1)
        per = SELECTOR_BITS + self._value_bits()
        return self._header_bits(d) + n * per + torch.where(keep, sel_w, 0).sum(dim=1)

    def _deltas(self, keep: torch.Tensor) -> torch.Tensor:
        """Per coordinate, its key minus the previous kept key minus one (meaningful where
        kept)."""
        m, d = keep.shape
        pos = torch.arange(d, device=keep.device).expand(m, d)
        last = torch.cummax(torch.where(keep, pos, -1), dim=1).values
        prev = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)
        return (pos - prev - 1).clamp(min=0)

    def _selectors(
        self, keep: torch.Tensor, widths: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per coordinate the index (0..3) of the smallest width holding its delta."""
        L = bit_length(self._deltas(keep)) if lengths is None else lengths
        sel = (L > widths[:, 0:1]).to(torch.int64)
        sel += L > widths[:, 1:2]
        sel += L > widths[:, 2:3]
        return sel

    def _delta_widths(
        self, keep: torch.Tensor, widths: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        d = keep.shape[1]
        w4 = self._all_widths(widths, d)
        return torch.gather(w4, 1, self._selectors(keep, widths, lengths))

    def _all_widths(self, widths: torch.Tensor, d: int) -> torch.Tensor:
        B = torch.full_like(widths[:, :1], self._B(d))
        return torch.cat([widths, B], dim=1)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        d = x_i.shape[1]
        if compiled_fastsgd.serves(x_i, x_i.dtype):  # _fields' numbers, in a few passes
            per = SELECTOR_BITS + self._value_bits()
            args = (float(self.base), self.levels, self._B(d), self._header_bits(d), per)
            fields, nbits = compiled_fastsgd.encode(x_i, *args)
        else:
            fields, nbits = self._fields(x_i)
        return self._packet(x_i, nbits, {"scale", "keep", "q", "signs", "widths"}, **fields)

    def _fields(self, x_i: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The payload's fields and the bits of each row, in torch."""
        d = x_i.shape[1]
        scale, q, keep = self.quantize(x_i)
        lengths = bit_length(self._deltas(keep))
        widths = choose_widths(lengths, keep, self._B(d))
        signs = (x_i < 0) & keep
        nbits = self.row_bits(keep, widths, lengths)
        fields = {
            "scale": scale,
            "keep": keep,
            "q": q.to(torch.int16),
            "signs": signs,
            "widths": widths,
        }
        return fields, nbits

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        if compiled_fastsgd.serves(f["keep"], packet.dtype):
            return compiled_fastsgd.decode(f, float(self.base), self.levels, packet.dtype)
        wd = torch.float64
        M = f["scale"].to(wd)
        pw = compiled_fastsgd.powers(float(self.base), self.levels).to(M.device)
        mag = M[:, None] * pw[f["q"].long().clamp(0, self.levels - 1)]
        y = torch.where(f["keep"], torch.where(f["signs"], -mag, mag), 0.0)
        bad = ~torch.isfinite(M)
        if bool(bad.any()):
            y = torch.where(bad[:, None], torch.nan, y)
        big = torch.finfo(packet.dtype).max
        return y.clamp_(-big, big).to(packet.dtype)

    # ---------------------------------------------------------------- the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        f, d = packet.fields, packet.d
        keep = f["keep"]
        n = keep.sum(dim=1)
        order = kept_first(keep)  # kept columns ascending, first
        sel = torch.gather(self._selectors(keep, f["widths"]), 1, order)
        code = 2 * f["q"].to(torch.int64) + f["signs"].to(torch.int64)
        w.floats(f["scale"][:, None])
        w.uint(n[:, None], ceil_log2(d + 1))
        w.uint(f["widths"], ceil_log2(self._B(d) + 1))
        w.uint(sel, SELECTOR_BITS, count=n)
        w.uint(torch.gather(code, 1, order), self._value_bits(), count=n)
        width = torch.gather(self._all_widths(f["widths"], d), 1, sel)
        deltas = torch.gather(self._deltas(keep), 1, order)
        slot = torch.arange(d, device=keep.device)[None, :] < n[:, None]
        width = torch.where(slot, width, 0)
        write_varwidth(w, deltas, width)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r = like.d, rd.r
        B = self._B(d)
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        n = rd.uint(1, ceil_log2(d + 1))[:, 0]
        if r and bool((n > d).any()):
            raise ValueError(f"a row claims more than d={d} keys: corrupt data")
        widths = rd.uint(3, ceil_log2(B + 1))
        if r and bool((widths > B).any() or (widths[:, :-1] > widths[:, 1:]).any()):
            raise ValueError(f"key widths out of order or above {B} bits: corrupt data")
        sel = rd.uint(d, SELECTOR_BITS, count=n)
        code = rd.uint(d, self._value_bits(), count=n)
        slot = torch.arange(d, device=rd.device)[None, :] < n[:, None]
        width = torch.where(slot, torch.gather(self._all_widths(widths, d), 1, sel), 0)
        deltas = read_varwidth(rd, width)
        keys = torch.cumsum(torch.where(slot, deltas + 1, 0), dim=1) - 1
        if r and bool((keys[slot] >= d).any()):
            raise ValueError(f"a key is out of range for d={d}: corrupt data")
        if r and bool(((code >> 1)[slot] >= self.levels).any()):
            raise ValueError(f"a level is out of range for levels={self.levels}: corrupt data")
        rows = torch.arange(r, device=rd.device)[:, None].expand(r, d)[slot]
        cols = keys[slot]
        keep = torch.zeros(r, d, dtype=torch.bool, device=rd.device)
        keep[rows, cols] = True
        q = torch.zeros(r, d, dtype=torch.int16, device=rd.device)
        q[rows, cols] = (code >> 1)[slot].to(torch.int16)
        signs = torch.zeros(r, d, dtype=torch.bool, device=rd.device)
        signs[rows, cols] = (code & 1)[slot].bool()
        nbits = self.row_bits(keep, widths)
        return self._rebuilt(
            like, r, nbits, scale=scale, keep=keep, q=q, signs=signs, widths=widths
        )


def write_varwidth(w: BitWriter, values: torch.Tensor, width: torch.Tensor) -> None:
    """Values ``(m, L)`` each at its own ``width`` (``(m, L)``, 0 for none), least significant
    bit first, one after the other."""
    off = torch.cumsum(width, dim=1) - width
    rows, cols = (width > 0).nonzero(as_tuple=True)
    v, wd, o = values[rows, cols], width[rows, cols], off[rows, cols]

    def write(buf: torch.Tensor, start: torch.Tensor) -> None:
        p = start[rows] + o
        for b in range(int(wd.max()) if wd.numel() else 0):
            on = b < wd
            buf[rows[on], (p + b)[on]] = ((v[on] >> b) & 1).to(torch.uint8)

    w.piece(width.sum(dim=1), write)


def read_varwidth(rd: BitReader, width: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`write_varwidth` from each row's cursor: int64 ``(r, L)``."""
    off = torch.cumsum(width, dim=1) - width
    end = rd.cursor + width.sum(dim=1)
    rd.advance(end)  # checks every row holds its bits before they are read
    out = torch.zeros_like(width)
    rows, cols = (width > 0).nonzero(as_tuple=True)
    if rows.numel():
        p = (end - width.sum(dim=1))[rows] + off[rows, cols]
        wd = width[rows, cols]
        v = torch.zeros_like(p)
        bits = rd.bits
        for b in range(int(wd.max())):
            on = b < wd
            v |= (
                torch.where(on, bits[rows, (p + b).clamp(max=bits.shape[1] - 1)], 0).to(torch.int64)
                << b
            )
        out[rows, cols] = v
    return out
