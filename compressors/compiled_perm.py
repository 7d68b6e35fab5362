"""Compiled CPU kernel of Perm-K's shared permutation (see :mod:`streams.compiled`).

``Streams.permutation`` is ``argsort`` of ``d`` SplitMix64 outputs: a comparison sort of an
``(m, d)`` block of keys, about ten times the cost of ``torch.randperm``. The keys are uniform,
so a bucket sort orders them in linear time, in two levels that stay in cache: one pass counts
the keys by their top 8 bits, a second regenerates them and appends each to its part (256
sequential streams); then each part (in parallel for a single row) is counting-sorted on its
next bits into about one key per bucket, and an insertion sort orders the few keys inside each
bucket. The result is the same permutation (the keys are distinct with probability above
``1 - d^2 / 2^64``; equal keys keep their index order).
"""

# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import _GOLDEN, launch, numba

__all__ = ["ENABLED", "permutation"]

ENABLED = numba is not None
_SIGN = np.uint64(1 << 63)  # flipping the top bit orders uint64 as the signed int64 keys


def usable(keys: torch.Tensor) -> bool:
    """Whether :func:`permutation` serves the streams with these keys."""
    return ENABLED and keys.device.type == "cpu"


def permutation(keys: torch.Tensor, d: int) -> torch.Tensor:
    """int64 ``(m, d)``: row ``j`` is ``argsort`` of the first ``d`` SplitMix64 outputs of
    ``keys[j]`` (as signed int64), the permutation ``Streams.permutation`` draws."""
    m = keys.numel()
    out = torch.empty(m, d, dtype=torch.int64)
    if d == 0 or m == 0:
        return out
    top = _TOP if d >= _TWO_LEVEL else 0  # bits of the first level (0: one part)
    kernel = _one_row if m == 1 else _rows
    launch(kernel, keys.numpy().view(np.uint64), top, out.numpy())
    return out


_TOP = 8
_TWO_LEVEL = 1 << 12


if numba is not None:
    from streams.compiled import _mix

    _jit = numba.njit(cache=True, nogil=True)
    _pjit = numba.njit(cache=True, nogil=True, parallel=True)

    @_jit
    def _log2(n):
        """``floor(log2(n))`` for ``n >= 1``."""
        b = 0
        while n > 1:
            n >>= 1
            b += 1
        return b

    @_jit
    def _split(key, top, ks, out, start):
        """Keys of one row into ``ks`` (with their positions in ``out``), grouped by their top
        ``top`` bits; ``start[b]`` is where group ``b`` begins (``start[-1] = d``)."""
        d = out.size
        start[:] = 0
        z = key
        if top == 0:
            for c in range(d):
                z += _GOLDEN
                ks[c] = _mix(z) ^ _SIGN
                out[c] = c
            start[1] = d
            return
        shift = np.uint64(64 - top)
        for _ in range(d):
            z += _GOLDEN
            start[np.int64((_mix(z) ^ _SIGN) >> shift) + 1] += 1
        for b in range(1, start.size):
            start[b] += start[b - 1]
        fill = start[:-1].copy()
        z = key
        for c in range(d):
            z += _GOLDEN
            u = _mix(z) ^ _SIGN
            b = np.int64(u >> shift)
            p = fill[b]
            fill[b] = p + 1
            ks[p] = u
            out[p] = c

    @_jit
    def _sort_part(ks, out, top, count, tk, to):
        """Sort ``ks`` (with ``out`` alongside): counting sort on the bits below the top
        ``top`` into about one key per bucket, then an insertion sort."""
        n = ks.size
        if n < 2:
            return
        bits = max(1, min(_log2(n), 63 - top))
        shift = np.uint64(64 - top - bits)
        mask = np.uint64((1 << bits) - 1)
        cnt = count[: (1 << bits) + 1]
        cnt[:] = 0
        for i in range(n):
            cnt[np.int64((ks[i] >> shift) & mask) + 1] += 1
        for b in range(1, cnt.size):
            cnt[b] += cnt[b - 1]
        for i in range(n):
            b = np.int64((ks[i] >> shift) & mask)
            p = cnt[b]
            cnt[b] = p + 1
            tk[p] = ks[i]
            to[p] = out[i]
        # keys of earlier buckets are all smaller: the sort moves keys within their bucket
        for i in range(1, n):
            u, c = tk[i], to[i]
            j = i - 1
            while j >= 0 and tk[j] > u:
                tk[j + 1] = tk[j]
                to[j + 1] = to[j]
                j -= 1
            tk[j + 1] = u
            to[j + 1] = c
        ks[:] = tk[:n]
        out[:] = to[:n]

    @_jit
    def _scratch(n):
        size = max(n, 2)
        count = np.empty((1 << _log2(size)) + 1, np.int64)
        return count, np.empty(size, np.uint64), np.empty(size, np.int64)

    @_pjit
    def _one_row(keys, top, out):
        d = out.shape[1]
        ks = np.empty(d, np.uint64)
        start = np.zeros((1 << top) + 1, np.int64)
        _split(keys[0], top, ks, out[0], start)
        parts = start.size - 1
        chunks = min(parts, 8)
        for c in numba.prange(chunks):
            big = 0
            for b in range(c * parts // chunks, (c + 1) * parts // chunks):
                big = max(big, start[b + 1] - start[b])
            count, tk, to = _scratch(big)
            for b in range(c * parts // chunks, (c + 1) * parts // chunks):
                s, e = start[b], start[b + 1]
                _sort_part(ks[s:e], out[0, s:e], top, count, tk, to)

    @_pjit
    def _rows(keys, top, out):
        m, d = out.shape
        chunks = min(m, 64)
        for c in numba.prange(chunks):
            ks = np.empty(d, np.uint64)
            start = np.zeros((1 << top) + 1, np.int64)
            count, tk, to = _scratch(d)
            for j in range(c * m // chunks, (c + 1) * m // chunks):
                _split(keys[j], top, ks, out[j], start)
                for b in range(start.size - 1):
                    s, e = start[b], start[b + 1]
                    _sort_part(ks[s:e], out[j, s:e], top, count, tk, to)
