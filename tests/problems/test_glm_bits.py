"""The ``dense-bits`` engine (dense rows whose non-zeros share one value, as bit masks by columns,
:mod:`problems.glm_bits`): its masks, its full gradients against the dense kernel's for every
loss, binary and scaled binary rows, shared and per-node points, differences and nodes held in
any order; minibatches, losses and rows of several values by the dense kernel; and where
``storage=auto`` offers it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from comm import SimulatedComm
from problems import glm_bits, glm_engine, glm_kernels
from problems.least_squares import LeastSquares
from problems.logreg import LogReg
from problems.logreg_nonconvex import LogRegNonconvex
from problems.sigmoid_squared import SigmoidSquared

pytestmark = pytest.mark.skipif(
    glm_kernels.numba is None, reason="numba is not installed: the GLM uses torch alone"
)

COUNTS = np.array([50, 100, 7, 80, 1, 140])  # unequal, one node of a single row
LOSSES = [LogReg, LogRegNonconvex, LeastSquares, SigmoidSquared]


def _data(value: float | None, seed: int = 0, counts=COUNTS, d: int = 37, density: float = 0.3):
    """Rows whose non-zeros are all ``value`` (None: normal values)."""
    rng = np.random.default_rng(seed)
    N = int(np.sum(counts))
    A = sp.random(N, d, density=density, format="csr", random_state=seed)
    A.data[:] = rng.standard_normal(A.nnz) if value is None else value
    return A, np.where(rng.random(N) < 0.5, -1.0, 1.0)


def _pair(cls, value, dtype=torch.float64, threads: int = 1, **kw):
    A, b = _data(value, **kw)
    counts = kw.get("counts", COUNTS)
    dense = cls(A, b, counts, lam=0.1, dtype=dtype, storage="dense", threads=1)
    bits = cls(A, b, counts, lam=0.1, dtype=dtype, storage="dense-bits", threads=threads)
    assert bits.engine == f"dense-bits/{threads}" and bits.dense
    return dense, bits


@pytest.mark.parametrize("cls", LOSSES)
@pytest.mark.parametrize("value", [1.0, 0.37])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradients_are_the_dense_kernels_to_rounding(cls, value, dtype):
    dense, bits = _pair(cls, value, dtype, threads=2)
    assert bits._kbits is not None and bits._kbin[1] == pytest.approx(value)
    close = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(dense.d, generator=gen, dtype=dtype)
    X = torch.randn(dense.m, dense.d, generator=gen, dtype=dtype)
    for point in (x, X, x.expand(dense.m, -1)):
        torch.testing.assert_close(bits.grad(point), dense.grad(point), **close)
        torch.testing.assert_close(bits.grad_diff(point, x), dense.grad_diff(point, x), **close)
        torch.testing.assert_close(bits.grad_diff(x, X), dense.grad_diff(x, X), **close)
    held = [5, 0, 2, 4]  # nodes held in another order: each node's masks of its own rows
    got, want = bits.local(held).grad(X[held]), dense.local(held).grad(X[held])
    torch.testing.assert_close(got, want, **close)


def test_a_wrong_lane_order_would_be_caught():
    """The comparison above is not loose: the masks of one node's rows reversed within each
    block (a plausible packing error) move its gradient far outside the tolerance."""
    dense, bits = _pair(LeastSquares, 1.0)
    x = torch.randn(dense.d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.allclose(bits.grad(x), dense.grad(x), rtol=1e-12, atol=1e-14)
    masks = bits._kbits[0]
    flipped = np.unpackbits(masks.view(np.uint8), bitorder="big")  # lanes reversed in bytes
    masks[:] = np.packbits(flipped, bitorder="little").view(masks.dtype)
    assert not torch.allclose(bits.grad(x), dense.grad(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_minibatches_and_losses_take_the_dense_kernel(dtype):
    dense, bits = _pair(LogRegNonconvex, 1.0, dtype)
    X = torch.randn(dense.m, dense.d, generator=torch.Generator().manual_seed(3), dtype=dtype)
    batch = dense.sample(SimulatedComm(dense.m, seed=0).rng(3), 6)
    assert torch.equal(bits.grad(X, batch), dense.grad(X, batch))
    assert torch.equal(bits.grad_diff(X, X[0], batch), dense.grad_diff(X, X[0], batch))
    assert torch.equal(bits.node_loss(X), dense.node_loss(X))


def test_rows_of_several_values_take_the_dense_kernel():
    dense, bits = _pair(LogRegNonconvex, None)
    assert bits._kbits is None  # forced, but the rows hold several values
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(dense.m, dense.d, generator=gen, dtype=torch.float64)
    assert torch.equal(bits.grad(X), dense.grad(X))
    assert torch.equal(bits.grad(X[0]), dense.grad(X[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_masks_of_each_node(dtype):
    """Every bit against the rows it stands for: bit ``t`` of mask ``(i, k, w)`` is row
    ``w L + t`` of node ``i`` in column ``k``; padded rows and columns hold no bit."""
    rng = np.random.default_rng(5)
    counts = np.array([3, 0, 70, 1])
    N, d = int(counts.sum()) + 4, 6
    B = (rng.random((N, d)) < 0.5).astype(np.uint8)
    rows = rng.permutation(N)[: counts.sum()]
    ptr = np.concatenate([[0], np.cumsum(counts)])
    b = rng.standard_normal(N)
    masks, base, blocks, dp, labels, held = glm_bits.pack(B, b, rows, ptr, dtype)
    L = glm_bits.lanes(dtype)
    assert masks.dtype == (np.uint16 if L == 16 else np.uint8) and dp == 8
    assert labels.dtype == dtype and np.array_equal(labels, b[rows].astype(dtype))
    assert np.array_equal(held, ptr)
    assert blocks.tolist() == [-(-c // (4 * L)) * 4 for c in counts]
    for i, c in enumerate(counts):  # the reference, written out: not a hot path
        for k in range(dp):
            for w in range(blocks[i]):
                word = int(masks[base[i] + k * blocks[i] + w])
                for t in range(L):
                    j = w * L + t
                    held = j < c and k < d and B[rows[ptr[i] + j], k] == 1
                    assert bool(word >> t & 1) == held, (i, k, w, t)


def test_auto_offers_it_for_rows_of_one_value():
    assert "dense-bits" in glm_engine.candidates("auto", True, True, True, bits_ok=True)
    assert "dense-bits" not in glm_engine.candidates("auto", True, True, True, bits_ok=False)
    assert "dense-bits" not in glm_engine.candidates("auto", False, True, True, bits_ok=True)
    assert "dense-bits" not in glm_engine.candidates("auto", True, False, True, bits_ok=True)
    assert glm_engine.candidates("dense-bits", False, True) == ["dense-bits"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_order_of_the_sums_is_the_documented_one(dtype):
    """Least squares (``phi' = z - b``: no library call) on binary rows (``c = 1``: no product
    the compiler might fuse), written out in NumPy in the order the module documents: a margin
    adds the row's ``x_k`` in column order from 0; the weight ``(z - b) / m`` is taken in
    float64 and stored in the dtype; a column's sum keeps one running sum per lane (row ``w L +
    t`` in lane ``t``), blocks in order, then adds the lanes in halves (lane ``t + L/2`` onto
    ``t``, then ``t + L/4``, ...), and the regulariser's term last. Bit for bit: a reassociated
    sum, or lanes added in another order, fails it."""
    counts = np.array([150, 70])
    A, b = _data(1.0, seed=9, counts=counts, d=13, density=0.4)
    p = LeastSquares(A, b, counts, lam=0.1, dtype=dtype, storage="dense-bits", threads=1)
    X = torch.randn(2, p.d, generator=torch.Generator().manual_seed(10), dtype=dtype).mul(0.3)
    Xr = p._rows(X)
    R = p._reg_grad_kernel(Xr, p._kernel_array(Xr))
    npdt = np.float32 if dtype == torch.float32 else np.float64
    B, c = (A.toarray() != 0), npdt(1.0)
    L = glm_bits.lanes(npdt)
    off = np.concatenate([[0], np.cumsum(counts)])
    want = np.empty((2, p.d), npdt)
    for i in range(2):  # two nodes, written out: the reference, not a hot path
        rows, x, m = B[off[i] : off[i + 1]], X[i].numpy(), counts[i]
        z = np.zeros(m, npdt)
        for k in range(p.d):
            z[rows[:, k]] += x[k]
        w = (c * z - b[off[i] : off[i + 1]].astype(npdt)).astype(np.float64) * (1.0 / m)
        w = np.concatenate([w.astype(npdt), np.zeros(-m % L, npdt)]).reshape(-1, L)
        held = np.concatenate([rows, np.zeros((-m % L, p.d), bool)]).reshape(-1, L, p.d)
        for k in range(p.d):
            lanes = np.zeros(L, npdt)
            for blk in range(w.shape[0]):
                lanes += np.where(held[blk, :, k], w[blk], npdt(0))
            while lanes.size > 1:  # lane t + h onto lane t, h = L/2, L/4, ...
                lanes = lanes[: lanes.size // 2] + lanes[lanes.size // 2 :]
            want[i, k] = npdt(R[i, k] + lanes[0])
    assert np.array_equal(p.grad(X).numpy(), want)


def test_a_launch_counts_the_rows_behind_each_mask(monkeypatch):
    """A gradient's work is its masks' entries times the rows each stands for: a problem of
    360,000 entries held in 24,000 float32 masks goes through the parallel path of
    :func:`streams.compiled.launch` (on one thread below ``SERIAL_BELOW`` entries of work), as
    the dense kernel on the same entries does, though its masks hold fewer than that."""
    from streams import compiled as sc

    counts = np.full(20, 300)
    _, bits = _pair(LogRegNonconvex, 1.0, torch.float32, threads=2, counts=counts, d=60)
    masks = bits._kbits[0]
    assert masks.size < sc.SERIAL_BELOW <= glm_bits.work(bits._kbits)
    assert glm_bits.work(bits._kbits) == masks.size * 16
    seen = []
    real = sc.launch
    monkeypatch.setattr(glm_bits, "launch", lambda *a, **k: (seen.append(k), real(*a, **k))[1])
    bits.grad(torch.zeros(bits.d))
    bits.grad(torch.zeros(bits.m, bits.d))
    assert [k.get("work") for k in seen] == [glm_bits.work(bits._kbits)] * 2
