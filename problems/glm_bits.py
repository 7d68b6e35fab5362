"""The full GLM gradient on dense rows whose non-zeros share one value, read as bit masks.

Most LIBSVM sets have binary features (mushrooms, a9a, w8a), or binary ones scaled (phishing:
every non-zero is ``1/sqrt(30)``). :func:`problems.glm_kernels.pack_binary` keeps such rows as
bytes, and the dense kernel converts each byte to a float and multiplies. Here each node's rows
are stored by columns as bit masks, one bit per row, ``L`` rows to a mask (``L`` = 16 in
float32, 8 in float64: the lanes of a 512-bit vector), and the gradient is made of masked
additions: a margin ``z_j = c sum_k B_jk x_k`` adds ``x_k`` to the lanes of the rows whose bit
is set (``GROUP`` blocks of ``L`` rows advance together, so the additions form independent
chains), and a column's sum ``sum_j s_j B_jk`` adds the block of weights ``s`` to ``L`` running
sums where the bits are set (``GROUP`` columns together), whose lanes are added at the end. On a
CPU with mask registers (AVX-512) each step is one mask load and one masked addition for ``L``
rows, and the data take an eighth of the bytes' footprint; elsewhere the compiler writes the
masks out as blends. The engine is a candidate (``dense-bits``) only where the rows are of one
value, and chosen by measurement (:mod:`problems.glm_engine`). Measured on a 2-core AMD EPYC
(Zen 4), float32, the full gradient at a shared point, side by side with the bytes kernel:
phishing 34-39 us against 70-84 on two threads, a9a 116-138 against 233-240; on one thread
60-64 against 113-153 and 227-230 against 468-470.

The margins add the row's ``x_k`` in column order; the sums keep a running sum per lane, blocks
in order, and add the ``L`` lanes in halves at the end (lane ``t + L/2`` onto lane ``t``, then
``t + L/4``, ...): the same maths as the other engines, rounded differently (like theirs,
deterministic for a given ``L``). Additions are skipped where a bit is clear, so a non-finite
``x_k`` reaches only the rows that hold column ``k`` (the bytes kernel multiplies it by 0).
Minibatches and the many-point kernels use the dense engine's bytes.
"""

# built against problems/glm_kernels.py e627c9253ad4909c
# built against streams/compiled.py 9e35d4bc5d1bb3f3

from __future__ import annotations

import numpy as np

from problems.glm_kernels import _weights
from streams.compiled import launch, numba

__all__ = ["GROUP", "grad_arrays", "lanes", "pack", "point_plan", "work"]

#: Blocks of ``L`` rows (in the margins) and columns (in the sums) summed together.
GROUP = 4


def lanes(dtype) -> int:
    """Rows per mask: the lanes of a 512-bit vector of ``dtype`` (16 float32, 8 float64)."""
    return 64 // np.dtype(dtype).itemsize


