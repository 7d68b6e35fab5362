"""The kernels of :mod:`problems.glm_lanes`, one per width: written by
:mod:`problems.glm_lanes_gen` (``python -m problems.glm_lanes_gen``); do not edit."""

# built against problems/glm_kernels.py 0003e4c6c3316213
# built against streams/compiled.py e68a8988580009b7

# fmt: off
from __future__ import annotations

import numba
import numpy as np

from problems.glm_kernels import _dphi_points, _phi_points, _u

_jit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
_pjit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"},
                   parallel=True)


@_jit
def _dphi_lanes(code, Zc, bb, n, inv):
    for i in range(n):
        Zc[i] = _dphi_points(code, Zc[i], bb[i]) * inv


@_jit
def _loss_lanes(code, Zc, bb, n, inv, W, Lc, lsum):
    for i in range(n):
        Lc[i] = _phi_points(code, Zc[i], bb[i]) * inv
    for i in range(0, n, W):
        for r in range(W):
            lsum[r] += Lc[i + r]


@_jit
def _node_4(indptr, indices, values, unit, PT, b, rows, lo, hi, code, with_loss, zero, Zc,
           bb, Lc, g, lsum):
    inv = 1.0 / (hi - lo)
    chunk = bb.size // 4
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            z0 = zero
            z1 = zero
            z2 = zero
            z3 = zero
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(4)
                    z0 += PT[o + _u(0)]
                    z1 += PT[o + _u(1)]
                    z2 += PT[o + _u(2)]
                    z3 += PT[o + _u(3)]
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(4)
                    v = values[p]
                    z0 += v * PT[o + _u(0)]
                    z1 += v * PT[o + _u(1)]
                    z2 += v * PT[o + _u(2)]
                    z3 += v * PT[o + _u(3)]
            q = (j - c0) * 4
            bj = b[row]
            Zc[q + 0] = z0
            Zc[q + 1] = z1
            Zc[q + 2] = z2
            Zc[q + 3] = z3
            bb[q + 0] = bj
            bb[q + 1] = bj
            bb[q + 2] = bj
            bb[q + 3] = bj
        n = (c1 - c0) * 4
        if with_loss:
            _loss_lanes(code, Zc, bb, n, inv, 4, Lc, lsum)
        _dphi_lanes(code, Zc, bb, n, inv)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            q = (j - c0) * 4
            z0 = Zc[q + 0]
            z1 = Zc[q + 1]
            z2 = Zc[q + 2]
            z3 = Zc[q + 3]
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(4)
                    g[o + _u(0)] += z0
                    g[o + _u(1)] += z1
                    g[o + _u(2)] += z2
                    g[o + _u(3)] += z3
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(4)
                    v = values[p]
                    g[o + _u(0)] += v * z0
                    g[o + _u(1)] += v * z1
                    g[o + _u(2)] += v * z2
                    g[o + _u(3)] += v * z3


@_pjit
def points_4(indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, chunk,
             reg, out, lout):
    R, d = reg.shape
    for i in numba.prange(ptr.size - 1):
        Zc = np.empty(chunk * 4, dtype=PT.dtype)
        bb = np.empty(chunk * 4, dtype=PT.dtype)
        Lc = np.empty(chunk * 4, dtype=np.float64)
        g = np.empty(d * 4, dtype=PT.dtype)
        g[:] = zero
        lsum = lout[i]
        lsum[:] = zero
        _node_4(indptr, indices, values, unit, PT, b, rows, ptr[i], ptr[i + 1], code,
                with_loss, zero, Zc, bb, Lc, g, lsum)
        for r in range(R):
            o, rr = out[r, i], reg[r]
            for k in range(d):
                o[k] = g[_u(k) * _u(4) + _u(r)] + rr[k]


