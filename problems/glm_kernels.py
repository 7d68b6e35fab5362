"""Compiled CPU kernels for GLM gradients and margins: one pass over each node's rows.

A node's gradient ``(1/|S_i|) sum_{j in S_i} phi'(a_j^T x_i, b_j) a_j + grad R(x_i)`` needs every
row twice, once for its margin and once for the weighted sum. Two library calls (a gemv for all
margins, then a batched gemv for all sums) stream the whole data set from memory twice, and on
this class of CPU MKL's gemv runs far below the memory bandwidth. These kernels instead take the
nodes in parallel (``prange``) and make one pass over a node's rows from memory: a sparse
row's margin, ``phi'`` and share of the sum are computed while the row is in L1, a chunk of
dense rows (about 128 KiB) has its margins, then its ``phi'``, then its sums computed while it
is in L2, so the data crosses the memory bus once. Rows are named by a
row list (``rows[ptr[i]:ptr[i+1]]`` belong to node ``i``), so the full gradient (each node's own
rows) and a minibatch (the sampled rows) are the same call. Dense rows are an ``(N, d)`` array;
sparse rows are CSR arrays (int32 column indices; no values at all for binary features), and
the work is then proportional to the non-zeros.

Reassociation lets the compiler vectorise the dot products; the result is
deterministic for a given machine and ``d``, and a node's gradient does not depend on which other
nodes are held, so a simulated run and a distributed run compute the same numbers.

Numba is optional at import: :func:`available` is False without it, and the GLM then uses its
torch path (also its path on CUDA and for other dtypes).
"""

# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import math

import numpy as np
import torch

from streams.compiled import launch, numba

__all__ = [
    "LOSSES", "available", "grad", "grad_arrays", "grad_csc_arrays", "grad_points", "margins",
    "pack", "pack_binary", "pack_columns", "pack_csc", "point_grad_plan",
]  # fmt: skip

# Dense rows go through a node in chunks of about this many bytes (they stay in L2 between
# the chunk's margins and its sums).
CHUNK_BYTES = 128 * 1024
# The losses the kernels know: a GLM subclass names its own in ``KERNEL_LOSS``.
LOSSES = {"logistic": 0, "squared": 1, "sigmoid-squared": 2}
DTYPES = (torch.float32, torch.float64)


