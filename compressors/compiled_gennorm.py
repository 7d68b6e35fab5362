"""Compiled CPU kernel of GenNorm's encoder (see :mod:`streams.compiled` for the set-up).

The torch form runs QSGD with the max norm (:mod:`compressors.compiled_quant`), then makes the
row in quantizer steps ``y = x (s / M)`` in float64, ``|y|`` and ``y^2`` and their means, each
entry's sign as sent and symbol, and the gather of each symbol's codeword length: a dozen
whole-array passes after the quantizer's, most over float64 temporaries. Here, once ``M`` is
known, one pass per row (or per thread's share of a row) draws each entry's uniform from the
row's SplitMix64 stream on the fly (the number ``Streams.uniform`` gives it), writes QSGD's
level (the arithmetic of :mod:`compressors.compiled_quant`) and the sign sent, counts the
symbols (a histogram, which the code's lengths then weigh: the same integer sum) and sums
``|y|`` and ``y^2``, stretch by stretch from cache.

The means must be the same bits as ``torch.mean``'s, so the sums reproduce the order of
torch's CPU float64 sum (``cascade_sum`` in ATen's ``SumKernel.cpp``): a contiguous row is read
as vectors of ``lanes`` doubles, four at a time, each lane summed in a cascade of four levels
(``2^p`` rows of four vectors per level, ``p = max(4, ceil(log2 rows) / 4)``), then the levels,
the leftover vectors, the four vectors, the scalar tail and the lanes are added in a fixed
order. A single row of ``GRAIN`` entries or more, with several threads, is cut as torch's
two-pass reduction cuts it (one share per thread, the shares' sums then summed the same way).
The lane count is the vector width of the ATen kernel that runs (4: ATen dispatches its sum to
the AVX2 kernel on AVX-512 machines too); it is found once per thread count by comparing with
``torch.mean`` on a few rows (:func:`lanes`), and where no width matches, the torch form is used.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against compressors/compiled_perm.py 98badd22cce111ea
# built against compressors/compiled_quant.py 2b12a66ee81dbbf6
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from compressors.compiled_quant import _FORMAT
from streams.compiled import _GOLDEN, compile_vectorised, launch, numba

__all__ = ["ENABLED", "abs_sums", "encode", "huffman_lengths", "lanes", "sums_match"]

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)
GRAIN = 32768  # ATen's GRAIN_SIZE: shorter reductions run on one thread
SUB = 8192  # entries quantized, then summed from cache, at a time (whole cascade blocks)
PAIRS_FROM = 4096  # shares of this many entries count their symbols two at a time
_LANES: dict[int, int | None] = {}  # thread count -> the matching lane count (None: none)
_SUMS: dict[int, bool] = {}  # thread count -> whether abs_sums gives torch's bits
#: the row dtypes whose encoder is compiled with the SLP vectoriser in this process: a look-up
#: here instead of typing its arguments at every call
_READY: set[torch.dtype] = set()


def usable(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a non-empty 2-D CPU tensor of a work dtype)."""
    ok = ENABLED and x.device.type == "cpu" and x.dtype in DTYPES and x.dim() == 2
    return ok and x.numel() > 0 and lanes() is not None


