"""Compiled CPU kernels of the count sketch (see :mod:`streams.compiled`).

The torch form draws its hashes as ``(m, rows, d)`` blocks (the uniforms, then int64 buckets
and signs in torch's default dtype), scales the row into a third such block and scatters it;
decode draws the hashes again, gathers a fourth block and sums it. The kernels draw each hash
where it is used, from the row's SplitMix64 stream (element ``j d + i`` of hash row ``j``, the
number ``Streams.uniform`` gives it), a block at a time, and add into the table or read from
it: no ``(m, rows, d)`` block.

Encode adds the entries of one table row in ascending order of the coordinate, as
``scatter_add_`` does, so each bucket's float64 sum is the same (a NaN sum keeps the NaN it
had, as ``+=`` does). Decode sums a coordinate's ``rows`` estimates left to right from 0, as
``sum(dim=1)`` does for up to :data:`SUM_ROWS` rows; for more, torch's reduction orders the
terms by the column's place in its vector blocks, so the kernel writes the estimates and
leaves the sum to torch. The bucket tables are read and written at random: the kernels cost
about what a scatter-add and a gather of ``rows d`` entries into them cost.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from compressors import compiled_dense
from streams.compiled import _GOLDEN, launch, numba

__all__ = ["ENABLED", "SUM_ROWS", "decode", "encode", "estimates", "serves"]

ENABLED = numba is not None
SUM_ROWS = 3  # up to this many rows the kernel sums the estimates itself
BLOCK = 1024  # hashes drawn at a time (into buffers in cache)
CHUNK = 1 << 15  # coordinates per decode task
_TWO_M53 = 2.0**-53


def serves(t: torch.Tensor, entries: int) -> bool:
    """Whether the kernels serve rows of ``entries`` entries in all held in ``t`` (a 2-D CPU
    tensor of float32 or float64: the input or the tables); from
    :data:`compressors.compiled_dense.FAST_FROM` entries on, smaller inputs take the torch form,
    which gives the same numbers."""
    return (
        ENABLED
        and t.device.type == "cpu"
        and t.dtype in (torch.float32, torch.float64)
        and t.dim() == 2
        and entries >= max(1, compiled_dense.FAST_FROM)
    )


def _keys(keys: torch.Tensor) -> np.ndarray:
    return keys.contiguous().numpy().view(np.uint64)


def encode(x, bucket_keys, sign_keys, rows: int, c: int, shift: float) -> torch.Tensor:
    """The tables ``(m, rows c)`` in ``x``'s dtype: ``sum_i s x_i shift`` per bucket in float64,
    divided by ``shift``, cast and saturated at the dtype's max where a finite sum overflowed."""
    x = x.detach().contiguous()
    m = x.shape[0]
    table = torch.empty(m, rows, c, dtype=torch.float64)
    args = (x.numpy(), _keys(bucket_keys), _keys(sign_keys), c, float(shift))
    launch(_scatter, *args, table.numpy())
    values = torch.empty(m, rows * c, dtype=x.dtype)
    big = float(torch.finfo(x.dtype).max)
    launch(_cast, table.numpy().reshape(m, rows * c), float(shift), big, values.numpy())
    return values


def decode(values, bucket_keys, sign_keys, rows: int, d: int, work: torch.dtype) -> torch.Tensor:
    """``sum_j (s_j table_j[h_j] / rows)`` per coordinate (``rows <= SUM_ROWS``) in ``work``
    (the dtype of the tables times the signs), cast to ``values``' dtype and saturated where it
    overflowed from finite estimates."""
    m = values.shape[0]
    table = values.to(work).contiguous().reshape(m, rows, -1).numpy()
    kind = table.dtype.type
    out = torch.empty(m, d, dtype=values.dtype)
    big = kind(torch.finfo(values.dtype).max)
    args = (table, _keys(bucket_keys), _keys(sign_keys), kind(rows), big)
    launch(_gather_sum, *args, out.numpy())
    return out


def estimates(values, bucket_keys, sign_keys, rows: int, d: int, work: torch.dtype):
    """The estimates ``s_j table_j[h_j]``, ``(m, rows, d)``, in ``work``."""
    m = values.shape[0]
    est = torch.empty(m, rows, d, dtype=work)
    table = values.to(work).contiguous().reshape(m, rows, -1).numpy()
    launch(_gather, table, _keys(bucket_keys), _keys(sign_keys), est.numpy())
    return est


