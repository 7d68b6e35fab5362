"""Bit-exact wire streams: fields of any width packed row by row into bytes, and back.

A row's message is one bit stream: its fields are written one after the other, each value at
exactly the width the bit model counts, and the stream is padded with zero bits to whole bytes.
Bit ``t`` of a stream is bit ``t % 8`` of byte ``t // 8``, and a value's bits go least
significant first, so a field of float32 values at a byte-aligned position reads as their
little-endian bytes. Elias-gamma codewords are the exception: they are written most significant
bit first, as the code is defined, so that a codeword's leading zeros announce its length.

Everything is vectorised over rows and elements; loops run over fields, over the bits of one
width (at most 64), or over the bits of the longest codeword.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

__all__ = [
    "BitReader",
    "BitWriter",
    "float_width",
    "gamma_lengths",
    "pack_bits",
    "unpack_bits",
]

_LITTLE = sys.byteorder == "little"  # byte-wide fields then copy whole bytes
_INT_OF = {8: torch.int64, 4: torch.int32, 2: torch.int16}
_FLOAT_OF = {
    (torch.float64, 8): torch.float64,
    (torch.float32, 4): torch.float32,
    (torch.bfloat16, 2): torch.bfloat16,
    (torch.float16, 2): torch.float16,
}


def float_width(dtype: torch.dtype) -> int:
    """Wire bits of one value of a floating dtype: its storage width."""
    if (dtype, torch.empty(0, dtype=dtype).element_size()) not in _FLOAT_OF:
        raise ValueError(f"no wire form for dtype {dtype}; allowed: float64, float32, bfloat16")
    return 8 * torch.empty(0, dtype=dtype).element_size()


def float_to_bits(x: torch.Tensor) -> torch.Tensor:
    """The IEEE bit pattern of each value as a non-negative int64 (int64 as is for float64)."""
    w = float_width(x.dtype)
    v = x.contiguous().view(_INT_OF[w // 8]).to(torch.int64)
    return v if w == 64 else v & ((1 << w) - 1)


def bits_to_float(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of :func:`float_to_bits`."""
    w = float_width(dtype)
    if w < 64:
        v = torch.where(v >= 1 << (w - 1), v - (1 << w), v)
    return v.to(_INT_OF[w // 8]).view(dtype)


def gamma_lengths(v: torch.Tensor) -> torch.Tensor:
    """``floor(log2 v)`` for integers ``v >= 1``: an Elias-gamma codeword has ``2 N + 1`` bits."""
    return torch.frexp(v.to(torch.float64))[1].to(torch.int64) - 1


def _check_width(width: int) -> None:
    if not isinstance(width, int) or not 0 <= width <= 64:
        raise ValueError(f"width must be an integer in [0, 64], got width={width!r}")


class BitWriter:
    """Collects the fields of ``m`` rows; :meth:`finish` lays them out and packs the bytes.

    Fields are pieces with a per-row bit length; each is written at the row's running offset
    once all lengths are known, so rows whose earlier fields differ in size still pack tightly.
    """

    def __init__(self, m: int, device: torch.device | str | None = None) -> None:
        self.m = m
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._pieces: list[tuple[torch.Tensor, Callable[[torch.Tensor, torch.Tensor], None]]] = []

    def piece(self, length: torch.Tensor, write: Callable[[torch.Tensor, torch.Tensor], None]):
        """A custom field of ``length`` (m,) bits; ``write(buf, start)`` sets its one bits in
        the row bit buffer ``buf`` (uint8 (m, T)) from the row offsets ``start`` (m,)."""
        self._pieces.append((length.to(torch.int64).reshape(self.m), write))

    def uint(self, values: torch.Tensor, width: int, count: torch.Tensor | None = None) -> None:
        """Values ``0 <= v < 2**width`` (int64 (m, L)) at ``width`` bits each; with ``count``
        (m,) only the first ``count[i]`` values of row ``i`` travel. Width 64 takes any int64."""
        _check_width(width)
        values = values.to(torch.int64).reshape(self.m, -1)
        L = values.shape[1]
        if width < 64 and values.numel() and bool(((values < 0) | (values >> width != 0)).any()):
            raise ValueError(f"values do not fit in width={width} bits")
        n = torch.full((self.m,), L, dtype=torch.int64, device=values.device)
        n = n if count is None else count.to(torch.int64).reshape(self.m)

        def write(buf: torch.Tensor, start: torch.Tensor) -> None:
            if width == 0 or L == 0:
                return
            if count is None and bool((start == start[0]).all()):
                o = int(start[0])
                view = buf[:, o : o + L * width].unflatten(1, (L, width))
                if width % 8 == 0 and _LITTLE:
                    view.copy_(_bytes_to_bits(_low_bytes(values, width // 8)).view_as(view))
                    return
                for b in range(width):
                    view[:, :, b] = ((values >> b) & 1).to(torch.uint8)
                return
            j = torch.arange(L, device=values.device)
            keep = j[None, :] < n[:, None]
            rows = torch.arange(self.m, device=values.device)[:, None].expand(-1, L)[keep]
            pos = (start[:, None] + j[None, :] * width)[keep]
            v = values[keep]
            for b in range(width):
                buf[rows, pos + b] = ((v >> b) & 1).to(torch.uint8)

        self.piece(n * width, write)

    def floats(self, values: torch.Tensor, count: torch.Tensor | None = None) -> None:
        """Floating values (m, L) at their storage width, bit for bit."""
        values = values.reshape(self.m, -1)
        self.uint(float_to_bits(values), float_width(values.dtype), count)

    def bools(self, values: torch.Tensor, count: torch.Tensor | None = None) -> None:
        """Flags (m, L) at one bit each."""
        self.uint(values.reshape(self.m, -1).to(torch.int64), 1, count)

    def finish(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(data, nbytes)``: uint8 (m, B) zero-padded rows and each row's byte count."""
        lengths = [n for n, _ in self._pieces]
        total = torch.zeros(self.m, dtype=torch.int64, device=self.device)
        starts = []
        for n in lengths:
            starts.append(total)
            total = total + n.to(self.device)
        nbytes = (total + 7) // 8
        B = int(nbytes.max()) if self.m else 0
        buf = torch.zeros(self.m, 8 * B, dtype=torch.uint8, device=self.device)
        for (_, write), start in zip(self._pieces, starts, strict=True):
            write(buf, start)
        return _bits_to_bytes(buf), nbytes


class BitReader:
    """Reads fields back from ``data`` (uint8 (r, B)) with ``nbytes`` (r,) valid bytes per row.

    Each row keeps its own cursor; reading past a row's ``8 * nbytes`` bits raises ValueError,
    and :meth:`finish` checks that every row was consumed up to its padding.
    """

    def __init__(self, data: torch.Tensor, nbytes: torch.Tensor) -> None:
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 2:
            got = (
                f"{data.dtype} of shape {tuple(data.shape)}"
                if isinstance(data, torch.Tensor)
                else type(data).__name__
            )
            raise ValueError(f"data must be a uint8 tensor of shape (r, B), got {got}")
        if (
            not isinstance(nbytes, torch.Tensor)
            or nbytes.dtype != torch.int64
            or nbytes.shape != (data.shape[0],)
        ):
            got = (
                f"{nbytes.dtype} {tuple(nbytes.shape)}"
                if isinstance(nbytes, torch.Tensor)
                else type(nbytes).__name__
            )
            raise ValueError(f"nbytes must be int64 of shape ({data.shape[0]},), got {got}")
        nbytes = nbytes.to(data.device)
        if nbytes.numel() and bool(((nbytes < 0) | (nbytes > data.shape[1])).any()):
            raise ValueError(
                f"nbytes must be in [0, {data.shape[1]}] (the width of data), got {nbytes.tolist()}"
            )
        self.r = data.shape[0]
        self.device = data.device
        self.limit = 8 * nbytes
        col = torch.arange(data.shape[1], device=self.device)
        self.data = torch.where(col[None, :] < nbytes[:, None], data, 0).to(torch.uint8)
        self._bits: torch.Tensor | None = None
        self.cursor = torch.zeros(self.r, dtype=torch.int64, device=self.device)

    @property
    def bits(self) -> torch.Tensor:
        """The rows as bits, uint8 (r, 8 B), zero past each row's ``nbytes``."""
        if self._bits is None:
            self._bits = _bytes_to_bits(self.data)
        return self._bits

    def advance(self, end: torch.Tensor) -> None:
        """Move the cursors to ``end`` (r,), checking that no row runs past its bytes."""
        if self.r and bool((end > self.limit).any()):
            bad = (end > self.limit).nonzero()[:, 0].tolist()
            raise ValueError(
                f"rows {bad} need more bits than their nbytes give: wrong width or corrupt data"
            )
        self.cursor = end

    def uint(self, L: int, width: int, count: torch.Tensor | None = None) -> torch.Tensor:
        """``L`` unsigned values of ``width`` bits per row (int64 (r, L)); entries past
        ``count[i]`` are 0. Width 64 gives back any int64."""
        _check_width(width)
        n = torch.full((self.r,), L, dtype=torch.int64, device=self.device)
        n = n if count is None else count.to(torch.int64).reshape(self.r).to(self.device)
        start = self.cursor
        self.advance(start + n * width)
        out = torch.zeros(self.r, L, dtype=torch.int64, device=self.device)
        if width == 0 or L == 0 or self.r == 0:
            return out
        if count is None and bool((start == start[0]).all()):
            o = int(start[0])
            if o % 8 == 0 and width % 8 == 0 and _LITTLE:
                data = self.data[:, o // 8 : o // 8 + L * width // 8]
                return _from_low_bytes(data, L, width // 8)
            view = self.bits[:, o : o + L * width].unflatten(1, (L, width))
            if width % 8 == 0 and _LITTLE:
                return _from_low_bytes(_bits_to_bytes(view.reshape(self.r, -1)), L, width // 8)
            for b in range(width):
                out |= view[:, :, b].to(torch.int64) << b
            return out
        j = torch.arange(L, device=self.device)
        keep = j[None, :] < n[:, None]
        rows = torch.arange(self.r, device=self.device)[:, None].expand(-1, L)[keep]
        pos = (start[:, None] + j[None, :] * width)[keep]
        v = torch.zeros_like(pos)
        for b in range(width):
            v |= self.bits[rows, pos + b].to(torch.int64) << b
        out[keep] = v
        return out

    def floats(self, L: int, dtype: torch.dtype, count: torch.Tensor | None = None):
        """``L`` floats of ``dtype`` per row (entries past ``count[i]`` are ``+0.0``)."""
        return bits_to_float(self.uint(L, float_width(dtype), count), dtype)

    def bools(self, L: int, count: torch.Tensor | None = None) -> torch.Tensor:
        return self.uint(L, 1, count).to(torch.bool)

    def finish(self) -> None:
        """Every row's message ends in its last byte (at most 7 padding bits left over)."""
        short = self.limit - self.cursor >= 8
        if self.r and bool(short.any()):
            bad = short.nonzero()[:, 0].tolist()
            raise ValueError(
                f"rows {bad} have more bytes than their message uses: wrong width or data"
            )


def pack_bits(values: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack int64 values (m, L) at ``width`` bits each into ``(data uint8 (m, B), nbytes)``."""
    w = BitWriter(values.shape[0], values.device)
    w.uint(values, width)
    return w.finish()


def unpack_bits(data: torch.Tensor, nbytes: torch.Tensor, L: int, width: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``L`` values of ``width`` bits per row."""
    r = BitReader(data, nbytes)
    out = r.uint(L, width)
    r.finish()
    return out


# ------------------------------------------------------------------ Elias gamma
def write_gamma(buf: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, v: torch.Tensor):
    """Elias-gamma codewords of ``v >= 1`` (1-D) at bit ``pos`` of row ``rows`` of ``buf``:
    ``N = floor(log2 v)`` zeros, then the ``N + 1`` binary digits of ``v``, most significant
    first. The buffer is zero, so only the digits are written."""
    if v.numel() == 0:
        return
    N = gamma_lengths(v)
    for t in range(int(N.max()) + 1):
        on = N >= t
        buf[rows[on], (pos + N + t)[on]] = ((v[on] >> (N - t)[on]) & 1).to(torch.uint8)


def next_one(bits: torch.Tensor) -> torch.Tensor:
    """For each position ``p`` of each row (and one past the end), the first ``q >= p`` with a
    one bit, or the row length ``T`` where none follows: int64 (r, T + 1)."""
    r, T = bits.shape
    pos = torch.arange(T, device=bits.device).expand(r, T)
    at = torch.where(bits.bool(), pos, T)
    at = torch.cat([at, torch.full((r, 1), T, device=bits.device, dtype=at.dtype)], dim=1)
    return torch.cummin(at.flip(1), dim=1).values.flip(1)


def read_gamma(bits: torch.Tensor, nxt: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor):
    """Decode the Elias-gamma codewords starting at ``pos`` (1-D, row ``rows``): values and
    lengths. ``nxt`` is :func:`next_one` of ``bits``."""
    N = nxt[rows, pos] - pos
    v = torch.zeros_like(pos)
    if pos.numel() == 0:
        return v, 2 * N + 1
    T = bits.shape[1]
    for t in range(int(N.max()) + 1):
        on = N >= t
        b = bits[rows, (pos + N + t).clamp(max=T - 1)].to(torch.int64)
        v = torch.where(on, (v << 1) | b, v)
    return v, 2 * N + 1


def _low_bytes(values: torch.Tensor, nb: int) -> torch.Tensor:
    """The ``nb`` low bytes of each int64 (m, L), little-endian: uint8 (m, L * nb)."""
    m, L = values.shape
    return values.contiguous().view(torch.uint8).reshape(m, L, 8)[:, :, :nb].reshape(m, -1)


def _from_low_bytes(data: torch.Tensor, L: int, nb: int) -> torch.Tensor:
    """Inverse of :func:`_low_bytes`: int64 (r, L), zero-extended (raw for ``nb == 8``)."""
    r = data.shape[0]
    full = torch.zeros(r, L, 8, dtype=torch.uint8, device=data.device)
    full[:, :, :nb] = data.reshape(r, L, nb)
    return full.view(torch.int64).reshape(r, L)


def _bits_to_bytes(buf: torch.Tensor) -> torch.Tensor:
    m = buf.shape[0]
    grouped = buf.reshape(m, -1, 8)
    out = torch.zeros(m, grouped.shape[1], dtype=torch.uint8, device=buf.device)
    for b in range(8):
        out |= grouped[:, :, b] << b
    return out


def _bytes_to_bits(data: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.uint8, device=data.device)
    return ((data[:, :, None] >> shifts) & 1).reshape(data.shape[0], -1)


# ------------------------------------------------------------------ QSGD's Elias code
def write_elias_levels(w: BitWriter, level: torch.Tensor, signs: torch.Tensor) -> None:
    """QSGD's code of the non-zero levels (Alistarh et al. 2017, arXiv 1610.02132, Sec. 3.2):
    per non-zero entry, gamma(gap to the previous non-zero, the first counted from -1), the
    sign bit, gamma(level). Its length is ``dithering.elias_payload_bits`` exactly."""
    level = level.to(torch.int64)
    m, d = level.shape
    nz = level > 0
    pos = torch.arange(d, device=level.device).expand(m, d)
    last = torch.cummax(torch.where(nz, pos, -1), dim=1).values
    prev = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)
    gap = (pos - prev).clamp(min=1)
    len_gap = 2 * gamma_lengths(gap) + 1
    per = torch.where(nz, len_gap + 1 + 2 * gamma_lengths(level.clamp(min=1)) + 1, 0)
    off = torch.cumsum(per, dim=1) - per
    rows, cols = nz.nonzero(as_tuple=True)

    def write(buf: torch.Tensor, start: torch.Tensor) -> None:
        p = start[rows] + off[rows, cols]
        write_gamma(buf, rows, p, gap[rows, cols])
        s = p + len_gap[rows, cols]
        buf[rows, s] = signs[rows, cols].to(torch.uint8)
        write_gamma(buf, rows, s + 1, level[rows, cols])

    w.piece(per.sum(dim=1), write)


def read_elias_levels(rd: BitReader, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`write_elias_levels` from each row's cursor to the end of its message:
    ``(levels int64 (r, d), signs bool (r, d))``, signs False where the level is 0.

    Codeword boundaries are found without walking the codewords: for every bit position ``p``
    the start of the next (gap, sign, level) triple is computed as if one began at ``p``, and
    the chain from the cursor is followed by pointer doubling, ``log2(d)`` gathers in all.
    """
    bits = rd.bits
    r, T = bits.shape
    dev = bits.device
    nxt = next_one(bits)
    sink = T + 1
    p = torch.arange(T + 1, device=dev).expand(r, T + 1)
    q = p + 2 * (nxt - p) + 2
    qc = q.clamp(max=T)
    nq = nxt.gather(1, qc)
    end = q + 2 * (nq - qc) + 1
    ok = (nxt < T) & (q <= T) & (nq < T) & (end <= rd.limit[:, None])
    step = torch.cat([torch.where(ok, end, sink), torch.full((r, 1), sink, device=dev)], dim=1)
    cmax = min(d, T // 3)
    c = torch.arange(cmax + 1, device=dev)
    cur = rd.cursor[:, None].expand(r, cmax + 1).clone()
    jump = step
    for k in range(cmax.bit_length()):
        cur = torch.where(((c >> k) & 1).bool(), jump.gather(1, cur), cur)
        jump = jump.gather(1, jump)
    triple = (cur < sink) & (step.gather(1, cur) < sink)
    count = triple.sum(dim=1)
    rows, cs = triple.nonzero(as_tuple=True)
    start = cur[rows, cs]
    gap, len_gap = read_gamma(bits, nxt, rows, start)
    sign = bits[rows, (start + len_gap).clamp(max=max(T - 1, 0))].bool()
    lev, _ = read_gamma(bits, nxt, rows, start + len_gap + 1)
    gaps = torch.zeros(r, cmax + 1, dtype=torch.int64, device=dev)
    gaps[rows, cs] = gap
    idx = (torch.cumsum(gaps, dim=1) - 1)[rows, cs]
    if idx.numel() and int(idx.max()) >= d:
        raise ValueError(f"Elias stream addresses entry {int(idx.max())} of a d={d} row")
    levels = torch.zeros(r, d, dtype=torch.int64, device=dev)
    signs = torch.zeros(r, d, dtype=torch.bool, device=dev)
    levels[rows, idx] = lev
    signs[rows, idx] = sign
    rd.advance(cur.gather(1, count[:, None])[:, 0])
    return levels, signs
