"""The ``csc`` engine (each node's rows by columns, :func:`problems.glm_kernels.pack_csc`): in
float64 the CSR kernel's gradients bit for bit (the same additions in the same order) for every
loss, binary and valued rows, shared and per-node points, differences, and nodes held in any
order; in float32 each coordinate's sum in float64, rounded once; minibatches by the CSR kernel;
the arrays it reads; and where ``storage=auto`` offers it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from comm import SimulatedComm
from problems import glm_engine, glm_kernels
from problems.least_squares import LeastSquares
from problems.logreg import LogReg
from problems.logreg_nonconvex import LogRegNonconvex
from problems.sigmoid_squared import SigmoidSquared

pytestmark = pytest.mark.skipif(
    glm_kernels.numba is None, reason="numba is not installed: the GLM uses torch alone"
)

COUNTS = np.array([50, 100, 7, 80, 1])  # unequal, one node of a single row
LOSSES = [LogReg, LogRegNonconvex, LeastSquares, SigmoidSquared]


def _data(binary: bool, seed: int = 0, counts=COUNTS, d: int = 37, density: float = 0.15):
    rng = np.random.default_rng(seed)
    N = int(np.sum(counts))
    A = sp.random(N, d, density=density, format="csr", random_state=seed)
    A.data[:] = 1.0 if binary else rng.standard_normal(A.nnz)
    return A, np.where(rng.random(N) < 0.5, -1.0, 1.0)


def _pair(cls, binary: bool, dtype=torch.float64, threads: int = 1, **kw):
    A, b = _data(binary, **kw)
    counts = kw.get("counts", COUNTS)
    csr = cls(A, b, counts, lam=0.1, dtype=dtype, storage="csr", threads=1)
    csc = cls(A, b, counts, lam=0.1, dtype=dtype, storage="csc", threads=threads)
    assert csc.engine == f"csc/{threads}" and csc._kcsc is not None
    return csr, csc


@pytest.mark.parametrize("cls", LOSSES)
@pytest.mark.parametrize("binary", [True, False])
def test_float64_gradients_are_the_csr_kernels_bit_for_bit(cls, binary):
    csr, csc = _pair(cls, binary, threads=2)
    assert (csc._kcsc[2].size == 0) == binary  # binary rows: no values stored
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(csr.d, generator=gen, dtype=torch.float64)
    X = torch.randn(csr.m, csr.d, generator=gen, dtype=torch.float64)
    for point in (x, X, x.expand(csr.m, -1)):
        assert torch.equal(csc.grad(point), csr.grad(point))
        assert torch.equal(csc.grad_diff(point, x), csr.grad_diff(point, x))
        assert torch.equal(csc.grad_diff(x, X), csr.grad_diff(x, X))
    held = [3, 0, 2]  # nodes held in another order: each node's rows by its own columns
    assert torch.equal(csc.local(held).grad(X[held]), csr.local(held).grad(X[held]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_minibatches_take_the_csr_kernel(dtype):
    csr, csc = _pair(LogRegNonconvex, True, dtype)
    X = torch.randn(csr.m, csr.d, generator=torch.Generator().manual_seed(2), dtype=dtype)
    batch = csr.sample(SimulatedComm(csr.m, seed=0).rng(3), 6)
    assert torch.equal(csc.grad(X, batch), csr.grad(X, batch))
    assert torch.equal(csc.grad_diff(X, X[0], batch), csr.grad_diff(X, X[0], batch))
    assert torch.equal(csc.node_loss(X), csr.node_loss(X))


@pytest.mark.parametrize("binary", [True, False])
def test_float32_sums_are_rounded_once(binary):
    """Long columns (1,500 rows per node): the CSR kernel rounds each coordinate's sum to
    float32 after every addition, the ``csc`` engine once at the end, so its gradient is much
    nearer the float64 problem's at the same point (the margins, the same in both, are the
    rest of the error); the two agree to float32 rounding."""
    counts = np.array([1500, 1500])
    kw = dict(counts=counts, d=12, density=0.5, seed=3)
    csr32, csc32 = _pair(LogRegNonconvex, binary, torch.float32, **kw)
    csr64, _ = _pair(LogRegNonconvex, binary, torch.float64, **kw)
    X = torch.randn(2, csr32.d, generator=torch.Generator().manual_seed(4)).mul(0.1)
    ref = csr64.grad(X.double())
    err_csr = (csr32.grad(X).double() - ref).abs().max()
    err_csc = (csc32.grad(X).double() - ref).abs().max()
    assert err_csc < err_csr / 4, (float(err_csc), float(err_csr))
    torch.testing.assert_close(csc32.grad(X), csr32.grad(X), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("binary", [True, False])
def test_float32_gradients_are_float64_sums_of_float64_weights_rounded_once(binary):
    """The float32 arithmetic written out in NumPy for least squares (``phi' = z - b``: no
    library call whose last bit NumPy might round otherwise): margins summed in float32 column
    by column, weights ``(z - b) / m_i`` taken in float64, each coordinate's sum in float64 in
    row order from the regulariser's term, rounded to float32 once. Bit for bit: weights or
    sums rounded to float32 along the way fail it."""
    counts = np.array([300, 200])
    A, b = _data(binary, seed=8, counts=counts, d=12, density=0.5)
    p = LeastSquares(A, b, counts, lam=0.1, dtype=torch.float32, storage="csc", threads=1)
    X = torch.randn(2, p.d, generator=torch.Generator().manual_seed(9)).mul(0.3)
    Xr = p._rows(X)
    R = p._reg_grad_kernel(Xr, p._kernel_array(Xr))
    dense, b32 = A.toarray().astype(np.float32), b.astype(np.float32)
    off = np.concatenate([[0], np.cumsum(counts)])
    want = np.empty((2, p.d), np.float32)
    for i in range(2):  # two nodes, written out: the reference, not a hot path
        rows, x = dense[off[i] : off[i + 1]], X[i].numpy()
        z = np.zeros(counts[i], np.float32)
        for k in range(p.d):  # a row's terms in the order of its columns
            held = rows[:, k] != 0
            z[held] += rows[held, k] * x[k]
        w = (z - b32[off[i] : off[i + 1]]).astype(np.float64) * (1.0 / counts[i])
        for k in range(p.d):
            held = rows[:, k] != 0
            terms = w[held] * rows[held, k].astype(np.float64)
            want[i, k] = np.cumsum(np.concatenate([[np.float64(R[i, k])], terms]))[-1]
    assert np.array_equal(p.grad(X).numpy(), want)


def test_the_columns_of_each_node():
    """Two nodes: rows 0-1 and 2-3 of a 4 x 3 matrix, held in the order (1, 0)."""
    A = sp.csr_matrix(np.array([[1.0, 0, 2.0], [0, 3.0, 4.0], [5.0, 0, 0], [0, 0, 6.0]]))
    b = np.array([10.0, 11.0, 12.0, 13.0])
    p = LeastSquares(A, b, np.array([2, 2]), lam=0.1, storage="csc", threads=1).local([1, 0])
    colptr, rowidx, vals, unit, bl, ptr, d = p._kcsc
    assert d == 3 and not unit and rowidx.dtype == np.uint16
    assert colptr.tolist() == [0, 1, 1, 2, 3, 4, 6]  # node 1's columns, then node 0's
    assert rowidx.tolist() == [0, 1, 0, 1, 0, 1]
    assert vals.tolist() == [5.0, 6.0, 1.0, 3.0, 2.0, 4.0]
    assert bl.tolist() == [12.0, 13.0, 10.0, 11.0] and ptr.tolist() == [0, 2, 4]


def test_a_node_of_more_rows_than_uint16_counts():
    counts = np.array([70_000, 3])
    csr, csc = _pair(LeastSquares, True, counts=counts, d=5, density=0.3, seed=5)
    assert csc._kcsc[1].dtype == np.int32
    x = torch.randn(csr.d, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    assert torch.equal(csc.grad(x), csr.grad(x))


def test_auto_offers_csc_where_the_nodes_columns_hold_entries():
    assert glm_engine.csc_allowed(20, 300, 580_000) and not glm_engine.csc_allowed(1000, 300, 1e5)
    assert "csc" in glm_engine.candidates("auto", False, True, True, csc_ok=True)
    assert "csc" not in glm_engine.candidates("auto", False, True, True, csc_ok=False)
    assert "csc" not in glm_engine.candidates("auto", False, False, True, csc_ok=True)
    assert glm_engine.candidates("csc", False, True) == ["csc"]


def test_without_the_kernels_csc_is_torchs_sparse_product(monkeypatch):
    A, b = _data(True, seed=7)
    monkeypatch.setattr(glm_kernels, "available", lambda *a: False)
    p = LogRegNonconvex(A, b, COUNTS, lam=0.1, storage="csc", threads=1)
    assert p.engine == "csr-torch/1" and not p._kernels
