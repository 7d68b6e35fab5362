"""Compiled CPU kernels of the stochastic quantizers (see :mod:`streams.compiled`).

Natural compression, random dithering (QSGD), natural dithering and TernGrad each take a
dozen whole-array torch passes (abs, division, frexp, floor, the uniforms, comparisons,
casts), each writing a temporary. These kernels read each entry once, draw its uniform from
the row's SplitMix64 stream on the fly (the same number ``Streams.uniform`` gives it) and
write the payload: the same bits as the torch form, in one pass. Rows are cut into chunks so
that a single long row runs on every thread. The dithering kernel works float32 rows in float32
and 32-bit integers (their 24-bit uniform is exact in float32); at 2.5 * 10^7 entries these
kernels are bound by their arithmetic (the draw's mixing above all), not by memory.

Natural compression works on the float's bits: for a normal ``|x| = (1 + M 2^-p) 2^E`` (``p``
mantissa bits), ``frexp`` gives ``mant = (1 + M 2^-p) / 2``, so the rule "round down if
``u < 2 - 2 mant``" reads ``U + 2 M < 2^b`` for the ``b``-bit integer ``U = u 2^b`` (24 bits
for float32, 53 for float64); the result keeps the exponent field ``E`` or takes ``E + 1``.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against compressors/compiled_perm.py 98badd22cce111ea
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import _GOLDEN, launch, numba

__all__ = [
    "ENABLED",
    "dither_decode",
    "dither_encode",
    "natural_decode",
    "natural_encode",
    "select",
]

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)
CHUNK = 1 << 15  # entries per task: a long row is shared among the threads
# float dtype -> (unsigned view, mantissa bits, exponent bias, uniform shift, uniform bits)
_FORMAT = {
    torch.float32: (np.uint32, 23, 127, 40, 24),
    torch.float64: (np.uint64, 52, 1023, 11, 53),
}
QSGD, TERNGRAD, NATURAL = 0, 1, 2  # the dithering grids the kernels know
MAX_NATURAL_LEVELS = 100  # 2^(1 - s) stays a normal float32


def usable(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a 2-D CPU tensor of a work dtype)."""
    return serves(x.device, x.dtype) and x.dim() == 2


