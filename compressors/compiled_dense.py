"""Compiled CPU kernels of three deterministic-format compressors: hard threshold, rounding to
a grid, 3LC's quantizer (see :mod:`streams.compiled`); and single passes that replace two or
three torch passes elsewhere: SIDCo's per-row threshold, Bernoulli's copy-or-zero with its
non-finite test and its scaling with the overflow test, scaled sign's ``|x|`` with the signs.

Their torch forms take one whole-array pass per operation (abs, compare, negate, where, sum,
casts to float64, cumulative maxima for the gaps of the Elias code, the quartic bytes and the
zero runs), each writing a temporary. The kernels here read the rows once (3LC twice: its scale
first) and write the payload, computing every entry with the same operations in the same
precision, so the payload is the same, bit for bit. Rows are cut into chunks so that a single
long row runs on every thread; what crosses a chunk's edge (the gap to the previous non-zero
level) is joined afterwards from per-chunk summaries. Inner loops run over slices indexed from
0, which the compiler vectorizes (an index that may be negative is wrapped, which it cannot)."""

# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import _GOLDEN, launch, numba

__all__ = [
    "ENABLED",
    "absmax",
    "round_decode",
    "round_encode",
    "serves",
    "threelc_decode",
    "threelc_encode",
    "threshold_encode",
    "threshold_rows",
    "rows_or_zero",
    "scale_rows",
    "abs_signs",
    "signs_rows",
]

ENABLED = numba is not None
#: Inputs with fewer entries take the torch form (the same numbers): there it costs microseconds,
#: and a process that never meets a large input never compiles these kernels (tens of seconds
#: the first time on a 2-core machine, before numba's on-disk cache holds them).
FAST_FROM = 1 << 15
CHUNK = 1 << 15  # entries per task; a multiple of 5 times this is used for 3LC's bytes
BYTES = 6554  # quartic bytes per 3LC task (5 * 6554 entries)
SUB = 2048  # entries a task computes before it codes them (while they are in cache)
_ZERO_WORD = int.from_bytes(bytes([121] * 8), "little")  # eight 3LC zero bytes (ZERO_BYTE)
_SHIFT53 = np.uint64(11)


def serves(t: torch.Tensor, dtype: torch.dtype | None = None) -> bool:
    """Whether the kernels serve ``t`` (a 2-D CPU tensor of float32 or float64 with at least
    ``FAST_FROM`` entries; with ``dtype``, rows shaped as ``t`` that decode to ``dtype``)."""
    return (
        ENABLED
        and t.device.type == "cpu"
        and (t.dtype if dtype is None else dtype) in (torch.float32, torch.float64)
        and t.dim() == 2
        and t.numel() >= max(1, FAST_FROM)
    )


def _tasks(d: int, chunk: int) -> int:
    return (d + chunk - 1) // chunk


def absmax(x: torch.Tensor) -> torch.Tensor:
    """``|x|.amax(dim=1)`` in one pass (a NaN, of some payload, if a row holds a NaN)."""
    x = x.detach().contiguous()
    ints, mask = (np.int32, 0x7FFFFFFF) if x.dtype == torch.float32 else (np.int64, (1 << 63) - 1)
    part = np.empty((x.shape[0], _tasks(x.shape[1], CHUNK)), dtype=ints)
    launch(_absmax, x.numpy().view(ints), ints(mask), part)
    return torch.from_numpy(part.view(x.numpy().dtype)).amax(dim=1)


def threshold_encode(x: torch.Tensor, lam: float):
    """``keep = not |x| < lam`` (``lam`` in ``x``'s dtype), ``values = where(keep, x, 0)``,
    the number kept per row and a copy of ``values`` (:func:`threshold_rows`)."""
    x = x.detach().contiguous()
    # lam rounded to x's dtype, then widened (exactly): the same comparisons in float64
    lam = float(x.numpy().dtype.type(lam))
    return threshold_rows(x, torch.full((x.shape[0],), lam, dtype=torch.float64))


