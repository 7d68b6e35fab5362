"""GLM gradients at ``R`` points in one pass, with ``R`` fixed when the kernel is compiled.

A batch of ``R`` runs (:mod:`problems.batched`) needs every node's gradient at ``R`` points per
step. The kernels of :mod:`problems.glm_kernels` loop over the points at run time, so each
stored entry costs a loop of ``R`` loads and adds through memory, and the sparse library
products (SciPy's, torch's) are scalar loops of the same kind. Here each width ``W`` has its
own kernel, written out with ``W`` scalar accumulators: a row's ``W`` margins stay in registers
while its entries stream past, and LLVM's SLP vectoriser packs the ``W`` adds of an entry into
a few vector instructions. SLP is off by default in numba (it once miscompiled some code), so
these kernels, and only these, are compiled with it on (:func:`streams.compiled.
compile_vectorised`); a test checks them against the generic kernel on every width: the
gradients bit for bit, the losses to 4 ulps.

Per node, rows go in chunks of :data:`CHUNK` rows: the chunk's ``W`` margins per row, then
``phi'`` of all of them in one loop the loop vectoriser handles (:func:`problems.glm_kernels.
_dphi_points`), then the scatter of each row's ``W`` weights into the node's ``(d, W)`` sums.
Each lane's arithmetic is the generic kernel's, in the same order (a margin sums its row's
entries in storage order; the sums take the rows in order), so the gradients are the same, bit
for bit; the losses (logged values only) differ by an ulp where the generic kernel, compiled
with reassociation, reorders the loss's polynomial. The loss itself has no library call
(:func:`problems.glm_kernels._phi_points`), so its loop vectorises: w8a, 12 points, a pass with
the losses 5.1 ms against 3.5 without (with ``math.log1p``: 7.7).

Measured through ``GLM.grad_points`` on a 2-core AMD EPYC, one thread, ``R = 12``,
float64 (ms; the generic kernel, then the fastest library engine, in brackets): mushrooms 0.58
(1.77; torch's sparse 0.97), phishing 1.00 (3.05; torch's sparse 1.76), a9a 1.78 (5.44; torch's
sparse 3.20), w8a 3.10 (7.53; torch's sparse 5.05). The entries are indexed unsigned
(:func:`problems.glm_kernels._u`; with signed indices: 0.97, 1.37, 2.20 and 3.67). The engine
is still chosen by measurement (:meth:`problems.glm.GLM._choose_points_engine`, engine
``lanes``).

Widths are multiples of 4 up to :data:`MAX_WIDTH` (each width costs about 2 s to compile, once
per machine: numba caches it); ``R`` points run on the next width up, the lanes beyond ``R``
at a zero point whose results are dropped. The kernels live in :mod:`problems.glm_lanes_kernels`,
written by :mod:`problems.glm_lanes_gen` (``python -m problems.glm_lanes_gen`` rewrites the
file; a test checks that it is current).
"""

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import compile_vectorised, launch, numba

__all__ = ["MAX_WIDTH", "WIDTHS", "available", "grad_points", "width"]

MAX_WIDTH = 16
WIDTHS = tuple(range(4, MAX_WIDTH + 1, 4))
#: Rows per chunk: their margins, then their ``phi'``, then their sums, while they are in L1.
CHUNK = 128
DTYPES = (torch.float32, torch.float64)


def width(R: int) -> int | None:
    """The kernel width that serves ``R`` points (``None`` above :data:`MAX_WIDTH`)."""
    w = -(-R // 4) * 4
    return w if 4 <= w <= MAX_WIDTH else None


def available(R: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a kernel serves ``R`` points of ``dtype`` on ``device``."""
    return numba is not None and device.type == "cpu" and dtype in DTYPES and width(R) is not None


#: ``(width, argument dtypes)`` whose kernel is ready in this process: a look-up here instead of
#: numba's typing of 14 arguments (0.3 ms a call)
_READY: set[tuple] = set()


def grad_points(
    csr: tuple, b: torch.Tensor, rows: torch.Tensor, ptr: torch.Tensor, P: torch.Tensor,
    code: int, with_loss: bool, reg: torch.Tensor | np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(R, m, d)`` sums and ``(m, R)`` mean losses (zeros without ``with_loss``): entry
    ``[r, i]`` of the sums is :func:`problems.glm_kernels.grad_points`' entry ``[i, :, r]`` plus
    ``reg[r]`` (``(R, d)``, the regulariser's gradient at each point, a tensor or a NumPy
    array in the points' dtype; None: zeros), for CSR rows ``csr``
    (:func:`problems.glm_kernels.pack`) and the loss ``code``, on the kernel of width
    :func:`width` ``(R)``. Each node's ``(d, W)`` sums stay in a buffer of its own and
    are written out run by run with ``reg`` added, the one addition a separate transpose and
    add made (the same bits), while they are in cache: no ``(m, d, W)`` array, no second pass
    (w8a, 12 points, one thread: the transpose and add took 0.39 ms of a batched step's 7.5)."""
    from problems import glm_lanes_kernels as K

    indptr, indices, values, unit, d = csr
    R = P.shape[0]
    W = width(R)
    Pn = P.detach().numpy()
    if W == R:  # the points by columns: NumPy's transposed copy (a torch one took 2.5x longer)
        PT = np.ascontiguousarray(Pn.T)
    else:
        PT = np.zeros((d, W), Pn.dtype)
        PT[:, :R] = Pn.T
    m = ptr.numel() - 1
    out = torch.empty(R, m, d, dtype=P.dtype)
    lout = torch.empty(m, W, dtype=P.dtype)
    if reg is None:
        regn = np.zeros((R, d), Pn.dtype)
    else:
        regn = reg if isinstance(reg, np.ndarray) else reg.contiguous().numpy()
        regn = np.ascontiguousarray(regn)
    zero = regn.dtype.type(0)
    args = (indptr, indices, values, unit, b.numpy(), rows.numpy(), ptr.numpy(),
            PT.reshape(-1), code, with_loss, zero, CHUNK, regn, out.numpy(),
            lout.numpy())  # fmt: skip
    kernel = getattr(K, f"points_{W}")
    ready = (W, indices.dtype, values.dtype, args[4].dtype, args[7].dtype)
    if ready not in _READY:
        compile_vectorised(kernel, args)
        _READY.add(ready)
    launch(kernel, *args)
    return out, lout[:, :R]
