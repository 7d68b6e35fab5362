"""Compiled CPU kernels of FastSGD (see :mod:`streams.compiled`).

FastSGD's torch form takes some thirty whole-array passes (casts to float64, abs, two
logarithms, a division, the rounding, comparisons, a cumulative maximum for the key deltas,
``frexp`` for their bit lengths, a histogram, the selectors, ``where`` upon ``where``), each
writing a temporary. Here encode reads the row twice (its largest magnitude first, then the
levels, kept keys and signs), then the kept keys once more, 64 to a word, for the histogram of
the key deltas' bit lengths (the runs of dropped entries between kept ones, joined across
chunks); the key widths and the bits follow from the histogram. Float32 rows of base 2 or 4
take the levels from their bits in 32-bit lanes, and count each chunk's runs while its keys are
in cache (2.5 * 10^7 entries on a 2-core AMD EPYC: encode 17.6 -> 11.5 ms). Decode reads the
payload once.

The level ``q = round(h)``, ``h = (log M - log |x|) / log b``, must be the one torch's
logarithm gives, and torch's logarithm is not the C library's (they differ in the last bit of
about one logarithm in 5000). For ``b = 2^s`` (2 or 4) the kernel reads the level off the
exponent of ``|x|`` and a comparison of its mantissa with one number per row (where
``h + 1/2`` crosses an integer); for other bases it computes ``log |x|`` to a few units in the
last place (``2^e m``, ``m`` in ``[1/sqrt 2, sqrt 2)``, the series of
``2 atanh((m - 1) / (m + 1))``). Either way ``q`` is decided wherever ``h`` lies more than a
margin (about 1e-11, many times the two logarithms' difference) from a boundary ``k + 1/2``;
the entries closer than that (none, in practice, unless put there on purpose) are settled by
torch's own operations on them alone (torch's logarithm gives an entry the same number alone as
in a row). ``M b^-q`` in decode takes ``b^-q`` from its exponent for ``b = 2^s``, else from
the table :func:`powers` that the torch form reads too.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import torch

from compressors import compiled_dense
from streams.compiled import launch, numba

__all__ = ["ENABLED", "decode", "encode", "powers", "serves"]

ENABLED = numba is not None
CHUNK = 1 << 15  # entries per task
DTYPES = (torch.float32, torch.float64)


def serves(t: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernels serve rows of ``dtype`` held in ``t`` (a 2-D CPU tensor: the input, or
    the packet's ``keep``) with at least :data:`compressors.compiled_dense.FAST_FROM` entries;
    smaller ones take the torch form, which gives the same numbers."""
    return (
        ENABLED
        and t.device.type == "cpu"
        and dtype in DTYPES
        and t.dim() == 2
        and t.numel() >= max(1, compiled_dense.FAST_FROM)
    )


def _tasks(d: int) -> int:
    return (d + CHUNK - 1) // CHUNK


def _binary(base: float) -> int:
    """``s`` with ``base = 2^s`` (1 or 2), else 0."""
    return {2.0: 1, 4.0: 2}.get(float(base), 0)


