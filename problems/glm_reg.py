"""The GLMs' regularisers' gradients at one small CPU point, compiled.

Every GLM gradient adds the regulariser's gradient at the point, ``lam x`` (``l2``) or
``2 lam x / (1 + x^2)^2`` (``nonconvex``, :class:`problems.logreg_nonconvex.LogRegNonconvex`).
On a small problem the gradient's kernel takes tens of microseconds, and NumPy's five small
calls for the nonconvex term, with the ``errstate`` that silences them, took 8 us of a 90 us
gradient (mushrooms, float32, ``d = 112``); one compiled call takes 1.7 us. The operations
are NumPy's and torch's, in their order and in the point's dtype (the constants rounded to it
first, as both round a Python scalar; no fused multiply-add), so the bits are theirs, overflows
and NaN included (checked against each GLM's ``reg_grad`` in ``tests/problems/``).

A GLM names its regulariser in ``KERNEL_REG``; one that writes its own ``reg_grad`` without
naming one has none here, and keeps NumPy's or torch's form.
"""

# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np

from streams.compiled import numba

__all__ = ["REGS", "available", "reg_grad"]

#: The regularisers this module computes, by the name a GLM gives in ``KERNEL_REG``.
REGS = {"l2": 0, "nonconvex": 1}


def available(name: str | None) -> bool:
    """Whether the regulariser ``name`` is computed here (numba installed)."""
    return numba is not None and name in REGS


def reg_grad(name: str, x: np.ndarray, lam: float) -> np.ndarray:
    """The gradient of regulariser ``name`` at the rows of ``x`` (float32 or float64, any
    shape), a fresh array in ``x``'s dtype."""
    x = np.ascontiguousarray(x)
    kind = x.dtype.type
    out = np.empty(x.shape, x.dtype)
    code = REGS[name]
    c = kind(lam) if code == 0 else kind(2.0 * lam)  # Python's product first, as written
    _reg_grad(code, x.reshape(-1), c, kind(1.0), out.reshape(-1))
    return out


if numba is not None:

    @numba.njit(cache=True, nogil=True, error_model="numpy")  # no fastmath: IEEE, in order
    def _reg_grad(code, x, c, one, out):
        if code == 0:
            for k in range(x.size):
                out[k] = c * x[k]
        else:
            for k in range(x.size):
                v = x[k]
                t = one + v * v
                out[k] = c * v / (t * t)
