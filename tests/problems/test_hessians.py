"""Exact per-node Hessians (``Problem.hess``) against finite differences of ``grad``."""

from __future__ import annotations

import pytest
import torch

from problems.registry import make_problem

GLMS = ["logreg", "least-squares", "logreg-nonconvex", "sigmoid-squared"]


def fd_hessians(problem, X: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """Central differences of every node's gradient, column ``k`` from ``e_k``, ``(m, d, d)``."""
    m, d = X.shape
    E = torch.eye(d, dtype=X.dtype)
    # All d directions for all m nodes as one batch of m d rows would need a problem over m d
    # nodes; d is small here, so the columns are stacked from d gradient calls.
    cols = [(problem.grad(X + h * E[k]) - problem.grad(X - h * E[k])) / (2 * h) for k in range(d)]
    return torch.stack(cols, dim=2)


def points(problem, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.5 * torch.randn(problem.m, problem.d, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("name", GLMS)
@pytest.mark.parametrize("storage", ["dense", "csr"])
def test_glm_hessians_match_finite_differences(name, storage):
    p = make_problem(name, nodes=4, lam=0.01, samples=80, features=6, storage=storage)
    X = points(p)
    H = p.hess(X)
    assert H.shape == (4, 6, 6) and H.dtype == torch.float64
    torch.testing.assert_close(H, H.transpose(1, 2))
    torch.testing.assert_close(H, fd_hessians(p, X), atol=1e-7, rtol=1e-6)


def test_glm_hessians_with_unequal_nodes_and_one_common_point():
    # 83 rows on 4 nodes: unequal m_i, the sparse path even for dense data; a (d,) point.
    p = make_problem("logreg", nodes=4, lam=0.1, samples=83, features=5, storage="dense")
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    H = p.hess(x)
    torch.testing.assert_close(H, fd_hessians(p, x.expand(4, 5)), atol=1e-7, rtol=1e-6)
    # the mean of the node Hessians is the Hessian of f (equal weights 1/n)
    Hf = p._hess64(x.numpy())
    torch.testing.assert_close(H.mean(0), torch.from_numpy(Hf), atol=1e-12, rtol=1e-10)


def test_a_local_copy_gives_its_own_rows_hessians():
    p = make_problem("logreg", nodes=4, lam=0.1, samples=80, features=5, storage="csr")
    X = points(p)
    full = p.hess(X)
    q = p.local([2, 0])
    torch.testing.assert_close(q.hess(X[[2, 0]]), full[[2, 0]])
    torch.testing.assert_close(p.hess(X), full)  # the cache follows the node set


def test_float32_hessians():
    p = make_problem("logreg", nodes=3, lam=0.1, samples=60, features=4, dtype="float32")
    X = points(p).float()
    H = p.hess(X)
    assert H.dtype == torch.float32
    p64 = make_problem("logreg", nodes=3, lam=0.1, samples=60, features=4)
    torch.testing.assert_close(H.double(), p64.hess(X.double()), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["random", "tridiagonal"])
def test_quadratic_hessians_are_the_node_matrices(family):
    p = make_problem("quadratic", nodes=3, family=family, dim=5)
    X = points(p)
    H = p.hess(X)
    torch.testing.assert_close(H, fd_hessians(p, X), atol=1e-8, rtol=1e-7)


def test_problems_without_exact_hessians_refuse():
    p = make_problem("mlp", nodes=2)
    assert not p.hessians
    with pytest.raises(ValueError, match="Hessians are not available"):
        p.hess(torch.zeros(p.d))


def test_the_batched_dense_path_matches_the_sparse_one():
    # Without the compiled kernels (CUDA, no numba) dense data with equal m_i takes one bmm.
    p = make_problem("logreg", nodes=4, lam=0.1, samples=80, features=6, storage="dense")
    X = points(p)
    sparse = p.hess(X)
    p._kernels = False
    p._select()
    assert p._X3 is not None
    torch.testing.assert_close(p.hess(X), sparse, atol=1e-13, rtol=1e-12)