def available(loss: str | None, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the kernels serve this loss, dtype and device."""
    return numba is not None and loss in LOSSES and dtype in DTYPES and device.type == "cpu"


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def pack(A: torch.Tensor | None, csr: tuple | None, d: int) -> tuple:
    """The kernels' view of the data: ``(A,)`` for dense rows (an ``(N, d)`` tensor), or
    ``(indptr, indices, values, unit, d)`` for CSR rows (``csr`` = torch's crow, col and value
    tensors). Column indices are kept as int32 when ``d`` allows (a third of the bytes a
    non-zero costs); when every stored value is 1 (binary features, as in most LIBSVM sets) the
    values are not read at all (``unit``): a product by 1 is exact, so the gradient is bit for
    bit the one computed with them."""
    if A is not None:
        return (_np(A),)
    crow, col, val = (_np(t) for t in csr)
    small = d < 2**31
    indices = col.astype(np.int32) if small else col
    unit = bool(val.size) and bool((val == 1).all())
    values = val[:0] if unit else val
    return (crow, indices, values, unit, d)


def pack_binary(A: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Dense rows whose non-zeros all take one value ``c`` (binary features, or binary ones scaled,
    as in phishing: every row's 30 non-zeros are ``1/sqrt(30)``) as ``(B, c)``: ``B`` the 0/1
    pattern in bytes, a quarter of float32's and an eighth of float64's. The dense kernel then
    computes each margin as ``c sum_k B_jk x_k`` and each row's share of the sum as ``(c s_j) B_j``:
    the same numbers to rounding (the margins' products are rounded once at the end instead of per
    entry; with ``c = 1`` the products are the same, but the compiler may group a vectorised sum of
    bytes differently from one of floats). None for other rows (two values or more, none, or not
    finite). What that saves is the footprint: phishing in float32 is 3 MB, more than a core's L2
    here, and 0.75 MB as bytes; the method's small torch calls after the gradient then find their
    memory in cache (EF21's step after the gradient with a free gradient: 126 us against 172 in
    float32, 78 against 147 in float64)."""
    if A.ndim != 2 or A.size == 0:
        return None
    mask = A != 0
    nz = A[mask]
    if nz.size == 0 or not np.isfinite(nz[0]) or not (nz == nz[0]).all():
        return None
    return mask.view(np.uint8), float(nz[0])


#: The dense engine's full gradients read each node's rows by columns as well
#: (:func:`pack_columns`) while the rows take at most this many bytes (the copy as many):
#: beyond the caches a gradient then reads two copies from memory instead of one. Measured
#: (rows as bytes, two threads, medians): a9a's 4 MB 0.53 ms against 0.81 for the rows alone,
#: w8a's 15 MB 3.5 ms against 3.2.
COLUMNS_MAX_BYTES = 1 << 23


def pack_columns(A: np.ndarray, rows: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Each node's rows by columns, node after node: node ``i``'s rows ``rows[ptr[i]:ptr[i+1]]``
    of ``A`` (floats, or :func:`pack_binary`'s bytes) as a ``(d, m_i)`` block starting at
    ``d ptr[i]`` of one flat array. Nodes of equal row counts are copied together (one copy
    per distinct count)."""
    d = A.shape[1]
    counts = np.diff(ptr)
    T = np.empty(int(ptr[-1]) * d, dtype=A.dtype)
    for m in np.unique(counts):
        nodes = np.flatnonzero(counts == m)
        if m == 0:
            continue
        idx = ptr[nodes][:, None] + np.arange(m)  # (k, m) positions in rows
        blocks = A[rows[idx]].transpose(0, 2, 1)  # (k, d, m)
        at = (d * ptr[nodes])[:, None] + np.arange(d * m)
        T[at] = blocks.reshape(nodes.size, d * m)
    return T


def grad(
    data: tuple,
    b: torch.Tensor,
    rows: torch.Tensor,
    ptr: torch.Tensor,
    X: torch.Tensor,
    R: torch.Tensor,
    loss: str,
    Y: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(m, d)``: row ``i`` is ``(1/c_i) sum_{j in rows[ptr[i]:ptr[i+1]]} phi'(a_j^T x_i, b_j)
    a_j + R_i`` with ``c_i = ptr[i+1] - ptr[i]``; with ``Y``, the difference of that sum at
    ``x_i`` and at ``y_i`` (each row read once for both points) plus ``R_i``.

    Args:
        data: from :func:`pack`.
        b: ``(N,)`` labels. rows, ptr: int64 row list and node pointers.
        X, Y: ``(m, d)`` points, or ``(1, d)`` for one point shared by every node.
        R: the regulariser's term, ``(m, d)`` or ``(1, d)`` (shared).
        loss: a key of :data:`LOSSES`.
    """
    Yn = None if Y is None else _np(Y)
    out = grad_arrays(data, _np(b), _np(rows), _np(ptr), _np(X), _np(R), LOSSES[loss], Yn)
    return torch.from_numpy(out)


def grad_arrays(
    data: tuple,
    b: np.ndarray,
    rows: np.ndarray,
    ptr: np.ndarray,
    X: np.ndarray,
    R: np.ndarray,
    code: int,
    Y: np.ndarray | None = None,
    scale: float = 1.0,
    cols: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`grad` on NumPy arrays (``code``: the loss's value in :data:`LOSSES`), returning a
    fresh NumPy array: what a caller holding its arrays as NumPy's calls, with none of the
    conversions (a microsecond or more each, after a gradient's data pass). Dense rows may
    be :func:`pack_binary`'s bytes, ``data = (B,)`` with ``scale = c``.

    ``cols``: for every held row of dense rows (``rows`` and ``ptr`` those of
    :func:`pack_columns`), the same rows by columns. Each node's margins are then ``d``
    passes of ``z += x_k T_k`` down its columns (no sum across a vector per row: a row of
    phishing's 68 entries is four vectors and a remainder, and its dot product waits on its
    sum), then its weights, then the sums ``g += s_j a_j`` along its rows as without
    ``cols``: the same gradients to rounding. Measured (float32, two threads, median of 15
    interleaved rounds) on phishing's rows as bytes: 209 us against 293 for the rows alone;
    on mushrooms': 216 us against 274 for the rows alone and 293 for the ``csc`` engine."""
    kernel, head, tail, shape = _grad_call(data, b, rows, ptr, code, X.dtype, scale, cols)
    out = np.empty(shape, dtype=X.dtype)
    points = (X, X.shape[0] == 1, X if Y is None else Y, Y is not None and Y.shape[0] == 1)
    launch(kernel, *head, *points, Y is not None, R, R.shape[0] == 1, *tail, out)
    return out


def _grad_call(data, b, rows, ptr, code, dtype, scale, cols) -> tuple:
    """:func:`grad_arrays`' kernel, its arguments before the points and after the regulariser's
    term, and the output's shape."""
    m = ptr.size - 1
    d = data[-1] if len(data) > 1 else data[0].shape[1]
    kind = np.dtype(dtype).type
    zero = kind(0)
    if len(data) > 1:
        return _sparse_grad, (*data[:4], b, rows, ptr), (code, zero), (m, d)
    T = data[0].reshape(-1)[:0] if cols is None else cols
    chunk = max(8, CHUNK_BYTES // (d * np.dtype(dtype).itemsize))  # the rows a chunk holds
    return _dense_grad, (data[0], kind(scale), T, b, rows, ptr), (code, zero, chunk), (m, d)


def point_grad_plan(
    data: tuple, b: np.ndarray, rows: np.ndarray, ptr: np.ndarray, code: int, dtype,
    scale: float = 1.0, cols: np.ndarray | None = None, csc: tuple | None = None,
):  # fmt: skip
    """``f(X, R)``: :func:`grad_arrays` (or, with ``csc``, :func:`grad_csc_arrays` on that view)
    of the rows ``rows`` at one point ``X`` shared by every node, ``(1, d)`` contiguous in
    ``dtype``, with the regulariser's term ``R`` ``(1, d)``: the same kernel call, with the
    arguments that do not change built once (what every step of a method asks of a small
    problem: the Python around a 53 us gradient took 22 us, mushrooms float32 on two threads)."""
    if csc is not None:
        kernel, head, tail, shape = _csc_call(csc, dtype, code)

        def call(X, R):
            out = np.empty(shape, dtype=X.dtype)
            launch(kernel, *head, X, True, X, True, False, R, True, *tail, out)
            return out

        return call
    kernel, head, tail, shape = _grad_call(data, b, rows, ptr, code, dtype, scale, cols)

    def call(X, R):
        out = np.empty(shape, dtype=X.dtype)
        launch(kernel, *head, X, True, X, False, False, R, True, *tail, out)
        return out

    return call


def pack_csc(Bt, unit: bool, bl: np.ndarray, ptr: np.ndarray) -> tuple:
    """The ``csc`` engine's view of the held rows, from the transposed block-diagonal design
    ``Bt`` (SciPy CSR, ``m d`` rows: row ``i d + k`` lists the held rows of node ``i`` with an
    entry in column ``k``, ascending, and their values), whether the rows are binary
    (``unit``), their labels ``bl`` in held order and the node pointers ``ptr``: ``(colptr,
    rowidx, values, unit, bl, ptr, d)``, column ``k`` of node ``i`` holding the entries
    ``colptr[i d + k]:colptr[i d + k + 1]``, its rows as positions within the node
    (``rowidx``: uint16 where every node holds at most 65,536 rows, else int32) with their
    values in ``bl``'s dtype (none for binary rows)."""
    ptr = np.asarray(ptr, np.int64)
    m = ptr.size - 1
    d = Bt.shape[0] // m
    if not Bt.has_sorted_indices:
        Bt.sort_indices()
    colptr = Bt.indptr.astype(np.int64)
    node = np.repeat(np.arange(m * d) // d, np.diff(colptr))
    wide = np.diff(ptr).max(initial=0) > 1 << 16
    rowidx = (Bt.indices - ptr[node]).astype(np.int32 if wide else np.uint16)
    vals = bl[:0] if unit else Bt.data.astype(bl.dtype)
    return (colptr, rowidx, vals, unit, bl, ptr, d)


def grad_csc_arrays(
    cdata: tuple, X: np.ndarray, R: np.ndarray, code: int, Y: np.ndarray | None = None
) -> np.ndarray:
    """:func:`grad_arrays` for every held row on the ``csc`` view ``cdata``
    (:func:`pack_csc`). Each node's margins are summed column by column (a row's terms in the
    order of its columns, as the CSR kernel sums them), then its weights, then each coordinate
    of its gradient as one sum down a column, four columns at a time: no branch per row, where
    rows of uneven length make the CSR kernel's loops mispredict their exits (w8a float64, 20
    nodes, two threads: 0.61-0.76 ms against 1.12-1.47 ms). The sums run in float64 and are
    rounded once: in float64 the same additions in the same order as the CSR kernel (the same
    bits); in float32 the CSR kernel rounds after each addition, so the two differ by that
    rounding (these sums are the more accurate)."""
    kernel, head, tail, shape = _csc_call(cdata, X.dtype, code)
    out = np.empty(shape, dtype=X.dtype)
    Yp = X if Y is None else Y
    args = (X, X.shape[0] == 1, Yp, Yp.shape[0] == 1, Y is not None, R, R.shape[0] == 1)
    launch(kernel, *head, *args, *tail, out)
    return out


def _csc_call(cdata: tuple, dtype, code: int) -> tuple:
    """:func:`grad_csc_arrays`' kernel, its arguments before the points and after the
    regulariser's term, and the output's shape."""
    colptr, rowidx, vals, unit, bl, ptr, d = cdata
    head = (colptr, rowidx, vals, unit, bl, ptr)
    return _csc_grad, head, (code, np.dtype(dtype).type(0)), (ptr.size - 1, d)


def grad_points(
    data: tuple, b: torch.Tensor, rows: torch.Tensor, ptr: torch.Tensor, P: torch.Tensor, loss: str,
    with_loss: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(m, d, R)`` and ``(m, R)``: entry ``[i, :, r]`` is ``(1/c_i) sum_{j in
    rows[ptr[i]:ptr[i+1]]} phi'(a_j^T p_r, b_j) a_j`` and entry ``[i, r]`` the mean of
    ``phi(a_j^T p_r, b_j)`` over the same rows, for each of ``R`` points ``P`` ``(R, d)``: one
    pass over each node's rows serves all ``R`` points (a row's ``R`` margins, ``phi'`` and
    scatter while it is in L1; the innermost loops run over the points). Without
    ``with_loss`` the losses are not computed (zeros): they cost a logarithm per row and
    point. No regulariser term: the caller adds it."""
    m = ptr.numel() - 1
    d = data[-1] if len(data) > 1 else data[0].shape[1]
    PT = P.T.contiguous()  # (d, R): a coordinate's R values side by side
    out = torch.empty(m, d, P.shape[0], dtype=P.dtype)
    lout = torch.empty(m, P.shape[0], dtype=P.dtype)
    zero = _np(out).dtype.type(0)
    args = (_np(b), _np(rows), _np(ptr), _np(PT), LOSSES[loss], with_loss, zero, _np(out),
            _np(lout))  # fmt: skip
    if len(data) > 1:
        launch(_sparse_points, *data[:4], *args)
    else:
        launch(_dense_points, data[0], *args)
    return out, lout


def margins(data: tuple, rows: torch.Tensor, ptr: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``(len(rows),)``: ``a_j^T x_i`` for every listed row ``j`` of node ``i``."""
    z = torch.empty(rows.numel(), dtype=X.dtype)
    zero = _np(z).dtype.type(0)
    args = (_np(rows), _np(ptr), _np(X), X.shape[0] == 1, zero, _np(z))
    if len(data) > 1:
        launch(_sparse_margins, *data[:4], *args)
    else:
        launch(_dense_margins, data[0], *args)
    return z


# ---------------------------------------------------------------------- compiled parts
if numba is not None:
    # Reassociation (and fused multiply-adds) let the dot products vectorise; no other
    # fast-math flag, so infinities and NaNs behave as in IEEE arithmetic.
    _FASTMATH = {"reassoc", "contract"}
    _jit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True)
    _pjit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True, parallel=True)
    # Sparse rows: no reassociation, which would vectorise a dozen-entry loop with gathers
    # (slower than scalar code on short rows).
    _sjit = numba.njit(cache=True, nogil=True)
    _spjit = numba.njit(cache=True, nogil=True, parallel=True)
    _prange = numba.prange
    _inline = numba.njit(inline="always", cache=True)
else:  # pragma: no cover
    _jit = _pjit = _sjit = _spjit = _inline = lambda f: f  # noqa: E731
    _prange = range


@_inline
def _u(i):
    """``i`` (a position, never negative) as an unsigned integer: numba wraps a signed index
    around when it is negative (a shift, an and and an add per access), an unsigned one it
    takes as it is. In the sparse loops, which index twice per stored entry, that wrap-around
    was a third of the time (mushrooms, the full gradient, float64: 0.22 -> 0.12 ms; the same
    numbers, bit for bit)."""
    return np.uint64(i)


@_inline
def _dphi(code, z, b):
    """``phi'(z, b)``: logistic ``-b sigmoid(-b z) = -b / (1 + exp(b z))`` (an overflow of
    ``exp`` gives the limit 0: the kernels keep IEEE infinities), squared ``z - b``, or
    sigmoid-squared ``-2 b s^2 (1 - s)`` with ``s = sigmoid(-b z)`` and ``1 - s = sigmoid(b z)``
    each from its own ``exp`` (no cancellation; an overflow again gives the limit 0)."""
    if code == 0:
        return -b / (1.0 + math.exp(b * z))
    if code == 2:
        s = 1.0 / (1.0 + math.exp(b * z))
        return -2.0 * b * s * s / (1.0 + math.exp(-b * z))
    return z - b


@_inline
def _phi(code, z, b):
    """``phi(z, b)``: logistic ``log(1 + exp(-b z))`` (written so that neither branch
    overflows), squared ``(z - b)^2 / 2``, sigmoid-squared ``sigmoid(-b z)^2``."""
    if code == 0:
        t = -b * z
        if t > 0:
            return t + math.log1p(math.exp(-t))
        return math.log1p(math.exp(t))
    if code == 2:
        s = 1.0 / (1.0 + math.exp(b * z))
        return s * s
    return 0.5 * (z - b) * (z - b)


if numba is not None:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _as_double(typingctx, bits):
        """The float64 whose bits are the int64 ``bits``."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], _ir.DoubleType())

        return _types.float64(_types.int64), codegen

    @_intrinsic
    def _as_bits(typingctx, x):
        """The int64 whose bits are the float64 ``x``."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], _ir.IntType(64))

        return _types.int64(_types.float64), codegen

    # The kernels of many points at once: no Python error checks in the loops (a division
    # check stops the loop over the points from vectorising); IEEE results instead.
    _ppjit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True, parallel=True,
                        error_model="numpy")  # fmt: skip
    _pointjit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True, error_model="numpy")
else:  # pragma: no cover
    _ppjit = _pointjit = _pjit

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts: k ln 2 is exact in the first
_LN2_LO = 1.90821492927058770002e-10
_TWO52 = 4503599627370496.0  # 2^52: adding it puts a small integer in a double's low bits


@_inline
def _exp(x):
    """``exp(x)`` with no library call and no integer conversion, so that a loop of them
    vectorises: ``x = k ln 2 + r`` with ``|r| <= ln 2 / 2``, ``exp(r)`` by its Taylor polynomial
    to degree 13 (truncation below 2e-17), times ``2^k`` in two factors built from their bits
    (``exp(709.7)`` finite, ``exp(710)`` inf, ``exp(-746)`` 0). Within one ulp of ``math.exp``
    (measured: at most 1.0000006 ulp over 600,000 points); NaN stays NaN, ``exp(inf) = inf``,
    ``exp(-inf) = 0``. A scalar ``exp`` per row and point was 40% of the kernels of many
    points; this one makes them 25% faster (w8a, 12 points, one thread: 5.9 -> 4.4 ms)."""
    y = 710.0 if x > 710.0 else x
    y = -746.0 if y < -746.0 else y
    k = math.floor(y * _LOG2E + 0.5)
    r = y - k * _LN2_HI - k * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    half = math.floor(k * 0.5)
    s1 = _as_double(_as_bits(k - half + 1023.0 + _TWO52) << 52)
    s2 = _as_double(_as_bits(half + 1023.0 + _TWO52) << 52)
    return p * s1 * s2


@_inline
def _dphi_points(code, z, b):
    """:func:`_dphi` with :func:`_exp` (the kernels of many points at once)."""
    if code == 0:
        return -b / (1.0 + _exp(b * z))
    if code == 2:
        s = 1.0 / (1.0 + _exp(b * z))
        return -2.0 * b * s * s / (1.0 + _exp(-b * z))
    return z - b


@_inline
def _log1p01(u):
    """``log1p(u)`` for ``0 <= u <= 1`` with no library call, so that a loop of them
    vectorises: ``2 atanh(s)`` with ``s = u / (2 + u) <= 1/3``, its odd series to ``s^33``
    (the next term is below ``2^-56`` of the sum)."""
    s = u / (2.0 + u)
    s2 = s * s
    p = 1.0 / 33.0
    p = p * s2 + 1.0 / 31.0
    p = p * s2 + 1.0 / 29.0
    p = p * s2 + 1.0 / 27.0
    p = p * s2 + 1.0 / 25.0
    p = p * s2 + 1.0 / 23.0
    p = p * s2 + 1.0 / 21.0
    p = p * s2 + 1.0 / 19.0
    p = p * s2 + 1.0 / 17.0
    p = p * s2 + 1.0 / 15.0
    p = p * s2 + 1.0 / 13.0
    p = p * s2 + 1.0 / 11.0
    p = p * s2 + 1.0 / 9.0
    p = p * s2 + 1.0 / 7.0
    p = p * s2 + 1.0 / 5.0
    p = p * s2 + 1.0 / 3.0
    p = p * s2 + 1.0
    return 2.0 * s * p


@_inline
def _phi_points(code, z, b):
    """:func:`_phi` with :func:`_exp` and :func:`_log1p01` (the kernels of many points at
    once): logistic ``max(t, 0) + log1p(exp(-|t|))``, ``t = -b z``, the two branches of
    :func:`_phi` in one expression (``inf`` at ``t = inf``, 0 at ``t = -inf``, NaN kept)."""
    if code == 0:
        t = -b * z
        a = t if t > 0 else -t
        return (t if t > 0 else 0.0) + _log1p01(_exp(-a))
    if code == 2:
        s = 1.0 / (1.0 + _exp(b * z))
        return s * s
    return 0.5 * (z - b) * (z - b)


@_jit
def _dense_dot(a, x, zero):
    s = zero
    for k in range(a.size):
        s += a[k] * x[k]
    return s


@_pointjit
def _dense_node(A, c, b, rows, lo, hi, x, y, diff, r, code, zero, chunk, z0, z1, bl, g):
    """The node's rows in chunks of ``chunk`` rows, each in three loops while it is in L2: the
    margins (dot products independent of each other) and the rows' labels side by side, then
    ``phi'`` of each (:func:`_dphi_points`, in a loop of its own, which vectorises), then the
    sum ``g += phi'_j a_j`` in row order. One loop doing all three per row made each row wait
    for its dot product, its ``exp`` and its sum in turn (full gradient, one thread: phishing
    0.59 -> 0.35 ms in float64, 0.64 -> 0.27 in float32; a9a float32 3.4 -> 1.3). A scalar
    ``math.exp`` per row with the labels read through the row list kept the second loop from
    vectorising (the kernel alone, two threads, phishing float64: 0.22-0.24 -> 0.14-0.16 ms).
    On rows far larger than the caches (w8a stored dense, 119 MB) one pass from memory was
    faster (8.5 -> 9.8 ms); the engine is measured, and dense storage is not chosen there.
    ``z0``, ``z1``, ``bl``: the chunk's margins (then their weights), its margins at ``y`` and
    its labels, buffers of at least ``min(chunk, hi - lo)`` entries. ``c``: the value of
    every non-zero when ``A`` holds :func:`pack_binary`'s bytes, else 1."""
    d = g.size
    for k in range(d):
        g[k] = r[k]
    inv = 1.0 / (hi - lo)
    cinv = inv * c
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        for j in range(c0, c1):
            a = A[_u(rows[j])]
            z0[j - c0] = c * _dense_dot(a, x, zero)
            if diff:
                z1[j - c0] = c * _dense_dot(a, y, zero)
            bl[j - c0] = b[_u(rows[j])]
        if diff:
            for t in range(c1 - c0):
                s = _dphi_points(code, z0[t], bl[t])
                s -= _dphi_points(code, z1[t], bl[t])
                z0[t] = s * cinv
        else:
            for t in range(c1 - c0):
                z0[t] = _dphi_points(code, z0[t], bl[t]) * cinv
        _dense_sums(A, rows, c0, c1, z0, g)


@_jit
def _dense_sums(A, rows, lo, hi, s, g):
    """``g += s_{j - lo} a_j`` for the rows ``lo..hi`` in row order, four rows per pass over ``g``
    (the same additions in the same order as one row at a time, with a quarter of the loads
    and stores of ``g``)."""
    d, j = g.size, lo
    while j + 4 <= hi:
        a0, a1 = A[_u(rows[j])], A[_u(rows[j + 1])]
        a2, a3 = A[_u(rows[j + 2])], A[_u(rows[j + 3])]
        s0, s1, s2, s3 = s[j - lo], s[j + 1 - lo], s[j + 2 - lo], s[j + 3 - lo]
        for k in range(d):
            t = g[k]
            t += s0 * a0[k]
            t += s1 * a1[k]
            t += s2 * a2[k]
            t += s3 * a3[k]
            g[k] = t
        j += 4
    while j < hi:
        a, sj = A[_u(rows[j])], s[j - lo]
        for k in range(d):
            g[k] += sj * a[k]
        j += 1


@_ppjit
def _dense_grad(A, c, T, b, rows, ptr, X, x_shared, Y, y_shared, diff, R, r_shared, code, zero, chunk, out):  # fmt: skip  # noqa: E501
    # the nodes in up to 64 runs of adjacent nodes, each with its buffers made once (a node's
    # own were 3000 allocations a gradient at n = 1000); T: the rows by columns as well
    # (grad_arrays' cols: margins by _cols_node), or empty (the rows alone, in chunks)
    m, cap, d = ptr.size - 1, 0, out.shape[1]
    by_cols = T.size > 0
    for i in range(m):
        cap = max(cap, ptr[i + 1] - ptr[i])
    cap = cap if by_cols else min(cap, chunk)
    runs = min(m, 64)
    for k in _prange(runs):
        z0, bl = np.empty(cap, dtype=out.dtype), np.empty(cap, dtype=out.dtype)
        z1 = np.empty(cap if diff else 0, dtype=out.dtype)
        for i in range(k * m // runs, (k + 1) * m // runs):
            x = X[0] if x_shared else X[i]
            y = Y[0] if y_shared else Y[i]
            r = R[0] if r_shared else R[i]
            lo, hi = ptr[i], ptr[i + 1]
            if by_cols:
                _cols_node(T, d * lo, A, c, b, rows, lo, hi, x, y, diff, r, code, zero, z0, z1,
                           bl, out[i])  # fmt: skip
            else:
                _dense_node(A, c, b, rows, lo, hi, x, y, diff, r, code, zero, chunk, z0, z1, bl,
                            out[i])  # fmt: skip


@_pointjit
def _cols_node(T, base, A, c, b, rows, lo, hi, x, y, diff, r, code, zero, z0, z1, bl, g):
    """One node's full gradient (:func:`grad_arrays` with ``cols``): its margins from its columns
    ``T[base:base + d m]``, four columns a pass, its weights, then its sums along its rows."""
    d, m = g.size, hi - lo
    for j in range(m):
        z0[_u(j)] = zero
        bl[_u(j)] = b[_u(rows[lo + j])]
    if diff:
        for j in range(m):
            z1[_u(j)] = zero
    k = 0
    while k + 4 <= d:
        p0, p1, p2, p3 = base + k * m, base + (k + 1) * m, base + (k + 2) * m, base + (k + 3) * m
        x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
        for j in range(m):
            z0[_u(j)] += (T[_u(p0 + j)] * x0 + T[_u(p1 + j)] * x1 + T[_u(p2 + j)] * x2
                          + T[_u(p3 + j)] * x3)  # fmt: skip
        if diff:
            y0, y1, y2, y3 = y[k], y[k + 1], y[k + 2], y[k + 3]
            for j in range(m):
                z1[_u(j)] += (T[_u(p0 + j)] * y0 + T[_u(p1 + j)] * y1 + T[_u(p2 + j)] * y2
                              + T[_u(p3 + j)] * y3)  # fmt: skip
        k += 4
    while k < d:
        p0, xk, yk = base + k * m, x[k], y[k]
        for j in range(m):
            z0[_u(j)] += T[_u(p0 + j)] * xk
        if diff:
            for j in range(m):
                z1[_u(j)] += T[_u(p0 + j)] * yk
        k += 1
    _weights(code, c, (1.0 / m) * c, z0, z1, bl, m, diff)
    for k in range(d):
        g[k] = r[k]
    _dense_sums(A, rows, lo, hi, z0, g)


@_inline
def _weights(code, c, cinv, z0, z1, bl, m, diff):
    """A node's weights in place of its margins: ``z0[j] = (phi'(c z0[j], bl[j]) -
    phi'(c z1[j], bl[j])) cinv`` for its ``m`` rows, without the second term unless ``diff``
    (the margins at ``x`` in ``z0``, at ``y`` in ``z1``)."""
    if diff:
        for j in range(m):
            s = _dphi_points(code, c * z0[_u(j)], bl[_u(j)])
            s -= _dphi_points(code, c * z1[_u(j)], bl[_u(j)])
            z0[_u(j)] = s * cinv
    else:
        for j in range(m):
            z0[_u(j)] = _dphi_points(code, c * z0[_u(j)], bl[_u(j)]) * cinv


@_sjit
def _sparse_node(indptr, indices, values, unit, b, rows, lo, hi, x, y, diff, r, code, zero, g):
    """One pass over the node's rows: a row's margin, ``phi'`` and scatter while its indices
    are in L1 (the same operations in the same order as a margins pass then a sum pass). The
    loops are written out for binary and valued rows (a branch per row costs a third)."""
    for k in range(g.size):
        g[k] = r[k]
    inv = 1.0 / (hi - lo)
    if unit:
        for j in range(lo, hi):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            s = zero
            for p in range(_u(p0), _u(p1)):
                s += x[_u(indices[p])]
            s = _dphi(code, s, b[row])
            if diff:
                t = zero
                for p in range(_u(p0), _u(p1)):
                    t += y[_u(indices[p])]
                s -= _dphi(code, t, b[row])
            s = s * inv
            for p in range(_u(p0), _u(p1)):
                g[_u(indices[p])] += s
    else:
        for j in range(lo, hi):
            row = rows[j]
            p0, p1 = indptr[row], indptr[row + 1]
            s = zero
            for p in range(_u(p0), _u(p1)):
                s += values[p] * x[_u(indices[p])]
            s = _dphi(code, s, b[row])
            if diff:
                t = zero
                for p in range(_u(p0), _u(p1)):
                    t += values[p] * y[_u(indices[p])]
                s -= _dphi(code, t, b[row])
            s = s * inv
            for p in range(_u(p0), _u(p1)):
                g[_u(indices[p])] += s * values[p]


@_spjit
def _sparse_grad(indptr, indices, values, unit, b, rows, ptr, X, x_shared, Y, y_shared, diff, R, r_shared, code, zero, out):  # fmt: skip  # noqa: E501
    csr = (indptr, indices, values, unit)
    for i in _prange(ptr.size - 1):
        x = X[0] if x_shared else X[i]
        y = Y[0] if y_shared else Y[i]
        r = R[0] if r_shared else R[i]
        lo, hi = ptr[i], ptr[i + 1]
        _sparse_node(*csr, b, rows, lo, hi, x, y, diff, r, code, zero, out[i])


@_sjit
def _csc_node(colptr, rowidx, vals, unit, bl, lo, hi, c0, x, y, diff, r, code, zero, g):
    """One node's gradient from its rows by columns (:func:`grad_csc_arrays`); its columns
    start at ``colptr[c0]``."""
    n, d = hi - lo, g.size
    z = np.empty(n, dtype=g.dtype)
    t = np.empty(n if diff else 0, dtype=g.dtype)
    w = np.empty(n, dtype=np.float64)
    for j in range(n):
        z[j] = zero
    for j in range(t.size):
        t[j] = zero
    for k in range(d):
        q0, q1 = _u(colptr[c0 + k]), _u(colptr[c0 + k + 1])
        xk, yk = x[k], y[k]
        if unit:
            for q in range(q0, q1):
                z[_u(rowidx[q])] += xk
            if diff:
                for q in range(q0, q1):
                    t[_u(rowidx[q])] += yk
        else:
            for q in range(q0, q1):
                z[_u(rowidx[q])] += vals[q] * xk
            if diff:
                for q in range(q0, q1):
                    t[_u(rowidx[q])] += vals[q] * yk
    inv = 1.0 / n
    for j in range(n):
        s = _dphi(code, z[j], bl[lo + j])
        if diff:
            s -= _dphi(code, t[j], bl[lo + j])
        w[j] = s * inv
    k = 0
    while k + 4 <= d:  # four columns' sums at once: four chains of additions side by side
        c = c0 + k
        p0, p1, p2 = _u(colptr[c]), _u(colptr[c + 1]), _u(colptr[c + 2])
        p3, e = _u(colptr[c + 3]), _u(colptr[c + 4])
        a0, a1 = np.float64(r[k]), np.float64(r[k + 1])
        a2, a3 = np.float64(r[k + 2]), np.float64(r[k + 3])
        both = min(p1 - p0, p2 - p1, p3 - p2, e - p3)
        if unit:
            for q in range(both):
                a0 += w[_u(rowidx[p0 + q])]
                a1 += w[_u(rowidx[p1 + q])]
                a2 += w[_u(rowidx[p2 + q])]
                a3 += w[_u(rowidx[p3 + q])]
            for q in range(p0 + both, p1):
                a0 += w[_u(rowidx[q])]
            for q in range(p1 + both, p2):
                a1 += w[_u(rowidx[q])]
            for q in range(p2 + both, p3):
                a2 += w[_u(rowidx[q])]
            for q in range(p3 + both, e):
                a3 += w[_u(rowidx[q])]
        else:
            for q in range(both):
                a0 += w[_u(rowidx[p0 + q])] * vals[p0 + q]
                a1 += w[_u(rowidx[p1 + q])] * vals[p1 + q]
                a2 += w[_u(rowidx[p2 + q])] * vals[p2 + q]
                a3 += w[_u(rowidx[p3 + q])] * vals[p3 + q]
            for q in range(p0 + both, p1):
                a0 += w[_u(rowidx[q])] * vals[q]
            for q in range(p1 + both, p2):
                a1 += w[_u(rowidx[q])] * vals[q]
            for q in range(p2 + both, p3):
                a2 += w[_u(rowidx[q])] * vals[q]
            for q in range(p3 + both, e):
                a3 += w[_u(rowidx[q])] * vals[q]
        g[k], g[k + 1], g[k + 2], g[k + 3] = a0, a1, a2, a3
        k += 4
    while k < d:
        a0 = np.float64(r[k])
        for q in range(_u(colptr[c0 + k]), _u(colptr[c0 + k + 1])):
            a0 += w[_u(rowidx[q])] if unit else w[_u(rowidx[q])] * vals[q]
        g[k] = a0
        k += 1


@_spjit
def _csc_grad(colptr, rowidx, vals, unit, bl, ptr, X, x_shared, Y, y_shared, diff, R, r_shared, code, zero, out):  # fmt: skip  # noqa: E501
    d = out.shape[1]
    for i in _prange(ptr.size - 1):
        x = X[0] if x_shared else X[i]
        y = Y[0] if y_shared else Y[i]
        r = R[0] if r_shared else R[i]
        _csc_node(colptr, rowidx, vals, unit, bl, ptr[i], ptr[i + 1], i * d, x, y, diff, r, code, zero, out[i])  # fmt: skip  # noqa: E501


@_pjit
def _dense_margins(A, rows, ptr, X, x_shared, zero, z):
    for i in _prange(ptr.size - 1):
        x = X[0] if x_shared else X[i]
        for j in range(ptr[i], ptr[i + 1]):
            z[j] = _dense_dot(A[rows[j]], x, zero)


@_spjit
def _sparse_margins(indptr, indices, values, unit, rows, ptr, X, x_shared, zero, z):
    for i in _prange(ptr.size - 1):
        x = X[0] if x_shared else X[i]
        if unit:
            for j in range(ptr[i], ptr[i + 1]):
                row, s = rows[j], zero
                for p in range(_u(indptr[row]), _u(indptr[row + 1])):
                    s += x[_u(indices[p])]
                z[j] = s
        else:
            for j in range(ptr[i], ptr[i + 1]):
                row, s = rows[j], zero
                for p in range(_u(indptr[row]), _u(indptr[row + 1])):
                    s += values[p] * x[_u(indices[p])]
                z[j] = s


@_pointjit
def _dense_points_node(A, b, rows, lo, hi, PT, code, with_loss, zero, g, lsum, z):
    """One node's dense rows at every point (see :func:`_sparse_points_node`)."""
    d, R = PT.shape
    g[:, :] = zero
    lsum[:] = zero
    inv = 1.0 / (hi - lo)
    for j in range(lo, hi):
        row = rows[j]
        a = A[row]
        z[:] = zero
        for k in range(d):
            ak, q = a[k], PT[k]
            for r in range(R):
                z[r] += ak * q[r]
        if with_loss:
            for r in range(R):
                lsum[r] += _phi_points(code, z[r], b[row]) * inv
        for r in range(R):
            z[r] = _dphi_points(code, z[r], b[row]) * inv
        for k in range(d):
            ak, q = a[k], g[k]
            for r in range(R):
                q[r] += ak * z[r]


@_ppjit
def _dense_points(A, b, rows, ptr, PT, code, with_loss, zero, out, lout):
    R = PT.shape[1]
    for i in _prange(ptr.size - 1):
        z = np.empty(R, dtype=PT.dtype)
        _dense_points_node(A, b, rows, ptr[i], ptr[i + 1], PT, code, with_loss, zero, out[i],
                           lout[i], z)  # fmt: skip


@_pointjit
def _sparse_points_node(indptr, indices, values, unit, b, rows, lo, hi, PT, code, with_loss,
                        zero, g, lsum, z):  # fmt: skip
    """One node's rows at every point (a function of its own, compiled outside the parallel
    loop, so that the loops over the points vectorise)."""
    R = z.size
    g[:, :] = zero
    lsum[:] = zero
    inv = 1.0 / (hi - lo)
    for j in range(lo, hi):
        row = rows[j]
        p0, p1 = indptr[row], indptr[row + 1]
        z[:] = zero
        if unit:
            for p in range(_u(p0), _u(p1)):
                q = PT[_u(indices[p])]  # the coordinate's values at the R points, side by side
                for r in range(R):
                    z[r] += q[r]
        else:
            for p in range(_u(p0), _u(p1)):
                q, v = PT[_u(indices[p])], values[p]
                for r in range(R):
                    z[r] += v * q[r]
        if with_loss:
            for r in range(R):
                lsum[r] += _phi_points(code, z[r], b[row]) * inv
        for r in range(R):
            z[r] = _dphi_points(code, z[r], b[row]) * inv
        if unit:
            for p in range(_u(p0), _u(p1)):
                q = g[_u(indices[p])]
                for r in range(R):
                    q[r] += z[r]
        else:
            for p in range(_u(p0), _u(p1)):
                q, v = g[_u(indices[p])], values[p]
                for r in range(R):
                    q[r] += v * z[r]


@_ppjit
def _sparse_points(
    indptr, indices, values, unit, b, rows, ptr, PT, code, with_loss, zero, out, lout
):
    R = PT.shape[1]
    for i in _prange(ptr.size - 1):
        z = np.empty(R, dtype=PT.dtype)
        _sparse_points_node(indptr, indices, values, unit, b, rows, ptr[i], ptr[i + 1], PT,
                            code, with_loss, zero, out[i], lout[i], z)  # fmt: skip