def encode(x: torch.Tensor, base: float, levels: int, B: int, header: int, per: int):
    """``(fields, nbits)``: FastSGD's payload of ``x`` (``scale``, ``keep``, ``q``, ``signs``,
    ``widths``) and the bits of each row (``header + n per`` plus the key deltas at the chosen
    widths)."""
    x = x.detach().contiguous()
    m, d = x.shape
    tasks = _tasks(d)
    top = compiled_dense.absmax(x).to(torch.float64)
    bad = ~torch.isfinite(top)
    M = torch.where(bad, 0.0, top)  # the torch form zeroes a row with a NaN or inf
    LM = torch.log(M)
    lb = math.log(base)
    s = _binary(base)
    # base 2^s: h + 1/2 = (F - log2 |x|) / s with F = log2 M + s/2 = n0 + log2 theta
    F = torch.where(M > 0, LM / math.log(2.0) + s / 2, 0.0)
    n0 = torch.floor(F)
    theta = torch.exp2(F - n0)
    keep = torch.empty(m, d, dtype=torch.bool)
    q = torch.empty(m, d, dtype=torch.int16)
    signs = torch.empty(m, d, dtype=torch.bool)
    unsure = np.zeros((m, tasks), np.int64)
    summary = np.empty((m, tasks, 3), np.int64)
    hist = np.zeros((m, tasks, B + 1), np.int64)
    keep_bytes = keep.numpy().view(np.uint8)
    counted = bool(s) and x.dtype == torch.float32
    if counted:  # the levels from float32 bits, and the runs counted in the same pass
        args = (x.numpy(), M.numpy(), levels, s, *_thresholds(n0, theta), keep_bytes)
        launch(_levels_f32, *args, q.numpy(), signs.numpy(), unsure, summary, hist)
    else:
        consts = (M.numpy(), LM.numpy(), lb, 1.0 / lb, levels, s)
        args = (x.numpy(), *consts, n0.to(torch.int64).numpy(), theta.numpy(), keep.numpy())
        launch(_levels, *args, q.numpy(), signs.numpy(), unsure)
    if unsure.any():
        _settle(x, LM, lb, levels, keep, q, signs, torch.from_numpy(unsure.sum(axis=1) > 0))
        counted, hist[:] = False, 0
    if not counted:
        launch(_runs, keep_bytes, summary, hist)
    widths = torch.empty(m, 3, dtype=torch.int64)
    nbits = torch.empty(m, dtype=torch.int64)
    _join(summary, hist, header, per, widths.numpy(), nbits.numpy())
    scale = M.to(x.dtype)
    if bool(bad.any()):
        scale = torch.where(bad, torch.nan, scale)
    return {"scale": scale, "keep": keep, "q": q, "signs": signs, "widths": widths}, nbits


def _thresholds(n0: torch.Tensor, theta: torch.Tensor) -> tuple[np.ndarray, ...]:
    """Per row, what :func:`_levels_f32` compares a float32 entry's 23 mantissa bits ``t``
    with (``m = 1 + t 2^-23``): ``n0`` as int32; ``floor((theta - 1) 2^23)``, above which
    ``m > theta``; the ``t`` with ``|m - theta| <= _TAU``, if any (-1 if none: ``t`` is an
    integer and ``_TAU 2^23 < 1/2``); and 0 where ``|2 m - theta| <= _TAU`` is met by ``m =
    1`` (``theta`` within ``_TAU`` of 2), else -1. ``|m - 2 theta| <= _TAU`` cannot hold:
    ``m <= 2 - 2^-23`` and ``2 theta >= 2``. All exact in float64 (``theta`` in ``[1, 2]``)."""
    th = theta.numpy()
    y = (th - 1.0) * 2.0**23
    near = np.round(y)
    n1 = np.where(np.abs(near - y) <= _TAU * 2.0**23, near, -1.0)
    n2 = np.where(2.0 - th <= _TAU, 0.0, -1.0)
    return tuple(a.astype(np.int32) for a in (n0.numpy(), np.floor(y), n1, n2))


def _settle(x, LM, lb: float, levels: int, keep, q, signs, rows) -> None:
    """The entries the kernel left undecided (``q = -1``) of the ``rows``, by the torch form's
    own operations: ``round((log M - log |x|) / log b)`` with torch's logarithm (which gives
    an entry the same number alone as in the row)."""
    r = rows.nonzero()[:, 0]
    sub = q[r] == -1
    at, cols = sub.nonzero(as_tuple=True)
    at = r[at]
    v = x[at, cols]
    h = (LM[at] - torch.log(v.to(torch.float64).abs())) / lb
    level = torch.round(h)
    k = level < levels
    keep[at, cols] = k
    q[at, cols] = torch.where(k, level, 0.0).to(torch.int16)
    signs[at, cols] = (v < 0) & k


