"""Compiled CPU kernels of sparse dithering (see :mod:`streams.compiled` for the set-up).

The torch form takes about forty whole-array passes: the rounding (abs, divisions, clamps,
floor, the uniforms, comparisons, casts) and the payload's size, which it counts per entry
(a cumulative maximum for each entry's previous non-zero, the gaps, their Rice quotients,
each level's Elias-gamma length). Here one pass per chunk of a row draws each entry's uniform
from the row's SplitMix64 stream on the fly (the same number ``Streams.uniform`` gives it, as
:mod:`compressors.compiled_quant` does), writes the level and the sign, and notes the chunk's
non-zeros: their count, the sum of their gamma lengths and their positions (up to
:data:`HELD` of them, else the chunk is scanned again). Once the Rice parameter is chosen from
the count, the gaps' quotients are summed from the noted positions. Decoding is one pass. The
arithmetic is the torch form's, operation for operation in the work dtype, and the sums are of
integers, so the payload, its size and the output are the same bits.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against compressors/compiled_perm.py 98badd22cce111ea
# built against compressors/compiled_quant.py 2b12a66ee81dbbf6
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from compressors.compiled_quant import _FORMAT, CHUNK
from streams.compiled import _GOLDEN, launch, numba

__all__ = ["ENABLED", "decode", "encode", "quotient_bits"]

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)
HELD = 512  # non-zero positions noted per chunk; a chunk with more is scanned again
SPAN = 64  # levels tested at once for a non-zero


def usable(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a non-empty 2-D CPU tensor of a work dtype)."""
    ok = ENABLED and x.device.type == "cpu" and x.dtype in DTYPES and x.dim() == 2
    return ok and x.numel() > 0