def serves(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the kernels serve tensors of ``dtype`` on ``device``."""
    return ENABLED and device.type == "cpu" and dtype in DTYPES


def _keys(keys: torch.Tensor) -> np.ndarray:
    return keys.contiguous().numpy().view(np.uint64)


def natural_encode(x: torch.Tensor, keys: torch.Tensor, emax: int):
    """``(signs, magnitudes)`` of natural compression of ``x`` (float32 or float64), the
    uniforms drawn from ``keys`` (one per row), no magnitude above ``2^emax``."""
    x = x.detach().contiguous()
    view, mbits, bias, ushift, ubits = _FORMAT[x.dtype]
    signs = torch.empty(x.shape, dtype=torch.bool)
    mag = torch.empty_like(x)
    ebits = 11 if mbits == 52 else 8
    args = (x.numpy(), x.numpy().view(view), _keys(keys), mbits, ebits, emax + bias, ushift, ubits)
    launch(_natural, *args, signs.numpy(), mag.numpy().view(view))
    return signs, mag


def natural_decode(signs: torch.Tensor, mag: torch.Tensor) -> torch.Tensor:
    """``where(signs, -mag, mag)`` in one pass (the sign bit flipped, as negation does)."""
    mag = mag.contiguous()
    view, mbits, *_ = _FORMAT[mag.dtype]
    out = torch.empty_like(mag)
    top = mbits + (11 if mbits == 52 else 8)
    launch(_flip, signs.contiguous().numpy(), mag.numpy().view(view), top, out.numpy().view(view))
    return out


def dither_encode(x: torch.Tensor, norm: torch.Tensor, keys, grid: int, s: int, level_dtype):
    """``(signs, levels)`` of a random dithering of ``x`` against ``norm`` (per row) on the
    grid ``grid`` with ``s`` levels; rows with a non-finite norm get level 0."""
    x = x.detach().contiguous()
    _, _, _, ushift, ubits = _FORMAT[x.dtype]
    kind = x.numpy().dtype.type
    signs = torch.empty(x.shape, dtype=torch.bool)
    levels = torch.empty(x.shape, dtype=level_dtype)
    consts = (grid, s, kind(s), kind(2.0 ** (1 - s)), ushift, 2.0**-ubits)
    args = (x.numpy(), norm.detach().contiguous().numpy(), _keys(keys), *consts)
    launch(_dither, *args, signs.numpy(), levels.numpy())
    return signs, levels


def dither_decode(norm: torch.Tensor, levels: torch.Tensor, signs: torch.Tensor, grid: int, s: int):
    """``norm sign grid[level]`` per entry, in ``norm``'s dtype."""
    norm = norm.contiguous()
    kind = norm.numpy().dtype.type
    out = torch.empty(levels.shape, dtype=norm.dtype)
    args = (norm.numpy(), levels.contiguous().numpy(), signs.contiguous().numpy(), grid, s)
    launch(_dither_decode, *args, kind(s), out.numpy())
    return out


def select(signs: torch.Tensor, neg: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``where(signs, neg[:, None], pos[:, None])`` (one value per row for each sign) in one
    pass, in the dtype of ``neg`` and ``pos``."""
    out = torch.empty(signs.shape, dtype=pos.dtype)
    launch(
        _select,
        signs.contiguous().numpy(),
        neg.contiguous().numpy(),
        pos.contiguous().numpy(),
        out.numpy(),
    )
    return out


def natural_levels_ok(s: int) -> bool:
    """Whether the natural-dithering kernel serves ``s`` levels (its grid is normal floats)."""
    return s <= MAX_NATURAL_LEVELS


if numba is not None:
    from numba import types

    from compressors.compiled_fastsgd import _as_bits, _as_float, _unary
    from compressors.compiled_perm import _log2
    from streams.compiled import _mix

    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    _inline = numba.njit(inline="always", cache=True, error_model="numpy")
    _ONE = np.uint64(1)
    _MANT_BITS = np.uint64(52)  # of a float64
    _MANT = np.uint64((1 << 52) - 1)
    _ULP1 = 2.0**-52
    _as_bits32 = _unary("bitcast", types.uint32, types.float32)
    # float32's uniform (``_FORMAT``): its shift and its scale 2^-24, exact in float32
    _USH32 = np.uint64(_FORMAT[torch.float32][3])
    _SCALE32 = np.float32(2.0 ** -_FORMAT[torch.float32][4])

    @_pjit
    def _natural(x, xb, keys, mbits, ebits, top, ushift, ubits, signs, mag):
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        mb, ush = np.uint64(mbits), np.uint64(ushift)
        mmask = (_ONE << mb) - _ONE
        emask = (_ONE << np.uint64(ebits)) - _ONE
        absmask = (_ONE << (mb + np.uint64(ebits))) - _ONE
        limit, utop, scale = _ONE << np.uint64(ubits), np.uint64(top), 2.0**-ubits
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, br, sr, mr = x[j, c0:c1], xb[j, c0:c1], signs[j, c0:c1], mag[j, c0:c1]
            z0 = keys[j] + np.uint64(c0) * _GOLDEN
            special = False
            for i in range(br.size):  # normal numbers and zeros, branch-free (vectorised)
                U = _mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush
                a = np.uint64(br[i]) & absmask
                E, M = a >> mb, a & mmask
                special |= (E == emask) | ((E == 0) & (M != 0))
                E = E + np.uint64(U + (M << _ONE) >= limit)
                mr[i] = min(E, utop) << mb
                sr[i] = xr[i] < 0
            if not special:
                continue
            for i in range(br.size):  # infinities, NaN and subnormals
                a = np.uint64(br[i]) & absmask
                E, M = a >> mb, a & mmask
                if E == emask:  # inf stays, NaN stays (quiet)
                    mr[i] = a | (_ONE << (mb - _ONE)) if M != 0 else a
                elif E == 0 and M != 0:  # a subnormal 2^p <= M < 2^(p+1)
                    U = _mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush
                    p = np.uint64(_log2(M))
                    down = U * scale < 2.0 - np.float64(M) / np.float64(_ONE << p)
                    mr[i] = _ONE << p if down else _ONE << (p + _ONE)

    @_pjit
    def _flip(signs, mag, top, out):
        m, d = mag.shape
        top = np.uint64(top)
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            sr, mr, orow = signs[j, c0:c1], mag[j, c0:c1], out[j, c0:c1]
            for i in range(mr.size):
                orow[i] = mr[i] ^ (np.uint64(sr[i]) << top)

    @numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")  # no zero checks
    def _dither(x, norm, keys, grid, s, sf, thr, ushift, scale, signs, levels):
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        one, ush = sf / sf, np.uint64(ushift)
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, sr, lr = x[j, c0:c1], signs[j, c0:c1], levels[j, c0:c1]
            nr = norm[j]
            if not np.isfinite(nr):  # a NaN or inf entry: the norm carries it, levels void
                for i in range(xr.size):
                    sr[i] = xr[i] < 0
                lr[:] = 0
                continue
            den = nr if nr > 0 else one
            z0 = keys[j] + np.uint64(c0) * _GOLDEN
            if x.itemsize == 4:
                _dither_narrow(xr, den, one, z0, grid, s, sf, thr, sr, lr)
            else:
                _dither_wide(xr, den, one, z0, grid, s, sf, thr, ush, scale, sr, lr)

    @_inline
    def _dither_wide(xr, den, one, z0, grid, s, sf, thr, ush, scale, sr, lr):
        """One chunk of :func:`_dither` in float64 (float64 rows, 53-bit uniforms)."""
        if grid == 0:  # QSGD: floor(r s) or one more
            for i in range(xr.size):
                u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * scale
                y = min(abs(xr[i]) / den, one) * sf
                low = np.floor(y)
                lr[i] = np.int64(low) + np.int64(u < np.float64(y - low))
                sr[i] = xr[i] < 0
        elif grid == 1:  # TernGrad: Bernoulli(r)
            for i in range(xr.size):
                u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * scale
                lr[i] = np.int64(u < np.float64(min(abs(xr[i]) / den, one)))
                sr[i] = xr[i] < 0
        else:
            ithr = 1.0 / np.float64(thr)  # a power of two: r / thr = r ithr exactly
            for i in range(xr.size):  # branch-free, on the bits of r (vectorised)
                u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * scale
                r = min(abs(xr[i]) / den, one)
                rb = np.float64(r)
                # natural: 2^e <= r < 2^(e+1) (r is normal here), level e + s or one more
                # with probability (r - 2^e) / 2^e, the mantissa's fraction, exactly
                bits = _as_bits(rb)
                e = np.int64(bits >> _MANT_BITS) - 1023
                frac = np.float64(bits & _MANT) * _ULP1
                hi = e + s + np.int64(u < frac)  # at most s: see _dither_narrow
                # below the smallest non-zero level 2^(1-s): 0 or that level (s >= 1)
                lo = np.int64(u < rb * ithr)
                lr[i] = hi if r >= thr else lo
                sr[i] = xr[i] < 0

    @_inline
    def _dither_narrow(xr, den, one, z0, grid, s, sf, thr, sr, lr):
        """One chunk of :func:`_dither` for float32 rows, in float32 and 32-bit integers: the
        same levels as :func:`_dither_wide` would give. The uniform ``u = U 2^-24`` (``U`` its
        24 bits) is exact in float32, so each comparison of ``u`` with a float32 difference is
        the float64 one; natural dithering compares ``u`` with the mantissa's fraction
        ``t 2^-23`` as the integers ``U < 2 t`` and scales ``r`` by ``1 / thr``, a power of
        two, exactly. One conversion of ``U`` and no float64 lanes: one row of 2.5 * 10^7
        entries on the 2-core AMD EPYC, side by side with the float64 form, QSGD's grid 7.7
        -> 5.8 ms, TernGrad's 5.9 -> 5.3, natural dithering's 10.2 -> 7.2 (its clamps
        dropped, which it never needed). (Compiled for float64 rows too, never run there.)"""
        ush, scale32 = _USH32, _SCALE32  # constants: an immediate shift (a variable one
        # measured 0.5 ms slower at 2.5 * 10^7 entries)
        ithr = one / thr  # a power of two: r / thr = r ithr exactly
        s32 = np.int32(s)
        if grid == 0:  # QSGD: floor(r s) or one more
            for i in range(xr.size):
                U = np.uint32(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush)
                y = min(abs(xr[i]) / den, one) * sf
                low = np.floor(y)
                lr[i] = np.int32(low) + np.int32(np.float32(U) * scale32 < y - low)
                sr[i] = xr[i] < 0
        elif grid == 1:  # TernGrad: Bernoulli(r)
            for i in range(xr.size):
                U = np.uint32(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush)
                lr[i] = np.int32(np.float32(U) * scale32 < min(abs(xr[i]) / den, one))
                sr[i] = xr[i] < 0
        else:
            for i in range(xr.size):  # branch-free, on the bits of r (vectorised)
                U = np.uint32(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush)
                r = min(abs(xr[i]) / den, one)
                # natural: 2^e <= r < 2^(e+1) (r >= thr is a normal float32), level e + s
                # or one more when u < t 2^-23, the mantissa's fraction
                rb = _as_bits32(np.float32(r))
                e = np.int32(rb >> np.uint32(23)) - np.int32(127)
                up = np.int32(U < ((rb & np.uint32(0x7FFFFF)) << np.uint32(1)))
                # at most s, with no clamp: r <= 1, so e <= 0, and r = 1 (e = 0) has
                # fraction 0 and never rounds up (a clamp took 10.3 -> 7.2 ms here)
                hi = e + s32 + up
                # below the smallest non-zero level 2^(1-s): 0 or that level (s >= 1)
                lo = np.int32(np.float32(U) * scale32 < r * ithr)
                lr[i] = hi if r >= thr else lo
                sr[i] = xr[i] < 0

    @_pjit
    def _dither_decode(norm, levels, signs, grid, s, sf, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            lr, sr, orow = levels[j, c0:c1], signs[j, c0:c1], out[j, c0:c1]
            nr = norm[j]
            # the output entry converts the grid value to the output's dtype first (stored,
            # then read back: the conversion the output's dtype makes)
            if grid == 2:  # 2^(level - s), built from its exponent (level - s >= -100)
                for i in range(lr.size):
                    level = np.int64(lr[i])
                    v = _as_float(np.uint64(1023 + level - s) << _MANT_BITS)
                    orow[i] = v if level > 0 else 0.0
                    mag = nr * orow[i]
                    orow[i] = -mag if sr[i] else mag
            elif grid == 0:
                for i in range(lr.size):
                    orow[i] = lr[i]
                    mag = nr * (orow[i] / sf)
                    orow[i] = -mag if sr[i] else mag
            else:
                for i in range(lr.size):
                    orow[i] = lr[i]
                    mag = nr * orow[i]
                    orow[i] = -mag if sr[i] else mag

    @_pjit
    def _select(signs, neg, pos, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            sr, orow = signs[j, c0:c1], out[j, c0:c1]
            lo, hi = neg[j], pos[j]
            for i in range(sr.size):
                orow[i] = lo if sr[i] else hi
