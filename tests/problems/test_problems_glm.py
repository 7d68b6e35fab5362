"""GLMs: gradients against autograd and finite differences, constants against Hessians."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from problems import solver
from problems.least_squares import LeastSquares
from problems.logreg import LogReg
from problems.logreg_nonconvex import LogRegNonconvex
from problems.sigmoid_squared import SigmoidSquared
from streams import Streams

GLMS = [LogReg, LogRegNonconvex, LeastSquares, SigmoidSquared]


def make_data(N=60, d=7, n=4, density=1.0, seed=0, unequal=True):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((N, d)) * (rng.random((N, d)) < density)
    b = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    if unequal:
        cuts = np.sort(rng.choice(np.arange(1, N), n - 1, replace=False))
        counts = np.diff(np.concatenate([[0], cuts, [N]]))
    else:
        counts = np.diff((np.arange(n + 1) * N) // n)
    return A, b, counts


def ref_node_loss(cls, A_i, b_i, x, lam):
    """f_i(x) written from DESIGN.md's formulas, one node at a time."""
    z = A_i @ x
    if cls is LeastSquares:
        data = 0.5 * ((z - b_i) ** 2).mean()
    elif cls is SigmoidSquared:  # phi(t) = (1 - 1/(1 + e^-t))^2, t = b a^T x
        data = ((1 - 1 / (1 + torch.exp(-b_i * z))) ** 2).mean()
    else:
        data = torch.log1p(torch.exp(-b_i * z)).mean()
    if cls is LogRegNonconvex:
        return data + lam * (x**2 / (1 + x**2)).sum()
    return data + 0.5 * lam * (x @ x)


def blocks(A, b, counts):
    off = np.concatenate([[0], np.cumsum(counts)])
    At, bt = torch.from_numpy(np.asarray(A)), torch.from_numpy(b)
    return [(At[off[i] : off[i + 1]], bt[off[i] : off[i + 1]]) for i in range(len(counts))]


def ref_f(cls, A, b, counts, lam):
    parts = blocks(A, b, counts)
    return lambda x: torch.stack([ref_node_loss(cls, Ai, bi, x, lam) for Ai, bi in parts]).mean()


