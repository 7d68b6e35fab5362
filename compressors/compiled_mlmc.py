"""Compiled CPU kernels of the MLMC compressors (see :mod:`streams.compiled` for the set-up).

MLMC Top-K. The torch form ranks each row by a full ``torch.sort`` of its float64 magnitudes (a
comparison sort, most of its time), then takes whole-row passes (square, gather, cumulative
sum). The increments' norms are partial sums of the sorted squares added one by one in rank
order (``cumsum`` is sequential), so the whole order of the values is needed, not a few
thresholds: a selection cannot replace the sort without changing the norms' last bits. The
kernel ranks a row with a least-significant-digit radix sort of the magnitudes' bits (for a
non-negative float the bits order as the value; 8 bits a pass, a pass whose digit is every
entry's skipped), largest first. Each pass is stable, so ties keep the lower index first, as
the stable ``torch.sort`` does: the same order, ties included. The squares are added in that
order, one by one, as ``cumsum`` adds them, keeping the sums at the level bounds. A float32
entry travels as one 64-bit word, its magnitude's bits (the sign bit along, outside the sorted
digits) above its index, so the drawn slots' values are read from the sorted words, not
gathered from the row; a float64 entry as its bits and a 32-bit index side by side. A long
float32 row among fewer rows than threads is cut into chunks that every pass scatters at once,
each from its own write offsets (the counts of the chunks before it), which keeps the pass
stable; the next pass's counts per chunk are taken while scattering.

MLMC bit levels. The torch form takes a dozen passes over float64 ``(m, d)`` temporaries per
level. The kernels take the row's maximum, then one pass for the levels' norms (the digits of
every level are the low bits of the finest code, counted in one histogram; the top residual's
norm is added in torch's order), one for the payload and one to decode, each over chunks of
the row on every thread.
"""

# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import launch, numba

__all__ = ["ENABLED", "Ranked", "pick", "rank", "serves"]

ENABLED = numba is not None
#: Inputs with fewer entries take the torch form (the same numbers): a process that never meets
#: a large input never compiles these kernels.
FAST_FROM = 1 << 15
DIGIT = 8  # bits of one radix pass (256 buckets: their write positions stay in cache)
WIDE = 1 << 18  # a float32 row this long, among fewer rows than threads, is sorted by them all
CHUNK = 1 << 16  # entries (or packet slots) per task: a long row is shared among threads


def serves(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a 2-D CPU float32 or float64 tensor with at least
    ``FAST_FROM`` entries, rows shorter than ``2^32``)."""
    return x.dim() == 2 and serves_rows(x.shape[0], x.shape[1], x)


def serves_rows(m: int, d: int, like: torch.Tensor) -> bool:
    """:func:`serves` for ``(m, d)`` rows of ``like``'s dtype and device."""
    return (
        ENABLED
        and like.device.type == "cpu"
        and like.dtype in (torch.float32, torch.float64)
        and m * d >= max(1, FAST_FROM)
        and 0 < d < (1 << 32)
    )


class Ranked:
    """Rows ranked by magnitude, kept between :func:`rank` and :func:`pick`: two buffers of
    sorted words (float32: key and index in one word) or of keys and indices (float64),
    ``where`` saying which holds each row's result, the rows with a non-finite entry (``bad``,
    bool ``(m,)``) and the partial sums of the sorted squares at the level bounds (``csum``,
    float64 ``(m, len(bounds))``)."""

    def __init__(self, keys, idx, where, csum: torch.Tensor, bad: torch.Tensor):
        self.keys, self.idx, self.where, self.csum, self.bad = keys, idx, where, csum, bad


def rank(x: torch.Tensor, bounds: list[int]) -> Ranked:
    """Rank each row of ``x`` by ``|x|`` (non-finite entries first, ties to the lower index) and
    add its squares (0 for a non-finite entry) in that order up to each of ``bounds``."""
    x = x.detach().contiguous()
    m, d = x.shape
    csum = torch.empty(m, len(bounds), dtype=torch.float64)
    bad = torch.empty(m, dtype=torch.bool)
    where = np.empty(m, np.bool_)
    b = np.asarray(bounds, np.int64)
    keys = np.empty((2, m, d), np.uint64)
    if x.dtype == torch.float32:
        idx = np.empty((2, m, 0), np.uint32)  # the words hold the indices
        args = (x.numpy().view(np.uint32), b, keys[0], keys[1])
    else:
        idx = np.empty((2, m, d), np.uint32)
        args = (x.numpy().view(np.uint64), b, keys[0], keys[1], idx[0], idx[1])
    if x.dtype == torch.float32 and m < torch.get_num_threads() and d >= WIDE:
        # few long rows: each sorted by every thread at once, a chunk of it each
        shift = max(16, (d - 1).bit_length() - 3)  # chunks of 2^shift entries, at most 8
        for r in range(m):
            out = (csum[r].numpy(), bad[r : r + 1].numpy(), where[r : r + 1])
            launch(_rank32_wide, args[0][r], b, keys[0, r], keys[1, r], shift, *out)
    else:
        kernel = _rank32 if x.dtype == torch.float32 else _rank64
        launch(kernel, *args, csum.numpy(), bad.numpy(), where)
    return Ranked(keys, idx, where, csum, bad)