@functools.lru_cache(maxsize=64)
def powers(base: float, levels: int) -> torch.Tensor:
    """``b^-k`` for ``k < levels``, float64, each correctly rounded from the exact rational
    power of the float ``base``: the same numbers on every machine, thread count and entry's
    place (torch's ``pow`` differs in the last bit by where an entry falls in a thread's block
    for some bases, and by the machine's vector unit). For ``b = 2^s`` these are exactly
    ``2^(-s k)`` (``levels <= 256``, ``b <= 4``: no underflow)."""
    b = Fraction(float(base))
    return torch.tensor([float(b**-k) for k in range(levels)], dtype=torch.float64)


def decode(f, base: float, levels: int, dtype: torch.dtype) -> torch.Tensor:
    """``where(keep, where(signs, -mag, mag), 0)`` with ``mag = M b^-q`` in float64 (NaN rows
    where ``M`` is not finite), clamped to ``dtype``'s range and cast to it."""
    M = f["scale"].to(torch.float64).contiguous()
    keep, q = f["keep"].contiguous(), f["q"].contiguous()
    out = torch.empty(q.shape, dtype=dtype)
    big = float(torch.finfo(dtype).max)
    s = _binary(base)
    if s:  # b^-q = 2^(-s q), the table's numbers: built from its exponent
        args = (keep.numpy().view(np.uint8), f["signs"].contiguous().numpy().view(np.uint8))
        launch(_decode_binary, *args, q.numpy(), M.numpy(), s, big, out.numpy())
        return out
    args = (keep.numpy(), f["signs"].contiguous().numpy(), q.numpy(), M.numpy())
    launch(_decode, *args, powers(float(base), levels).numpy(), big, out.numpy())
    return out