@pytest.mark.parametrize("cls", GLMS)
@pytest.mark.parametrize("density", [1.0, 0.3])
def test_grad_matches_autograd_per_node(cls, density):
    A, b, counts = make_data(density=density)
    A_in = sp.csr_matrix(A) if density < 1 else A
    p = cls(A_in, b, counts, lam=0.1)
    X = torch.randn(p.m, p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    G = p.grad(X)
    losses = p.node_loss(X)
    for j, (Ai, bi) in enumerate(blocks(A, b, counts)):
        x = X[j].clone().requires_grad_(True)
        loss = ref_node_loss(cls, Ai, bi, x, 0.1)
        (g,) = torch.autograd.grad(loss, x)
        torch.testing.assert_close(G[j], g, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(losses[j], loss.detach(), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("cls", GLMS)
def test_loss_and_full_grad_match_autograd_and_fd(cls):
    A, b, counts = make_data(d=5)
    p = cls(A, b, counts, lam=0.3)
    f = ref_f(cls, A, b, counts, 0.3)
    x = torch.randn(p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    xr = x.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(f(xr), xr)
    torch.testing.assert_close(p.loss(x), f(x), rtol=1e-13, atol=0)
    torch.testing.assert_close(p.full_grad(x), g_ref, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(p.grad(x).mean(0), p.full_grad(x), rtol=1e-12, atol=1e-13)
    h = 1e-6
    fd = torch.stack(
        [
            (p.loss(x + h * e) - p.loss(x - h * e)) / (2 * h)
            for e in torch.eye(p.d, dtype=torch.float64)
        ]
    )
    torch.testing.assert_close(p.full_grad(x), fd, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("cls", GLMS)
def test_node_grads_match_finite_differences(cls):
    A, b, counts = make_data(d=4, density=0.5)
    p = cls(sp.csr_matrix(A), b, counts, lam=0.2)
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(p.m, p.d, dtype=torch.float64, generator=gen)
    V = torch.randn(p.m, p.d, dtype=torch.float64, generator=gen)
    h = 1e-6
    fd = (p.node_loss(X + h * V) - p.node_loss(X - h * V)) / (2 * h)
    torch.testing.assert_close((p.grad(X) * V).sum(1), fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("cls", GLMS)
@pytest.mark.parametrize("density", [1.0, 0.3])
def test_batch_grad_is_the_gradient_on_the_drawn_rows(cls, density):
    A, b, counts = make_data(density=density)
    p = cls(sp.csr_matrix(A) if density < 1 else A, b, counts, lam=0.1)
    batch = p.sample(Streams.for_nodes(5, range(p.n)), 6)
    assert batch.idx.shape == (p.m, 6)
    off = np.concatenate([[0], np.cumsum(counts)])
    for j in range(p.m):
        assert ((batch.idx[j] >= off[j]) & (batch.idx[j] < off[j + 1])).all()
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(p.m, p.d, dtype=torch.float64, generator=gen)
    G = p.grad(X, batch)
    At, bt = torch.from_numpy(A), torch.from_numpy(b)
    for j in range(p.m):
        rows = batch.idx[j]
        x = X[j].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(ref_node_loss(cls, At[rows], bt[rows], x, 0.1), x)
        torch.testing.assert_close(G[j], g, rtol=1e-12, atol=1e-13)
    # The same batch is the same sample at another point: the difference is exact.
    Y = torch.randn(p.m, p.d, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(p.grad(X, batch), G, rtol=0, atol=0)
    if cls is LeastSquares:
        diff = p.grad(X, batch) - p.grad(Y, batch)
        for j in range(p.m):
            Ab = At[batch.idx[j]]
            expect = Ab.T @ (Ab @ (X[j] - Y[j])) / 6 + 0.1 * (X[j] - Y[j])
            torch.testing.assert_close(diff[j], expect, rtol=1e-10, atol=1e-12)


def test_sample_is_deterministic_and_per_node():
    A, b, counts = make_data(n=5)
    p = LogReg(A, b, counts, lam=0.1)
    s = Streams.for_nodes(7, range(5))
    b1, b2 = p.sample(s, 4), p.sample(s, 4)
    assert torch.equal(b1.idx, b2.idx)
    one = p.local([3]).sample(Streams.for_nodes(7, [3]), 4)
    assert torch.equal(one.idx[0], b1.idx[3])
    assert not torch.equal(p.sample(Streams.for_nodes(8, range(5)), 4).idx, b1.idx)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 6),
    extra=st.integers(0, 20),
    d=st.integers(1, 6),
    seed=st.integers(0, 1000),
    cls=st.sampled_from(GLMS),
)
def test_grad_property_any_shapes(n, extra, d, seed, cls):
    A, b, counts = make_data(N=n + extra, d=d, n=n, seed=seed, density=0.6)
    p = cls(sp.csr_matrix(A), b, counts, lam=0.05)
    X = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    G = p.grad(X)
    for j, (Ai, bi) in enumerate(blocks(A, b, counts)):
        x = X[j].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(ref_node_loss(cls, Ai, bi, x, 0.05), x)
        torch.testing.assert_close(G[j], g, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("cls", GLMS)
def test_float32_agrees_with_float64(cls):
    A, b, counts = make_data(density=0.4)
    p64 = cls(sp.csr_matrix(A), b, counts, lam=0.1)
    p32 = cls(sp.csr_matrix(A), b, counts, lam=0.1, dtype=torch.float32)
    X = torch.randn(p64.m, p64.d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    g32 = p32.grad(X)
    assert g32.dtype == torch.float32
    torch.testing.assert_close(g32.double(), p64.grad(X), rtol=1e-5, atol=1e-5)
    batch = p64.sample(0, 3)
    torch.testing.assert_close(
        p32.grad(X, batch).double(), p64.grad(X, batch), rtol=1e-5, atol=1e-5
    )


def test_local_holds_the_same_rows_and_shares_constants():
    A, b, counts = make_data(n=5)
    p = LogRegNonconvex(A, b, counts, lam=0.1)
    X = torch.randn(5, p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    q = p.local([4, 1])
    assert q.m == 2 and q.n == 5 and q.nodes.tolist() == [4, 1]
    torch.testing.assert_close(q.grad(X[[4, 1]]), p.grad(X)[[4, 1]], rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(q.node_loss(X[[4, 1]]), p.node_loss(X)[[4, 1]])
    assert q.consts is p.consts
    torch.testing.assert_close(q.loss(X[0]), p.loss(X[0]))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        p.local([5])
    with pytest.raises(ValueError, match="distinct"):
        p.local([1, 1])


def hessian(f, x):
    return torch.autograd.functional.hessian(f, x)


def top(H):
    return float(torch.linalg.eigvalsh(H)[-1])


@pytest.mark.parametrize("cls", GLMS)
def test_smoothness_constants_are_valid_and_tight(cls):
    A, b, counts = make_data(N=50, d=6, n=3, density=0.7)
    lam = 0.1
    p = cls(sp.csr_matrix(A), b, counts, lam=lam)
    c = p.consts
    zero = torch.zeros(p.d, dtype=torch.float64)
    parts = blocks(A, b, counts)
    f = ref_f(cls, A, b, counts, lam)
    # Tight: the bound is the top Hessian eigenvalue at x = 0 (sigma'(0) = 1/4, R''(0) = 2 lam).
    # (Not for sigmoid-squared: its phi'' is largest away from 0 and changes sign.)
    tight = cls is not SigmoidSquared
    if tight:
        assert c.L == pytest.approx(top(hessian(f, zero)), rel=1e-9)
    for i, (Ai, bi) in enumerate(parts if tight else ()):
        H0 = hessian(lambda x, Ai=Ai, bi=bi: ref_node_loss(cls, Ai, bi, x, lam), zero)
        assert float(c.L_i[i]) == pytest.approx(top(H0), rel=1e-9)
    # Valid: no Hessian anywhere exceeds it (spectral norm, for the indefinite regulariser).
    gen = torch.Generator().manual_seed(7)
    for _ in range(5):
        x = 2 * torch.randn(p.d, dtype=torch.float64, generator=gen)
        assert torch.linalg.matrix_norm(hessian(f, x), 2) <= c.L * (1 + 1e-12)
        for i, (Ai, bi) in enumerate(parts):
            Hi = hessian(lambda x, Ai=Ai, bi=bi: ref_node_loss(cls, Ai, bi, x, lam), x)
            assert torch.linalg.matrix_norm(Hi, 2) <= c.L_i[i] * (1 + 1e-12)
    assert c.L <= float(c.L_i.mean()) + 1e-12 <= c.L_tilde + 1e-12 <= c.L_max + 1e-12
    assert c.L_tilde == pytest.approx(float(torch.sqrt((c.L_i**2).mean())), rel=1e-14)


def test_least_squares_mu_and_L_pm_exact():
    A, b, counts = make_data(N=40, d=5, n=4)
    lam = 0.05
    p = LeastSquares(A, b, counts, lam=lam)
    parts = blocks(A, b, counts)
    zero = torch.zeros(p.d, dtype=torch.float64)
    H = [
        hessian(lambda x, Ai=Ai, bi=bi: ref_node_loss(LeastSquares, Ai, bi, x, lam), zero)
        for Ai, bi in parts
    ]
    Hbar = sum(H) / len(H)
    V = sum(h @ h for h in H) / len(H) - Hbar @ Hbar
    assert p.consts.L_pm == pytest.approx(float(torch.linalg.eigvalsh(V)[-1]) ** 0.5, rel=1e-9)
    assert p.consts.mu == pytest.approx(float(torch.linalg.eigvalsh(Hbar)[0]), rel=1e-9)
    # The defining inequality of L_pm at random pairs.
    gen = torch.Generator().manual_seed(8)
    for _ in range(5):
        x, y = (torch.randn(p.d, dtype=torch.float64, generator=gen) for _ in range(2))
        D = p.grad(x) - p.grad(y)
        lhs = (D**2).sum(1).mean() - (D.mean(0) ** 2).sum()
        assert lhs <= p.consts.L_pm**2 * ((x - y) ** 2).sum() * (1 + 1e-10)


def test_least_squares_pl_constant_when_rank_deficient():
    A, b, counts = make_data(N=30, d=6, n=3)
    A[:, 5] = A[:, 0] + A[:, 1]  # rank 5
    p = LeastSquares(A, b, counts, lam=0.0)
    w = np.repeat(1.0 / (3 * counts), counts)
    ev = np.linalg.eigvalsh(A.T @ (w[:, None] * A))
    assert ev[0] < 1e-12
    assert p.consts.mu == pytest.approx(ev[1], rel=1e-9)
    assert p.full_grad(p.x_star).norm() <= 1e-9
    assert p.consts.f_star == pytest.approx(float(p.loss(p.x_star)), rel=1e-12)


@pytest.mark.parametrize("cls", [LogReg, LeastSquares])
def test_convex_solution_zeta2_and_mu(cls):
    A, b, counts = make_data(N=80, d=6, n=4, density=0.8)
    p = cls(sp.csr_matrix(A), b, counts, lam=0.01)
    c = p.consts
    x = p.x_star
    assert p.full_grad(x).norm() <= 1e-9
    assert c.f_star == pytest.approx(float(p.loss(x)), rel=1e-13)
    g = p.grad(x)
    assert c.zeta2 == pytest.approx(float((g**2).sum(1).mean()), rel=1e-10)
    gen = torch.Generator().manual_seed(9)
    for _ in range(5):  # f_star is the minimum
        y = x + 0.1 * torch.randn(p.d, dtype=torch.float64, generator=gen)
        assert float(p.loss(y)) >= c.f_star
    if cls is LogReg:
        assert c.mu == 0.01 and c.L_pm is None


def test_nonconvex_has_no_optimum_constants():
    A, b, counts = make_data()
    c = LogRegNonconvex(A, b, counts, lam=0.1).consts
    assert c.mu is None and c.f_star is None and c.zeta2 is None and c.L_pm is None
    assert LogRegNonconvex(A, b, counts, lam=0.1).x_star is None


def test_f_star_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "c"))
    A, b, counts = make_data()
    f1 = LogReg(A, b, counts, lam=0.1).consts.f_star
    files = list((tmp_path / "c").glob("fstar-*.npz"))
    assert len(files) == 1

    def boom(*a, **k):
        raise AssertionError("solved again instead of reading the cache")

    monkeypatch.setattr(solver, "solve", boom)
    assert LogReg(A, b, counts, lam=0.1).consts.f_star == f1
    with pytest.raises(AssertionError, match="solved again"):
        _ = LogReg(A, b, counts, lam=0.2).consts  # other parameters, other key


def test_bad_inputs_name_the_value():
    A, b, counts = make_data(n=3)
    with pytest.raises(ValueError, match="-1"):
        LogReg(A, b, counts, lam=-1.0)
    with pytest.raises(ValueError, match="nan"):
        LogReg(A, b, counts, lam=float("nan"))
    with pytest.raises(ValueError, match=r"empty nodes \[1\]"):
        LogReg(A, b, np.array([counts[0] + counts[1], 0, counts[2]]), lam=0.1)
    p = LogReg(A, b, counts, lam=0.1)
    with pytest.raises(ValueError, match=r"\(3, 7\)"):
        p.grad(torch.zeros(2, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match="batch_size"):
        p.sample(0, 0)
    with pytest.raises(ValueError, match="nodes"):
        p.local([0]).grad(torch.zeros(7, dtype=torch.float64), p.sample(0, 2))


def test_separable_data_without_regulariser_reaches_the_infimum():
    A = np.array([[1.0, 0.0], [2.0, 1.0], [-1.0, 0.5], [-2.0, -1.0]])
    p = LogReg(A, np.array([1.0, 1.0, -1.0, -1.0]), np.array([2, 2]), lam=0.0)
    c = p.consts  # inf f = 0 is approached at infinity; f_star is it to solver accuracy
    assert c.mu is None and 0 <= c.f_star < 1e-10
    assert p.full_grad(p.x_star).norm() <= 1e-9


@pytest.mark.parametrize("name", ["logreg", "logreg-nonconvex", "least-squares", "sigmoid-squared"])
def test_sample_smoothness_bounds_every_single_sample_difference(name):
    import torch

    from problems.registry import make_problem

    p = make_problem(name, nodes=4, lam=0.1, samples=60, features=6, seed=3)
    calL = p.sample_smoothness()
    assert calL >= p.consts.L_tilde * (1 - 1e-12)  # averaging samples only smooths
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(p.d, generator=g, dtype=torch.float64)
        y = x + 0.3 * torch.randn(p.d, generator=g, dtype=torch.float64)
        size = int(p.counts.max())
        idx = torch.stack([p.offsets[i] + torch.arange(size) % p.counts[i] for i in range(p.n)])
        from problems.base import Batch

        # one sample at a time: a batch of size 1 holding sample j of every node
        sq = torch.zeros(p.n, dtype=torch.float64)
        for j in range(size):
            batch = Batch(nodes=p.nodes, size=1, idx=idx[:, j : j + 1])
            diff = p.grad(x, batch) - p.grad(y, batch)
            sq += (diff**2).sum(dim=1) / size
        assert float(sq.mean()) <= calL**2 * float(((x - y) ** 2).sum()) * (1 + 1e-9)


@pytest.mark.parametrize("name", ["logreg", "logreg-nonconvex", "least-squares", "sigmoid-squared"])
@pytest.mark.parametrize("split", ["contiguous", "dirichlet:0.5"])
def test_dense_storage_agrees_with_the_sparse_one(name, split, monkeypatch):
    """Dense data (density > DENSE_ABOVE) takes gemv/bmm paths; they must give the numbers of
    the block-sparse path on the same data, for equal and unequal node sizes."""
    import torch

    from problems import glm
    from problems.registry import make_problem

    kw = dict(nodes=5, lam=0.1, samples=103, features=7, density=1.0, seed=4, split=split)
    dense = make_problem(name, **kw)
    monkeypatch.setattr(glm, "DENSE_ABOVE", 2.0)
    sparse = make_problem(name, **kw)
    assert dense.dense and not sparse.dense
    g = torch.Generator().manual_seed(1)
    x = torch.randn(dense.d, generator=g, dtype=torch.float64)
    X = torch.randn(dense.n, dense.d, generator=g, dtype=torch.float64)
    close = dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(dense.grad(x), sparse.grad(x), **close)
    torch.testing.assert_close(dense.grad(X), sparse.grad(X), **close)
    torch.testing.assert_close(dense.node_loss(X), sparse.node_loss(X), **close)
    torch.testing.assert_close(dense.loss(x), sparse.loss(x), **close)
    torch.testing.assert_close(dense.full_grad(x), sparse.full_grad(x), **close)
    torch.testing.assert_close(dense.full_grad(x), dense.grad(x).mean(dim=0), **close)
    one = dense.local([3])
    torch.testing.assert_close(one.grad(x), sparse.grad(x)[3:4], **close)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logistic_weighted_derivative_in_three_passes_is_the_four_pass_one(dtype):
    """The many-points paths take ``dphi(Z, b) * w`` as ``sigmoid(-b Z) * (-b w)``: bit for bit
    ``-b sigmoid(-b Z) * w`` for labels in {-1, 0, 1} (0 pads a node's rows), at huge, zero,
    infinite and NaN margins; other labels take the four passes, where the short form would
    round differently."""
    import math

    from problems.glm import GLM
    from problems.registry import make_problem

    p = make_problem("logreg", dataset="synthetic", nodes=4, seed=0, dtype=str(dtype)[6:])
    assert p._signed_labels
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(500, 12, generator=g, dtype=torch.float64).to(dtype) * 30
    Z[0, :4] = torch.tensor([math.inf, -math.inf, math.nan, 0.0])
    Z[1] = -0.0
    b = torch.tensor([-1.0, 1.0, 0.0])[torch.randint(0, 3, (500, 1), generator=g)].to(dtype)
    w = torch.rand(500, 1, generator=g, dtype=torch.float64).to(dtype) / 7
    four = GLM._dphi_times(p, Z, b, w)
    three = p._dphi_times(Z, b, w)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    nan = torch.isnan(four)
    assert torch.equal(nan, torch.isnan(three))
    assert torch.equal(four[~nan].view(bits), three[~nan].view(bits))
    once = p._dphi_times_of(b, w)(Z)  # what depends on b and w alone, computed once
    assert torch.equal(nan, torch.isnan(once))
    assert torch.equal(four[~nan].view(bits), once[~nan].view(bits))
    z = Z.numpy().copy()  # dense-numpy's weights: in place on NumPy margins, the same bits
    in_place = torch.from_numpy(p._dphi_times_numpy_of(b, w)(z))
    assert in_place.data_ptr() == torch.from_numpy(z).data_ptr()
    assert torch.equal(nan, torch.isnan(in_place))
    assert torch.equal(four[~nan].view(bits), in_place[~nan].view(bits))

    odd = b * 0.3  # labels outside {-1, 0, 1}: the short form rounds differently there ...
    nb = -odd
    assert not torch.equal((Z * nb).sigmoid_().mul_(nb * w)[2:], GLM._dphi_times(p, Z, odd, w)[2:])
    p._b64 = p._b64 * 0.3  # ... and a problem with such labels takes the four passes
    p.__dict__.pop("_signed_labels", None)
    assert torch.equal(p._dphi_times(Z, odd, w)[2:], GLM._dphi_times(p, Z, odd, w)[2:])
    assert torch.equal(p._dphi_times_of(odd, w)(Z)[2:], GLM._dphi_times(p, Z, odd, w)[2:])
    out = torch.from_numpy(p._dphi_times_numpy_of(odd, w)(Z.numpy().copy()))
    assert torch.equal(out[2:], GLM._dphi_times(p, Z, odd, w)[2:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cls", GLMS)
def test_regulariser_gradient_through_numpy_is_torch_bit_for_bit(cls, dtype):
    """A small CPU point's regulariser gradient is computed in one compiled call
    (:mod:`problems.glm_reg`), or by NumPy (``REG_NUMPY``): the same bits as ``reg_grad`` on
    the torch tensor, at huge, tiny, zero, signed-zero, infinite and
    NaN entries, for a broadcast point, one row and per-node rows; a point above
    ``REG_NUMPY_MAX`` entries takes torch."""
    import math

    from problems import glm

    A, b, counts = make_data()
    p = cls(A, b, counts, lam=0.37, dtype=dtype)
    assert p.REG_NUMPY
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, generator=g, dtype=torch.float64).to(dtype) * 10.0 ** torch.randint(
        -30, 30, (300,), generator=g
    ).to(dtype)
    x[:6] = torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e200]).to(dtype)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    rows = torch.randn(5, 300, generator=g, dtype=torch.float64).to(dtype) * 1e3
    for X in (x[None].expand(4, -1), x[None], rows):
        got, want = p._reg_grad_rows(X), p.reg_grad(X[:1] if X.stride(0) == 0 else X, p.lam)
        assert got.dtype == dtype and got.shape == want.shape
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got.nan_to_num().view(bits), want.nan_to_num().view(bits))
    big = torch.zeros(2, glm.REG_NUMPY_MAX // 2 + 1, dtype=dtype)
    calls = []
    real = p.reg_grad

    def spy(X, lam):
        calls.append(type(X))
        return real(X, lam)

    p.reg_grad = spy
    p._reg_grad_rows(big)
    p._reg_grad_rows(x[None])  # the compiled form (problems.glm_reg): reg_grad is not called
    assert calls == [torch.Tensor] and glm.glm_reg.available(p.KERNEL_REG)
    with pytest.MonkeyPatch.context() as mp:  # NumPy's where it is not compiled
        mp.setattr(glm.glm_reg, "available", lambda name: False)
        p._reg_grad_rows(x[None])
    assert calls == [torch.Tensor, np.ndarray]
