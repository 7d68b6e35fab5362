"""Compiled CPU kernels of THC (see :mod:`streams.compiled` and :mod:`compressors.compiled_fwht`).

THC's torch form pads, flips and transforms the row (already in place on the CPU), then quantizes
it in a dozen whole-array passes (the division by the range, the clamp, the position on the
grid, ``searchsorted``, two table lookups, the uniforms, the comparison, the casts), each writing
a temporary; decode looks the indices up, scales them and transforms back. Here encode fills the
padded, sign-flipped row and transforms it as FO-SGD's compiled encode does, then one pass draws
each entry's uniform from the row's SplitMix64 stream (the number ``Streams.uniform`` gives it)
and writes the index; decode writes the table values of the indices straight into the transform's
buffer. Every entry goes through the same operations in the same precision: the same bits.
"""

# built against compressors/compiled_dense.py a47a7160c7f7ad7e
# built against compressors/compiled_fastsgd.py 08c265d29743cfc5
# built against compressors/compiled_fwht.py ad9e8438d1623c0a
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np
import torch

from compressors import compiled_dense, compiled_fwht
from streams.compiled import _GOLDEN, launch, numba

__all__ = ["ENABLED", "decode", "quantize", "rotate", "serves"]

ENABLED = numba is not None
CHUNK = 1 << 15  # entries per task of the quantization pass
_UNIFORM = {torch.float32: (40, 2.0**-24), torch.float64: (11, 2.0**-53)}


def serves(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a 2-D CPU tensor of float32 or float64 with at least
    :data:`compressors.compiled_dense.FAST_FROM` entries; others take the torch form, which
    gives the same numbers)."""
    return ENABLED and x.dim() == 2 and compiled_fwht.serves(x)


def rotate(x: torch.Tensor, den: torch.Tensor, sign_keys: torch.Tensor, n: int, root: float):
    """``(signs, buf, own)``: the signs ``1 - 2 (bits64 & 1)`` (``(m, n)``), ``buf = H D
    (x / den)`` (unnormalized: ``y = buf / root``) and ``own = ||y||_inf`` per row."""
    x = x.detach().contiguous()
    m = x.shape[0]
    signs, buf = torch.empty(m, n, dtype=x.dtype), torch.empty(m, n, dtype=x.dtype)
    kind = x.numpy().dtype.type
    p = compiled_fwht.plan(n, x.dtype)
    keys = sign_keys.contiguous().numpy().view(np.uint64)
    args = (x.numpy(), den.contiguous().numpy(), keys, kind(1.0))
    launch(_fill, *args, signs.numpy(), buf.numpy(), p[0])
    launch(compiled_fwht._outer, buf.numpy(), *p)
    own = compiled_dense.absmax(buf) / root  # max_j |y_j|: division is monotone
    return signs, buf, own


def quantize(buf, root: float, den, table, g: int, dither_keys, index_dtype, uniform: bool):
    """Each entry's index into ``table`` (ascending, ``(q,)`` in ``buf``'s dtype, on the grid
    ``0..g``): ``p = (clamp(buf / root / den, -1, 1) + 1) g / 2`` rounded to its lower neighbour
    ``T_k`` (``searchsorted``, right, less one, within ``0..q-2``) or, if the row's uniform is
    below ``(p - T_k) / (T_{k+1} - T_k)``, to its upper one. ``uniform``: ``table`` is
    ``0..q-1``, where ``k = floor(p)``."""
    kind = buf.numpy().dtype.type
    index = torch.empty(buf.shape, dtype=index_dtype)
    shift, scale = _UNIFORM[buf.dtype]
    keys = dither_keys.contiguous().numpy().view(np.uint64)
    consts = (kind(root), den.contiguous().numpy(), table.contiguous().numpy(), kind(g / 2.0))
    args = (*consts, kind(1.0), bool(uniform), keys, np.uint64(shift), scale)
    launch(_quantize, buf.numpy(), *args, index.numpy())
    return index


def decode(index, values, signs, scale, d: int, root: float, big: float) -> torch.Tensor:
    """``clamp(scale (D H values[index] / root)[:d], -big, big)`` in the dtype of ``signs``
    (``values``: the table's decoded values, ``(q,)`` in that dtype)."""
    signs = signs.contiguous()
    kind = signs.numpy().dtype.type
    m, n = signs.shape
    buf = torch.empty(m, n, dtype=signs.dtype)
    p = compiled_fwht.plan(n, signs.dtype)
    launch(_unpack, index.contiguous().numpy(), values.contiguous().numpy(), buf.numpy(), p[0])
    launch(compiled_fwht._outer, buf.numpy(), *p)
    out = torch.empty(m, d, dtype=signs.dtype)
    args = (buf.numpy(), signs.numpy(), kind(root), scale.contiguous().numpy(), kind(big))
    launch(_finish, *args, out.numpy())
    return out


if numba is not None:
    # the fill (signs, scaling, first stages) and the finish are FO-SGD's; _block is compiled
    # into _unpack here (a change there restamps this file: streams.stamps)
    from compressors.compiled_fwht import _block, _fill, _finish
    from streams.compiled import _mix

    # IEEE division (no ZeroDivisionError check), which lets the loops vectorize
    _pjit = numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy")

    @_pjit
    def _quantize(buf, root, den, table, halfg, one, uniform, keys, shift, scale, index):
        m, n = buf.shape
        q = table.size
        tasks = (n + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            r, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(n, c0 + CHUNK)
            br, out, dn = buf[r, c0:c1], index[r, c0:c1], den[r]
            z = keys[r] + np.uint64(c0) * _GOLDEN
            if uniform:
                for i in range(br.size):
                    u = (br[i] / root) / dn
                    p = (min(max(u, -one), one) + one) * halfg  # in [0, q - 1]
                    k = min(np.int64(p), q - 2)
                    # (p - T_k) / (T_{k+1} - T_k) = p - k, exact in either precision
                    frac = np.float64(p) - np.float64(k)
                    w = np.float64(_mix(z + np.uint64(i + 1) * _GOLDEN) >> shift) * scale
                    out[i] = k + (w < frac)
            else:
                for i in range(br.size):
                    u = (br[i] / root) / dn
                    p = (min(max(u, -one), one) + one) * halfg
                    k = 0  # searchsorted(right) - 1: the entries not above p, less one
                    for j in range(1, q - 1):
                        k += not table[j] > p
                    lo, hi = table[k], table[k + 1]
                    w = np.float64(_mix(z + np.uint64(i + 1) * _GOLDEN) >> shift) * scale
                    out[i] = k + (w < (p - lo) / (hi - lo))

    @_pjit
    def _unpack(index, values, buf, bl):
        m, n = buf.shape
        tasks = n >> bl
        for t in numba.prange(m * tasks):
            r, o = t // tasks, (t % tasks) << bl
            br, ir = buf[r, o : o + (1 << bl)], index[r, o : o + (1 << bl)]
            for i in range(br.size):
                br[i] = values[ir[i]]
            _block(buf[r], o, bl)