if numba is not None:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    # IEEE division (no ZeroDivisionError check), which lets the loops vectorize
    _pjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _inline = numba.njit(inline="always", cache=True, error_model="numpy")

    _LN2_HI = 6.93147180369123816490e-01  # ln 2 in 32 bits: e * _LN2_HI is exact
    _LN2_LO = 1.90821492927058770002e-10
    _SQRT2 = 1.4142135623730951
    _TINY = 2.2250738585072014e-308  # the least normal float64
    _TWO54 = 2.0**54
    _ROUND = 6755399441055744.0  # 1.5 2^52: (h + _ROUND) - _ROUND rounds h half to even
    _TAU = 2.0**-35  # how near a mantissa may come to theta before torch decides
    _MANT = np.uint64(0x000FFFFFFFFFFFFF)
    _ONE = np.uint64(1023 << 52)  # the bits of 1.0
    # 0x0102040810204080: packs the low bits of 8 bytes into one byte
    _BYTES = np.uint64(sum(1 << (56 - 7 * k) for k in range(8)))

    def _unary(name, result, arg):
        """An intrinsic of one argument: a bit cast or an LLVM bit-counting function."""

        @intrinsic
        def call(typingctx, v):
            def codegen(context, builder, signature, args):
                if name == "bitcast":
                    return builder.bitcast(args[0], context.get_value_type(result))
                i64 = ir.IntType(64)
                if name == "ctpop":
                    fn = builder.module.declare_intrinsic("llvm.ctpop", [i64])
                    return builder.call(fn, [args[0]])
                i1 = ir.IntType(1)
                fnty = ir.FunctionType(i64, [i64, i1])
                fn = builder.module.declare_intrinsic(f"llvm.{name}", [i64], fnty)
                return builder.call(fn, [args[0], ir.Constant(i1, 0)])

            return result(arg), codegen

        return call

    _as_bits = _unary("bitcast", types.uint64, types.float64)
    _as_float = _unary("bitcast", types.float64, types.uint64)
    _ctz = _unary("cttz", types.uint64, types.uint64)  # 64 for 0
    _clz = _unary("ctlz", types.uint64, types.uint64)
    _popcount = _unary("ctpop", types.uint64, types.uint64)

    @_inline
    def _split(a):
        """``(e, m)`` with ``a = 2^e m``, ``m`` in ``[1, 2)``, for a finite ``a > 0``."""
        small = a < _TINY
        bits = _as_bits(a * _TWO54 if small else a)
        e = np.int64(bits >> np.uint64(52)) - (1077 if small else 1023)
        return e, _as_float((bits & _MANT) | _ONE)

    @_inline
    def _log(a):
        """``log a`` for a finite ``a > 0``, to a few units in the last place."""
        e, m = _split(a)
        big = m > _SQRT2
        m = m * 0.5 if big else m
        ef = np.float64(e + 1 if big else e)
        t = (m - 1.0) / (m + 1.0)
        t2 = t * t
        p = 1.0 / 15.0
        p = p * t2 + 1.0 / 13.0
        p = p * t2 + 1.0 / 11.0
        p = p * t2 + 1.0 / 9.0
        p = p * t2 + 1.0 / 7.0
        p = p * t2 + 1.0 / 5.0
        p = p * t2 + 1.0 / 3.0
        lnm = 2.0 * t + 2.0 * t * (t2 * p)
        return ef * _LN2_HI + (ef * _LN2_LO + lnm)

    @_inline
    def _margin(LM, La, h, inv_lb):
        """A bound, with room to spare, on how far ``h`` from the kernel's logarithm can be from
        ``h`` from torch's (each logarithm within a few units in the last place)."""
        return (abs(LM) + abs(La) + 1.0) * 2.0**-44 * inv_lb + abs(h) * 2.0**-44

    @_inline
    def _bit_length(v):
        """Binary digits of ``v >= 0`` (0 for 0)."""
        return 64 - np.int64(_clz(np.uint64(v)))

    @_pjit
    def _levels(x, M, LM, lb, inv_lb, levels, s, n0, theta, keep, q, signs, unsure):
        """Each entry's level ``q``, whether it is kept (``q < levels``, not zero) and its sign;
        an entry too near a rounding boundary for the kernel is marked ``q = -1`` (not kept)
        and counted in ``unsure[r, task]``. Base ``2^s`` (``s`` 1 or 2): the level from the
        exponent and a comparison of the mantissa with ``theta``; other bases: from
        :func:`_log`."""
        m, d = x.shape
        tasks = unsure.shape[1]
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, kr, qr, sr = x[r, c0:c1], keep[r, c0:c1], q[r, c0:c1], signs[r, c0:c1]
            Mr, LMr, nr, th = M[r], LM[r], n0[r], theta[r]
            count = 0
            if s > 0:
                for i in range(xr.size):
                    v = xr[i]
                    a = abs(np.float64(v))
                    live = (a > 0.0) & (Mr > 0.0)  # not a zero, nor in a row torch zeroes
                    e, ma = _split(a if live else 1.0)
                    level = (nr - e - np.int64(ma > th)) >> (s - 1)
                    # h + 1/2 = G / s next to an integer: G next to n0 - e (the mantissa
                    # next to theta), or to n0 - e -+ 1 (next to 2 theta or theta / 2), and
                    # that integer a multiple of s
                    odd = s - 1
                    g = nr - e
                    near = (abs(ma - th) <= _TAU) & ((g & odd) == 0)
                    near |= (abs(ma - 2.0 * th) <= _TAU) & (((g - 1) & odd) == 0)
                    near |= (abs(2.0 * ma - th) <= _TAU) & (((g + 1) & odd) == 0)
                    count += np.int64(live & near)
                    k = live & (level < levels) & (not near)
                    kr[i] = k
                    qr[i] = -1 if live & near else (level if k else 0)
                    sr[i] = k & (v < 0)
            else:
                for i in range(xr.size):
                    v = xr[i]
                    a = abs(np.float64(v))
                    live = (a > 0.0) & (Mr > 0.0)
                    La = _log(a if live else 1.0)
                    h = (LMr - La) * inv_lb
                    level = (min(h, 2.0**50) + _ROUND) - _ROUND
                    near = abs(abs(h - level) - 0.5) <= _margin(LMr, La, h, inv_lb)
                    count += np.int64(live & near)
                    k = live & (level < levels) & (not near)
                    kr[i] = k
                    qr[i] = -1 if live & near else (np.int16(level) if k else 0)
                    sr[i] = k & (v < 0)
            unsure[r, t % tasks] = count

    @_pjit
    def _runs(keep, summary, hist):
        """Per task: ``summary[r, task]`` = (kept entries, dropped ones before the first kept
        or -1 if none is kept, dropped ones after the last kept) and ``hist[r, task]``, the
        bit lengths of the key deltas between its kept entries (the runs of dropped entries
        between them): :func:`_run_chunk` of each task's entries."""
        m, d = keep.shape
        tasks = summary.shape[1]
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            _run_chunk(keep[r, c0 : min(d, c0 + CHUNK)], hist[r, t % tasks], summary[r, t % tasks])

    @_inline
    def _run_chunk(kr, ht, s):
        """The runs of one task's keep flags ``kr`` (bytes): ``s`` = (kept, leading dropped or
        -1, trailing dropped), the deltas' bit lengths added to ``ht``. Words of 64 entries:
        the starts of the runs of kept entries are the bits of ``W & ~(W << 1)``."""
        kept, first, last, carry = 0, -1, -1, np.uint64(0)
        words = kr.size // 64
        for w in range(words):
            word = np.uint64(0)
            for j in range(8):
                byte = np.uint64(0)
                for b in range(8):
                    byte |= np.uint64(kr[64 * w + 8 * j + b]) << np.uint64(8 * b)
                word |= ((byte * _BYTES) >> np.uint64(56)) << np.uint64(8 * j)
            if word == 0:
                carry = np.uint64(0)
                continue
            kept += np.int64(_popcount(word))
            starts = word & ~((word << np.uint64(1)) | carry)
            # a start two places after a kept entry of the same word follows one dropped
            # entry (a delta of 1 bit): counted at once, not one by one (most gaps where few
            # entries drop: 2.5 * 10^7 normal entries, base 2, 2.75 -> 1.32 ms a pass)
            single = starts & (word << np.uint64(2))
            ht[1] += np.int64(_popcount(single))
            starts ^= single
            while starts != 0:
                p = np.int64(_ctz(starts))
                below = word & ((np.uint64(1) << np.uint64(p)) - np.uint64(1))
                prev = 64 * w + 63 - np.int64(_clz(below)) if below != 0 else last
                if prev < 0:
                    first = 64 * w + p
                else:
                    ht[_bit_length(64 * w + p - prev - 1)] += 1
                starts &= starts - np.uint64(1)
            last = 64 * w + 63 - np.int64(_clz(word))
            carry = word >> np.uint64(63)
        for i in range(64 * words, kr.size):
            if kr[i]:
                kept += 1
                if last < 0:
                    first = i
                elif i - last > 1:
                    ht[_bit_length(i - last - 1)] += 1
                last = i
        s[0], s[1], s[2] = kept, first, kr.size - 1 - last

    @_pjit
    def _levels_f32(x, M, levels, s, n0, T, N1, N2, keep, q, signs, unsure, summary, hist):
        """:func:`_levels` of float32 rows for base ``2^s``, from each entry's bits in 32-bit
        lanes (twice the lanes of float64, no conversion): ``|x| = 2^e m`` with ``e`` the
        exponent field less 127 and ``m > theta`` where the mantissa field exceeds ``T``
        (:func:`_thresholds`, as the near tests ``N1``, ``N2``); the same levels, keeps,
        signs and undecided entries as :func:`_levels`, and besides the subnormal entries
        (exponent field 0, rarely met) left undecided, for the torch form to settle. Each
        task then counts its runs (:func:`_run_chunk`) while its flags are in cache; the
        caller counts them again after settling any entry."""
        m, d = x.shape
        tasks = unsure.shape[1]
        xb = x.view(np.uint32)
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, kr, qr, sr = xb[r, c0:c1], keep[r, c0:c1], q[r, c0:c1], signs[r, c0:c1]
            nr, Tr, n1, n2 = n0[r], T[r], N1[r], N2[r]
            row_live = M[r] > 0.0  # not a row torch zeroes
            odd = np.int32(s - 1)
            count = 0
            for i in range(xr.size):
                b = xr[i]
                mag = b & np.uint32(0x7FFFFFFF)
                live = (mag != 0) & row_live
                sub = mag < np.uint32(1 << 23)  # a subnormal (or a zero: not live)
                g = nr - (np.int32(mag >> np.uint32(23)) - np.int32(127))  # n0 - e
                t23 = np.int32(mag & np.uint32(0x7FFFFF))
                level = (g - np.int32(t23 > Tr)) >> odd
                near = (t23 == n1) & ((g & odd) == 0)
                near |= (t23 == n2) & (((g + 1) & odd) == 0)
                near |= sub
                count += np.int32(live & near)
                k = live & (level < levels) & (not near)
                kr[i] = k
                qr[i] = np.int16(-1) if live & near else (np.int16(level) if k else np.int16(0))
                sr[i] = k & ((b >> np.uint32(31)) != np.uint32(0))
            unsure[r, t % tasks] = count
            _run_chunk(kr, hist[r, t % tasks], summary[r, t % tasks])

    @_jit
    def _join(summary, hist, header, per, widths, nbits):
        """Per row: the bit lengths of all key deltas (the runs crossing the tasks' edges
        added), the widths ``w1 <= w2 <= w3 <= B`` of least total (the first in lexicographic
        order among equals) and the bits."""
        m, tasks, _ = summary.shape
        B = hist.shape[2] - 1
        for r in range(m):
            h = hist[r, 0].copy()
            for c in range(1, tasks):
                h += hist[r, c]
            carry, n = 0, 0
            for c in range(tasks):
                kept, lead, trail = summary[r, c, 0], summary[r, c, 1], summary[r, c, 2]
                n += kept
                if lead >= 0:
                    if carry + lead > 0:
                        h[_bit_length(carry + lead)] += 1
                    carry = trail
                else:
                    carry += trail
            h[0] = n - h[1:].sum()  # the deltas of 0 (adjacent keys)
            cum = np.cumsum(h)
            best, w = -1, (0, 0, 0)
            for a in range(B + 1):
                for b in range(a, B + 1):
                    for c in range(b, B + 1):
                        c1, c2, c3 = cum[a], cum[b], cum[c]
                        cost = a * c1 + b * (c2 - c1) + c * (c3 - c2) + B * (n - c3)
                        if best < 0 or cost < best:
                            best, w = cost, (a, b, c)
            widths[r, 0], widths[r, 1], widths[r, 2] = w
            nbits[r] = header + n * per + best

    @_pjit
    def _decode_binary(keep, signs, q, M, s, big, out):
        """Base ``2^s``: ``M 2^(-s q)``, its power of two built from its exponent."""
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            kr, sr, qr, orow = keep[r, c0:c1], signs[r, c0:c1], q[r, c0:c1], out[r, c0:c1]
            Mr = M[r]
            finite = abs(Mr) < np.inf
            for i in range(kr.size):
                mag = Mr * _as_float(np.uint64(1023 - s * np.int64(qr[i])) << np.uint64(52))
                y = (-mag if sr[i] != 0 else mag) if kr[i] != 0 else 0.0
                y = y if finite else np.nan
                orow[i] = big if y > big else (-big if y < -big else y)

    @_pjit
    def _decode(keep, signs, q, M, pw, big, out):
        """``pw``: the powers by level (:func:`powers`)."""
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            kr, sr, qr, orow = keep[r, c0:c1], signs[r, c0:c1], q[r, c0:c1], out[r, c0:c1]
            Mr = M[r]
            finite = abs(Mr) < np.inf
            top = pw.size - 1
            for i in range(kr.size):
                # a dropped entry's q is 0 in every packet; clamped all the same
                mag = Mr * pw[min(max(np.int64(qr[i]), 0), top)]
                y = (-mag if sr[i] else mag) if kr[i] else 0.0
                y = y if finite else np.nan
                orow[i] = big if y > big else (-big if y < -big else y)