def pack(B: np.ndarray, b: np.ndarray, rows: np.ndarray, ptr: np.ndarray, dtype) -> tuple:
    """Each node's rows of the 0/1 pattern ``B`` (``(N, d)`` bytes, from
    :func:`problems.glm_kernels.pack_binary`) as masks by columns, with their labels (of
    ``b``): ``(masks, base, blocks, d_pad, labels, ptr)``. ``labels``: the held rows' labels in
    ``dtype``, in the order of ``rows`` (gathered here once, not at every gradient). Node ``i``'s
    rows ``rows[ptr[i]:ptr[i+1]]``, padded with empty rows to
    ``blocks[i] L`` rows (a multiple of ``GROUP L``), are ``blocks[i]`` blocks of ``L``; bit
    ``t`` of ``masks[base[i] + k blocks[i] + w]`` says whether row ``w L + t`` of the node holds
    column ``k`` (columns padded with empty ones to ``d_pad``, a multiple of ``GROUP``).
    ``masks``: uint16 (``L`` = 16) or uint8 (``L`` = 8). Built for all nodes at once."""
    L = lanes(dtype)
    N, d = B.shape
    dp = -(-d // GROUP) * GROUP
    counts = np.diff(ptr).astype(np.int64)
    m = counts.size
    blocks = -(-counts // (GROUP * L)) * GROUP
    first = np.concatenate([[0], np.cumsum(blocks)]).astype(np.int64)  # each node's first block
    nb = int(first[-1])
    node = np.repeat(np.arange(m), counts)
    pos = L * first[node] + (np.arange(counts.sum()) - np.repeat(ptr[:-1], counts))
    P = np.zeros((nb * L, dp), dtype=np.uint8)
    P[pos, :d] = B[rows[: counts.sum()]]
    bits = np.packbits(P.reshape(nb, L, dp), axis=1, bitorder="little")  # (nb, L/8, dp)
    word = np.ascontiguousarray(bits.transpose(0, 2, 1)).view(np.uint16 if L == 16 else np.uint8)
    word = word.reshape(nb, dp)
    base = (dp * first[:-1]).astype(np.int64)
    bnode = np.repeat(np.arange(m), blocks)  # each block's node
    w = np.arange(nb) - first[bnode]
    at = (base[bnode] + w)[:, None] + np.arange(dp)[None, :] * blocks[bnode][:, None]
    masks = np.empty(nb * dp, dtype=word.dtype)
    masks[at.reshape(-1)] = word.reshape(-1)
    labels = np.ascontiguousarray(b[rows[: counts.sum()]], dtype=dtype)
    return masks, base, blocks.astype(np.int64), dp, labels, np.asarray(ptr, dtype=np.int64)


def work(bits: tuple) -> int:
    """The entries a gradient goes through (:func:`streams.compiled.launch`'s ``work``): each
    entry of the masks stands for ``L`` rows of a column."""
    return bits[0].size * bits[0].itemsize * 8


def grad_arrays(
    bits: tuple, X: np.ndarray, R: np.ndarray, code: int, Y: np.ndarray | None = None,
    scale: float = 1.0,
) -> np.ndarray:  # fmt: skip
    """:func:`problems.glm_kernels.grad_arrays` of every row :func:`pack` was given, on its
    masks and labels ``bits``, every non-zero being ``scale``."""
    masks, base, blocks, dp, labels, ptr = bits
    m, d = ptr.size - 1, X.shape[1]
    out = np.empty((m, d), dtype=X.dtype)
    kind = X.dtype.type
    Yp = X if Y is None else Y
    launch(_grad, masks, base, blocks, dp, labels, ptr, X, X.shape[0] == 1, Yp,
           Yp.shape[0] == 1, Y is not None, R, R.shape[0] == 1, code, kind(0), kind(scale),
           out, work=work(bits))  # fmt: skip
    return out


def point_plan(bits: tuple, code: int, dtype, scale: float = 1.0):
    """``f(X, R)``: :func:`grad_arrays` at one point ``X`` ``(1, d)`` shared by every node, with
    the arguments that do not change built once (as :func:`problems.glm_kernels.
    point_grad_plan`)."""
    masks, base, blocks, dp, labels, ptr = bits
    m, n = ptr.size - 1, work(bits)
    kind = np.dtype(dtype).type
    zero, c = kind(0), kind(scale)

    def call(X, R):
        out = np.empty((m, X.shape[1]), dtype=X.dtype)
        launch(_grad, masks, base, blocks, dp, labels, ptr, X, True, X, True, False, R, True,
               code, zero, c, out, work=n)  # fmt: skip
        return out

    return call


# ---------------------------------------------------------------------- compiled parts
if numba is not None:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _vector(context, builder, sig, arg: int, value):
        """The data pointer of the array argument ``arg``."""
        return context.make_array(sig.args[arg])(context, builder, value).data

    def _registers(builder, dtype, L: int) -> tuple:
        """The vector type of ``L`` floats of ``dtype``, its mask type, and ``GROUP`` zeroed
        accumulators of it (stack slots, which LLVM keeps in registers)."""
        vt = ir.VectorType(ir.FloatType() if dtype.bitwidth == 32 else ir.DoubleType(), L)
        mt = ir.VectorType(ir.IntType(1), L)
        acc = [cgutils.alloca_once_value(builder, ir.Constant(vt, None)) for _ in range(GROUP)]
        return vt, mt, acc

    def _splat(builder, v, vt: ir.VectorType):
        u = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), [0] * vt.count)
        return builder.shuffle_vector(u, ir.Constant(vt, ir.Undefined), mask)

    @intrinsic
    def _margins_group(typingctx, z, zoff, masks, moff, nb, d, x):
        """``z[zoff + L q + t] = sum_{k < d} x[k] [bit t of masks[moff + k nb + q]]`` for
        ``q < GROUP``, each sum taken in column order (``L``: the masks' bits)."""
        L = masks.dtype.bitwidth

        def codegen(context, builder, sig, args):
            Z, zo, M, mo, NB, D, Xa = args
            zp, mp, xp = (_vector(context, builder, sig, i, args[i]) for i in (0, 2, 6))
            vt, mt, acc = _registers(builder, sig.args[0].dtype, L)
            with cgutils.for_range(builder, D) as loop:
                k = loop.index
                xv = _splat(builder, builder.load(builder.gep(xp, [k])), vt)
                at = builder.add(mo, builder.mul(k, NB))
                for q in range(GROUP):
                    word = builder.load(builder.gep(mp, [builder.add(at, ir.Constant(at.type, q))]))
                    bit = builder.bitcast(word, mt)
                    a = builder.load(acc[q])
                    builder.store(builder.select(bit, builder.fadd(a, xv), a), acc[q])
            for q in range(GROUP):
                p = builder.gep(zp, [builder.add(zo, ir.Constant(zo.type, L * q))])
                builder.store(builder.load(acc[q]), builder.bitcast(p, vt.as_pointer()), align=1)
            return context.get_dummy_value()

        return types.void(z, zoff, masks, moff, nb, d, x), codegen

    @intrinsic
    def _sums_group(typingctx, acc, masks, moff, nb, s):
        """``acc[q] = sum_t sum_{w < nb} s[L w + t] [bit t of masks[moff + q nb + w]]`` for
        ``q < GROUP``: each lane's sum taken in block order, then the lanes added in halves
        (lane ``t + L/2`` onto lane ``t``, then ``t + L/4`` onto ``t``, ...), here with no
        fast-math flag, so that the order does not depend on what the compiler makes of the
        code around it."""
        L = masks.dtype.bitwidth

        def codegen(context, builder, sig, args):
            A, M, mo, NB, S = args
            ap, mp, sp = (_vector(context, builder, sig, i, args[i]) for i in (0, 1, 4))
            vt, mt, run = _registers(builder, sig.args[0].dtype, L)
            with cgutils.for_range(builder, NB) as loop:
                w = loop.index
                p = builder.gep(sp, [builder.mul(w, ir.Constant(w.type, L))])
                sv = builder.load(builder.bitcast(p, vt.as_pointer()), align=1)
                for q in range(GROUP):
                    at = builder.add(builder.add(mo, builder.mul(NB, ir.Constant(NB.type, q))), w)
                    bit = builder.bitcast(builder.load(builder.gep(mp, [at])), mt)
                    a = builder.load(run[q])
                    builder.store(builder.select(bit, builder.fadd(a, sv), a), run[q])
            for q in range(GROUP):
                v, h = builder.load(run[q]), L
                while h > 1:  # lane t + h/2 onto lane t: halves, then quarters, ...
                    h //= 2
                    lo = ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h)))
                    hi = ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h, 2 * h)))
                    v = builder.fadd(
                        builder.shuffle_vector(v, v, lo), builder.shuffle_vector(v, v, hi)
                    )
                t = builder.extract_element(v, ir.Constant(ir.IntType(32), 0))
                builder.store(t, builder.gep(ap, [ir.Constant(ir.IntType(64), q)]))
            return context.get_dummy_value()

        return types.void(acc, masks, moff, nb, s), codegen

    # as problems.glm_kernels' kernels of many points: the weights' exp vectorises
    _FASTMATH = {"reassoc", "contract"}
    _jit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True, error_model="numpy")
    _pjit = numba.njit(fastmath=_FASTMATH, cache=True, nogil=True, parallel=True,
                       error_model="numpy")  # fmt: skip
    _prange = numba.prange