def threshold_rows(x: torch.Tensor, t: torch.Tensor):
    """:func:`threshold_encode` with a threshold per row, ``t`` ``(m,)`` float64: ``keep = not
    |x| < t`` compared in float64 (every float32 or float64 ``|x_j|`` is exact there; a NaN
    threshold keeps the whole row). Returns ``(keep, values, nnz, rows)``: ``rows``, written in
    the same pass, equals ``values`` in memory of its own, what the compressor's decode would
    copy (measured on 2.5e7 float32 entries, encode and decode: Threshold 18.4-19.0 ms with the
    copy, 14.6-17.0 with these rows)."""
    x = x.detach().contiguous()
    keep = torch.empty(x.shape, dtype=torch.bool)
    values, rows = torch.empty_like(x), torch.empty_like(x)
    part = torch.empty(x.shape[0], _tasks(x.shape[1], CHUNK), dtype=torch.int64)
    t = t.detach().to(torch.float64).contiguous()
    zero = x.numpy().dtype.type(0)
    args = (x.numpy(), t.numpy(), zero, keep.numpy(), values.numpy(), rows.numpy())
    launch(_threshold_rows, *args, part.numpy())
    return keep, values, part.sum(dim=1), rows


def rows_or_zero(x: torch.Tensor, sent: torch.Tensor):
    """``where(sent[:, None], x, 0)`` and, per row, whether ``x`` holds a NaN or an infinity,
    in one pass (``sent`` ``(m,)`` bool)."""
    x = x.detach().contiguous()
    values = torch.empty_like(x)
    part = torch.empty(x.shape[0], _tasks(x.shape[1], CHUNK), dtype=torch.bool)
    zero = x.numpy().dtype.type(0)
    launch(_rows_or_zero, x.numpy(), sent.contiguous().numpy(), zero, values.numpy(), part.numpy())
    return values, part.any(dim=1)


def scale_rows(x: torch.Tensor, c: float):
    """``x * c`` (``c`` rounded to ``x``'s dtype first, as torch does with a Python number)
    and whether every product is finite, in one pass."""
    x = x.detach().contiguous()
    out = torch.empty_like(x)
    part = torch.empty(x.shape[0], _tasks(x.shape[1], CHUNK), dtype=torch.bool)
    launch(_scale_rows, x.numpy(), x.numpy().dtype.type(c), out.numpy(), part.numpy())
    return out, not bool(part.any())


def abs_signs(x: torch.Tensor):
    """``|x|`` and ``x < 0`` in one pass."""
    x = x.detach().contiguous()
    a = torch.empty_like(x)
    neg = torch.empty(x.shape, dtype=torch.bool)
    launch(_abs_signs, x.numpy(), a.numpy(), neg.numpy())
    return a, neg


def signs_rows(x: torch.Tensor):
    """``x < 0`` and, per row, whether ``x`` holds a NaN or an infinity, in one pass."""
    x = x.detach().contiguous()
    neg = torch.empty(x.shape, dtype=torch.bool)
    part = torch.empty(x.shape[0], _tasks(x.shape[1], CHUNK), dtype=torch.bool)
    launch(_signs_rows, x.numpy(), neg.numpy(), part.numpy())
    return neg, part.any(dim=1)