def pick(
    x: torch.Tensor,
    r: Ranked,
    k0: int,
    lo: torch.Tensor,
    n: torch.Tensor,
    width: int,
    scale: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The packet's ``(indices, values)``, ``(m, width)``: per row the entries ranked ``0 ..
    k0 - 1`` then ``lo .. lo + n - 1`` (``lo``, ``n``: int64 ``(m,)``), each value ``x`` times 1
    (the first ``k0``) or times the row's ``scale`` (``x``'s dtype), clamped to the dtype's
    range where a finite entry overflowed; unused slots hold index 0 and value 0, and a row
    with a non-finite entry has NaN as its first value."""
    x = x.detach().contiguous()
    m = x.shape[0]
    idx = torch.empty(m, width, dtype=torch.int64)
    val = torch.empty(m, width, dtype=x.dtype)
    kind = x.numpy().dtype
    lims = np.array([1.0, np.finfo(kind).max], kind)  # the base slots' factor, the saturation
    f32 = x.dtype == torch.float32  # the words' high halves (little-endian), or the keys
    vals = r.keys.view(np.float32)[..., 1::2] if f32 else r.keys.view(np.float64)
    args = (x.numpy(), r.keys, r.idx, vals, r.where, r.bad.numpy(), k0, lo.contiguous().numpy())
    launch(
        _pick,
        *args,
        n.contiguous().numpy(),
        scale.contiguous().numpy(),
        lims,
        idx.numpy(),
        val.numpy(),
    )
    return idx, val


if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _pjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _BUCKETS = 1 << DIGIT
    _MASK = np.uint64(_BUCKETS - 1)
    # infinity's bits (all exponent bits set) and the mask of all bits but the sign's
    _INF32, _ABS32 = np.array(np.inf, np.float32).view(np.uint32)[()], np.uint32(0x7FFFFFFF)
    _INF64 = np.array(np.inf, np.float64).view(np.uint64)[()]
    _ABS64 = np.uint64(0x7FFFFFFFFFFFFFFF)
    _LOW32 = np.uint64(0xFFFFFFFF)
    _SIGN32, _SIGN64 = np.uint32(1 << 31), np.uint64(1 << 63)  # the sign bits

    @_jit
    def _mag32(v):
        """The bits of a float32's magnitude (bits ``v``); an infinity's for NaN (every
        non-finite entry ranks as an infinite magnitude)."""
        return min(v & _ABS32, _INF32)

    @_jit
    def _mag64(v):
        return min(v & _ABS64, _INF64)

    @_jit
    def _digit_mask(p, passes):
        """The last pass's digit leaves out the top bit (the sign, which travels along)."""
        return _MASK >> np.uint64(1) if p == passes - 1 else _MASK

    @_jit
    def _offsets(hist, p):
        """Start of each digit's run in pass ``p``, the largest digit first, and whether the
        pass moves anything (some digit is not every entry's)."""
        off = np.empty(_BUCKETS, np.int64)
        t = 0
        busy = 0
        for g in range(_BUCKETS - 1, -1, -1):
            off[g] = t
            t += hist[p, g]
            busy += hist[p, g] > 0
        return off, busy > 1

    @_jit
    def _sums(bounds, mag, csum):
        """``csum[j]``: the squares of the sorted magnitudes ``mag`` (float64, non-finite ones
        counting 0) of ranks below ``bounds[j]`` (ascending), added one by one in rank order,
        as ``cumsum`` adds them."""
        s = 0.0
        i = 0
        for j in range(bounds.size):
            while i < bounds[j]:
                v = np.float64(mag[i])
                if abs(v) < np.inf:
                    s += v * v
                i += 1
            csum[j] = s

    @_jit
    def _rank32_row(bits, bounds, keys, tmp, csum):
        """Sort one float32 row (``bits``) into ``keys`` or ``tmp``: words ``|x| bits << 32 |
        index``, by magnitude descending (a stable sort on the high half: ties keep the index
        order); add up the sorted squares. Whether the row has a non-finite entry, and whether
        the result is in ``tmp``."""
        d = bits.size
        hist = np.zeros((4, _BUCKETS), np.int64)
        bad = False
        for i in range(d):
            k = np.uint64(_mag32(bits[i]))
            bad |= k == _INF32
            for p in range(4):
                hist[p, (k >> np.uint64(DIGIT * p)) & _MASK] += 1
        src, dst = tmp, keys
        done = 0  # passes made: the result is in keys after an odd number
        for p in range(4):
            off, busy = _offsets(hist, p)
            if not busy and not (done == 0 and p == 3):
                continue  # this digit is every entry's: the pass would move nothing
            shift, mask = np.uint64(32 + DIGIT * p), _digit_mask(p, 4)
            if done == 0:  # the words are made as the first pass reads the row
                for i in range(d):
                    v = bits[i]
                    k = np.uint64(_mag32(v) | (v & _SIGN32))
                    w = (k << np.uint64(32)) | np.uint64(i)
                    g = (w >> shift) & mask
                    dst[off[g]] = w
                    off[g] += 1
            else:
                for i in range(d):
                    w = src[i]
                    g = (w >> shift) & mask
                    dst[off[g]] = w
                    off[g] += 1
            src, dst = dst, src
            done += 1
        _sums(bounds, src.view(np.float32)[1::2], csum)  # the high halves (little-endian)
        return bad, done % 2 == 0

    @_jit
    def _rank64_row(bits, bounds, keys, tmp, idx, tmpi, csum):
        """As :func:`_rank32_row` for a float64 row: keys ``|x|`` bits, the indices in
        ``idx`` or ``tmpi``."""
        d = bits.size
        hist = np.zeros((8, _BUCKETS), np.int64)
        bad = False
        for i in range(d):
            k = _mag64(bits[i])
            bad |= k == _INF64
            for p in range(8):
                hist[p, (k >> np.uint64(DIGIT * p)) & _MASK] += 1
        src, dst, srci, dsti = tmp, keys, tmpi, idx
        done = 0
        for p in range(8):
            off, busy = _offsets(hist, p)
            if not busy and not (done == 0 and p == 7):
                continue
            shift, mask = np.uint64(DIGIT * p), _digit_mask(p, 8)
            if done == 0:
                for i in range(d):
                    v = bits[i]
                    k = _mag64(v) | (v & _SIGN64)
                    g = (k >> shift) & mask
                    dst[off[g]] = k
                    dsti[off[g]] = i
                    off[g] += 1
            else:
                for i in range(d):
                    k = src[i]
                    g = (k >> shift) & mask
                    dst[off[g]] = k
                    dsti[off[g]] = srci[i]
                    off[g] += 1
            src, dst, srci, dsti = dst, src, dsti, srci
            done += 1
        _sums(bounds, src.view(np.float64), csum)
        return bad, done % 2 == 0

    @_pjit
    def _rank32(bits, bounds, keys, tmp, csum, bad, where):
        for r in numba.prange(bits.shape[0]):
            bad[r], where[r] = _rank32_row(bits[r], bounds, keys[r], tmp[r], csum[r])

    @_jit
    def _count_chunk(bits, hist):
        """Digit counts of every pass (``hist[p]``) of the float32 ``bits``; whether one is
        non-finite."""
        bad = False
        for i in range(bits.size):
            k = np.uint64(_mag32(bits[i]))
            bad |= k == _INF32
            for p in range(4):
                hist[p, (k >> np.uint64(DIGIT * p)) & _MASK] += 1
        return bad

    @_jit
    def _scatter_chunk(src, bits, start, p, q, chunk, off, nxt, dst):
        """Pass ``p`` of the entries ``start ..`` (the words ``src``, or made from ``bits`` in
        the first pass): each to ``off[digit]``; counts the next pass ``q``'s digits (``q < 0``:
        none) per destination chunk (``2^chunk`` entries) in ``nxt``."""
        shift, mask = np.uint64(32 + DIGIT * p), _digit_mask(p, 4)
        qshift, qmask = np.uint64(32 + DIGIT * max(q, 0)), _digit_mask(q, 4)
        cshift = np.uint64(chunk)
        n = bits.size if bits.size else src.size
        for i in range(n):
            if bits.size:
                v = bits[i]
                w = (np.uint64(_mag32(v) | (v & _SIGN32)) << np.uint64(32)) | np.uint64(start + i)
            else:
                w = src[i]
            g = (w >> shift) & mask
            at = off[g]
            dst[at] = w
            off[g] = at + 1
            if q >= 0:
                nxt[np.uint64(at) >> cshift, (w >> qshift) & qmask] += 1

    @_pjit
    def _rank32_wide(bits, bounds, keys, tmp, chunk, csum, bad, where):
        """:func:`_rank32_row` of one long row by all threads: the row in chunks of
        ``2^chunk`` entries, each pass scattering every chunk at once, from write offsets per
        chunk and digit (the counts of the entries before it), so that each pass stays stable;
        the counts of the next pass's digits per chunk are taken while scattering."""
        d = bits.size
        n = (d + (1 << chunk) - 1) >> chunk
        hist = np.zeros((n, 4, _BUCKETS), np.int64)
        flags = np.zeros(n, np.bool_)
        for t in numba.prange(n):
            flags[t] = _count_chunk(bits[t << chunk : (t + 1) << chunk], hist[t])
        bad[0] = flags.any()
        total = hist.sum(axis=0)
        passes = []
        for p in range(4):
            if (total[p] > 0).sum() > 1:
                passes.append(p)
        if not passes:  # every key equal: one pass puts the words in index order
            passes.append(3)
        cur = hist[:, passes[0], :].copy()  # counts per source chunk of this pass's digits
        src, dst = tmp, keys
        for j in range(len(passes)):
            p = passes[j]
            q = passes[j + 1] if j + 1 < len(passes) else -1
            off = np.empty((n, _BUCKETS), np.int64)
            base = 0
            for g in range(_BUCKETS - 1, -1, -1):
                for t in range(n):
                    off[t, g] = base
                    base += cur[t, g]
            nxt = np.zeros((n, n, _BUCKETS), np.int64)
            for t in numba.prange(n):
                lo, hi = t << chunk, min(d, (t + 1) << chunk)
                part = bits[lo:hi] if j == 0 else bits[:0]
                _scatter_chunk(src[lo:hi], part, lo, p, q, chunk, off[t], nxt[t], dst)
            cur = nxt.sum(axis=0)
            src, dst = dst, src
        _sums(bounds, src.view(np.float32)[1::2], csum)
        where[0] = len(passes) % 2 == 0

    @_pjit
    def _rank64(bits, bounds, keys, tmp, idx, tmpi, csum, bad, where):
        for r in numba.prange(bits.shape[0]):
            row = _rank64_row(bits[r], bounds, keys[r], tmp[r], idx[r], tmpi[r], csum[r])
            bad[r], where[r] = row

    @_jit
    def _emit(keys, idx, vals, sc, big, out_idx, out_val):
        """Slots ``out`` from the sorted words ``keys`` (or keys and indices ``idx``) and their
        values ``vals`` (the words' sign and magnitude bits as floats) times ``sc``, saturated
        (a non-finite entry's word holds an infinity: the caller reads those from ``x``)."""
        if idx.size:
            for s in range(out_idx.size):
                out_idx[s] = idx[s]
        else:
            for s in range(out_idx.size):
                out_idx[s] = np.int64(keys[s] & _LOW32)
        for s in range(out_val.size):
            y = vals[s] * sc
            out_val[s] = big if y > big else (-big if y < -big else y)

    @_jit
    def _pick_span(x, keys, idx, vals, bad, k0, lo, n, scale, one, big, s0, s1, oi, ov):
        """Slots ``s0 .. s1 - 1`` of one row of :func:`_pick` (``oi``, ``ov`` the row's)."""
        a, b = s0, min(s1, k0)  # the base level's
        if a < b:
            _emit(keys[a:b], idx[a:b], vals[a:b], one, big, oi[a:b], ov[a:b])
        a, b = max(s0, k0), min(s1, k0 + n)  # the drawn increment's
        if a < b:
            pa, pb = lo + a - k0, lo + b - k0
            _emit(keys[pa:pb], idx[pa:pb], vals[pa:pb], scale, big, oi[a:b], ov[a:b])
        a = max(s0, k0 + n)  # unused
        oi[a:s1] = 0
        ov[a:s1] = 0
        if bad:  # the non-finite entries as they are (times the factor), and NaN first
            for s in range(s0, min(s1, k0 + n)):
                pos, sc = (s, one) if s < k0 else (lo + s - k0, scale)
                if not abs(vals[pos]) < np.inf:
                    ov[s] = x[oi[s]] * sc
            if s0 == 0 < s1:
                ov[0] = np.nan

    @_pjit
    def _pick(x, keys, idx, vals, where, bad, k0, lo, n, scale, lims, out_idx, out_val):
        m, width = out_idx.shape
        per = (width + CHUNK - 1) // CHUNK  # tasks a row: a long row's slots on every thread
        for t in numba.prange(m * per):
            r, s0 = t // per, (t % per) * CHUNK
            w = np.int64(where[r])  # the buffer holding the row's order
            args = (x[r], keys[w, r], idx[w, r], vals[w, r], bad[r], k0, lo[r], n[r], scale[r])
            span = (lims[0], lims[1], s0, min(width, s0 + CHUNK))
            _pick_span(*args, *span, out_idx[r], out_val[r])