if numba is not None:
    from streams.compiled import _mix

    # IEEE division (no ZeroDivisionError check), which lets the loops vectorize
    _pjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _inline = numba.njit(inline="always", cache=True, error_model="numpy")

    @_inline
    def _hashes(kb, ks, start, c, bk, sg):
        """Buckets ``min(floor(u c), c - 1)`` and signs ``-1 if u' < 1/2 else 1`` (in ``sg``'s
        dtype) of the ``bk.size`` elements from ``start`` of the bucket and sign streams, ``u``
        and ``u'`` their uniforms (53 bits)."""
        zb = kb + np.uint64(start) * _GOLDEN
        zs = ks + np.uint64(start) * _GOLDEN
        cf = np.float64(c)
        for i in range(bk.size):
            step = np.uint64(i + 1) * _GOLDEN
            ub = np.float64(_mix(zb + step) >> np.uint64(11)) * _TWO_M53
            bk[i] = min(np.int64(ub * cf), c - 1)  # u c >= 0: truncation is floor
            # u' < 1/2: its 53 bits below 2^52, the top bit of the word clear
            sg[i] = 1 if _mix(zs + step) >> np.uint64(63) else -1

    @_inline
    def _add(a, v):
        """``a + v`` where a NaN ``a`` (the running sum) is the one kept, as in torch's sums
        (``a += v``), whichever operand order the compiler picks."""
        s = a + v
        return a if s != s and a != a else s

    @_inline
    def _saturate(out, i, source, big):
        """``out[i]`` (cast from a float64 computed from ``source``) clamped to ``+-big`` where it
        overflowed from a finite ``source``; NaN stays, as under ``clamp``."""
        v = out[i]
        if not np.isfinite(v) and np.isfinite(source):
            if v > 0:
                out[i] = big
            elif v < 0:
                out[i] = -big

    @_pjit
    def _scatter(x, kb, ks, c, shift, table):
        m, d = x.shape
        rows = table.shape[1]
        for t in numba.prange(m * rows):
            r, j = t // rows, t % rows
            tab = table[r, j]
            tab[:] = 0.0
            bk = np.empty(BLOCK, np.int64)
            sg = np.empty(BLOCK, np.float64)
            for o in range(0, d, BLOCK):
                n = min(BLOCK, d - o)
                _hashes(kb[r], ks[r], j * d + o, c, bk[:n], sg[:n])
                xr = x[r, o : o + n]
                for i in range(n):
                    b = bk[i]
                    tab[b] = _add(tab[b], (np.float64(xr[i]) * sg[i]) * shift)

    @_pjit
    def _cast(table, shift, big, out):
        """``table / shift`` cast to ``out``'s dtype; an overflow of a finite sum saturates."""
        m, n = table.shape
        for r in numba.prange(m):
            tr, orow = table[r], out[r]
            for i in range(n):
                orow[i] = tr[i] / shift
                _saturate(orow, i, tr[i], big)

    @_pjit
    def _gather_sum(table, kb, ks, rows_f, big, out):
        m, rows, _ = table.shape
        d = out.shape[1]
        c = table.shape[2]
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            bk = np.empty(BLOCK, np.int64)
            sg = np.empty(BLOCK, table.dtype)
            acc = np.empty(BLOCK, table.dtype)
            first = np.empty(BLOCK, table.dtype)
            for o in range(c0, c1, BLOCK):
                n = min(BLOCK, c1 - o)
                acc[:n] = 0
                for j in range(rows):
                    _hashes(kb[r], ks[r], j * d + o, c, bk[:n], sg[:n])
                    tab = table[r, j]
                    for i in range(n):
                        e = tab[bk[i]] * sg[i]
                        if j == 0:
                            first[i] = e
                        acc[i] = _add(acc[i], e / rows_f)
                orow = out[r, o : o + n]
                for i in range(n):
                    orow[i] = acc[i]
                    _saturate(orow, i, first[i], big)

    @_pjit
    def _gather(table, kb, ks, est):
        m, rows, d = est.shape
        c = table.shape[2]
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * rows * tasks):
            r, j, c0 = t // (rows * tasks), (t // tasks) % rows, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            bk = np.empty(BLOCK, np.int64)
            sg = np.empty(BLOCK, table.dtype)
            tab = table[r, j]
            for o in range(c0, c1, BLOCK):
                n = min(BLOCK, c1 - o)
                _hashes(kb[r], ks[r], j * d + o, c, bk[:n], sg[:n])
                er = est[r, j, o : o + n]
                for i in range(n):
                    er[i] = tab[bk[i]] * sg[i]
