"""Compiled CPU kernels of the compressors (see :mod:`streams.compiled` for the set-up).

Top-K's selection with its tie rule (ties at the threshold go to the lower index) takes about a
dozen whole-array torch passes (abs, topk, min, two comparisons, a cumulative sum, nonzero,
gather); the kernel does it row by row in cache: the threshold (the ``k``-th largest magnitude),
then one ascending scan. The result is the same set in the same (ascending) order. The
threshold comes from a quickselect, or, for a small ``k`` of a long row (:func:`heap_serves`),
from a ``k``-entry min-heap fed the row in one scan: an entry enters only when it beats the
heap's smallest, a test a branch predictor learns, where each partition step of a quickselect
branches on random data (20 rows of 1000 float64 entries, ``k = 10``: 121 us by quickselect,
26.5 us by the heap; 1659 -> 222 us at 10,000 entries). Both give the same value, the ``k``-th
largest of the magnitudes. A row sorted by increasing magnitude is the heap's worst case (each
entry enters): then it costs about what a quickselect costs on random data (134 against 121
us above). A long row with a larger ``k`` (:func:`_top_k_sampled`) takes a bound below the
threshold from a sorted sample of its magnitudes, gathers the entries at or above it in one scan
(sixteen entries tested at once, gathered only where one passes) and selects from those alone
(one row of 2.5 * 10^7 float32 entries: encode 423 -> 48 ms at ``k = 250,000``, 20 ms at ``k =
2,500``); where the bound misses, which the gathered count shows, the row takes the quickselect.

On a small input (one thread's work), Top-K and Rand-K also write the decoded rows as they
encode (:func:`top_k_rows`, :func:`rand_k_rows`), for the first decode
(:meth:`compressors.base.Compressor._keep_rows`): a zero fill and a scatter cost less inside the
kernel than a decode's separate torch calls (EF21 + Top-1 on 20 x 112 rows: its step besides the
gradient 89.7 -> 75.6 us; DIANA and DASHA + Rand-10 about 15 us less).
"""

# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import math

import numpy as np
import torch

from streams.compiled import SERIAL_BELOW, launch, numba

__all__ = ["ENABLED", "heap_serves", "rand_k_rows", "scatter_sum", "small", "top_k", "top_k_rows",
           "top_k_shifted"]  # fmt: skip

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)
#: The heap finds the threshold where ``k <= HEAP_MAX_K`` and ``k * HEAP_RATIO <= d``; past
#: these the heap's sifts outweigh the quickselect's mispredicted branches (measured on random
#: rows: d = 300, k = 20: 25.6 against 19.6 us; d = 1000, k = 100: 287 against 176 us).
HEAP_MAX_K, HEAP_RATIO = 32, 32
#: Rows of at least ``SAMPLE_FROM`` entries, where the heap does not serve, bound the threshold
#: from a sorted sample of up to ``SAMPLE_SIZE`` of their magnitudes and select from the
#: entries above the bound, gathered ``GATHER_BLOCK`` at a time (:func:`_top_k_sampled`).
SAMPLE_FROM, SAMPLE_SIZE, GATHER_BLOCK = 4096, 8192, 4096


def heap_serves(k: int, d: int) -> bool:
    """Whether Top-K's kernels find the threshold of a row of ``d`` entries by the heap."""
    return 2 <= k <= HEAP_MAX_K and k * HEAP_RATIO <= d


def usable(x: torch.Tensor) -> bool:
    """Whether :func:`top_k` serves ``x``."""
    return ENABLED and x.device.type == "cpu" and x.dtype in DTYPES and x.dim() == 2