@_jit
def _node_8(indptr, indices, values, unit, PT, b, rows, lo, hi, code, with_loss, zero, Zc,
           bb, Lc, g, lsum):
    inv = 1.0 / (hi - lo)
    chunk = bb.size // 8
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            z0 = zero
            z1 = zero
            z2 = zero
            z3 = zero
            z4 = zero
            z5 = zero
            z6 = zero
            z7 = zero
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(8)
                    z0 += PT[o + _u(0)]
                    z1 += PT[o + _u(1)]
                    z2 += PT[o + _u(2)]
                    z3 += PT[o + _u(3)]
                    z4 += PT[o + _u(4)]
                    z5 += PT[o + _u(5)]
                    z6 += PT[o + _u(6)]
                    z7 += PT[o + _u(7)]
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(8)
                    v = values[p]
                    z0 += v * PT[o + _u(0)]
                    z1 += v * PT[o + _u(1)]
                    z2 += v * PT[o + _u(2)]
                    z3 += v * PT[o + _u(3)]
                    z4 += v * PT[o + _u(4)]
                    z5 += v * PT[o + _u(5)]
                    z6 += v * PT[o + _u(6)]
                    z7 += v * PT[o + _u(7)]
            q = (j - c0) * 8
            bj = b[row]
            Zc[q + 0] = z0
            Zc[q + 1] = z1
            Zc[q + 2] = z2
            Zc[q + 3] = z3
            Zc[q + 4] = z4
            Zc[q + 5] = z5
            Zc[q + 6] = z6
            Zc[q + 7] = z7
            bb[q + 0] = bj
            bb[q + 1] = bj
            bb[q + 2] = bj
            bb[q + 3] = bj
            bb[q + 4] = bj
            bb[q + 5] = bj
            bb[q + 6] = bj
            bb[q + 7] = bj
        n = (c1 - c0) * 8
        if with_loss:
            _loss_lanes(code, Zc, bb, n, inv, 8, Lc, lsum)
        _dphi_lanes(code, Zc, bb, n, inv)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            q = (j - c0) * 8
            z0 = Zc[q + 0]
            z1 = Zc[q + 1]
            z2 = Zc[q + 2]
            z3 = Zc[q + 3]
            z4 = Zc[q + 4]
            z5 = Zc[q + 5]
            z6 = Zc[q + 6]
            z7 = Zc[q + 7]
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(8)
                    g[o + _u(0)] += z0
                    g[o + _u(1)] += z1
                    g[o + _u(2)] += z2
                    g[o + _u(3)] += z3
                    g[o + _u(4)] += z4
                    g[o + _u(5)] += z5
                    g[o + _u(6)] += z6
                    g[o + _u(7)] += z7
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(8)
                    v = values[p]
                    g[o + _u(0)] += v * z0
                    g[o + _u(1)] += v * z1
                    g[o + _u(2)] += v * z2
                    g[o + _u(3)] += v * z3
                    g[o + _u(4)] += v * z4
                    g[o + _u(5)] += v * z5
                    g[o + _u(6)] += v * z6
                    g[o + _u(7)] += v * z7


@_pjit
def points_8(indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, chunk,
             reg, out, lout):
    R, d = reg.shape
    for i in numba.prange(ptr.size - 1):
        Zc = np.empty(chunk * 8, dtype=PT.dtype)
        bb = np.empty(chunk * 8, dtype=PT.dtype)
        Lc = np.empty(chunk * 8, dtype=np.float64)
        g = np.empty(d * 8, dtype=PT.dtype)
        g[:] = zero
        lsum = lout[i]
        lsum[:] = zero
        _node_8(indptr, indices, values, unit, PT, b, rows, ptr[i], ptr[i + 1], code,
                with_loss, zero, Zc, bb, Lc, g, lsum)
        for r in range(R):
            o, rr = out[r, i], reg[r]
            for k in range(d):
                o[k] = g[_u(k) * _u(8) + _u(r)] + rr[k]