def encode(x: torch.Tensor, norm: torch.Tensor, s: float, keys: torch.Tensor, dtype=torch.int32):
    """``(levels, signs bool, count int64 (m,), gamma int64 (m,), notes)``: the levels
    ``l_j`` (the stochastic rounding of ``min(s |x_j| / norm, s)``; 0 in rows whose norm is not
    finite and positive) as ``dtype`` (int32, or uint8 where ``ceil(s) <= 255``: ``l_j <=
    ceil(s)``), the signs of the non-zeros, each row's count of non-zeros and sum of
    ``floor(log2 l_j)`` over them, and what :func:`quotient_bits` needs."""
    x = x.detach().contiguous()
    m, d = x.shape
    _, _, _, ushift, ubits = _FORMAT[x.dtype]
    kind = x.numpy().dtype.type
    tasks = -(-d // CHUNK)
    levels = torch.empty(x.shape, dtype=dtype)
    signs = torch.empty(x.shape, dtype=torch.bool)
    count = np.empty(m * tasks, dtype=np.int64)
    gamma = np.empty(m * tasks, dtype=np.int64)
    last = np.empty(m * tasks, dtype=np.int64)
    pos = np.empty((m * tasks, min(HELD, CHUNK)), dtype=np.int32)
    args = (x.numpy(), norm.detach().contiguous().numpy(), kind(s))
    args += (keys.contiguous().numpy().view(np.uint64), ushift, 2.0**-ubits)
    launch(_encode, *args, levels.numpy(), signs.numpy(), count, gamma, last, pos)
    n = torch.from_numpy(count.reshape(m, tasks).sum(axis=1))
    g = torch.from_numpy(gamma.reshape(m, tasks).sum(axis=1))
    return levels, signs, n, g, (count, last, pos)


def quotient_bits(levels: torch.Tensor, k: torch.Tensor, notes) -> torch.Tensor:
    """Per row, the sum over its non-zeros of the Rice quotient ``(gap - 1) >> k`` (the gap to
    the previous non-zero, the first counted from position -1), int64 ``(m,)``."""
    count, last, pos = notes
    m, d = levels.shape
    out = torch.empty(m, dtype=torch.int64)
    before = np.empty_like(last)
    part = np.empty_like(last)
    # the levels are read again only in chunks with more non-zeros than noted; without such a
    # chunk an empty view goes in, and the launch, sized by its arrays, takes one thread
    scan = levels.numpy() if int(count.max()) > pos.shape[1] else levels.numpy()[:, :0]
    args = (scan, d, k.contiguous().numpy(), count, last, pos, before, part)
    launch(_quotients, *args, out.numpy())
    return out


def decode(norm: torch.Tensor, levels: torch.Tensor, signs: torch.Tensor, s: float, big: float):
    """``clamp(±norm (l_j / s), -big, big)`` per entry, in ``norm``'s dtype."""
    norm = norm.contiguous()
    kind = norm.numpy().dtype.type
    out = torch.empty(levels.shape, dtype=norm.dtype)
    args = (norm.numpy(), levels.contiguous().numpy(), signs.contiguous().numpy())
    launch(_decode, *args, kind(s), kind(big), out.numpy())
    return out


if numba is not None:
    from compressors.compiled_quant import _SCALE32, _USH32
    from streams.compiled import _mix

    _pjit = numba.njit(cache=True, nogil=True, parallel=True)

    @_pjit
    def _encode(x, norm, sf, keys, ushift, uscale, levels, signs, count, gamma, last, pos):
        # float32 rows compare their 24-bit uniform in float32, where it is exact: the same
        # levels, no float64 lanes (2.5 * 10^7 entries on the 2-core AMD EPYC: 9.3 -> 8.3 ms);
        # its shift and scale are compiled_quant's constants (an immediate shift)
        narrow = x.itemsize == 4
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        held = pos.shape[1]
        ush = np.uint64(ushift)
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, lr, sr = x[j, c0:c1], levels[j, c0:c1], signs[j, c0:c1]
            nr = norm[j]
            count[t], gamma[t], last[t] = 0, 0, -1
            if not (np.isfinite(nr) and nr > 0):  # no entry sent
                lr[:] = 0
                sr[:] = False
                continue
            z0 = keys[j] + np.uint64(c0) * _GOLDEN
            if narrow:
                for i in range(xr.size):
                    U = np.uint32(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> _USH32)
                    r = min(sf * (abs(xr[i]) / nr), sf)
                    low = np.floor(r)
                    lr[i] = np.int32(low) + np.int32(np.float32(U) * _SCALE32 < r - low)
            else:
                for i in range(xr.size):
                    u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * uscale
                    r = min(sf * (abs(xr[i]) / nr), sf)
                    low = np.floor(r)
                    lr[i] = np.int32(low) + np.int32(u < np.float64(r - low))
            for i in range(xr.size):
                sr[i] = (xr[i] < 0) & (lr[i] > 0)
            c, g, at = 0, 0, -1
            for b in range(0, lr.size, SPAN):  # the chunk's non-zeros, from cache
                span = lr[b : b + SPAN]
                some = 0
                for i in range(span.size):  # a vectorised test skips the spans of zeros
                    some |= span[i]
                if some == 0:
                    continue
                for i in range(span.size):
                    if span[i] > 0:
                        if c < held:
                            pos[t, c] = b + i
                        c += 1
                        at = b + i
                        v = span[i] >> 1
                        while v > 0:  # floor(log2 l)
                            g += 1
                            v >>= 1
            count[t], gamma[t] = c, g
            last[t] = c0 + at if c else -1

    @_pjit
    def _quotients(levels, d, k, count, last, pos, before, part, out):
        m = out.size
        tasks = count.size // m
        held = pos.shape[1]
        for j in range(m):  # the last non-zero before each chunk
            p = -1
            for t in range(j * tasks, (j + 1) * tasks):
                before[t] = p
                if count[t]:
                    p = last[t]
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            kk, prev, acc = k[j], before[t], 0
            if count[t] <= held:
                for e in range(count[t]):
                    p = c0 + pos[t, e]
                    acc += (p - prev - 1) >> kk
                    prev = p
            else:
                lr = levels[j, c0 : min(d, c0 + CHUNK)]
                for i in range(lr.size):
                    if lr[i] > 0:
                        acc += (c0 + i - prev - 1) >> kk
                        prev = c0 + i
            part[t] = acc
        for j in range(m):
            acc = 0
            for t in range(j * tasks, (j + 1) * tasks):
                acc += part[t]
            out[j] = acc

    @_pjit
    def _decode(norm, levels, signs, sf, big, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            lr, sr, orow = levels[j, c0:c1], signs[j, c0:c1], out[j, c0:c1]
            nr = norm[j]
            for i in range(lr.size):
                orow[i] = lr[i]  # the level in the output's dtype first
                mag = nr * (orow[i] / sf)
                v = -mag if sr[i] else mag
                v = big if v > big else v
                orow[i] = -big if v < -big else v  # NaN stays