def _shares(m: int, d: int, threads: int) -> list[tuple[int, int, int]]:
    """``(row, begin, end)`` of each sum torch takes: a whole row, or for a single row of at
    least ``GRAIN`` entries with several threads, each thread's share of it."""
    if m == 1 and d >= GRAIN and threads > 1:
        n = min(threads, -(-d // GRAIN))
        size = -(-d // n)
        return [(0, b, min(d, b + size)) for b in range(0, d, size)]
    return [(j, 0, d) for j in range(m)]


def encode(x, norm, factor, s: int, keys: torch.Tensor, lane_count: int | None = None):
    """GenNorm's quantizer and fit in one pass per share of a row: ``(signs, levels, counts,
    m1, m2)``. ``levels`` (uint8) are QSGD's with the max norm ``norm`` and ``s`` levels (the
    uniforms of ``keys``' streams; 0 in rows whose norm is not finite), ``signs`` those of the
    non-zero levels, ``counts`` int64 ``(m, 2 s + 1)`` each symbol ``s + sign level``'s count per
    row, and ``m1``, ``m2`` the bits of ``y.abs().mean(dim=1)`` and ``(y * y).mean(dim=1)``,
    ``y = float64(x) factor`` (one float64 factor per row), for rows whose ``y`` is finite."""
    x = x.detach().contiguous()
    m, d = x.shape
    threads = torch.get_num_threads()
    V = lanes() if lane_count is None else lane_count
    shares = np.array(_shares(m, d, threads), dtype=np.int64).reshape(-1, 3)
    _, _, _, ushift, ubits = _FORMAT[x.dtype]
    kind = x.numpy().dtype.type
    signs = torch.empty(x.shape, dtype=torch.bool)
    levels = torch.empty(x.shape, dtype=torch.uint8)
    hist = np.zeros((shares.shape[0], 4, 2 * s + 1), dtype=np.int64)
    part = np.empty((shares.shape[0], 2), dtype=np.float64)
    out = np.empty((m, 2), dtype=np.float64)
    two_pass = shares.shape[0] > m
    f = factor.detach().to(torch.float64).contiguous().numpy()
    keys = keys.contiguous().numpy().view(np.uint64)
    args = (x.numpy(), norm.detach().contiguous().numpy(), f, keys)
    shift = np.uint16((2 * s).bit_length())  # the bits of a symbol, 0..2s
    args += ((s, kind(s), ushift, 2.0**-ubits, shift), (shares, V, two_pass, threads))
    args += (signs.numpy(), levels.numpy(), hist, part, out)
    if x.dtype not in _READY:  # :func:`_rows16`'s lanes as vector operations
        compile_vectorised(_encode, args)
        _READY.add(x.dtype)
    launch(_encode, *args)
    counts = hist.sum(axis=1)
    counts = counts.sum(axis=0, keepdims=True) if two_pass else counts
    sums = torch.from_numpy(out)
    return signs, levels, torch.from_numpy(counts), sums[:, 0] / d, sums[:, 1] / d


def huffman_lengths(weights: torch.Tensor) -> torch.Tensor:
    """:func:`compressors.gennorm.huffman_lengths` of the int64 weights ``(m, K)`` on a CPU, row
    by row in one compiled call: the same merges (the two lightest nodes, ties to the lower
    index), so the same lengths, where torch's form makes about ten calls a merge (``K = 17``:
    0.45 ms -> a few microseconds)."""
    w = weights.detach().to(torch.int64).contiguous()
    out = torch.empty_like(w)
    _huffman(w.numpy(), out.numpy())
    return out


def abs_sums(x: torch.Tensor) -> torch.Tensor | None:
    """Per row of ``x`` (float32 or float64, 2-D, on a CPU), ``x.abs().sum(dim=1,
    dtype=torch.float64)``, the same bits (ATen sums a float32 row into a float64 result in the
    order it sums the row's float64 copy, as :func:`encode` sums ``|y|``), in one pass with no
    copy of ``|x|``; None where that was not found to hold at the current thread count
    (:func:`sums_match`). SIDCo's one-stage fit sums its rows so."""
    if not (usable(x) and sums_match()):
        return None
    return _sums(x)


def _sums(x: torch.Tensor) -> torch.Tensor:
    """:func:`abs_sums`, unchecked."""
    x = x.detach().contiguous()
    m, d = x.shape
    threads = torch.get_num_threads()
    shares = np.array(_shares(m, d, threads), dtype=np.int64).reshape(-1, 3)
    part = np.empty((shares.shape[0], 2), dtype=np.float64)
    out = np.empty(m, dtype=np.float64)
    launch(_abs_sums, x.numpy(), (shares, lanes(), shares.shape[0] > m, threads), part, out)
    return torch.from_numpy(out)


def sums_match() -> bool:
    """Whether :func:`abs_sums` gives torch's bits at the current thread count: checked once
    per count, in float32 and float64, on rows that take each of torch's paths (short, long,
    one long row cut into the threads' shares), magnitudes spread by a factor exp(7 z)."""
    threads = torch.get_num_threads()
    if threads not in _SUMS:
        _SUMS[threads] = False
        if ENABLED and lanes() is not None:
            gen = torch.Generator().manual_seed(1)
            sizes = (1, 3, 7, 21, 100, 1000, GRAIN - 1, GRAIN, GRAIN + 1, 3 * GRAIN + 77)
            ok = True
            for dtype in DTYPES:
                for m, n in [(1, n) for n in sizes] + [(3, 1001), (2, 2 * GRAIN + 5)]:
                    x = torch.randn(m, n, generator=gen, dtype=torch.float64)
                    x = (x * torch.exp(7 * torch.randn(m, n, generator=gen))).to(dtype)
                    want = x.abs().sum(dim=1, dtype=torch.float64)
                    ok &= torch.equal(_sums(x).view(torch.int64), want.view(torch.int64))
            _SUMS[threads] = ok
    return _SUMS[threads]


def lanes() -> int | None:
    """The lane count with which :func:`encode` gives ``torch.mean``'s bits at the current
    thread count (checked once per count on rows that take each of torch's paths), or None."""
    threads = torch.get_num_threads()
    if threads not in _LANES:
        _LANES[threads] = _find_lanes()
    return _LANES[threads]


def _find_lanes() -> int | None:
    if not ENABLED:
        return None
    gen = torch.Generator().manual_seed(0)
    sizes = (1, 3, 7, 21, 100, 1000, GRAIN - 1, GRAIN, GRAIN + 1, 2 * GRAIN + 1, 3 * GRAIN + 77)
    rows = [(1, n) for n in sizes] + [(3, 1001)]
    for V in (4, 8, 2, 16):
        ok = True
        for m, n in rows:
            x = torch.randn(m, n, generator=gen, dtype=torch.float64)
            x = (x * torch.exp(4 * torch.randn(m, n, generator=gen, dtype=torch.float64))).float()
            factor = torch.rand(m, generator=gen, dtype=torch.float64) + 0.5
            keys = torch.zeros(m, dtype=torch.int64)
            y = x * factor[:, None]
            m1, m2 = encode(x, x.abs().amax(dim=1), factor, 1, keys, V)[3:]
            ok &= torch.equal(m1, y.abs().mean(dim=1)) and torch.equal(m2, (y * y).mean(dim=1))
        if ok:
            return V
    return None


if numba is not None:
    from compressors.compiled_quant import _dither_narrow, _dither_wide

    _jit = numba.njit(cache=True, nogil=True)
    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    _inline = numba.njit(inline="always", cache=True)

    @_jit
    def _huffman(weights, out):
        """Each row's Huffman code lengths: ``K - 1`` merges of the two lightest nodes (the
        first index among equal weights; the leaves come before the merged nodes), then each
        leaf's depth, counted up its parents."""
        m, K = weights.shape
        big = np.iinfo(np.int64).max
        w = np.empty(2 * K - 1, np.int64)
        parent = np.empty(2 * K - 1, np.int64)
        for r in range(m):
            w[:K] = weights[r]
            w[K:] = big
            for i in range(K - 1):
                j1 = 0
                for j in range(1, K + i):
                    if w[j] < w[j1]:
                        j1 = j
                w1, w[j1] = w[j1], big
                j2 = 0
                for j in range(1, K + i):
                    if w[j] < w[j2]:
                        j2 = j
                w2, w[j2] = w[j2], big
                w[K + i] = w1 + w2
                parent[j1] = parent[j2] = K + i
            root = 2 * K - 2
            for j in range(K):
                depth, node = 0, j
                while node != root:
                    node = parent[node]
                    depth += 1
                out[r, j] = depth

    @_jit
    def _ceil_log2(n):
        """ATen's ``CeilLog2``: 1 for ``n <= 2``, else ``ceil(log2 n)``."""
        if n <= 2:
            return 1
        v, b = n - 1, 0
        while v > 0:
            v >>= 1
            b += 1
        return b

    @_inline
    def _rows(xs, count, f, W, a1, a2):
        """``count`` rows of ``W`` entries from the start of ``xs`` into the level-0 sums
        ``a1`` (of ``|y|``) and ``a2`` (of ``y^2``), lane by lane (loops from 0 over slices:
        no negative-index wraparound, so they vectorise)."""
        for r in range(count):
            row = xs[r * W : r * W + W]
            for q in range(W):
                y = np.float64(row[q]) * f
                a1[q] += abs(y)
                a2[q] += y * y

    @_inline
    def _abs4(row, o, f, s):
        """Four lanes of :func:`_rows`' sums of ``|y|`` after one more row (from ``row[o]``)."""
        y0, y1 = np.float64(row[o]) * f, np.float64(row[o + 1]) * f
        y2, y3 = np.float64(row[o + 2]) * f, np.float64(row[o + 3]) * f
        return (s[0] + abs(y0), s[1] + abs(y1), s[2] + abs(y2), s[3] + abs(y3))

    @_inline
    def _sq4(row, o, f, t):
        """The same for the sums of ``y^2`` (a product, then a sum: no fused multiply-add)."""
        y0, y1 = np.float64(row[o]) * f, np.float64(row[o + 1]) * f
        y2, y3 = np.float64(row[o + 2]) * f, np.float64(row[o + 3]) * f
        return (t[0] + y0 * y0, t[1] + y1 * y1, t[2] + y2 * y2, t[3] + y3 * y3)

    @_inline
    def _get4(a, o):
        return (a[o], a[o + 1], a[o + 2], a[o + 3])

    @_inline
    def _put4(a, o, v):
        a[o], a[o + 1], a[o + 2], a[o + 3] = v[0], v[1], v[2], v[3]

    @_jit
    def _rows16(xs, count, f, a1, a2):
        """:func:`_rows` for rows of ``W = 16`` entries (four lanes of four), its sums held in
        registers through the rows: written lane by lane, so that, compiled with LLVM's SLP
        vectoriser (:func:`streams.compiled.compile_vectorised`), they become vector
        operations (the loop of :func:`_rows` loads and stores its sums at every row; 1.25 *
        10^7 float32 entries on one thread of a 2-core AMD EPYC: 7.0 -> 1.8 ms). The same
        additions in the same order. A function of its own, compiled with its caller: inlined,
        its tuples trip numba's analysis of the parallel loop."""
        s0, s1, s2, s3 = _get4(a1, 0), _get4(a1, 4), _get4(a1, 8), _get4(a1, 12)
        t0, t1, t2, t3 = _get4(a2, 0), _get4(a2, 4), _get4(a2, 8), _get4(a2, 12)
        for r in range(count):
            row = xs[r * 16 : r * 16 + 16]
            s0, s1 = _abs4(row, 0, f, s0), _abs4(row, 4, f, s1)
            s2, s3 = _abs4(row, 8, f, s2), _abs4(row, 12, f, s3)
            t0, t1 = _sq4(row, 0, f, t0), _sq4(row, 4, f, t1)
            t2, t3 = _sq4(row, 8, f, t2), _sq4(row, 12, f, t3)
        _put4(a1, 0, s0)
        _put4(a1, 4, s1)
        _put4(a1, 8, s2)
        _put4(a1, 12, s3)
        _put4(a2, 0, t0)
        _put4(a2, 4, t1)
        _put4(a2, 8, t2)
        _put4(a2, 12, t3)

    @_inline
    def _level0(xs, count, f, W, a1, a2):
        """:func:`_rows`, by :func:`_rows16` where ``W`` is 16 (ATen's four-lane sum)."""
        if W == 16:
            _rows16(xs, count, f, a1, a2)
        else:
            _rows(xs, count, f, W, a1, a2)

    @_inline
    def _rows_abs(xs, count, W, a1):
        """:func:`_rows` of ``|x|`` alone (``f = 1``: ``y`` is ``x``; no squares)."""
        for r in range(count):
            row = xs[r * W : r * W + W]
            for q in range(W):
                a1[q] += abs(np.float64(row[q]))

    @_inline
    def _up(acc1, acc2, i, mask, power):
        """After a whole block of level-0 rows (``i`` rows in all): each level into the next,
        as far as ``i`` is a multiple of the next level's size."""
        for level in range(1, 4):
            for q in range(acc1.shape[1]):
                acc1[level, q] += acc1[level - 1, q]
                acc1[level - 1, q] = 0.0
                acc2[level, q] += acc2[level - 1, q]
                acc2[level - 1, q] = 0.0
            if (i & (mask << (level * power))) != 0:
                break

    @_jit
    def _finish(xs, f, V, rows, acc1, acc2, out):
        """The end of ATen's sums over ``xs`` from the rows' levels: the levels added into
        level 0, the leftover vectors into its first vector, its four vectors into one, then
        the scalar tail and the lanes; into ``out[0]``, ``out[1]``."""
        vec = xs.size // V
        for level in range(1, 4):
            for q in range(4 * V):
                acc1[0, q] += acc1[level, q]
                acc2[0, q] += acc2[level, q]
        for v in range(rows * 4, vec):  # leftover vectors, into the first
            for q in range(V):
                y = np.float64(xs[v * V + q]) * f
                acc1[0, q] += abs(y)
                acc2[0, q] += y * y
        for k in range(1, 4):
            for q in range(V):
                acc1[0, q] += acc1[0, k * V + q]
                acc2[0, q] += acc2[0, k * V + q]
        s1, s2 = 0.0, 0.0
        for k in range(vec * V, xs.size):  # the scalar tail, then the lanes
            y = np.float64(xs[k]) * f
            s1 += abs(y)
            s2 += y * y
        for q in range(V):
            s1 += acc1[0, q]
            s2 += acc2[0, q]
        out[0], out[1] = s1, s2

    @_jit
    def _short(a, V):
        """ATen's sum of the short float64 row ``a`` (the two-pass reduction's buffer of the
        shares' sums, non-negative): the cascade's sum of ``|a_i|``, which is theirs."""
        if a.size < V:  # ATen's scalar path: a row of four-wide rows, the leftovers into the first
            p = np.zeros(4)
            rows = a.size // 4
            for i in range(rows):
                for q in range(4):
                    p[q] += a[i * 4 + q]
            for k in range(rows * 4, a.size):
                p[0] += a[k]
            return ((p[0] + p[1]) + p[2]) + p[3]
        out = np.empty(2)
        _abs_cascade(a, V, out)
        return out[0]

    @_jit
    def _abs_cascade(xs, V, out):
        """``out[0]``: the cascade's sum of ``|xs_i|`` in float64, as :func:`_encode` sums
        ``|y|`` (``y = xs``): ``V`` lanes, four rows of them, each level into the next after a
        block (``out[1]`` holds the leftovers' squares, unused)."""
        W = 4 * V
        acc1, acc2 = np.zeros((4, W)), np.zeros((4, W))
        rows = xs.size // W
        power = max(4, _ceil_log2(rows) // 4)
        step = 1 << power
        i = 0
        while i + step <= rows:
            _rows_abs(xs[i * W :], step, W, acc1[0])
            i += step
            _up(acc1, acc2, i, step - 1, power)
        _rows_abs(xs[i * W :], rows - i, W, acc1[0])
        _finish(xs, 1.0, V, rows, acc1, acc2, out)

    @_pjit
    def _abs_sums(x, cut, part, out):
        """:func:`abs_sums`: each share summed as :func:`_encode` sums ``|y|`` (``y = x``),
        then the shares of a single row as torch adds them. ``cut``: as :func:`_encode`'s."""
        shares, V, two, T = cut
        for t in numba.prange(shares.shape[0]):
            j, b, e = shares[t, 0], shares[t, 1], shares[t, 2]
            _abs_cascade(x[j, b:e], V, part[t])
        if two:  # each share's sum into a zeroed buffer slot (one per thread), then the buffer
            buf = np.zeros(T)
            for t in range(shares.shape[0]):
                buf[t] = 0.0 + part[t, 0]
            out[0] = 0.0 + _short(buf, V)
        else:
            for j in range(out.shape[0]):
                out[j] = 0.0 + part[j, 0]

    @_jit
    def _quantize(xs, den, one, sf, finite, z0, ush, uscale, s, ss, ls, h, sym, pairs, ph, shift):
        """QSGD's levels (max norm, drawn as :mod:`compressors.compiled_quant` draws them,
        ``z0`` the stream's state before the first entry of ``xs``), the signs sent and the
        symbols' counts: in a share of :data:`PAIRS_FROM` entries or more, successive symbols
        two to a bin of ``ph`` (``(a << shift) | b``; two histograms, so that successive
        increments do not wait on each other), which :func:`_fold` adds up, a last odd one
        into ``h[0]`` (one increment per two entries: 1.25 * 10^7 entries on one thread, 7.2
        -> 5.1 ms with the symbols made, measured apart); in a shorter share, one by one into
        the four ``h``. ``sym``, ``pairs``: scratch of ``xs.size`` bytes and half as many
        16-bit words. The levels are QSGD's kernel's (float32 rows in float32, where their
        24-bit uniforms are exact: 1.25 * 10^7 entries, one thread, 7.5 -> 6.6 ms)."""
        if not finite:  # a NaN or inf entry: the norm carries it, levels void
            ls[:] = 0
            ss[:] = False
            h[0, s] += xs.size
            return
        # QSGD's own levels (grid 0 of compressors.compiled_quant's dithering; its signs, written
        # into ss, are replaced below by the signs sent)
        if xs.itemsize == 4:
            _dither_narrow(xs, den, one, z0, 0, s, sf, one, ss, ls)
        else:
            _dither_wide(xs, den, one, z0, 0, s, sf, one, ush, uscale, ss, ls)
        for i in range(xs.size):  # the symbol s + sign level, branch-free
            neg = (xs[i] < 0) & (ls[i] > 0)
            ss[i] = neg
            sym[i] = s + ls[i] - 2 * ls[i] * np.uint8(neg)
        if pairs.size == 0:  # a short share: one increment per entry
            for i in range(xs.size):  # apart, and by an unsigned index: 5x faster
                h[i & 3, sym[i]] += 1
            return
        half = xs.size // 2
        for i in range(half):
            pairs[i] = (np.uint16(sym[2 * i]) << shift) | np.uint16(sym[2 * i + 1])
        for i in range(half):  # apart, and by an unsigned index
            ph[i & 1, pairs[i]] += 1
        if xs.size & 1:
            h[0, sym[xs.size - 1]] += 1

    @_jit
    def _fold(ph, shift, h):
        """The pairs' counts of :func:`_quantize` into the symbols' ``h[0]``: a bin ``(a, b)``
        counts once for ``a`` and once for ``b``."""
        K = h.shape[1]
        for a in range(K):
            for b in range(K):
                c = ph[0, (a << shift) | b] + ph[1, (a << shift) | b]
                h[0, a] += c
                h[0, b] += c

    @_pjit
    def _encode(x, norm, factor, keys, draw, cut, signs, levels, hist, part, out):
        """``draw``: ``(s, s in x's dtype, uniform shift, uniform scale, a symbol's bits)``;
        ``cut``: ``(shares, lanes, whether the shares are one row's, torch's thread count)``."""
        s, sf, ushift, uscale, shift = draw
        shares, V, two, T = cut
        ush = np.uint64(ushift)
        one = sf / sf
        W = 4 * V
        for t in numba.prange(shares.shape[0]):
            j, b, e = shares[t, 0], shares[t, 1], shares[t, 2]
            xs, ss, ls = x[j, b:e], signs[j, b:e], levels[j, b:e]
            nr = norm[j]
            den = nr if nr > 0 else one
            z0 = keys[j] + np.uint64(b) * _GOLDEN
            finite = np.isfinite(nr)
            f = factor[j]
            acc1, acc2 = np.zeros((4, W)), np.zeros((4, W))
            rows = (e - b) // W
            power = max(4, _ceil_log2(rows) // 4)
            step = 1 << power
            block = step * W
            full = (rows // step) * block  # the entries of whole cascade blocks
            per = max(1, SUB // block) * block  # at least the rest after the last stretch
            sym = np.empty(per, dtype=np.uint8)
            paired = e - b >= PAIRS_FROM  # else the pairs' table costs more than it saves
            pairs = np.empty(per // 2 if paired else 0, dtype=np.uint16)
            ph = np.zeros((2, 1 << (2 * np.int64(shift)) if paired else 0), dtype=np.int64)
            i = 0  # rows added
            for c0 in range(0, full, per):  # quantize a stretch, then sum it from cache
                c1 = min(full, c0 + per)
                z = z0 + np.uint64(c0) * _GOLDEN
                q = (ss[c0:c1], ls[c0:c1], hist[t], sym, pairs, ph, shift)
                _quantize(xs[c0:c1], den, one, sf, finite, z, ush, uscale, s, *q)
                for c in range(c0, c1, block):
                    _level0(xs[c:], step, f, W, acc1[0], acc2[0])
                    i += step
                    _up(acc1, acc2, i, step - 1, power)
            z = z0 + np.uint64(full) * _GOLDEN
            q = (ss[full:], ls[full:], hist[t], sym, pairs, ph, shift)
            _quantize(xs[full:], den, one, sf, finite, z, ush, uscale, s, *q)
            if paired:
                _fold(ph, shift, hist[t])
            _level0(xs[full:], rows - i, f, W, acc1[0], acc2[0])
            _finish(xs, f, V, rows, acc1, acc2, part[t])
        if two:  # each share's sum into a zeroed buffer slot (one per thread), then the buffer
            buf = np.zeros(T)
            for c in range(2):
                for t in range(shares.shape[0]):
                    buf[t] = 0.0 + part[t, c]
                out[0, c] = 0.0 + _short(buf, V)
        else:
            for j in range(out.shape[0]):
                out[j, 0] = 0.0 + part[j, 0]
                out[j, 1] = 0.0 + part[j, 1]
