"""Compiled CPU kernels of the Walsh-Hadamard transform and of FO-SGD's compressor (see
:mod:`streams.compiled`).

The transform runs in place. The first ``bl`` butterfly stages of each block of ``2^bl`` entries
run while the block is in cache: those within :data:`LANE_BYTES` of adjacent entries (``h = 1 ..
64`` in float32, ``1 .. 32`` in float64) in vector registers, eight 64-byte vectors at a time,
each stage within a vector a swap of its lanes, an add, a subtract and a select
(:func:`_lane_stages`), then the others three at a time. Written as loops, those first stages
did not vectorise and took two thirds of a block's time (a float32 block of ``2^13``: 11.4-12.1
us, 3.4-3.7 in registers; float64 12.7-13.9 and 6.6-7.6, on a 2-core AMD EPYC). The remaining
stages go in rounds of up to ``rnd``: a tile of ``tile`` adjacent columns of the round's
``2^rnd`` strided segments goes through all the round's stages while it is in cache, three
stages at a time (eight entries at strides ``h, 2h, 4h`` held in registers). A length ``2^L``
costs ``1 + ceil((L - bl) / rnd)`` passes over memory instead of ``L``. Which ``(bl, rnd,
tile)`` is fastest depends on the CPU's caches: for long rows it is timed once per length, dtype
and thread count (:func:`plan`). Every butterfly is one of the stage-by-stage form (``a + b``,
``a - b`` of the same two values, each having been through the same earlier stages); only the
order in which the butterflies of different entries run changes, so the result is the same, bit
for bit.

FO-SGD's encode fills the padded, sign-flipped row block by block (the signs drawn on the fly
from the row's SplitMix64 stream, as ``Streams.bits64`` draws them) and runs the in-cache
stages on it at once; the quantization pass draws the dither the same way. Decode builds
``+-1`` from the bits, transforms, and writes ``D H q / sqrt(n)``, scaled and clamped.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import time

import numpy as np
import torch

from compressors import compiled_dense
from streams.compiled import _GOLDEN, launch, numba

__all__ = ["ENABLED", "fwht_", "fosgd_decode", "fosgd_encode", "serves"]

ENABLED = numba is not None
CHUNK = 1 << 15  # entries per task of the elementwise passes
#: ``(block_log, round, tile)``: the stages done per block of ``2^block_log`` entries while it is
#: in cache, the stages per pass over memory after them, and the adjacent columns per task of
#: such a pass (``2^round x tile`` entries in L2). The first serves rows shorter than
#: :data:`MEASURE_FROM`; longer rows take the fastest, timed on this machine (:func:`plan`).
PLANS = ((13, 7, 512), (13, 6, 1024), (14, 6, 1024), (12, 7, 512), (11, 7, 256), (18, 7, 512))
MEASURE_FROM = 1 << 20
#: Bytes of adjacent entries whose stages run in registers (:func:`_lane_stages`): eight
#: 64-byte vectors.
LANE_BYTES = 512
_CHOSEN: dict[tuple, tuple[int, int, int]] = {}
_UNIFORM = {torch.float32: (40, 2.0**-24), torch.float64: (11, 2.0**-53)}


def serves(t: torch.Tensor) -> bool:
    """Whether the kernels serve ``t`` (a CPU tensor of float32 or float64 with at least
    :data:`compressors.compiled_dense.FAST_FROM` entries; smaller ones take the torch form,
    which gives the same numbers)."""
    return (
        ENABLED
        and t.device.type == "cpu"
        and t.dtype in _UNIFORM
        and t.numel() >= max(1, compiled_dense.FAST_FROM)
    )


def _log2(n: int) -> int:
    return (n - 1).bit_length()


def plan(n: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """``(bl, rnd, tile)`` for rows of ``n`` entries (``bl`` at most ``log2 n``): the first of
    :data:`PLANS` below :data:`MEASURE_FROM` entries, else the fastest of them, timed once per
    length, dtype and thread count in this process. The transform's numbers are the same under
    every plan (each butterfly is the stage-by-stage one)."""
    if n < MEASURE_FROM:
        bl, rnd, tile = PLANS[0]
        return min(bl, _log2(n)), rnd, tile
    key = (n, dtype, torch.get_num_threads())
    if key not in _CHOSEN:
        buf = torch.zeros(1, n, dtype=dtype)
        plans = [(min(bl, _log2(n)), rnd, tile) for bl, rnd, tile in PLANS]
        best = dict.fromkeys(plans, float("inf"))
        for _ in range(3):  # in turn, round by round (the first call may load the kernels)
            for p in plans:
                t0 = time.perf_counter()
                transform_(buf, p)
                best[p] = min(best[p], time.perf_counter() - t0)
        _CHOSEN[key] = min(plans, key=best.__getitem__)
    return _CHOSEN[key]


def transform_(buf: torch.Tensor, p: tuple[int, int, int]) -> torch.Tensor:
    """:func:`fwht_` under the plan ``p``."""
    launch(_fwht_blocks, buf.numpy(), p[0])
    launch(_outer, buf.numpy(), *p)
    return buf


def fwht_(buf: torch.Tensor) -> torch.Tensor:
    """``buf`` (contiguous ``(m, n)``, ``n`` a power of two) replaced by its unnormalized
    Walsh-Hadamard transform, row by row."""
    if buf.numel():
        transform_(buf, plan(buf.shape[1], buf.dtype))
    return buf


def fosgd_encode(x, den, sign_keys, dither_keys, n: int, root: float):
    """FO-SGD's payload from rows ``x`` (``(m, d)``, float32 or float64) and their divisors
    ``den`` (``(m,)``): ``signs`` (``(m, n)``, ``+-1``), ``lam = ||H D (x / den) / root||_inf``
    (``(m,)``) and ``bits = u < (1 + y / lam) / 2`` with ``y = H D (x / den) / root``."""
    x = x.detach().contiguous()
    kind = x.numpy().dtype.type
    m = x.shape[0]
    signs = torch.empty(m, n, dtype=x.dtype)
    buf = torch.empty(m, n, dtype=x.dtype)
    p = plan(n, x.dtype)
    ks = sign_keys.contiguous().numpy().view(np.uint64)
    args = (x.numpy(), den.contiguous().numpy(), ks, kind(1.0))
    launch(_fill, *args, signs.numpy(), buf.numpy(), p[0])
    launch(_outer, buf.numpy(), *p)
    lam = compiled_dense.absmax(buf) / root  # max_j |y_j| / root: division is monotone
    den2 = torch.where(lam > 0, lam, 1.0)
    bits = torch.empty(m, n, dtype=torch.bool)
    shift, scale = _UNIFORM[x.dtype]
    kd = dither_keys.contiguous().numpy().view(np.uint64)
    args = (buf.numpy(), kind(root), den2.numpy(), kd, kind(0.5), kind(1.0), np.uint64(shift))
    launch(_quantize, *args, scale, bits.numpy())
    return signs, lam, bits


def fosgd_decode(bits, signs, scale, d: int, root: float, big: float) -> torch.Tensor:
    """``clamp(scale (D H (2 bits - 1) / root)[:d], -big, big)``, in the dtype of ``signs``."""
    signs = signs.contiguous()
    kind = signs.numpy().dtype.type
    m, n = signs.shape
    buf = torch.empty(m, n, dtype=signs.dtype)
    p = plan(n, signs.dtype)
    launch(_unpack, bits.contiguous().numpy(), kind(1.0), buf.numpy(), p[0])
    launch(_outer, buf.numpy(), *p)
    out = torch.empty(m, d, dtype=signs.dtype)
    args = (buf.numpy(), signs.numpy(), kind(root), scale.contiguous().numpy(), kind(big))
    launch(_finish, *args, out.numpy())
    return out


if numba is not None:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    from streams.compiled import _mix

    _VECTORS = LANE_BYTES // 64  # vectors of 64 bytes per call of _lane_stages
    # the stages done by one call: log2 of the entries in LANE_BYTES (7 in float32, 6 in float64)
    _LOW32, _LOW64 = (LANE_BYTES // 4).bit_length() - 1, (LANE_BYTES // 8).bit_length() - 1

    @intrinsic
    def _lane_stages(typingctx, b, o):
        """The stages ``h = 1, 2, .., LANE_BYTES / itemsize / 2`` on the
        ``LANE_BYTES / itemsize`` entries of the contiguous row ``b`` from ``o``, in registers:
        :data:`_VECTORS` vectors of 64 bytes. A stage within a vector pairs each lane ``i``
        with lane ``i ^ h`` (a shuffle ``t``): the lanes with bit ``h`` clear take ``v + t``
        (``a + b``), the others ``t - v`` (``a - b``), as stage by stage; a stage across
        vectors adds and subtracts two of them."""
        if not (isinstance(b, types.Array) and b.ndim == 1 and b.layout == "C"):
            return None
        if b.dtype not in (types.float32, types.float64):
            return None
        width = 64 // (b.dtype.bitwidth // 8)  # lanes of a 64-byte vector

        def codegen(context, builder, signature, args):
            row = context.make_array(signature.args[0])(context, builder, args[0])
            vty = ir.VectorType(context.get_value_type(b.dtype), width)
            align = b.dtype.bitwidth // 8
            ptrs = []
            for q in range(_VECTORS):
                at = builder.add(args[1], ir.Constant(args[1].type, q * width))
                ptrs.append(builder.bitcast(builder.gep(row.data, [at]), vty.as_pointer()))
            vs = [builder.load(p, align=align) for p in ptrs]
            lanes, bools = ir.VectorType(ir.IntType(32), width), ir.VectorType(ir.IntType(1), width)
            h = 1
            while h < width:
                swap = ir.Constant(lanes, [i ^ h for i in range(width)])
                upper = ir.Constant(bools, [bool(i & h) for i in range(width)])
                for q, v in enumerate(vs):
                    t = builder.shuffle_vector(v, v, swap)
                    vs[q] = builder.select(upper, builder.fsub(t, v), builder.fadd(v, t))
                h *= 2
            g = 1
            while g < _VECTORS:
                for q in range(_VECTORS):
                    if not q & g:
                        a, c = vs[q], vs[q + g]
                        vs[q], vs[q + g] = builder.fadd(a, c), builder.fsub(a, c)
                g *= 2
            for p, v in zip(ptrs, vs, strict=True):
                builder.store(v, p, align=align)
            return context.get_dummy_value()

        return types.void(b, o), codegen

    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    # IEEE division (no ZeroDivisionError check), which lets the loops vectorize: the fill and
    # the finish divide by a row's positive scale and by sqrt(n) only (THC's kernels share them)
    _pjit_ieee = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")
    _inline = numba.njit(inline="always", cache=True)

    @_inline
    def _stages(b, o, h, k, cnt):
        """Stages ``h, 2h, ..`` (``k`` of them, at most 3) on the ``2^k`` entries at stride ``h``
        from each of ``o, .., o + cnt - 1``. Long runs go through slices indexed from 0, which
        vectorize; short ones (the first stages of a block) index the row."""
        if cnt >= 8:
            _stages_wide(b, o, h, k, cnt)
            return
        h2, h3 = 2 * h, 3 * h
        for j in range(o, o + cnt):
            if k == 3:
                h4, h5, h6, h7 = 4 * h, 5 * h, 6 * h, 7 * h
                v0, v1, v2, v3 = b[j], b[j + h], b[j + h2], b[j + h3]
                v4, v5, v6, v7 = b[j + h4], b[j + h5], b[j + h6], b[j + h7]
                v0, v1, v2, v3 = v0 + v1, v0 - v1, v2 + v3, v2 - v3
                v4, v5, v6, v7 = v4 + v5, v4 - v5, v6 + v7, v6 - v7
                v0, v2, v1, v3 = v0 + v2, v0 - v2, v1 + v3, v1 - v3
                v4, v6, v5, v7 = v4 + v6, v4 - v6, v5 + v7, v5 - v7
                b[j], b[j + h4] = v0 + v4, v0 - v4
                b[j + h], b[j + h5] = v1 + v5, v1 - v5
                b[j + h2], b[j + h6] = v2 + v6, v2 - v6
                b[j + h3], b[j + h7] = v3 + v7, v3 - v7
            elif k == 2:
                v0, v1, v2, v3 = b[j], b[j + h], b[j + h2], b[j + h3]
                v0, v1, v2, v3 = v0 + v1, v0 - v1, v2 + v3, v2 - v3
                b[j], b[j + h2] = v0 + v2, v0 - v2
                b[j + h], b[j + h3] = v1 + v3, v1 - v3
            else:
                v0, v1 = b[j], b[j + h]
                b[j], b[j + h] = v0 + v1, v0 - v1

    @_inline
    def _stages_wide(b, o, h, k, cnt):
        s0, s1 = b[o : o + cnt], b[o + h : o + h + cnt]
        if k == 1:
            for j in range(cnt):
                v0, v1 = s0[j], s1[j]
                s0[j], s1[j] = v0 + v1, v0 - v1
            return
        s2, s3 = b[o + 2 * h : o + 2 * h + cnt], b[o + 3 * h : o + 3 * h + cnt]
        if k == 2:
            for j in range(cnt):
                v0, v1, v2, v3 = s0[j], s1[j], s2[j], s3[j]
                v0, v1, v2, v3 = v0 + v1, v0 - v1, v2 + v3, v2 - v3
                s0[j], s2[j] = v0 + v2, v0 - v2
                s1[j], s3[j] = v1 + v3, v1 - v3
            return
        s4, s5 = b[o + 4 * h : o + 4 * h + cnt], b[o + 5 * h : o + 5 * h + cnt]
        s6, s7 = b[o + 6 * h : o + 6 * h + cnt], b[o + 7 * h : o + 7 * h + cnt]
        for j in range(cnt):
            v0, v1, v2, v3 = s0[j], s1[j], s2[j], s3[j]
            v4, v5, v6, v7 = s4[j], s5[j], s6[j], s7[j]
            v0, v1, v2, v3 = v0 + v1, v0 - v1, v2 + v3, v2 - v3
            v4, v5, v6, v7 = v4 + v5, v4 - v5, v6 + v7, v6 - v7
            v0, v2, v1, v3 = v0 + v2, v0 - v2, v1 + v3, v1 - v3
            v4, v6, v5, v7 = v4 + v6, v4 - v6, v5 + v7, v5 - v7
            s0[j], s4[j] = v0 + v4, v0 - v4
            s1[j], s5[j] = v1 + v5, v1 - v5
            s2[j], s6[j] = v2 + v6, v2 - v6
            s3[j], s7[j] = v3 + v7, v3 - v7

    @_inline
    def _block(b, o, bl):
        """The first ``bl`` stages on the block ``b[o : o + 2^bl]``: the first
        ``log2(LANE_BYTES / itemsize)`` in registers (:func:`_lane_stages`), where the block
        holds that many entries, the rest three at a time."""
        lev = 0
        low = _LOW32 if b.itemsize == 4 else _LOW64
        if bl >= low:
            for g in range(o, o + (1 << bl), 1 << low):
                _lane_stages(b, g)
            lev = low
        while lev < bl:
            k = min(3, bl - lev)
            h = 1 << lev
            span = h << k
            for s in range(o, o + (1 << bl), span):
                _stages(b, s, h, k, h)
            lev += k

    @_pjit
    def _outer(buf, bl, rnd, tile):
        """The stages from ``h = 2^bl`` on, of each row of ``buf``, in rounds of up to ``rnd``
        stages: a round's tile (``tile`` adjacent columns of its ``2^R`` strided segments) goes
        through all its stages, three at a time, while it is in cache."""
        m, n = buf.shape
        lev = bl
        while (1 << lev) < n:
            h0 = 1 << lev
            R = 1
            while R < rnd and (h0 << R) < n:
                R += 1
            span = h0 << R
            width = min(h0, tile)
            per = h0 // width
            tasks = (n // span) * per
            for t in numba.prange(m * tasks):
                r, u = t // tasks, t % tasks
                o = (u // per) * span + (u % per) * width
                _round(buf[r], o, h0, R, width)
            lev += R

    @_inline
    def _round(b, o, h0, R, width):
        """Stages ``h0, 2 h0, .., 2^(R-1) h0`` on the ``2^R`` segments ``b[o + i h0 :][:width]``,
        three at a time (lower stages first, as stage by stage)."""
        lev = 0
        while lev < R:
            k = min(3, R - lev)
            h = h0 << lev
            for q in range(1 << (R - lev - k)):
                for a in range(1 << lev):
                    _stages(b, o + a * h0 + q * (h << k), h, k, width)
            lev += k

    @_pjit
    def _fwht_blocks(buf, bl):
        m, n = buf.shape
        tasks = n >> bl
        for t in numba.prange(m * tasks):
            _block(buf[t // tasks], (t % tasks) << bl, bl)

    @_pjit_ieee
    def _fill(x, den, keys, one, signs, buf, bl):
        """``signs = 1 - 2 (bits64 & 1)``, ``buf = (x / den, then zeros) * signs``, then the
        first ``bl`` stages, block by block."""
        m, d = x.shape
        n = buf.shape[1]
        tasks = n >> bl
        zero = one - one
        for t in numba.prange(m * tasks):
            r, o = t // tasks, (t % tasks) << bl
            sr, br = signs[r, o : o + (1 << bl)], buf[r, o : o + (1 << bl)]
            z = keys[r] + np.uint64(o) * _GOLDEN
            for i in range(sr.size):
                sr[i] = -one if _mix(z + np.uint64(i + 1) * _GOLDEN) & np.uint64(1) else one
            xr, dn = x[r, min(d, o) : min(d, o + (1 << bl))], den[r]
            for i in range(xr.size):
                br[i] = (xr[i] / dn) * sr[i]
            for i in range(xr.size, br.size):
                br[i] = zero * sr[i]
            _block(buf[r], o, bl)

    @_pjit
    def _quantize(buf, root, den, keys, half, one, shift, scale, bits):
        m, n = buf.shape
        tasks = (n + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(n, c0 + CHUNK)
            br, out, dn = buf[r, c0:c1], bits[r, c0:c1], den[r]
            z = keys[r] + np.uint64(c0) * _GOLDEN
            for i in range(br.size):
                u = np.float64(_mix(z + np.uint64(i + 1) * _GOLDEN) >> shift) * scale
                out[i] = u < half * (one + (br[i] / root) / dn)

    @_pjit
    def _unpack(bits, one, buf, bl):
        m, n = buf.shape
        tasks = n >> bl
        for t in numba.prange(m * tasks):
            r, o = t // tasks, (t % tasks) << bl
            br, bt = buf[r, o : o + (1 << bl)], bits[r, o : o + (1 << bl)]
            for i in range(br.size):
                br[i] = one if bt[i] else -one
            _block(buf[r], o, bl)

    @_pjit_ieee
    def _finish(buf, signs, root, scale, big, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            br, sr, orow, sc = buf[r, c0:c1], signs[r, c0:c1], out[r, c0:c1], scale[r]
            for i in range(br.size):
                v = (sr[i] * (br[i] / root)) * sc
                orow[i] = big if v > big else (-big if v < -big else v)  # NaN stays