@_jit
def _node_12(indptr, indices, values, unit, PT, b, rows, lo, hi, code, with_loss, zero, Zc,
            bb, Lc, g, lsum):
    inv = 1.0 / (hi - lo)
    chunk = bb.size // 12
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            z0 = zero
            z1 = zero
            z2 = zero
            z3 = zero
            z4 = zero
            z5 = zero
            z6 = zero
            z7 = zero
            z8 = zero
            z9 = zero
            z10 = zero
            z11 = zero
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(12)
                    z0 += PT[o + _u(0)]
                    z1 += PT[o + _u(1)]
                    z2 += PT[o + _u(2)]
                    z3 += PT[o + _u(3)]
                    z4 += PT[o + _u(4)]
                    z5 += PT[o + _u(5)]
                    z6 += PT[o + _u(6)]
                    z7 += PT[o + _u(7)]
                    z8 += PT[o + _u(8)]
                    z9 += PT[o + _u(9)]
                    z10 += PT[o + _u(10)]
                    z11 += PT[o + _u(11)]
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(12)
                    v = values[p]
                    z0 += v * PT[o + _u(0)]
                    z1 += v * PT[o + _u(1)]
                    z2 += v * PT[o + _u(2)]
                    z3 += v * PT[o + _u(3)]
                    z4 += v * PT[o + _u(4)]
                    z5 += v * PT[o + _u(5)]
                    z6 += v * PT[o + _u(6)]
                    z7 += v * PT[o + _u(7)]
                    z8 += v * PT[o + _u(8)]
                    z9 += v * PT[o + _u(9)]
                    z10 += v * PT[o + _u(10)]
                    z11 += v * PT[o + _u(11)]
            q = (j - c0) * 12
            bj = b[row]
            Zc[q + 0] = z0
            Zc[q + 1] = z1
            Zc[q + 2] = z2
            Zc[q + 3] = z3
            Zc[q + 4] = z4
            Zc[q + 5] = z5
            Zc[q + 6] = z6
            Zc[q + 7] = z7
            Zc[q + 8] = z8
            Zc[q + 9] = z9
            Zc[q + 10] = z10
            Zc[q + 11] = z11
            bb[q + 0] = bj
            bb[q + 1] = bj
            bb[q + 2] = bj
            bb[q + 3] = bj
            bb[q + 4] = bj
            bb[q + 5] = bj
            bb[q + 6] = bj
            bb[q + 7] = bj
            bb[q + 8] = bj
            bb[q + 9] = bj
            bb[q + 10] = bj
            bb[q + 11] = bj
        n = (c1 - c0) * 12
        if with_loss:
            _loss_lanes(code, Zc, bb, n, inv, 12, Lc, lsum)
        _dphi_lanes(code, Zc, bb, n, inv)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            q = (j - c0) * 12
            z0 = Zc[q + 0]
            z1 = Zc[q + 1]
            z2 = Zc[q + 2]
            z3 = Zc[q + 3]
            z4 = Zc[q + 4]
            z5 = Zc[q + 5]
            z6 = Zc[q + 6]
            z7 = Zc[q + 7]
            z8 = Zc[q + 8]
            z9 = Zc[q + 9]
            z10 = Zc[q + 10]
            z11 = Zc[q + 11]
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(12)
                    g[o + _u(0)] += z0
                    g[o + _u(1)] += z1
                    g[o + _u(2)] += z2
                    g[o + _u(3)] += z3
                    g[o + _u(4)] += z4
                    g[o + _u(5)] += z5
                    g[o + _u(6)] += z6
                    g[o + _u(7)] += z7
                    g[o + _u(8)] += z8
                    g[o + _u(9)] += z9
                    g[o + _u(10)] += z10
                    g[o + _u(11)] += z11
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(12)
                    v = values[p]
                    g[o + _u(0)] += v * z0
                    g[o + _u(1)] += v * z1
                    g[o + _u(2)] += v * z2
                    g[o + _u(3)] += v * z3
                    g[o + _u(4)] += v * z4
                    g[o + _u(5)] += v * z5
                    g[o + _u(6)] += v * z6
                    g[o + _u(7)] += v * z7
                    g[o + _u(8)] += v * z8
                    g[o + _u(9)] += v * z9
                    g[o + _u(10)] += v * z10
                    g[o + _u(11)] += v * z11


