"""The compiled GLM kernels against the torch path: same gradients, margins and minibatch
gradients for every GLM, dense and sparse, float64 and float32, shared and per-node points; and
a node's gradient does not depend on which other nodes a process holds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from comm import SimulatedComm
from problems import glm, glm_kernels
from problems.least_squares import LeastSquares
from problems.logreg import LogReg
from problems.logreg_nonconvex import LogRegNonconvex
from problems.sigmoid_squared import SigmoidSquared

pytestmark = pytest.mark.skipif(
    glm_kernels.numba is None, reason="numba is not installed: the GLM uses torch alone"
)

COUNTS = np.array([50, 100, 7, 80])  # unequal, one node smaller than a minibatch


def _data(dense: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    N, d = int(COUNTS.sum()), 37
    if dense:
        A = rng.standard_normal((N, d))
    else:
        A = sp.random(N, d, density=0.1, format="csr", random_state=seed)
    return A, np.where(rng.random(N) < 0.5, -1.0, 1.0)


def _pair(cls, dense, dtype, monkeypatch):
    A, b = _data(dense)
    fast = cls(A, b, COUNTS, lam=0.1, dtype=dtype)
    with monkeypatch.context() as m:
        m.setattr(glm.glm_kernels, "available", lambda *a: False)
        slow = cls(A, b, COUNTS, lam=0.1, dtype=dtype)
    assert fast._kernels and not slow._kernels
    return fast, slow


@pytest.mark.parametrize("cls", [LogReg, LogRegNonconvex, LeastSquares, SigmoidSquared])
@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kernels_match_the_torch_path(cls, dense, dtype, monkeypatch):
    fast, slow = _pair(cls, dense, dtype, monkeypatch)
    assert fast.dense == dense
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(fast.d, generator=gen, dtype=torch.float64).to(dtype)
    X = torch.randn(4, fast.d, generator=gen, dtype=torch.float64).to(dtype)
    tol = dict(rtol=1e-11, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    for point in (x, X, x.expand(4, -1)):
        g = fast.grad(point)
        assert g.shape == (4, fast.d) and g.dtype == dtype
        torch.testing.assert_close(g, slow.grad(point), **tol)
        torch.testing.assert_close(fast.node_loss(point), slow.node_loss(point), **tol)
    batch = fast.sample(SimulatedComm(4, seed=0).rng(3), 9)
    torch.testing.assert_close(fast.grad(X, batch), slow.grad(X, batch), **tol)
    torch.testing.assert_close(fast.grad(x, batch), slow.grad(x, batch), **tol)


@pytest.mark.parametrize("cls", [LogReg, LogRegNonconvex, LeastSquares, SigmoidSquared])
@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reg_numpy", [True, False])
def test_the_short_way_gives_the_kernels_numbers(cls, dense, dtype, reg_numpy, monkeypatch):
    """The gradient's short way to the kernels (NumPy arrays kept, the regulariser's term made
    once) gives the numbers of :func:`glm_kernels.grad` called with torch's tensors, bit for
    bit: full gradients at one point, a point per node, a broadcast point and a non-contiguous
    one, differences, minibatches, and the regulariser in torch as well."""
    A, b = _data(dense, seed=6)
    p = cls(A, b, COUNTS, lam=0.1, dtype=dtype)
    monkeypatch.setattr(p, "REG_NUMPY", reg_numpy)
    assert p._kernels
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(p.d, generator=gen, dtype=torch.float64).to(dtype)
    X = torch.randn(4, p.d, generator=gen, dtype=torch.float64).to(dtype)
    Xt = torch.randn(p.d, 4, generator=gen, dtype=torch.float64).to(dtype).t()

    def torch_way(q, P, rows, ptr, Q=None):
        R = q._reg_grad_rows(P)
        if Q is not None:
            R = R - q._reg_grad_rows(Q)
            Q = q._kernel_point(Q)
        P = q._kernel_point(P)
        if dense and rows is q._krows:  # full gradients of dense rows: by columns too
            T, A, c = q._kcols
            Qn = None if Q is None else Q.numpy()
            code = glm_kernels.LOSSES[q.KERNEL_LOSS]
            args = (q._b.numpy(), rows.numpy(), ptr.numpy(), P.numpy(), R.contiguous().numpy())
            return torch.from_numpy(glm_kernels.grad_arrays((A,), *args, code, Qn, c, T))
        return glm_kernels.grad(q._kdata, q._b, rows, ptr, P, R.contiguous(), q.KERNEL_LOSS, Q)

    for point in (x, X, x.expand(4, -1), Xt):
        got = p.grad(point)
        assert got.shape == (4, p.d) and got.dtype == dtype
        assert torch.equal(got, torch_way(p, p._rows(point), p._krows, p._ptr))
        want = torch_way(p, p._rows(point), p._krows, p._ptr, p._rows(X))
        assert torch.equal(p.grad_diff(point, X), want)
    batch = p.sample(SimulatedComm(4, seed=0).rng(2), 5)
    rows, ptr = p._batch_rows(batch)
    assert torch.equal(p.grad(X, batch), torch_way(p, X, rows, ptr))
    assert torch.equal(p.grad_diff(X, x, batch), torch_way(p, X, rows, ptr, p._rows(x)))
    local = p.local([2, 0])
    assert torch.equal(local.grad(X[:2]), torch_way(local, X[:2], local._krows, local._ptr))


@pytest.mark.parametrize("dense", [True, False])
def test_a_node_gradient_does_not_depend_on_the_nodes_held(dense):
    A, b = _data(dense, seed=2)
    p = LogRegNonconvex(A, b, COUNTS, lam=0.1)
    X = torch.randn(4, p.d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    G = p.grad(X)
    for i in range(4):
        assert torch.equal(p.local([i]).grad(X[i : i + 1])[0], G[i])


def test_gradient_is_one_pass_of_finite_differences():
    """An absolute check of the kernel's maths: central differences of the node loss."""
    A, b = _data(True, seed=3)
    p = LogRegNonconvex(A, b, COUNTS, lam=0.1)
    x = torch.randn(p.d, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 0.3
    g = p.grad(x)
    h = 1e-6
    E = torch.eye(p.d, dtype=torch.float64) * h
    fd = torch.stack(
        [(p.node_loss(x + E[k]) - p.node_loss(x - E[k])) / (2 * h) for k in range(p.d)], dim=1
    )
    torch.testing.assert_close(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("cls", [LogRegNonconvex, LeastSquares, SigmoidSquared])
@pytest.mark.parametrize("dense", [True, False])
def test_gradient_difference_in_one_pass(cls, dense, monkeypatch):
    """``grad_diff`` (one pass over the rows for both points) equals the difference of two
    gradients, full and minibatch, with shared and per-node points; so does the torch path."""
    fast, slow = _pair(cls, dense, torch.float64, monkeypatch)
    gen = torch.Generator().manual_seed(3)
    x, y = (torch.randn(fast.d, generator=gen, dtype=torch.float64) for _ in range(2))
    X, Y = (torch.randn(4, fast.d, generator=gen, dtype=torch.float64) for _ in range(2))
    batch = fast.sample(SimulatedComm(4, seed=0).rng(5), 6)
    for a, b in ((x, y), (X, Y), (x, Y)):
        for bt in (None, batch):
            want = fast.grad(a, bt) - fast.grad(b, bt)
            torch.testing.assert_close(fast.grad_diff(a, b, bt), want, rtol=1e-10, atol=1e-13)
            torch.testing.assert_close(slow.grad_diff(a, b, bt), want, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_binary_features_are_read_without_their_values(dtype, monkeypatch):
    """Binary (0/1) features, as in mushrooms, a9a and w8a: the kernels skip the value array,
    and the gradients, minibatch gradients, differences and margins are bit for bit those
    computed with the values read (a product by 1 is exact), and match the torch path."""
    A, b = _data(False, seed=4)
    A = sp.csr_matrix((np.ones_like(A.data), A.indices, A.indptr), shape=A.shape)
    fast = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype)
    with monkeypatch.context() as m:
        m.setattr(glm.glm_kernels, "available", lambda *a: False)
        slow = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype)
    assert fast._kdata[3] is True and fast._kdata[2].size == 0
    assert fast._kdata[1].dtype == np.int32
    read = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype)
    indptr, indices, _, _, d = read._kdata
    read._kdata = (indptr, indices, _np_values(read), False, d)
    read._kplan = None  # its prepared call read the rows without values
    gen = torch.Generator().manual_seed(2)
    X, Y = (torch.randn(4, fast.d, generator=gen, dtype=torch.float64).to(dtype) for _ in "XY")
    batch = fast.sample(SimulatedComm(4, seed=0).rng(1), 5)
    for bt in (None, batch):
        assert torch.equal(fast.grad(X, bt), read.grad(X, bt))
        assert torch.equal(fast.grad_diff(X, Y, bt), read.grad_diff(X, Y, bt))
    assert torch.equal(fast.node_loss(X), read.node_loss(X))
    tol = dict(rtol=1e-11, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(fast.grad(X), slow.grad(X), **tol)
    torch.testing.assert_close(fast.grad(X, batch), slow.grad(X, batch), **tol)


def _one_value(value: float, seed: int = 5):
    """Sparse rows whose non-zeros all equal ``value`` (phishing's form: 1/sqrt(30))."""
    A, b = _data(False, seed=seed)
    return sp.csr_matrix((np.full_like(A.data, value), A.indices, A.indptr), shape=A.shape), b


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("value", [1.0, 0.18257])
def test_dense_rows_of_one_value_are_read_as_bytes(dtype, value, monkeypatch):
    """Dense rows whose non-zeros share one value ``c`` are read as 0/1 bytes scaled by ``c``
    (:func:`problems.glm_kernels.pack_binary`): the full gradient, the difference of two and
    the minibatch gradient match the rows read as floats to rounding (the products are the
    same when ``c`` is 1, but the compiler may group a vectorised sum of bytes differently
    from one of floats: at 512 bits it did)."""
    A, b = _one_value(value)
    fast = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")
    B, c = fast._kbin
    assert B.dtype == np.uint8 and B.shape == A.shape
    assert c == fast._kdata[0].dtype.type(value)
    assert np.array_equal(B, (A.toarray() != 0).astype(np.uint8))
    floats = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")
    floats._kbin = floats._kcols = floats._kplan = None  # the rows as floats, read alone
    gen = torch.Generator().manual_seed(3)
    X, Y = (torch.randn(4, fast.d, generator=gen, dtype=torch.float64).to(dtype) for _ in "XY")
    batch = fast.sample(SimulatedComm(4, seed=0).rng(1), 5)
    pairs = [(fast.grad(p), floats.grad(p)) for p in (X, X[0])]
    pairs += [(fast.grad_diff(X, Y), floats.grad_diff(X, Y))]
    pairs += [(fast.grad(X, batch), floats.grad(X, batch))]
    f64 = dtype == torch.float64
    tol = dict(rtol=1e-13, atol=1e-15) if f64 else dict(rtol=1e-5, atol=1e-7)
    for got, want in pairs:
        torch.testing.assert_close(got, want, **tol)
    with monkeypatch.context() as m:  # and the torch path agrees
        m.setattr(glm.glm_kernels, "available", lambda *a: False)
        slow = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")
    tol = dict(rtol=1e-11, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(fast.grad(X), slow.grad(X), **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("rows", ["floats", "bytes"])
def test_full_dense_gradients_read_the_rows_by_columns_too(dtype, rows, monkeypatch):
    """The dense engine's full gradients take their margins from each node's rows by columns
    (:func:`problems.glm_kernels.pack_columns`, node ``i``'s rows as a ``(d, m_i)`` block at
    ``d ptr[i]``) and their sums from the rows: the same gradients, at a shared point, at a
    point per node and as a difference of two, as the rows alone to rounding; minibatches
    read the rows alone; a copy above ``COLUMNS_MAX_BYTES`` is not made."""
    A, b = _data(True) if rows == "floats" else _one_value(0.5)
    both = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")
    R = both._kdata[0] if rows == "floats" else both._kbin[0]
    krows, kptr = both._kfull[1:3]
    (T, held, c), d = both._kcols, both.d
    assert held is R and c == (1.0 if rows == "floats" else 0.5)
    assert T.dtype == R.dtype and T.size == R.size
    for i in range(COUNTS.size):
        block = T[d * kptr[i] : d * kptr[i + 1]].reshape(d, COUNTS[i])
        assert np.array_equal(block, R[krows[kptr[i] : kptr[i + 1]]].T)
    alone = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")
    alone._kcols = alone._kplan = None  # the rows alone (the plan of grad was made with both)
    calls = []
    real = glm_kernels.launch

    def spy(kernel, *a, **kw):
        calls.append(a[2].size > 0)  # _dense_grad's T: the rows by columns given
        return real(kernel, *a, **kw)

    monkeypatch.setattr(glm_kernels, "launch", spy)
    gen = torch.Generator().manual_seed(5)
    X, Y = (torch.randn(4, both.d, generator=gen, dtype=torch.float64).to(dtype) for _ in "XY")
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    for got, want in [(both.grad(X), alone.grad(X)), (both.grad(X[1]), alone.grad(X[1])),
                      (both.grad_diff(X, Y), alone.grad_diff(X, Y))]:  # fmt: skip
        torch.testing.assert_close(got, want, **tol)
    assert calls == [True, False] * 3  # both by columns, alone by rows
    batch = both.sample(SimulatedComm(4, seed=0).rng(2), 6)
    assert torch.equal(both.grad(X, batch), alone.grad(X, batch))
    assert calls[6:] == [False, False]  # minibatches by rows
    monkeypatch.setattr(glm_kernels, "COLUMNS_MAX_BYTES", R.nbytes - 1)
    assert LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage="dense")._kcols is None


def test_the_bytes_form_is_only_for_rows_of_one_finite_value():
    dense = np.array([[0.0, 2.0, 2.0], [2.0, 0.0, 0.0]])
    B, c = glm_kernels.pack_binary(dense)
    assert c == 2.0 and B.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert glm_kernels.pack_binary(np.array([[0.0, 2.0], [3.0, 0.0]])) is None
    assert glm_kernels.pack_binary(np.zeros((2, 3))) is None
    assert glm_kernels.pack_binary(np.array([[np.inf, 0.0], [np.inf, np.inf]])) is None
    assert glm_kernels.pack_binary(np.array([[-1.0, 0.0], [-1.0, -1.0]]))[1] == -1.0
    A, b = _data(False, seed=4)  # values of many kinds: the floats are read
    assert LogRegNonconvex(A, b, COUNTS, lam=0.1, storage="dense")._kbin is None
    A, b = _one_value(1.0)  # sparse rows on the CSR kernel: no dense bytes
    assert LogRegNonconvex(A, b, COUNTS, lam=0.1, storage="csr")._kbin is None


def _np_values(p) -> np.ndarray:
    return p._val.numpy()


def test_values_other_than_one_are_read():
    A, b = _data(False, seed=4)
    p = LogRegNonconvex(A, b, COUNTS, lam=0.1)
    assert p._kdata[3] is False and p._kdata[2].size == A.nnz


@pytest.mark.parametrize("storage", ["dense", "csr"])
def test_storage_option_forces_the_layout(storage):
    """``storage=dense|csr`` overrides the density threshold; the gradients agree to rounding
    with the other layout, and a bad value names the allowed ones."""
    A, b = _data(storage == "csr", seed=6)  # data whose automatic layout is the other one
    forced = LogRegNonconvex(A, b, COUNTS, lam=0.1, storage=storage)
    auto = LogRegNonconvex(A, b, COUNTS, lam=0.1)
    assert forced.dense == (storage == "dense") and auto.dense != forced.dense
    X = torch.randn(4, auto.d, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    torch.testing.assert_close(forced.grad(X), auto.grad(X), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(forced.node_loss(X), auto.node_loss(X), rtol=1e-12, atol=1e-14)
    allowed = "auto, dense, csr, dense-torch, csr-torch, csr-scipy, csc-scipy, dense-numpy, csc, "
    allowed += "dense-bits"
    with pytest.raises(ValueError, match=f"storage must be one of {allowed}, got 'ram'"):
        LogRegNonconvex(A, b, COUNTS, lam=0.1, storage="ram")


def test_storage_through_the_registry():
    from problems.registry import make_problem

    p = make_problem("logreg", dataset="synthetic", nodes=4, storage="dense")
    assert p.dense
    with pytest.raises(ValueError, match="storage must be one of"):
        make_problem("logreg", dataset="synthetic", nodes=4, storage="ram")


@pytest.mark.parametrize("storage", ["dense", "csr", "csc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", ["floats", "bytes"])
def test_a_gradient_at_one_point_is_the_prepared_call_with_the_same_bits(
    storage, dtype, rows, monkeypatch
):
    """``grad`` at one point ``(d,)`` shared by the nodes is one prepared kernel call
    (:func:`problems.glm_kernels.point_grad_plan`): bit for bit the general path's gradient
    (the dense rows by columns, as bytes, CSR and the ``csc`` view); a point per node, a
    minibatch, another dtype and a GLM with its own ``_grad`` take the general path."""
    A, b = _data(True) if rows == "floats" else _one_value(0.5)
    p = LogRegNonconvex(A, b, COUNTS, lam=0.1, dtype=dtype, storage=storage)
    assert p._kplan is not None and p.engine.startswith(storage)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(p.d, generator=gen, dtype=torch.float64).to(dtype)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    planned, real = [], p._kplan
    p._kplan = lambda X, R: planned.append(X.shape) or real(X, R)
    got = p.grad(x)
    assert planned == [(1, p.d)]
    want = p._grad(p._rows(x))  # the general path
    assert torch.equal(got.view(bits), want.view(bits))
    X = torch.randn(COUNTS.size, p.d, generator=gen, dtype=torch.float64).to(dtype)
    batch = p.sample(SimulatedComm(COUNTS.size, seed=0).rng(1), 3)
    other = torch.float64 if dtype == torch.float32 else torch.float32
    p.grad(X), p.grad(x, batch), p.grad(x.to(other))
    assert planned == [(1, p.d)]  # none of them took the plan

    class Own(LogRegNonconvex):
        def _grad(self, X):
            return super()._grad(X)

    assert Own(A, b, COUNTS, lam=0.1, dtype=dtype, storage=storage)._kplan is None