def round_encode(x: torch.Tensor, h: float, keys, random: bool, escape: int):
    """Grid rounding's payload (``levels``, ``escaped``, ``raw``) and per row the number of
    escaped entries and the Elias bits of the codes (``escape`` for an escaped entry, else
    ``|level|``). ``raw`` is ``(m, K)``, ``K`` the most escaped entries of a row: row ``r``'s
    escaped values in column order, then zeros. A dense ``(m, d)`` ``raw``, zero but for the
    rare escaped entries, took up to 9.6 ms to make at ``d = 2.5e7`` float32, a quarter of the
    encode and decode: zeroed memory is free where the heap hands out pages never touched, a
    ``memset`` where it reuses freed ones."""
    x = x.detach().contiguous()
    m, d = x.shape
    levels = torch.empty(m, d, dtype=torch.int32)  # |level| < 2^24: half the bytes of int64
    esc = torch.empty(m, d, dtype=torch.bool)
    tasks = _tasks(d, CHUNK)
    summary = torch.empty(m, tasks, 4, dtype=torch.int64)
    k = keys.contiguous().numpy().view(np.uint64)
    args = (x.numpy(), float(h), k, bool(random), escape, levels.numpy(), esc.numpy())
    launch(_round, *args, summary.numpy())
    totals = torch.empty(m, 2, dtype=torch.int64)
    _join_gaps(summary.numpy(), totals.numpy())
    K = int(totals[:, 0].max()) if m else 0
    raw = torch.zeros(m, K, dtype=x.dtype)
    if K:
        _escaped_values(x.numpy(), esc.numpy(), summary.numpy(), raw.numpy())
    return levels, esc, raw, totals[:, 0], totals[:, 1]


def round_decode(levels, esc, raw, h: float) -> torch.Tensor:
    """``levels h`` (float64) cast to ``raw``'s dtype and, where that overflows, saturated at
    ``+-finfo.max``; each row's escaped entries take its ``raw`` values in turn."""
    raw = raw.contiguous()
    levels = levels.contiguous()
    out = torch.empty(levels.shape, dtype=raw.dtype)
    big = torch.finfo(raw.dtype).max
    launch(_round_decode, levels.numpy(), float(h), float(big), out.numpy())
    if raw.shape[1]:  # some row has escaped entries
        launch(_put_escaped, esc.contiguous().numpy(), raw.numpy(), out.numpy())
    return out


