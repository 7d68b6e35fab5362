"""Matrix smoothness (``Problem.smoothness_matrices``): the definition holds at random pairs
(with equality for quadratics and least squares), the Hessian by finite differences lies below
``L_i``, the top eigenvalue is the problem's ``L_i`` constant, rows follow ``local``, and a
problem that does not know its matrices says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from problems.base import Problem
from problems.registry import make_problem

CASES = {
    "logreg": dict(name="logreg", nodes=4, samples=160, features=7, lam=0.05, seed=1),
    "logreg-csr": dict(name="logreg", nodes=3, samples=90, features=9, storage="csr", seed=2),
    "least-squares": dict(name="least-squares", nodes=3, samples=60, features=6, lam=0.1),
    "logreg-nonconvex": dict(name="logreg-nonconvex", nodes=3, samples=60, features=5, lam=0.1),
    "quadratic": dict(name="quadratic", nodes=4, dim=6, seed=3),
    "tridiagonal": dict(name="quadratic", family="tridiagonal", nodes=3, dim=7, s=0.3),
}
# f_i is exactly quadratic: the definition holds with equality.
EXACT = {"least-squares", "quadratic", "tridiagonal"}


def build(key: str):
    kw = dict(CASES[key])
    return make_problem(kw.pop("name"), **kw)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    p = build(request.param)
    return request.param, p, p.smoothness_matrices()


def test_shape_symmetry_and_top_eigenvalue(case):
    _, p, L = case
    assert L.shape == (p.m, p.d, p.d) and L.dtype == torch.float64
    torch.testing.assert_close(L, L.transpose(1, 2), rtol=0, atol=0)
    top = torch.linalg.eigvalsh(L).abs().amax(dim=1)
    torch.testing.assert_close(top, p.consts.L_i, rtol=1e-9, atol=1e-12)


def test_the_definition_holds_at_random_pairs(case):
    key, p, L = case
    gen = torch.Generator().manual_seed(7)
    for scale in (0.1, 1.0, 5.0):
        X = scale * torch.randn(p.m, p.d, generator=gen, dtype=torch.float64)
        Y = scale * torch.randn(p.m, p.d, generator=gen, dtype=torch.float64)
        V = X - Y
        upper = (
            p.node_loss(Y) + (p.grad(Y) * V).sum(1) + 0.5 * torch.einsum("mi,mij,mj->m", V, L, V)
        )
        gap = upper - p.node_loss(X)
        tol = 1e-9 * (1.0 + upper.abs())
        assert (gap >= -tol).all(), (key, gap)
        if key in EXACT:
            torch.testing.assert_close(gap, torch.zeros_like(gap), rtol=0, atol=float(tol.max()))


def test_the_hessian_by_finite_differences_lies_below(case):
    key, p, L = case
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(p.m, p.d, generator=gen, dtype=torch.float64)
    h = 1e-5
    for _ in range(4):
        v = torch.randn(p.m, p.d, generator=gen, dtype=torch.float64)
        Hv = (p.grad(x + h * v) - p.grad(x - h * v)) / (2 * h)
        Lv = torch.einsum("mij,mj->mi", L, v)
        vHv, vLv = (v * Hv).sum(1), (v * Lv).sum(1)
        assert (vHv <= vLv + 1e-6 * vLv.abs()).all(), (key, vHv, vLv)
        if key in EXACT:
            torch.testing.assert_close(Hv, Lv, rtol=1e-6, atol=1e-7)


def test_logistic_regression_matrix_is_the_quarter_gram_plus_lambda():
    p = build("logreg")
    A, offsets = p._A64.toarray(), p._offsets64
    L = p.smoothness_matrices()
    for i in range(p.n):
        Ai = A[offsets[i] : offsets[i + 1]]
        ref = Ai.T @ Ai / (4 * Ai.shape[0]) + 0.05 * np.eye(p.d)
        torch.testing.assert_close(L[i], torch.from_numpy(ref), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("key", ["logreg-csr", "quadratic", "tridiagonal"])
def test_local_copies_hold_their_own_rows(key):
    p = build(key)
    full = p.smoothness_matrices()
    torch.testing.assert_close(p.local([2, 0]).smoothness_matrices(), full[[2, 0]])


def test_dense_and_csr_storage_agree():
    kw = dict(CASES["logreg"])
    kw.pop("name")
    dense = make_problem("logreg", storage="dense", **kw).smoothness_matrices()
    csr = make_problem("logreg", storage="csr", **kw).smoothness_matrices()
    torch.testing.assert_close(dense, csr, rtol=1e-12, atol=1e-15)


def test_unknown_matrices_are_none_by_default():
    class Bare(Problem):
        name = "bare"

    p = Bare(2, 3, consts=lambda: None, x0=torch.zeros(3))
    assert p.smoothness_matrices() is None