def top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, values)``, both ``(m, k)``: per row the ``k`` entries of largest ``|x|``,
    ties at the threshold to the lower index, indices ascending."""
    m, _ = x.shape
    idx = torch.empty(m, k, dtype=torch.int64)
    val = torch.empty(m, k, dtype=x.dtype)
    args = (x.detach().contiguous().numpy(), k, idx.numpy(), val.numpy())
    launch(_top_k, *args, serial=_top_k_serial)
    return idx, val


def small(x: torch.Tensor) -> bool:
    """Whether ``x`` is a small input the kernels serve (:func:`usable`, and one thread's work:
    fewer than ``SERIAL_BELOW`` entries), where one compiled call costs less than torch's
    several: the encoders then write the decoded rows as they go (:func:`top_k_rows`,
    :func:`rand_k_rows`) and a sparse reduction is one call (:func:`scatter_sum`)."""
    return usable(x) and x.numel() < SERIAL_BELOW


def top_k_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`top_k` and the decoded rows, ``(m, d)``: the kept values in place, zeros elsewhere
    (what a scatter into zeros gives), on this thread."""
    xn = x.detach().contiguous().numpy()
    m, d = xn.shape  # NumPy's buffers: a third of torch.empty's cost at this size
    idx, val, rows = np.empty((m, k), np.int64), np.empty((m, k), xn.dtype), np.empty_like(xn)
    _top_k_rows(xn, k, idx, val, rows)
    return torch.from_numpy(idx), torch.from_numpy(val), torch.from_numpy(rows)