@_pjit
def points_12(indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, chunk,
              reg, out, lout):
    R, d = reg.shape
    for i in numba.prange(ptr.size - 1):
        Zc = np.empty(chunk * 12, dtype=PT.dtype)
        bb = np.empty(chunk * 12, dtype=PT.dtype)
        Lc = np.empty(chunk * 12, dtype=np.float64)
        g = np.empty(d * 12, dtype=PT.dtype)
        g[:] = zero
        lsum = lout[i]
        lsum[:] = zero
        _node_12(indptr, indices, values, unit, PT, b, rows, ptr[i], ptr[i + 1], code,
                 with_loss, zero, Zc, bb, Lc, g, lsum)
        for r in range(R):
            o, rr = out[r, i], reg[r]
            for k in range(d):
                o[k] = g[_u(k) * _u(12) + _u(r)] + rr[k]


@_jit
def _node_16(indptr, indices, values, unit, PT, b, rows, lo, hi, code, with_loss, zero, Zc,
            bb, Lc, g, lsum):
    inv = 1.0 / (hi - lo)
    chunk = bb.size // 16
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            z0 = zero
            z1 = zero
            z2 = zero
            z3 = zero
            z4 = zero
            z5 = zero
            z6 = zero
            z7 = zero
            z8 = zero
            z9 = zero
            z10 = zero
            z11 = zero
            z12 = zero
            z13 = zero
            z14 = zero
            z15 = zero
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(16)
                    z0 += PT[o + _u(0)]
                    z1 += PT[o + _u(1)]
                    z2 += PT[o + _u(2)]
                    z3 += PT[o + _u(3)]
                    z4 += PT[o + _u(4)]
                    z5 += PT[o + _u(5)]
                    z6 += PT[o + _u(6)]
                    z7 += PT[o + _u(7)]
                    z8 += PT[o + _u(8)]
                    z9 += PT[o + _u(9)]
                    z10 += PT[o + _u(10)]
                    z11 += PT[o + _u(11)]
                    z12 += PT[o + _u(12)]
                    z13 += PT[o + _u(13)]
                    z14 += PT[o + _u(14)]
                    z15 += PT[o + _u(15)]
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(16)
                    v = values[p]
                    z0 += v * PT[o + _u(0)]
                    z1 += v * PT[o + _u(1)]
                    z2 += v * PT[o + _u(2)]
                    z3 += v * PT[o + _u(3)]
                    z4 += v * PT[o + _u(4)]
                    z5 += v * PT[o + _u(5)]
                    z6 += v * PT[o + _u(6)]
                    z7 += v * PT[o + _u(7)]
                    z8 += v * PT[o + _u(8)]
                    z9 += v * PT[o + _u(9)]
                    z10 += v * PT[o + _u(10)]
                    z11 += v * PT[o + _u(11)]
                    z12 += v * PT[o + _u(12)]
                    z13 += v * PT[o + _u(13)]
                    z14 += v * PT[o + _u(14)]
                    z15 += v * PT[o + _u(15)]
            q = (j - c0) * 16
            bj = b[row]
            Zc[q + 0] = z0
            Zc[q + 1] = z1
            Zc[q + 2] = z2
            Zc[q + 3] = z3
            Zc[q + 4] = z4
            Zc[q + 5] = z5
            Zc[q + 6] = z6
            Zc[q + 7] = z7
            Zc[q + 8] = z8
            Zc[q + 9] = z9
            Zc[q + 10] = z10
            Zc[q + 11] = z11
            Zc[q + 12] = z12
            Zc[q + 13] = z13
            Zc[q + 14] = z14
            Zc[q + 15] = z15
            bb[q + 0] = bj
            bb[q + 1] = bj
            bb[q + 2] = bj
            bb[q + 3] = bj
            bb[q + 4] = bj
            bb[q + 5] = bj
            bb[q + 6] = bj
            bb[q + 7] = bj
            bb[q + 8] = bj
            bb[q + 9] = bj
            bb[q + 10] = bj
            bb[q + 11] = bj
            bb[q + 12] = bj
            bb[q + 13] = bj
            bb[q + 14] = bj
            bb[q + 15] = bj
        n = (c1 - c0) * 16
        if with_loss:
            _loss_lanes(code, Zc, bb, n, inv, 16, Lc, lsum)
        _dphi_lanes(code, Zc, bb, n, inv)
        for j in range(c0, c1):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            q = (j - c0) * 16
            z0 = Zc[q + 0]
            z1 = Zc[q + 1]
            z2 = Zc[q + 2]
            z3 = Zc[q + 3]
            z4 = Zc[q + 4]
            z5 = Zc[q + 5]
            z6 = Zc[q + 6]
            z7 = Zc[q + 7]
            z8 = Zc[q + 8]
            z9 = Zc[q + 9]
            z10 = Zc[q + 10]
            z11 = Zc[q + 11]
            z12 = Zc[q + 12]
            z13 = Zc[q + 13]
            z14 = Zc[q + 14]
            z15 = Zc[q + 15]
            if unit:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(16)
                    g[o + _u(0)] += z0
                    g[o + _u(1)] += z1
                    g[o + _u(2)] += z2
                    g[o + _u(3)] += z3
                    g[o + _u(4)] += z4
                    g[o + _u(5)] += z5
                    g[o + _u(6)] += z6
                    g[o + _u(7)] += z7
                    g[o + _u(8)] += z8
                    g[o + _u(9)] += z9
                    g[o + _u(10)] += z10
                    g[o + _u(11)] += z11
                    g[o + _u(12)] += z12
                    g[o + _u(13)] += z13
                    g[o + _u(14)] += z14
                    g[o + _u(15)] += z15
            else:
                for p in range(_u(p0), _u(p1)):
                    o = _u(indices[p]) * _u(16)
                    v = values[p]
                    g[o + _u(0)] += v * z0
                    g[o + _u(1)] += v * z1
                    g[o + _u(2)] += v * z2
                    g[o + _u(3)] += v * z3
                    g[o + _u(4)] += v * z4
                    g[o + _u(5)] += v * z5
                    g[o + _u(6)] += v * z6
                    g[o + _u(7)] += v * z7
                    g[o + _u(8)] += v * z8
                    g[o + _u(9)] += v * z9
                    g[o + _u(10)] += v * z10
                    g[o + _u(11)] += v * z11
                    g[o + _u(12)] += v * z12
                    g[o + _u(13)] += v * z13
                    g[o + _u(14)] += v * z14
                    g[o + _u(15)] += v * z15


@_pjit
def points_16(indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, chunk,
              reg, out, lout):
    R, d = reg.shape
    for i in numba.prange(ptr.size - 1):
        Zc = np.empty(chunk * 16, dtype=PT.dtype)
        bb = np.empty(chunk * 16, dtype=PT.dtype)
        Lc = np.empty(chunk * 16, dtype=np.float64)
        g = np.empty(d * 16, dtype=PT.dtype)
        g[:] = zero
        lsum = lout[i]
        lsum[:] = zero
        _node_16(indptr, indices, values, unit, PT, b, rows, ptr[i], ptr[i + 1], code,
                 with_loss, zero, Zc, bb, Lc, g, lsum)
        for r in range(R):
            o, rr = out[r, i], reg[r]
            for k in range(d):
                o[k] = g[_u(k) * _u(16) + _u(r)] + rr[k]
