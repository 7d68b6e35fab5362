"""Compiled CPU kernels of the compressors (see :mod:`streams.compiled` for the set-up).

Top-K's selection with its tie rule (ties at the threshold go to the lower index) takes about a
dozen whole-array torch passes (abs, topk, min, two comparisons, a cumulative sum, nonzero,
gather); the kernel does it row by row in cache: a quickselect for the threshold, then one
ascending scan. The result is the same set in the same (ascending) order.
"""

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import launch, numba

__all__ = ["ENABLED", "top_k"]

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)


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


if numba is not None:
    _jit = numba.njit(cache=True, nogil=True)

    @_jit
    def _kth_largest(a, k):
        """The ``k``-th largest entry of ``a`` (which is reordered): quickselect."""
        lo, hi, target = 0, a.size - 1, a.size - k
        while lo < hi:
            mid = (lo + hi) // 2  # median of three as the pivot
            if a[mid] < a[lo]:
                a[mid], a[lo] = a[lo], a[mid]
            if a[hi] < a[lo]:
                a[hi], a[lo] = a[lo], a[hi]
            if a[hi] < a[mid]:
                a[hi], a[mid] = a[mid], a[hi]
            pivot = a[mid]
            i, j = lo, hi
            while i <= j:
                while a[i] < pivot:
                    i += 1
                while a[j] > pivot:
                    j -= 1
                if i <= j:
                    a[i], a[j] = a[j], a[i]
                    i += 1
                    j -= 1
            if target <= j:
                hi = j
            elif target >= i:
                lo = i
            else:
                break
        return a[target]

    @_jit
    def _magnitude(v):
        """``|v|``, with NaN ranked above everything (as ``torch.topk`` ranks it)."""
        a = abs(v)
        return np.inf if a != a else a

    @_jit
    def _top_k_row(row, k, scratch, idx, val):
        d = row.size
        if k == 1:  # the first entry of largest magnitude
            best, at = _magnitude(row[0]), 0
            for j in range(1, d):
                if _magnitude(row[j]) > best:
                    best, at = _magnitude(row[j]), j
            idx[0], val[0] = at, row[at]
            return
        for j in range(d):
            scratch[j] = _magnitude(row[j])
        tau = _kth_largest(scratch, k)
        room = k
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

    @numba.njit(cache=True, nogil=True, parallel=True)
    def _top_k(x, k, idx, val):
        m, d = x.shape
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            scratch = np.empty(d, x.dtype)
            for i in range(c * m // chunks, (c + 1) * m // chunks):
                _top_k_row(x[i], k, scratch, idx[i], val[i])