def threelc_encode(x: torch.Tensor, amax: torch.Tensor, s: float):
    """``q = clamp(round(x / den / s), -1, 1)`` (int8; ``den = amax``, or 1 where ``amax`` is 0)
    and per row the length of the zero-run encoded quartic bytes of ``q``.

    No division per entry: ``v = (|x| / den) / s`` is a non-decreasing function of ``|x|``
    (each rounded division is) and odd in ``x`` (rounding to nearest is symmetric), so
    ``v > 1/2`` exactly when ``|x| > T``, ``T`` the largest float whose ``v`` is at most 1/2,
    found per row by bisection on the floats' bit patterns with the same two divisions
    (:func:`ternary_thresholds`): the same ``q`` by comparisons alone. Each task summarises its
    bytes' zero runs while they are in cache; the runs are joined across tasks per row (a row
    of one long vector used to be one thread's serial scan)."""
    x = x.detach().contiguous()
    kind = x.numpy().dtype.type
    m, d = x.shape
    nbytes = -(-d // 5)
    q = torch.empty(m, d, dtype=torch.int8)
    quart = torch.empty(m, nbytes, dtype=torch.uint8)
    den = torch.where(amax > 0, amax, torch.ones_like(amax)).contiguous()
    T = ternary_thresholds(den.numpy(), kind(s), kind(0.5))
    tasks = max(1, -(-nbytes // BYTES))
    runs = np.zeros((m, tasks, 5), dtype=np.int64)
    launch(_ternary, x.numpy(), T, q.numpy(), quart.numpy(), runs)
    lens = np.empty(m, dtype=np.int64)
    _zre_join(runs, lens)
    return q, torch.from_numpy(lens)


def ternary_thresholds(den: np.ndarray, s, half) -> np.ndarray:
    """Per row the largest float ``T >= 0`` (in ``den``'s dtype) with ``(T / den) / s <= half``
    (``s`` and ``half`` in that dtype; ``den`` finite and positive)."""
    out = np.empty_like(den)
    ints = np.int32 if den.dtype == np.float32 else np.int64
    inf_bits = int(np.array([np.inf], den.dtype).view(ints)[0])
    _thresholds(den, s, half, inf_bits, out)
    return out


def threelc_decode(q, scale, s: float, big: float) -> torch.Tensor:
    """``clamp((q scale) s, -big, big)`` in ``scale``'s dtype."""
    scale = scale.contiguous()
    kind = scale.numpy().dtype.type
    out = torch.empty(q.shape, dtype=scale.dtype)
    launch(_ternary_decode, q.contiguous().numpy(), scale.numpy(), kind(s), kind(big), out.numpy())
    return out


if numba is not None:
    from numba import types
    from numba.extending import overload

    from compressors.compiled_fastsgd import _as_bits, _as_float, _unary
    from streams.compiled import _mix

    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    _jit = numba.njit(cache=True, nogil=True)
    _inline = numba.njit(inline="always", cache=True)

    @_inline
    def _gamma(v):
        """Elias-gamma length of ``v >= 1``: ``2 floor(log2 v) + 1``."""
        e = 0
        if v >= 1 << 32:
            v >>= 32
            e += 32
        if v >= 1 << 16:
            v >>= 16
            e += 16
        if v >= 1 << 8:
            v >>= 8
            e += 8
        if v >= 1 << 4:
            v >>= 4
            e += 4
        if v >= 1 << 2:
            v >>= 2
            e += 2
        if v >= 2:
            e += 1
        return 2 * e + 1

    @_inline
    def _quartic(q, i):
        """The quartic byte of ``q[i : i + 5]``."""
        return (81 * (q[i] + 1) + 27 * (q[i + 1] + 1) + 9 * (q[i + 2] + 1) + 3 * (q[i + 3] + 1)) + (
            q[i + 4] + 1
        )

    @_inline
    def _quartic_tail(q, i, d):
        """The quartic byte of ``q[i : i + 5]``, entries past ``d`` taken as 0 (digit 1)."""
        byte = 0
        for j in range(i, i + 5):
            byte = 3 * byte + (q[j] + 1 if j < d else 1)
        return byte

    @_pjit
    def _absmax(bits, mask, part):
        """Per task the largest of ``bits & mask`` (the float's magnitude as an integer: ordered
        as the magnitudes, a NaN above every number); loops over slices from 0 vectorize."""
        m, d = bits.shape
        tasks = part.shape[1]
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            xr = bits[r, c0 : min(d, c0 + CHUNK)]
            top = xr[0] & mask
            for i in range(xr.size):
                top = max(top, xr[i] & mask)
            part[r, t % tasks] = top

    @_inline
    def _span(task, tasks, d):
        """Task ``task``'s row and columns ``[c0, c1)`` (``tasks`` chunks of ``CHUNK`` a row)."""
        c0 = (task % tasks) * CHUNK
        return task // tasks, c0, min(d, c0 + CHUNK)

    @_pjit
    def _threshold_rows(x, t, zero, keep, values, rows, part):
        m, d = x.shape
        tasks = part.shape[1]
        for task in numba.prange(m * tasks):
            r, c0, c1 = _span(task, tasks, d)
            xr, kr, vr, rr = x[r, c0:c1], keep[r, c0:c1], values[r, c0:c1], rows[r, c0:c1]
            lam = t[r]
            cnt = 0
            for i in range(xr.size):
                v = xr[i]
                small = np.float64(abs(v)) < lam
                kr[i] = not small
                w = zero if small else v
                vr[i] = w
                rr[i] = w
                cnt += not small
            part[r, task % tasks] = cnt

    @_pjit
    def _rows_or_zero(x, sent, zero, values, part):
        m, d = x.shape
        tasks = part.shape[1]
        for task in numba.prange(m * tasks):
            r, c0, c1 = _span(task, tasks, d)
            xr, vr = x[r, c0:c1], values[r, c0:c1]
            bad = False
            if sent[r]:
                for i in range(xr.size):
                    v = xr[i]
                    vr[i] = v
                    w = v - v  # NaN for a NaN or an infinity, else 0
                    bad |= w != w
            else:
                for i in range(xr.size):
                    vr[i] = zero
                    w = xr[i] - xr[i]
                    bad |= w != w
            part[r, task % tasks] = bad

    @_pjit
    def _scale_rows(x, c, out, part):
        m, d = x.shape
        tasks = part.shape[1]
        for task in numba.prange(m * tasks):
            r, c0, c1 = _span(task, tasks, d)
            xr, orow = x[r, c0:c1], out[r, c0:c1]
            bad = False
            for i in range(xr.size):
                y = xr[i] * c
                orow[i] = y
                w = y - y
                bad |= w != w
            part[r, task % tasks] = bad

    @_pjit
    def _abs_signs(x, a, neg):
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for task in numba.prange(m * tasks):
            r, c0, c1 = _span(task, tasks, d)
            xr, ar, nr = x[r, c0:c1], a[r, c0:c1], neg[r, c0:c1]
            for i in range(xr.size):
                v = xr[i]
                ar[i] = abs(v)
                nr[i] = v < 0

    @_pjit
    def _signs_rows(x, neg, part):
        m, d = x.shape
        tasks = part.shape[1]
        for task in numba.prange(m * tasks):
            r, c0, c1 = _span(task, tasks, d)
            xr, nr = x[r, c0:c1], neg[r, c0:c1]
            bad = False
            for i in range(xr.size):
                v = xr[i]
                nr[i] = v < 0
                w = v - v  # NaN for a NaN or an infinity, else 0
                bad |= w != w
            part[r, task % tasks] = bad

    @_pjit
    def _round(x, h, keys, random, escape, levels, esc, summary):
        """Per task: escaped count, first and last column with a non-zero code, and the Elias
        bits of its codes, the first one's gap counted from column -1 (``_join_gaps`` puts the
        true gap in). ``2 floor(log2 v) + 1`` of a code is read off the exponent of
        ``float64(v)``, in the loop that makes the levels. Every gap is 1 but the block's
        first and those after zero codes, which are found 8 zero flags at a time: walking the
        block entry by entry, a serial chain, took 7 of 21 ms at ``d = 2.5e7`` (h = 1e-3,
        normal entries), the flags 3 to 4."""
        m, d = x.shape
        tasks = summary.shape[1]
        lim = np.float64(escape - 1)
        fesc = np.float64(escape)
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            flag = np.empty(SUB, np.uint8)  # SUB is a multiple of 8
            flag_w = flag.view(np.uint64)
            n_esc, first, last, bits = 0, -1, -1, 0
            for a in range(c0, min(d, c0 + CHUNK), SUB):
                b = min(d, c0 + CHUNK, a + SUB)
                xr, lr, er = x[r, a:b], levels[r, a:b], esc[r, a:b]
                nonzero = 0
                # each non-zero code: gamma(code) + 1 (its sign) + gamma(1), as if its gap were
                # 1; a gap g > 1 (after zero codes, or the block's first) adds gamma(g) - 1
                if random:
                    z = keys[r] + np.uint64(a) * _GOLDEN
                    for i in range(xr.size):
                        q = np.float64(xr[i]) / h
                        e = not abs(q) < lim
                        q = 0.0 if e else q
                        u = np.float64(_mix(z + np.uint64(i + 1) * _GOLDEN) >> _SHIFT53)
                        low = np.floor(q)
                        lev = low + (1.0 if u * 2.0**-53 < q - low else 0.0)
                        lr[i] = np.int32(lev)
                        er[i] = e
                        code = np.int64(_as_bits(fesc if e else abs(lev)))
                        flag[i] = code == 0
                        n_esc += e
                        nonzero += code != 0
                        bits += 2 * (code >> 52) - 2043 if code != 0 else 0
                else:
                    for i in range(xr.size):
                        q = np.float64(xr[i]) / h
                        e = not abs(q) < lim
                        lev = np.rint(0.0 if e else q)
                        lr[i] = np.int32(lev)
                        er[i] = e
                        code = np.int64(_as_bits(fesc if e else abs(lev)))
                        flag[i] = code == 0
                        n_esc += e
                        nonzero += code != 0
                        bits += 2 * (code >> 52) - 2043 if code != 0 else 0
                if nonzero == xr.size:  # no zero code (a fine grid): only the first gap
                    g = a - last
                    bits += _gamma(g) - 1 if g > 1 else 0
                    first = a if first < 0 else first
                    last = b - 1
                    continue
                # the zero codes' flags, read 8 at a time: only words with a zero are walked
                words = (xr.size + 7) // 8
                flag[xr.size : 8 * words] = 1  # a partial word is walked
                for w in range(words):
                    k0 = 8 * w
                    if flag_w[w] == 0:
                        g = a + k0 - last
                        bits += _gamma(g) - 1 if g > 1 else 0
                        first = a + k0 if first < 0 else first
                        last = a + k0 + 7
                        continue
                    for k in range(k0, min(k0 + 8, xr.size)):
                        if flag[k] == 0:
                            g = a + k - last
                            bits += _gamma(g) - 1 if g > 1 else 0
                            first = a + k if first < 0 else first
                            last = a + k
            s = summary[r, t % tasks]
            s[0], s[1], s[2], s[3] = n_esc, first, last, bits

    @_jit
    def _join_gaps(summary, totals):
        m, tasks, _ = summary.shape
        for r in range(m):
            n_esc, bits, prev = 0, 0, -1
            for c in range(tasks):
                s = summary[r, c]
                n_esc += s[0]
                if s[1] >= 0:
                    bits += s[3] - _gamma(s[1] + 1) + _gamma(s[1] - prev)
                    prev = s[2]
            totals[r, 0], totals[r, 1] = n_esc, bits

    @_pjit
    def _round_decode(levels, h, big, out):
        m, d = out.shape
        tasks = (d + SUB - 1) // SUB
        for t in numba.prange(m * tasks):
            r, a = t // tasks, (t % tasks) * SUB
            b = min(d, a + SUB)
            lr, orow = levels[r, a:b], out[r, a:b]
            for i in range(lr.size):
                y = np.float64(lr[i]) * h
                # a finite product saturates: clamped before the cast to the output's dtype,
                # as after it (rounding is monotone and big representable); inf stays
                if abs(y) < np.inf:
                    y = big if y > big else (-big if y < -big else y)
                orow[i] = y

    @_jit
    def _escaped_values(x, esc, summary, raw):
        """``raw[r]``: row ``r``'s escaped values in column order, read from the chunks whose
        summary counts any (escaped entries are rare)."""
        m, tasks = summary.shape[0], summary.shape[1]
        d = x.shape[1]
        for r in range(m):
            k = 0
            for t in range(tasks):
                if summary[r, t, 0] == 0:
                    continue
                for j in range(t * CHUNK, min(d, (t + 1) * CHUNK)):
                    if esc[r, j]:
                        raw[r, k] = x[r, j]
                        k += 1

    @_pjit
    def _put_escaped(esc, raw, out):
        """Row ``r``'s escaped entries of ``out`` take ``raw[r]`` in turn."""
        m, d = out.shape
        K = raw.shape[1]
        for r in numba.prange(m):
            k = 0
            er, orow = esc[r], out[r]
            for j in range(d):
                if k == K:
                    break
                if er[j]:
                    orow[j] = raw[r, k]
                    k += 1

    @_pjit
    def _ternary(x, T, q, quart, runs):
        """``q = (x > T) - (x < -T)`` (``clamp(round(x / den / s), -1, 1)``, ties at 1/2 to
        even, 0: :func:`threelc_encode`), its quartic bytes, and per task the zero runs of
        its bytes: ``runs[r, task]`` = (all zero, leading zero bytes, trailing zero bytes,
        the bytes of the runs between non-zero bytes, non-zero bytes)."""
        m, d = x.shape
        nb = quart.shape[1]
        tasks = runs.shape[1]
        for t in numba.prange(m * tasks):
            r, b0 = t // tasks, (t % tasks) * BYTES
            b1 = min(nb, b0 + BYTES)
            i0, i1 = 5 * b0, min(d, 5 * b1)
            xr, qr, hi = x[r, i0:i1], q[r, i0:i1], T[r]
            lo = -hi
            for i in range(xr.size):
                v = xr[i]
                qr[i] = np.int8(v > hi) - np.int8(v < lo)
            br = quart[r, b0:b1]
            full = xr.size // 5  # bytes of five entries (a branch per byte kept the loop scalar)
            for b in range(full):
                br[b] = _quartic(qr, 5 * b)
            for b in range(full, br.size):
                br[b] = _quartic_tail(qr, 5 * b, xr.size)
            _zre_summary(br, runs[r, t % tasks])

    @_inline
    def _zre_summary(br, out):
        """The zero runs of the quartic bytes ``br`` (``ZERO_BYTE`` = 121: five zeros), as
        :func:`_ternary` records them; a run costs one byte per piece of at most 14. Eight
        bytes are tested at once (most bytes are zero bytes): byte by byte the scan took as
        long as the ternary levels themselves."""
        n = br.size
        nw = n // 8
        words = br[: 8 * nw].view(np.uint64)
        zeros = np.uint64(_ZERO_WORD)
        lead, inner, run, nz = -1, 0, 0, 0  # lead: the leading zero bytes, once a byte is not
        for w in range(nw + 1):
            if w < nw and words[w] == zeros:
                run += 8
                continue
            for b in range(8 * w, min(n, 8 * w + 8)):
                if br[b] == 121:
                    run += 1
                    continue
                if lead < 0:
                    lead = run
                else:
                    inner += (run + 13) // 14
                run = 0
                nz += 1
        if lead < 0:
            out[0], out[1], out[2] = 1, n, n
            return
        out[1], out[2], out[3], out[4] = lead, run, inner, nz

    @_jit
    def _zre_join(runs, lens):
        """Per row the zero-run encoded length: the tasks' runs joined in order (a run may
        span tasks)."""
        m, tasks, _ = runs.shape
        for r in range(m):
            total, carry = 0, 0
            for t in range(tasks):
                all_zero, lead, trail, inner, nz = runs[r, t]
                if all_zero:
                    carry += lead
                else:
                    total += (carry + lead + 13) // 14 + inner + nz
                    carry = trail
            lens[r] = total + (carry + 13) // 14

    _f32 = _unary("bitcast", types.float32, types.uint32)

    def _from_bits(bits, like):
        """The float of ``like``'s dtype whose bit pattern is ``bits`` (compiled code only)."""
        raise NotImplementedError

    @overload(_from_bits)
    def _from_bits_typed(bits, like):
        if like == types.float32:
            return lambda bits, like: _f32(np.uint32(bits))
        return lambda bits, like: _as_float(np.uint64(bits))

    @_jit
    def _thresholds(den, s, half, top, out):
        """Per row the largest float ``a >= 0`` with ``(a / den) / s <= half``, the kernel's
        division form in ``den``'s dtype: bisection on the bit patterns of ``[0, inf]``
        (``top``: inf's; non-negative floats are ordered as their bits; ``0`` qualifies,
        ``inf`` does not)."""
        for r in range(den.size):
            lo, hi = 0, top
            while hi - lo > 1:
                mid = lo + (hi - lo) // 2
                if (_from_bits(mid, den[r]) / den[r]) / s <= half:
                    lo = mid
                else:
                    hi = mid
            out[r] = _from_bits(lo, den[r])

    @_pjit
    def _ternary_decode(q, scale, s, big, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            qr, orow, sc = q[r, c0:c1], out[r, c0:c1], scale[r]
            for i in range(qr.size):
                v = (qr[i] * sc) * s  # the int8 level converted to the scale's dtype
                orow[i] = big if v > big else (-big if v < -big else v)  # NaN stays
