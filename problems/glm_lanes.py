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

Per node, rows go in chunks of at most :data:`CHUNK` rows (:func:`plan`, built once per
problem): the chunk's ``W`` margins per row, then ``phi'`` of all of them in one loop the loop
vectoriser handles (:func:`problems.glm_kernels._dphi_points`), then the sums column by
column, each column's ``W`` sums held in registers while its entries in the chunk stream past
(the chunk's entries by column, CSC), and stored back into the node's ``(d, W)`` sums. Each
lane's arithmetic is the generic kernel's, in the same order (a margin sums its row's entries
in storage order; a column's sum takes the rows in order, chunk after chunk), so the gradients
are the same, bit for bit; the losses (logged values only) differ by an ulp where the generic
kernel, compiled with reassociation, reorders the loss's polynomial. The loss itself has no
library call (:func:`problems.glm_kernels._phi_points`), so its loop vectorises: w8a, 12
points, a pass with the losses 5.1 ms against 3.5 without (with ``math.log1p``: 7.7).

A sum of one row or column is a chain of dependent additions (4 cycles each on the AMD EPYC's
FMA), so :data:`GROUP` rows (columns) are summed together, over the entries they have in
common and then each one's rest: independent chains the core overlaps. Each chunk takes its
rows, and its columns, longest first, so that the rows summed together have nearly the same
length. Against summing each row's products into the node's sums as the row is read (a
read-modify-write of ``g`` per entry) and one row at a time, through ``GLM.grad_points`` on the
2-core AMD EPYC, ``R = 12``, float64, ms, side by side: one thread, mushrooms 0.53-0.57 ->
0.44-0.47, phishing 0.92-1.01 -> 0.76-0.78, a9a 1.68-1.82 -> 1.28, w8a 2.93-3.06 -> 2.20-2.24
(float32: 0.46 -> 0.38, 0.78-0.81 -> 0.65-0.66, 1.50-1.52 -> 1.17-1.19, 2.82-2.90 ->
1.86-1.98); two threads, 0.28 -> 0.26, 0.48 -> 0.44, 0.87 -> 0.65, 1.51 -> 1.01. Chunks of
256 rows measured best among 128 to 4096 (w8a: 1.13, 1.05, 1.09, 1.10 ms for 128, 256, 512
and 1024 on two threads; 1.18 and 1.22 for 2048 and 4096). The entries are indexed unsigned
(:func:`problems.glm_kernels._u`: numba wraps a signed index around when it is negative, an
and, a shift and an add per access). The engine is still chosen by measurement
(:meth:`problems.glm.GLM._choose_points_engine`, engine ``lanes``).

Where a pass's time goes (mushrooms, 12 points, float64, one thread, each part in a compiled
loop over every node and chunk): the margins 141 us, ``phi'`` 118 us, the column sums 150 us
(phishing: 283, 159, 337); over ``R`` points a pass takes about 130 + 23 R us (R = 4 to 16).
Pattern tables (the "four Russians": the columns cut into blocks with few distinct row
patterns, each pattern's sum of the points taken once per pass, a row's margin then one
look-up per block and its column sums added per pattern) were tried and not kept. With 2 to 4
times fewer additions per row (5 to 15 look-ups against 21 to 30 non-zeros) mushrooms and
phishing ran 0.8 to 1.2 times this kernel's time, as a kernel of their own or as a matrix of
patterns through this one: the work per row and ``phi'`` hold the pass, not the additions.

Widths are multiples of 4 up to :data:`MAX_WIDTH` (each width costs 8 to 17 s to compile, the
wider the longer, once per machine: numba caches it); ``R`` points run on the next width up,
the lanes beyond ``R`` at a zero point whose results are dropped. The kernels live in
:mod:`problems.glm_lanes_kernels`, written by :mod:`problems.glm_lanes_gen` (``python -m
problems.glm_lanes_gen`` rewrites the file; a test checks that it is current).
"""

from __future__ import annotations

import numpy as np
import torch

from streams.compiled import compile_vectorised, launch, numba

__all__ = ["MAX_WIDTH", "WIDTHS", "available", "grad_points", "pieces", "plan", "width"]

MAX_WIDTH = 16
WIDTHS = tuple(range(4, MAX_WIDTH + 1, 4))
#: Most rows per chunk: their margins, then their ``phi'``, then their sums column by column,
#: while the chunk's ``W`` margins per row are in cache (256 rows x 16 points x 8 bytes: 32 KiB).
CHUNK = 256
#: Rows (columns) whose sums advance together, as independent chains of additions.
GROUP = 4
DTYPES = (torch.float32, torch.float64)


def width(R: int) -> int | None:
    """The kernel width that serves ``R`` points in one call (``None`` above
    :data:`MAX_WIDTH`)."""
    w = -(-R // 4) * 4
    return w if 4 <= w <= MAX_WIDTH else None


def pieces(R: int) -> list[tuple[int, int]]:
    """The ranges of ``R`` points that take one kernel call each: :data:`MAX_WIDTH` points a
    call, the rest in the last (20 points: 16 on the widest kernel, 4 on the narrowest)."""
    return [(r, min(r + MAX_WIDTH, R)) for r in range(0, R, MAX_WIDTH)]


def available(R: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the kernels serve ``R`` points of ``dtype`` on ``device`` (any ``R >= 1``, in
    :func:`pieces` above :data:`MAX_WIDTH`)."""
    return numba is not None and device.type == "cpu" and dtype in DTYPES and R >= 1


#: ``(width, argument dtypes)`` whose kernel is ready in this process: a look-up here instead of
#: numba's typing of 14 arguments (0.3 ms a call)
_READY: set[tuple] = set()


def plan(csr: tuple, rows: torch.Tensor, ptr: torch.Tensor, chunk: int = CHUNK) -> tuple:
    """The order in which the kernels take the rows ``rows`` of nodes ``ptr`` and their
    entries, built once per problem with NumPy (no loop in Python): each node's rows in chunks
    of at most ``chunk`` rows, as even as they go; per chunk, its rows by length (longest
    first, so that the rows taken together have nearly the same length), and its entries by
    column (CSC: each column's entries by row, columns by count, longest first). Returns
    ``(nch, cpos, kp, ccol, cptr, crow, cval, rperm)``: node ``i``'s chunks ``nch[i]`` to
    ``nch[i + 1]``; chunk ``c``'s rows at positions ``cpos[c]`` to ``cpos[c + 1]`` of
    ``rows``, taken in the order ``cpos[c] + rperm[cpos[c]:cpos[c + 1]]``; its columns
    ``ccol[kp[c]:kp[c + 1]]``, column ``t``'s entries ``cptr[t]`` to ``cptr[t + 1]`` of
    ``crow`` (a row's place in its chunk) and ``cval`` (their values; empty for binary rows)."""
    indptr, indices, values, unit, d = csr
    rows = rows.numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
    ptr = (ptr.numpy() if isinstance(ptr, torch.Tensor) else np.asarray(ptr)).astype(np.int64)
    sizes = np.diff(ptr)
    per = -(-sizes // chunk)  # chunks per node (none for a node with no row)
    nch = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    node = np.repeat(np.arange(sizes.size), per)
    k = np.arange(nch[-1]) - nch[:-1][node]  # a chunk's place in its node
    cpos = np.append(ptr[node] + sizes[node] * k // per[node], ptr[-1]).astype(np.int64)
    of = np.repeat(np.arange(nch[-1]), np.diff(cpos))  # each position's chunk
    local = np.arange(of.size) - cpos[of]
    start = indptr[rows].astype(np.int64)
    length = indptr[rows + 1] - start
    rperm = local[np.lexsort((local, -length, of))].astype(np.int32)
    # every entry of every held row: its position, chunk, place in chunk, column, value
    pos = np.repeat(np.arange(of.size), length)
    p = start[pos] + np.arange(pos.size) - np.repeat(np.cumsum(length) - length, length)
    col = indices[p].astype(np.int64)
    key = of[pos] * d + col
    order = np.lexsort((local[pos], key))  # by chunk and column, each column's rows in order
    key = key[order]
    heads = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.append(heads, key.size))
    gchunk, gcol = key[heads] // d, key[heads] % d
    by = np.lexsort((gcol, -counts, gchunk))  # each chunk's columns, longest first
    cptr = np.concatenate([[0], np.cumsum(counts[by])]).astype(np.int64)
    entry = order[np.repeat(heads[by] - cptr[:-1], counts[by]) + np.arange(key.size)]
    crow = local[pos[entry]].astype(np.int32)
    cval = values[:0] if unit else values[p[entry]]
    kp = np.searchsorted(gchunk[by], np.arange(nch[-1] + 1)).astype(np.int64)
    return (nch, cpos, kp, gcol[by].astype(np.int32), cptr, crow, cval, rperm)


def grad_points(
    csr: tuple, b: torch.Tensor, rows: torch.Tensor, ptr: torch.Tensor, P: torch.Tensor,
    code: int, with_loss: bool, reg: torch.Tensor | np.ndarray | None = None,
    order: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(R, m, d)`` sums and ``(m, R)`` mean losses (zeros without ``with_loss``): entry
    ``[r, i]`` of the sums is :func:`problems.glm_kernels.grad_points`' entry ``[i, :, r]`` plus
    ``reg[r]`` (``(R, d)``, the regulariser's gradient at each point, a tensor or a NumPy
    array in the points' dtype; None: zeros), for CSR rows ``csr``
    (:func:`problems.glm_kernels.pack`) and the loss ``code``, on the kernel of width
    :func:`width` ``(R)`` (above :data:`MAX_WIDTH`, one call per :func:`pieces`: each point
    is a lane of its own, so the same numbers). Each node's ``(d, W)`` sums stay in a buffer
    of its own and are written out run by run with ``reg`` added, the one addition a separate
    transpose and add made (the same bits), while they are in cache: no ``(m, d, W)`` array,
    no second pass (w8a, 12 points, one thread: the transpose and add took 0.39 ms of a
    batched step's 7.5).
    ``order``: :func:`plan` ``(csr, rows, ptr)`` (built here when None)."""
    indptr, indices, values, unit, d = csr
    R = P.shape[0]
    Pn = P.detach().numpy()
    m = ptr.numel() - 1
    out = torch.empty(R, m, d, dtype=P.dtype)
    if reg is None:
        regn = np.zeros((R, d), Pn.dtype)
    else:
        regn = reg if isinstance(reg, np.ndarray) else reg.contiguous().numpy()
        regn = np.ascontiguousarray(regn)
    if order is None:
        order = plan(csr, rows, ptr)
    head = (indptr, indices, values, unit, b.numpy(), rows.numpy(), ptr.numpy(), order)
    spans = pieces(R)
    if len(spans) == 1:
        return out, _call(head, Pn, code, with_loss, regn, out.numpy())
    L = torch.empty(m, R, dtype=P.dtype)  # each piece's points are its own lanes: the same sums
    for r0, r1 in spans:
        L[:, r0:r1] = _call(head, Pn[r0:r1], code, with_loss, regn[r0:r1], out.numpy()[r0:r1])
    return out, L


def _call(head: tuple, Pn: np.ndarray, code: int, with_loss: bool, regn: np.ndarray,
          out: np.ndarray) -> torch.Tensor:  # fmt: skip
    """One kernel call for the points ``Pn`` (at most :data:`MAX_WIDTH`), their sums written
    into ``out``; returns their ``(m, R)`` losses."""
    from problems import glm_lanes_kernels as K

    R, d = Pn.shape
    W = width(R)
    if W == R:  # the points by columns: NumPy's transposed copy (a torch one took 2.5x longer)
        PT = np.ascontiguousarray(Pn.T)
    else:
        PT = np.zeros((d, W), Pn.dtype)
        PT[:, :R] = Pn.T
    lout = np.empty((out.shape[1], W), Pn.dtype)
    zero = regn.dtype.type(0)
    args = (*head, PT.reshape(-1), code, with_loss, zero, regn, out, lout)
    kernel = getattr(K, f"points_{W}")
    ready = (W, head[1].dtype, head[2].dtype, args[4].dtype, args[8].dtype)
    if ready not in _READY:
        compile_vectorised(kernel, args)
        _READY.add(ready)
    launch(kernel, *args)
    return torch.from_numpy(lout[:, :R])