# ------------------------------------------------------------------------ MLMC bit levels
HIST_BITS = 12  # the digits of all levels are counted in one histogram up to this many bits


def _tasks(d: int) -> int:
    return max(1, -(-d // CHUNK))


def bits_absmax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, bad)``: ``|x|.amax(dim=1)`` of the rows without a NaN or inf entry, and those rows
    (``bad``; their ``s`` is left to torch, whose NaN the packet keeps). The maximum is taken
    over the magnitudes' bits (which order as the values), so that it vectorizes."""
    x = x.detach().contiguous()
    m, d = x.shape
    f32 = x.dtype == torch.float32
    view = np.uint32 if f32 else np.uint64
    part = np.empty((m, _tasks(d)), view)
    mask = view(0x7FFFFFFF if f32 else 0x7FFFFFFFFFFFFFFF)  # all bits but the sign's
    launch(_absmax, x.numpy().view(view), mask, part)
    top = part.max(axis=1)
    inf = np.array(np.inf, x.numpy().dtype).view(view)[()]  # infinity's bits
    bad = top >= inf
    s = np.where(bad, 0, top).astype(view).view(x.numpy().dtype)
    return torch.from_numpy(s), torch.from_numpy(bad)


def bits_norms(x: torch.Tensor, s: torch.Tensor, bad: torch.Tensor, b: list[int], step: int):
    """The increments' norms, float64 ``(m, depth + 1)``, of rows ``x`` (``s`` their absolute
    maxima, ``bad`` the non-finite rows, whose ratios are 0; ``b`` the precisions): ``||digits_l||
    2^-b_l``, a sum of squares of integers, exact in any order (the digits of every level are
    the low bits of ``q_{b_depth}``, counted in one histogram of those bits where they are few),
    and the top one, ``||r - q_{b_depth}(r) 2^-b_depth||``, added up in torch's order
    (:func:`norm_form`), or, where that is unknown, by ``torch.linalg.vector_norm`` itself from
    the residuals the kernel writes out."""
    x = x.detach().contiguous()
    m, d = x.shape
    K = len(b) - 1
    form = norm_form()
    res = torch.empty(m, d if form is None else 0, dtype=torch.float64)  # none: torch adds
    hist = step * K if step * K <= HIST_BITS else -1
    sums = np.zeros((m, _tasks(d), max(K, 1)), np.int64)
    norms = torch.empty(m, K + 1, dtype=torch.float64)
    args = (x.numpy(), s.to(torch.float64).numpy(), bad.numpy(), _pow2(b), 2.0**step, step, hist)
    launch(_bit_norms, *args, res.numpy(), sums)
    if form is None:
        norms[:, K] = torch.linalg.vector_norm(res, dim=1)
    else:
        launch(_top_norms, *args[:4], *form, norms[:, K].numpy())
    # vector_norm's square root is the correctly rounded one (NumPy's; torch's elementwise
    # sqrt may differ in the last bit)
    tot = np.sqrt(sums.sum(axis=1)[:, :K].astype(np.float64)) * _pow2(b)[1:, 2]
    norms[:, :K] = torch.from_numpy(tot)
    return norms


def bits_fields(x, s, bad, level, p, b: list[int], step: int, q0_dtype, value_columns: int):
    """The payload fields of rows ``x`` (``s`` their absolute maxima, ``bad`` the non-finite
    rows, ``level`` the drawn increments, ``p`` their probabilities): ``signs``, ``q0``
    (``q0_dtype``), the drawn truncation increment's ``digits`` (uint8; 0 in other rows) and
    the drawn top increment's ``values`` (``x``'s dtype, ``value_columns`` columns, ``d`` or
    none; 0 in other rows), in one pass."""
    x = x.detach().contiguous()
    m, d = x.shape
    K = len(b) - 1
    hi = (b[0] + step * (level.clamp(max=max(K - 1, 0)) + 1)).numpy()
    signs = torch.empty(m, d, dtype=torch.bool)
    q0 = torch.empty(m, d, dtype=q0_dtype)
    digits = torch.empty(m, d, dtype=torch.uint8)
    values = torch.empty(m, value_columns, dtype=x.dtype)
    args = (x.numpy(), s.to(torch.float64).numpy(), bad.numpy(), level.numpy(), p.numpy())
    consts = (_pow2(b), _pow2(hi), _pow2(hi - step), 2.0**step, float(torch.finfo(x.dtype).max))
    launch(_bit_fields, *args, *consts, signs.numpy(), q0.numpy(), digits.numpy(), values.numpy())
    return signs, q0, digits, values


def bits_decode(f: dict, base_bits: int) -> torch.Tensor:
    """The rows MLMC-bits fields ``f`` (float32 or float64) decode to, computed as the torch
    form computes them, in one pass (``values`` with no columns: no row sent the top increment,
    and each entry takes ``+ 0``, as from a zero value)."""
    s = f["scale"].contiguous()
    out = torch.empty(f["q0"].shape, dtype=s.dtype)
    kind = s.numpy().dtype
    consts = np.array([2.0**-base_bits, np.finfo(kind).max], kind)
    args = (s.numpy(), f["q0"].contiguous().numpy(), f["digits"].contiguous().numpy())
    args += (f["inc_scale"].contiguous().numpy(), f["signs"].contiguous().numpy())
    launch(_bit_decode, *args, f["values"].contiguous().numpy(), consts, out.numpy())
    return out


def _pow2(b) -> np.ndarray:
    """Per precision ``b``: ``2^b``, ``2^b - 1`` (rounded as float64 rounds it) and ``2^-b``,
    float64 ``(len(b), 3)``."""
    b = np.asarray(b, np.int64)
    p = np.ldexp(1.0, b)
    return np.stack([p, p - 1.0, np.ldexp(1.0, -b)], axis=-1)


_FORM: list = []


def norm_form() -> tuple[int, bool] | None:
    """How ``torch.linalg.vector_norm`` adds up a contiguous float64 row: ``(lanes, fma)``: the
    squares of the first ``d - d % lanes`` entries go to ``lanes`` running sums by position (a
    multiply, then an add), which are then added left to right, and the remaining squares one
    by one (``fma``: as fused multiply-adds). That is torch's vectorized CPU kernel, its lane
    count set by the instruction set it was built for. The form is found once per process by
    trying the candidates on probe rows (every length from 1 to 40 and a few long ones,
    magnitudes spread over many binades); ``None`` (the caller then lets torch add) if no
    candidate gives torch's bits on every probe."""
    if not _FORM:
        g = torch.Generator().manual_seed(0)
        rows = [
            torch.randn(1, n, generator=g, dtype=torch.float64)
            * torch.exp(4 * torch.randn(1, n, generator=g, dtype=torch.float64))
            for n in [*range(1, 41), 97, 1001, 4099, 65537]
        ]
        want = torch.cat([torch.linalg.vector_norm(r, dim=1) for r in rows])
        found = None
        for form in [(4, True), (8, True), (4, False), (8, False), (2, True), (16, True)]:
            got = torch.empty(len(rows), dtype=torch.float64)
            for i, r in enumerate(rows):
                got[i] = _lanes_norm(r[0].numpy(), *form)
            if torch.equal(got.view(torch.int64), want.view(torch.int64)):
                found = form
                break
        _FORM.append(found)
    return _FORM[0]


if numba is not None:
    _ijit = numba.njit(cache=True, nogil=True, inline="always", error_model="numpy")
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _vjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _BLOCK = 1024  # entries coded at once (their codes kept in cache)

    @_ijit
    def _span(t, n, d):
        """Row and entry range of task ``t`` (``n`` tasks a row)."""
        r = t // n
        lo = (t % n) * CHUNK
        return r, lo, min(d, lo + CHUNK)

    @_vjit
    def _absmax(bits, mask, part):
        m, d = bits.shape
        n = part.shape[1]
        for t in numba.prange(m * n):
            r, lo, hi = _span(t, n, d)
            row = bits[r, lo:hi]
            top = row[0] & mask
            for i in range(1, row.size):
                top = max(top, row[i] & mask)
            part[r, t % n] = top

    @_ijit
    def _code(r, pw):
        """``q_b(r) = min(floor(r 2^b), 2^b - 1)`` (``pw`` from :func:`_pow2`)."""
        return min(np.floor(r * pw[0]), pw[1])

    @_ijit
    def _ratio(v, div, bad):
        """``r = |x| / s`` in float64 (``div``: ``s``, or 1 where it is 0), 0 in a non-finite
        row."""
        return 0.0 if bad else np.float64(abs(v)) / div

    @_ijit
    def _divisor(s):
        return s if s > 0 else 1.0

    @_ijit
    def _clamp(y, big):
        """``y`` clamped to ``[-big, big]`` (NaN kept), as ``torch.clamp``."""
        return big if y > big else (-big if y < -big else y)

    _fjit = numba.njit(cache=True, nogil=True, fastmath={"contract"})

    @_fjit
    def _fma_square(t, e):
        """``t + e * e`` fused into one rounding (the compiler contracts the pair)."""
        return t + e * e

    @_jit
    def _lanes_add(acc, e):
        """``acc[j] += e[j] ** 2`` (a multiply, then an add), ``e`` a multiple of the lanes."""
        lanes = acc.size
        if lanes == 4:
            a0, a1, a2, a3 = acc[0], acc[1], acc[2], acc[3]
            for j in range(0, e.size, 4):
                a0 += e[j] * e[j]
                a1 += e[j + 1] * e[j + 1]
                a2 += e[j + 2] * e[j + 2]
                a3 += e[j + 3] * e[j + 3]
            acc[0], acc[1], acc[2], acc[3] = a0, a1, a2, a3
        else:
            for j in range(0, e.size, lanes):
                for k in range(lanes):
                    acc[k] += e[j + k] * e[j + k]

    @_jit
    def _lanes_end(acc, fma, tail):
        """The lanes added left to right, then the ``tail`` squares one by one; the root."""
        t = acc[0]
        for j in range(1, acc.size):
            t = t + acc[j]
        for e in tail:
            t = _fma_square(t, e) if fma else t + e * e
        return np.sqrt(t)

    @_jit
    def _lanes_norm(row, lanes, fma):
        """``||row||`` added up in the form ``(lanes, fma)`` of :func:`norm_form`."""
        main = row.size - row.size % lanes
        acc = np.zeros(lanes)
        _lanes_add(acc, row[:main])
        return _lanes_end(acc, fma, row[main:])

    @_jit
    def _top_norm(x, div, bad, pk, lanes, fma):
        """``||r - q_{b_K}(r) 2^-b_K||`` of one row, in the form ``(lanes, fma)``."""
        main = x.size - x.size % lanes
        acc = np.zeros(lanes)
        e = np.empty(_BLOCK)  # a multiple of the lanes
        for a in range(0, main, _BLOCK):
            xs = x[a : min(main, a + _BLOCK)]
            for i in range(xs.size):
                ri = _ratio(xs[i], div, bad)
                e[i] = ri - _code(ri, pk) * pk[2]
            _lanes_add(acc, e[: xs.size])
        tail = np.empty(x.size - main)
        for i in range(tail.size):
            ri = _ratio(x[main + i], div, bad)
            tail[i] = ri - _code(ri, pk) * pk[2]
        return _lanes_end(acc, fma, tail)

    @_vjit
    def _top_norms(x, s, bad, pw, lanes, fma, out):
        for r in numba.prange(x.shape[0]):
            out[r] = _top_norm(x[r], _divisor(s[r]), bad[r], pw[pw.shape[0] - 1], lanes, fma)

    @_jit
    def _norms_part(x, div, bad, pw, shift, step, hist_bits, res, sq):
        """One task of :func:`_bit_norms`: the residuals of entries ``x`` into ``res`` and the
        sums of their digits' squares added to ``sq`` (one per level)."""
        K = pw.shape[0] - 1
        if hist_bits < 0:
            for i in range(x.size):
                ri = _ratio(x[i], div, bad)
                prev = _code(ri, pw[0])
                for lv in range(1, K + 1):
                    q = _code(ri, pw[lv])
                    g = np.int64(q - prev * shift)
                    sq[lv - 1] += g * g
                    prev = q
                if res.size:
                    res[i] = ri - prev * pw[K, 2]
            return
        # digit l is bits step (K - l) .. step (K - l + 1) - 1 of q_{b_K} where r < 1 (floor(r
        # 2^b) is then below 2^b, a shift of floor(r 2^b_K)); r = 1 is the cap at every level,
        # added with its own digits
        low = (1 << hist_bits) - 1
        hist = np.zeros(1 << hist_bits, np.int64)
        code = np.empty(min(x.size, _BLOCK), np.int64)
        ones = 0
        pk = pw[K]
        for a in range(0, x.size, _BLOCK):
            xs = x[a : a + _BLOCK]
            for i in range(xs.size):
                ri = _ratio(xs[i], div, bad)
                code[i] = np.int64(_code(ri, pk)) & low
                ones += ri == 1.0
            if res.size:
                rs = res[a : a + _BLOCK]
                for i in range(xs.size):
                    ri = _ratio(xs[i], div, bad)
                    rs[i] = ri - _code(ri, pk) * pk[2]
            for i in range(xs.size):
                hist[code[i]] += 1
        hist[np.int64(pk[1]) & low] -= ones
        mask = (1 << step) - 1
        for v in range(1 << hist_bits):
            if hist[v]:
                for lv in range(1, K + 1):
                    g = (v >> (step * (K - lv))) & mask
                    sq[lv - 1] += hist[v] * g * g
        for lv in range(1, K + 1):
            g = np.int64(pw[lv, 1] - pw[lv - 1, 1] * shift)
            sq[lv - 1] += ones * g * g

    @_vjit
    def _bit_norms(x, s, bad, pw, shift, step, hist_bits, res, sums):
        m, d = x.shape
        n = sums.shape[1]
        for t in numba.prange(m * n):
            r, lo, hi = _span(t, n, d)
            args = (_divisor(s[r]), bad[r], pw, shift, step, hist_bits)
            _norms_part(x[r, lo:hi], *args, res[r, lo:hi], sums[r, t % n])

    @_jit
    def _fields_part(x, div, bad, trunc, sr, pr, pw, ph, pl, shift, big, signs, q0, dig, val):
        """One task of :func:`_bit_fields`."""
        K = pw.shape[0] - 1
        for i in range(x.size):
            v = x[i]
            signs[i] = v < 0
            q0[i] = _code(_ratio(v, div, bad), pw[0])
        if trunc:  # the drawn truncation increment's digits
            for i in range(x.size):
                ri = _ratio(x[i], div, bad)
                dig[i] = np.uint8(_code(ri, ph) - _code(ri, pl) * shift)
            val[:] = 0  # no columns where no row drew the top increment
        elif not bad:  # the drawn top increment, (x - Q_{b_depth}(x)) / p_top, saturated
            for i in range(x.size):
                v64 = np.float64(x[i])
                mag = sr * (_code(_ratio(v64, div, bad), pw[K]) * pw[K, 2])
                dig[i] = 0
                val[i] = _clamp((v64 - (-mag if v64 < 0 else mag)) / pr, big)
        else:
            dig[:] = 0
            val[:] = 0

    @_vjit
    def _bit_fields(x, s, bad, level, p, pw, pwhi, pwlo, shift, big, signs, q0, dig, val):
        m, d = x.shape
        n = (d + CHUNK - 1) // CHUNK
        K = pw.shape[0] - 1
        for t in numba.prange(m * n):
            r, lo, hi = _span(t, n, d)
            trunc = level[r] < K and not bad[r]
            args = (_divisor(s[r]), bad[r], trunc, s[r], p[r], pw, pwhi[r], pwlo[r], shift, big)
            outs = (signs[r, lo:hi], q0[r, lo:hi], dig[r, lo:hi], val[r, lo:hi])
            _fields_part(x[r, lo:hi], *args, *outs)

    @_jit
    def _decode_part(sr, ir, q0, dig, signs, val, unit, big, out):
        """One task of :func:`_bit_decode`."""
        ft = out.dtype.type
        sent, zero = val.size > 0, ft(0)  # no values: + 0, as a zero value adds (-0 -> +0)
        for i in range(out.size):
            mag = sr * (ft(q0[i]) * unit)
            mag = mag + ft(dig[i]) * ir
            out[i] = (-mag if signs[i] else mag) + (val[i] if sent else zero)
        if np.isfinite(sr):  # an overflow of a finite row saturates
            for i in range(out.size):
                out[i] = _clamp(out[i], big)

    @_vjit
    def _bit_decode(s, q0, dig, inc, signs, val, consts, out):
        m, d = out.shape
        n = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * n):
            r, lo, hi = _span(t, n, d)
            ins = (q0[r, lo:hi], dig[r, lo:hi], signs[r, lo:hi], val[r, lo:hi])
            _decode_part(s[r], inc[r], *ins, consts[0], consts[1], out[r, lo:hi])