def top_k_shifted(
    x: torch.Tensor, h: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-K shifted by ``h`` (:meth:`compressors.base.Compressor.encode_shifted`) in one pass
    per row: ``x`` (contiguous, written in place) becomes ``x - h``, whose :func:`top_k` are
    taken; then the decoded rows ``c`` (the kept values, zeros elsewhere), each row's
    ``||x - h - c||^2`` (each entry's error in ``x``'s dtype, squared and summed in float64)
    and ``x = c + h``. Returns ``(indices, values, c, squared errors)``: the same indices,
    values and rows, bit for bit, as :func:`top_k_rows` of ``x - h``, and ``c + h`` as torch
    adds them; the errors to rounding (torch's float32 norm is taken in float32)."""
    xn = x.detach().numpy()
    hn = h.detach().contiguous().numpy()
    m, d = xn.shape
    idx, val, rows = np.empty((m, k), np.int64), np.empty((m, k), xn.dtype), np.empty_like(xn)
    sq = np.empty(m, np.float64)
    launch(_top_k_shifted, xn, hn, k, idx, val, rows, sq, serial=_top_k_shifted_serial)
    t = torch.from_numpy
    return t(idx), t(val), t(rows), t(sq)


def rand_k_rows(
    x: torch.Tensor, idx: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rand-K's payload values and decoded rows on a small input, in one pass on this thread:
    ``values = x[i, idx[i]]`` with NaN first in a row holding a NaN or infinity, and the rows
    ``scale values`` (in ``x``'s dtype; a product that overflows from a finite value saturates
    at the dtype's largest finite value) at ``idx``, zeros elsewhere: what
    :func:`compressors.nonfinite.poison_first`, :func:`~compressors.nonfinite.saturate` and a
    scatter into zeros give."""
    xn = x.detach().contiguous().numpy()
    m, d = xn.shape
    ix = idx.contiguous().numpy()
    val, rows = np.empty(ix.shape, xn.dtype), np.empty_like(xn)
    kind = xn.dtype.type
    # the constants in x's dtype, so that the products are taken in it (as torch takes them)
    _rand_k_rows(xn, ix, kind(scale), kind(np.finfo(xn.dtype).max), kind(np.nan), val, rows)
    return torch.from_numpy(val), torch.from_numpy(rows)


def scatter_sum(
    values: torch.Tensor, idx: torch.Tensor, scale: float, weight: torch.Tensor | None, d: int
) -> torch.Tensor:
    """:func:`compressors.base.scatter_sum` of a small packet in one call, the same bits: each
    kept value times its row's factor (``scale / m``, or ``scale w_i``, in the values' dtype),
    added into a ``(d,)`` vector of zeros in row-major order, the order of torch's
    ``index_add_``."""
    vn = values.detach().contiguous().numpy()
    m, kind = vn.shape[0], vn.dtype.type
    if weight is None:
        factor = np.full(m, kind(scale * (1.0 / m)))
    else:
        factor = weight.detach().to(values).contiguous().numpy() * kind(scale)
    out = np.zeros(d, vn.dtype)
    _scatter_sum(vn, idx.contiguous().numpy(), factor, out)
    return torch.from_numpy(out)


if numba is not None:
    from streams.compiled import _kth_largest, _top_of_gathered

    _jit = numba.njit(cache=True, nogil=True)

    @_jit
    def _scatter_sum(values, idx, factor, out):
        m, k = idx.shape
        for i in range(m):
            f = factor[i]
            for c in range(k):
                v = values[i, c] * f  # rounded to the dtype, then added, as torch does
                out[idx[i, c]] += v

    @_jit
    def _rand_k_rows(x, idx, scale, big, nan, val, rows):
        m, k = idx.shape
        for i in range(m):
            row, r = x[i], rows[i]
            bad = False
            for j in range(row.size):
                if not math.isfinite(row[j]):
                    bad = True
                r[j] = 0.0
            for c in range(k):
                v = row[idx[i, c]]
                if bad and c == 0:
                    v = nan
                val[i, c] = v
                y = v * scale
                if math.isfinite(v) and not math.isfinite(y):
                    y = big if y > 0 else -big
                r[idx[i, c]] = y

    @_jit
    def _magnitude(v):
        """``|v|``, with NaN ranked above everything (as ``torch.topk`` ranks it)."""
        a = abs(v)
        return np.float32(np.inf) if a != a else a  # inf is exact in float32: no widening

    @numba.njit(inline="always", cache=True)
    def _sift_min(heap, i, k):
        """Restore the min-heap order of ``heap[:k]`` below ``i``."""
        v = heap[i]
        while True:
            c = 2 * i + 1
            if c >= k:
                break
            if c + 1 < k and heap[c + 1] < heap[c]:
                c += 1
            if heap[c] < v:
                heap[i] = heap[c]
                i = c
            else:
                break
        heap[i] = v

    @_jit
    def _kth_largest_heap(row, k, heap):
        """The ``k``-th largest :func:`_magnitude` of ``row``: the smallest of a min-heap
        (``heap[:k]``) of the largest ``k`` seen, fed the row in one scan."""
        for c in range(k):
            heap[c] = _magnitude(row[c])
        for i in range(k // 2 - 1, -1, -1):
            _sift_min(heap, i, k)
        top = heap[0]
        for j in range(k, row.size):
            v = _magnitude(row[j])
            if v > top:
                heap[0] = v
                _sift_min(heap, 0, k)
                top = heap[0]
        return top

    @_jit
    def _top_k_sampled(row, k, scratch, idx, val):
        """Top-K of a row of at least ``SAMPLE_FROM`` entries through a sample; False where the
        sample's bound misses (nothing written then). An evenly spaced sample of the magnitudes,
        sorted, gives a bound ``t_lo`` three standard deviations of the sample's rank below
        the ``k``-th largest; one scan with no branch gathers the positions and magnitudes of
        the entries at or above it, in order. With at least ``k`` gathered (so the ``k``-th
        largest is among them) and no more than the room made for them, a quickselect of the
        gathered magnitudes gives the threshold, and the gathered entries alone are selected
        from, in order, as :func:`_top_k_row` selects from the whole row
        (:func:`streams.compiled._top_of_gathered`)."""
        d = row.size
        s = min(SAMPLE_SIZE, d // 8)
        stride = d // s
        sample = np.empty(s, scratch.dtype)
        for i in range(s):
            sample[i] = _magnitude(row[i * stride])
        sample.sort()
        r = k * s / d  # the k-th largest's expected rank from the top of the sample
        margin = 3.0 * math.sqrt(r * (1.0 - k / d)) + 2.0
        lo = int(math.floor(s - r - margin))
        if lo < 0:  # the bound would be below every entry: nothing to gain
            return False
        t_lo = sample[lo]
        cap = min(d, 2 * int((r + margin) * d / s) + GATHER_BLOCK)
        pos = np.empty(cap + GATHER_BLOCK, np.int64)
        c = 0
        for a in range(0, d, GATHER_BLOCK):
            b = min(d, a + GATHER_BLOCK)
            for g in range(a, b, 16):  # groups of 16: tested at once, gathered where one is
                e = min(b, g + 16)
                hit = False
                for j in range(g, e):
                    hit |= _magnitude(row[j]) >= t_lo
                if hit:
                    for j in range(g, e):
                        v = _magnitude(row[j])
                        pos[c], scratch[c] = j, v
                        c += v >= t_lo
            if c > cap:
                return False
        if c < k:
            return False
        chosen = _top_of_gathered(scratch[:c], k)
        for o in range(k):
            j = pos[chosen[o]]
            idx[o], val[o] = j, row[j]
        return True

    # A magnitude's bits order as the magnitude (IEEE floats of one sign order as their bits),
    # and the least of the bits and infinity's ranks NaN (whose bits lie above) as infinity
    _ABS32, _INF32 = np.uint32((1 << 31) - 1), np.float32(np.inf).view(np.uint32)
    _ABS64, _INF64 = np.uint64((1 << 63) - 1), np.float64(np.inf).view(np.uint64)

    def _magnitude_keys(row):
        """``(bits, mask, inf)``: the row's entries as unsigned integers of their width, the
        mask that drops the sign and infinity's bits (compiled code only)."""
        raise NotImplementedError

    @numba.extending.overload(_magnitude_keys)
    def _magnitude_keys_typed(row):
        if row.dtype == numba.types.float32:
            return lambda row: (row.view(np.uint32), _ABS32, _INF32)
        return lambda row: (row.view(np.uint64), _ABS64, _INF64)

    @numba.njit(inline="always", cache=True)
    def _largest_at(keys, mask, inf):
        """The first position of the largest key ``min(bits & mask, inf)`` of a non-empty row of
        :func:`_magnitude_keys`: the largest, then the least position holding it, two integer
        passes that vectorise."""
        best = min(keys[0] & mask, inf)
        for j in range(1, keys.size):
            best = max(best, min(keys[j] & mask, inf))
        at = keys.size
        for j in range(keys.size):
            at = min(at, j if min(keys[j] & mask, inf) == best else keys.size)
        return at

    @_jit
    def _first_largest(row):
        """The first position of the largest magnitude (:func:`_magnitude`: NaN ranks as
        infinity) of a non-empty contiguous row, from its magnitudes' bits
        (:func:`_largest_at`; see ``_ABS32``). The single scan that keeps an entry only when it
        beats the best so far gives the same position. 240 rows of 68 float64 (a batch of 12
        runs of EF21 + Top-1 on phishing), one thread: 12.6 -> 6.4 us."""
        keys, mask, inf = _magnitude_keys(row)
        return _largest_at(keys, mask, inf)

    @_jit
    def _top_k_row(row, k, scratch, idx, val):
        d = row.size
        if k == 1:  # the first entry of largest magnitude
            at = _first_largest(row)
            idx[0], val[0] = at, row[at]
            return
        room = k  # less the entries above the threshold: the ties it takes
        if k <= HEAP_MAX_K and k * HEAP_RATIO <= d:  # heap_serves
            tau = _kth_largest_heap(row, k, scratch)
            for c in range(k):  # every entry above the k-th largest is in the heap
                if scratch[c] > tau:
                    room -= 1
        else:
            if d >= SAMPLE_FROM and _top_k_sampled(row, k, scratch, idx, val):
                return
            for j in range(d):
                scratch[j] = _magnitude(row[j])
            tau = _kth_largest(scratch, k)
            for j in range(d):
                if _magnitude(row[j]) > tau:
                    room -= 1
        c = 0
        for j in range(d):
            v = _magnitude(row[j])
            if v > tau or (v == tau and room > 0):
                if v == tau:
                    room -= 1
                idx[c], val[c] = j, row[j]
                c += 1

    @_jit
    def _top_k_serial(x, k, idx, val):
        """:func:`_top_k` on this thread: the same rows, one after the other."""
        scratch = np.empty(x.shape[1], x.dtype)
        for i in range(x.shape[0]):
            _top_k_row(x[i], k, scratch, idx[i], val[i])

    @_jit
    def _top_k_rows(x, k, idx, val, rows):
        """:func:`_top_k_serial`, each row's kept values then written into ``rows``."""
        scratch = np.empty(x.shape[1], x.dtype)
        for i in range(x.shape[0]):
            _top_k_row(x[i], k, scratch, idx[i], val[i])
            r = rows[i]
            for j in range(r.size):
                r[j] = 0.0
            for c in range(k):
                r[idx[i, c]] = val[i, c]

    @numba.njit(cache=True, nogil=True, parallel=True)
    def _top_k(x, k, idx, val):
        m, d = x.shape
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            scratch = np.empty(d, x.dtype)
            for i in range(c * m // chunks, (c + 1) * m // chunks):
                _top_k_row(x[i], k, scratch, idx[i], val[i])

    @numba.njit(inline="always", cache=True)
    def _shift_back(x, h, r):
        """A shifted row's squared error ``||x - r||^2`` (``x`` the difference, ``r`` the
        decoded row; each entry's error in ``x``'s dtype, squared and summed in float64), then
        ``x = r + h``, the new shift."""
        d = x.size
        s0 = s1 = s2 = s3 = 0.0  # four running sums: the adds need not wait on each other
        j = 0
        while j + 4 <= d:
            e0, e1 = np.float64(x[j] - r[j]), np.float64(x[j + 1] - r[j + 1])
            e2, e3 = np.float64(x[j + 2] - r[j + 2]), np.float64(x[j + 3] - r[j + 3])
            s0 += e0 * e0
            s1 += e1 * e1
            s2 += e2 * e2
            s3 += e3 * e3
            j += 4
        while j < d:
            e0 = np.float64(x[j] - r[j])
            s0 += e0 * e0
            j += 1
        for j in range(d):
            x[j] = r[j] + h[j]
        return (s0 + s1) + (s2 + s3)

    @_jit
    def _top_k_shifted_row(x, h, k, scratch, idx, val, r):
        """One row of :func:`top_k_shifted`; returns its squared error."""
        d = x.size
        for j in range(d):
            x[j] = x[j] - h[j]
        _top_k_row(x, k, scratch, idx, val)
        for j in range(d):
            r[j] = 0.0
        for c in range(k):
            r[idx[c]] = val[c]
        return _shift_back(x, h, r)

    @_jit
    def _top_k_shifted_serial(x, h, k, idx, val, rows, sq):
        """:func:`_top_k_shifted` on this thread."""
        if k == 1:
            _top_1_shifted(x, h, idx, val, rows, sq)
            return
        scratch = np.empty(x.shape[1], x.dtype)
        for i in range(x.shape[0]):
            sq[i] = _top_k_shifted_row(x[i], h[i], k, scratch, idx[i], val[i], rows[i])

    @_jit
    def _top_1_shifted(x, h, idx, val, rows, sq):
        """:func:`_top_k_shifted_row` for ``k = 1``, row after row, its parts inlined: a call
        with a row's views costs more than the row's work on short rows, where EF21 + Top-1
        spends its time (240 rows of 68 float64, a batch of 12 runs on phishing, one thread:
        38 -> 24 us; 240 of 300, w8a's: 106 -> 65). The same operations in the same order."""
        keys, mask, inf = _magnitude_keys(x)
        for i in range(x.shape[0]):
            xr, hr, rr = x[i], h[i], rows[i]
            for j in range(xr.size):
                xr[j] = xr[j] - hr[j]
            at = _largest_at(keys[i], mask, inf)
            v = xr[at]
            idx[i, 0], val[i, 0] = at, v
            for j in range(rr.size):
                rr[j] = 0.0
            rr[at] = v
            sq[i] = _shift_back(xr, hr, rr)

    @numba.njit(cache=True, nogil=True, parallel=True)
    def _top_k_shifted(x, h, k, idx, val, rows, sq):
        m, d = x.shape
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            scratch = np.empty(d, x.dtype)
            for i in range(c * m // chunks, (c + 1) * m // chunks):
                sq[i] = _top_k_shifted_row(x[i], h[i], k, scratch, idx[i], val[i], rows[i])