else:  # pragma: no cover
    _jit = _pjit = lambda f: f  # noqa: E731
    _prange = range


@_jit
def _node(masks, base, nb, dp, bl, x, y, diff, r, code, zero, c, z0, z1, acc, g):
    """One node's gradient: its margins by blocks, its weights, its sums by columns (``bl``: its
    labels)."""
    d, m = g.size, bl.size
    L = masks.itemsize * 8
    for w in range(0, nb, GROUP):
        _margins_group(z0, L * w, masks, base + w, nb, d, x)
        if diff:
            _margins_group(z1, L * w, masks, base + w, nb, d, y)
    _weights(code, c, (1.0 / m) * c if m > 0 else zero, z0, z1, bl, m, diff)
    for k0 in range(0, dp, GROUP):
        _sums_group(acc, masks, base + k0 * nb, nb, z0)
        for q in range(GROUP):
            if k0 + q < d:
                g[k0 + q] = r[k0 + q] + acc[q]


@_pjit
def _grad(masks, base, blocks, dp, labels, ptr, X, x_shared, Y, y_shared, diff, R, r_shared,
          code, zero, c, out):  # fmt: skip
    # the nodes in up to 64 runs of adjacent nodes, each with its buffers made once
    m, cap = ptr.size - 1, 0
    L = masks.itemsize * 8
    for i in range(m):
        cap = max(cap, blocks[i])
    runs = min(m, 64)
    for k in _prange(runs):
        z0 = np.empty(cap * L, dtype=out.dtype)
        z1 = np.empty(cap * L if diff else 0, dtype=out.dtype)
        acc = np.empty(GROUP, dtype=out.dtype)
        for i in range(k * m // runs, (k + 1) * m // runs):
            x = X[0] if x_shared else X[i]
            y = Y[0] if y_shared else Y[i]
            r = R[0] if r_shared else R[i]
            _node(masks, base[i], blocks[i], dp, labels[ptr[i] : ptr[i + 1]], x, y, diff, r, code,
                  zero, c, z0, z1, acc, out[i])  # fmt: skip
