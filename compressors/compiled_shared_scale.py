"""Compiled CPU kernels of SSQ and MSQ (see :mod:`streams.compiled` for the set-up).

The torch form takes about twenty whole-array passes (abs, divisions, the choice of scale per
width, an indexed gather of the levels, floor, the uniforms, comparisons, ``where`` and casts),
each writing a temporary. Here one pass finds each row's largest magnitude and one more writes
the choice of scale and the signed level of each entry, drawing its uniform from the row's
SplitMix64 stream on the fly (the same number ``Streams.uniform`` gives it, as
:mod:`compressors.compiled_quant` does); decoding is one pass. The arithmetic is the torch
form's, operation for operation in the work dtype, so the payload and the output are the same
bits.
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

__all__ = ["ENABLED", "decode", "max_abs", "quantize", "resolution"]

ENABLED = numba is not None
DTYPES = (torch.float32, torch.float64)
PAD = 16  # at most 16 scales (widths 1..16, distinct): the tables' length


def usable(x: torch.Tensor) -> bool:
    """Whether the kernels serve ``x`` (a 2-D CPU tensor of a work dtype)."""
    ok = ENABLED and x.device.type == "cpu" and x.dtype in DTYPES and x.dim() == 2
    return ok and x.numel() > 0


def max_abs(x: torch.Tensor) -> torch.Tensor:
    """``x.abs().amax(dim=1)``, the same bits, in one pass (``d >= 1``; rows with a NaN take
    torch's form, so theirs is the NaN ``amax`` gives)."""
    x = x.detach().contiguous()
    m, d = x.shape
    view, mbits, *_ = _FORMAT[x.dtype]
    top = (1 << (mbits + (11 if mbits == 52 else 8))) - 1  # all but the sign bit
    out = torch.empty(m, dtype=x.dtype)
    bits = out.numpy().view(view)
    part = np.empty(m * (-(-d // CHUNK)), dtype=view)
    launch(_max_abs, x.numpy().view(view), view(top), part, bits)
    inf = int(np.array(np.inf, dtype=x.numpy().dtype).view(view))
    nan = torch.from_numpy(bits.astype(np.uint64) > inf)
    if bool(nan.any()):
        out[nan] = x[nan].abs().amax(dim=1)
    return out


def _padded(values, dtype: torch.dtype) -> np.ndarray:
    """``values`` in ``dtype`` (``s_k``: exact, at most ``2^16 - 1``) followed by infinities,
    :data:`PAD` in all."""
    out = np.full(PAD, np.inf, dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    out[: len(values)] = values
    return out


def resolution(x: torch.Tensor, scale: torch.Tensor, levels: tuple[int, ...]) -> torch.Tensor:
    """The finest scale ``k`` with ``(|x_j| / B) s_k <= s_1`` per entry, uint8 ``(m, d)``."""
    x = x.detach().contiguous()
    res = torch.empty(x.shape, dtype=torch.uint8)
    args = (x.numpy(), scale.detach().contiguous().numpy(), _padded(levels, x.dtype))
    launch(_resolution, *args, len(levels), res.numpy())
    return res


def quantize(x, scale, res, levels: tuple[int, ...], keys: torch.Tensor, dtype=torch.int32):
    """``(signed levels (m, d) of dtype, res uint8 (m, d))``: the stochastic rounding of
    ``(|x_j| / B) s_{k_j}`` (clamped at ``s_1``, which ``dtype`` holds), signed as ``x_j``;
    level 0 in rows whose ``B`` is not finite. ``res`` is the choice of scale, or None: chosen
    here (and returned)."""
    x = x.detach().contiguous()
    _, _, _, ushift, ubits = _FORMAT[x.dtype]
    out = torch.empty(x.shape, dtype=dtype)
    choose = res is None
    res = torch.empty(x.shape, dtype=torch.uint8) if choose else res.contiguous()
    sk = _padded(levels, x.dtype)
    keys = keys.contiguous().numpy().view(np.uint64)
    args = (x.numpy(), scale.detach().contiguous().numpy(), sk, len(levels), keys)
    launch(_quantize, *args, choose, ushift, 2.0**-ubits, res.numpy(), out.numpy())
    return out, res


def decode(scale: torch.Tensor, levels: torch.Tensor, res: torch.Tensor, step: torch.Tensor):
    """``B (level step[res])`` per entry, in ``scale``'s dtype (``step``: ``1 / s_k`` in it)."""
    scale = scale.contiguous()
    out = torch.empty(levels.shape, dtype=scale.dtype)
    args = (scale.numpy(), levels.contiguous().numpy(), res.contiguous().numpy())
    launch(_decode, *args, _padded(step.numpy(), scale.dtype), step.numel(), out.numpy())
    return out


if numba is not None:
    from streams.compiled import _mix

    _pjit = numba.njit(cache=True, nogil=True, parallel=True)
    _inline = numba.njit(inline="always", cache=True)

    @_pjit
    def _max_abs(xb, absmask, part, out):
        """Per row the largest of the bit patterns with the sign bit cleared: monotone in the
        magnitude for numbers, and a NaN's pattern is above every number's. An integer
        reduction vectorises (a float one keeps its order without fast-math flags)."""
        m, d = xb.shape
        tasks = part.size // m
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            xr = xb[j, c0 : min(d, c0 + CHUNK)]
            top = xr[0] & absmask
            for i in range(1, xr.size):
                b = xr[i] & absmask
                top = b if b > top else top
            part[t] = top
        for j in range(m):
            top = part[j * tasks]
            for t in range(j * tasks + 1, (j + 1) * tasks):
                top = part[t] if part[t] > top else top
            out[j] = top

    @_inline
    def _choose4(r, sk, s1):
        """The last ``q`` with ``r s_q <= s_1`` (0 if none) and its ``s_q``, for at most 4
        scales (``sk`` padded with infinities, never chosen): 3 selects, which vectorise."""
        k, sq = 0, sk[0]
        for q in range(1, 4):
            if r * sk[q] <= s1:
                k, sq = q, sk[q]
        return k, sq

    @_inline
    def _choose(r, sk, s1, nk):
        """:func:`_choose4` for any number ``nk`` of scales (a loop, which does not vectorise)."""
        k, sq = 0, sk[0]
        for q in range(1, nk):
            if r * sk[q] <= s1:
                k, sq = q, sk[q]
        return k, sq

    @_inline
    def _pick4(k, table):
        """``table[k]`` for ``k < 4`` as 3 selects on an int32 (a gather, or selects on the
        uint8, vectorise worse)."""
        k = np.int32(k)
        v = table[0]
        v = table[1] if k == 1 else v
        v = table[2] if k == 2 else v
        return table[3] if k == 3 else v

    @_inline
    def _round(u, r, sq, s1, neg):
        """The signed stochastic rounding of ``min(r s_q, s_1)`` (as the torch form)."""
        y = min(r * sq, s1)
        low = np.floor(y)
        level = np.int32(low) + np.int32(u < np.float64(y - low))
        return -level if neg else level

    @_pjit
    def _resolution(x, scale, sk, nk, res):
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        s1 = sk[0]
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, rr = x[j, c0:c1], res[j, c0:c1]
            safe = scale[j] if scale[j] > 0 else s1 / s1
            if nk <= 4:
                for i in range(xr.size):
                    rr[i] = _choose4(abs(xr[i]) / safe, sk, s1)[0]
            else:
                for i in range(xr.size):
                    rr[i] = _choose(abs(xr[i]) / safe, sk, s1, nk)[0]

    @_pjit
    def _quantize(x, scale, sk, nk, keys, choose, ushift, uscale, res, out):
        m, d = x.shape
        tasks = (d + CHUNK - 1) // CHUNK
        s1, ush = sk[0], np.uint64(ushift)
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            xr, rr, orow = x[j, c0:c1], res[j, c0:c1], out[j, c0:c1]
            sc = scale[j]
            safe = sc if sc > 0 else s1 / s1
            z0 = keys[j] + np.uint64(c0) * _GOLDEN
            if not np.isfinite(sc):  # a NaN or inf entry: the scale carries it, levels void
                orow[:] = 0
                if choose:
                    for i in range(xr.size):
                        rr[i] = _choose(abs(xr[i]) / safe, sk, s1, nk)[0]
                continue
            if nk == 1:  # one scale (SSQ): every choice is 0
                if choose:
                    rr[:] = 0
                for i in range(xr.size):
                    u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * uscale
                    orow[i] = _round(u, abs(xr[i]) / safe, s1, s1, xr[i] < 0)
            elif choose and nk <= 4:
                for i in range(xr.size):
                    u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * uscale
                    r = abs(xr[i]) / safe
                    k, sq = _choose4(r, sk, s1)
                    rr[i] = k
                    orow[i] = _round(u, r, sq, s1, xr[i] < 0)
            elif choose:
                for i in range(xr.size):
                    u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * uscale
                    r = abs(xr[i]) / safe
                    k, sq = _choose(r, sk, s1, nk)
                    rr[i] = k
                    orow[i] = _round(u, r, sq, s1, xr[i] < 0)
            else:  # the choice given
                for i in range(xr.size):
                    u = np.float64(_mix(z0 + np.uint64(i + 1) * _GOLDEN) >> ush) * uscale
                    sq = _pick4(rr[i], sk) if nk <= 4 else sk[rr[i]]
                    orow[i] = _round(u, abs(xr[i]) / safe, sq, s1, xr[i] < 0)

    @_pjit
    def _decode(scale, levels, res, step, nk, out):
        m, d = out.shape
        tasks = (d + CHUNK - 1) // CHUNK
        for t in numba.prange(m * tasks):
            j, c0 = t // tasks, (t % tasks) * CHUNK
            c1 = min(d, c0 + CHUNK)
            lr, rr, orow = levels[j, c0:c1], res[j, c0:c1], out[j, c0:c1]
            sc = scale[j]
            # each level is stored first, so that it is converted to the output's dtype
            if nk == 1:
                for i in range(lr.size):
                    orow[i] = lr[i]
                    orow[i] = sc * (orow[i] * step[0])
            elif nk <= 4:
                for i in range(lr.size):
                    orow[i] = lr[i]
                    orow[i] = sc * (orow[i] * _pick4(rr[i], step))
            else:
                for i in range(lr.size):
                    orow[i] = lr[i]
                    orow[i] = sc * (orow[i] * step[rr[i]])
