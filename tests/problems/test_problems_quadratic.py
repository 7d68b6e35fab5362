"""Quadratics: closed forms of the tridiagonal family, exact knobs of the random family."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from problems import make_problem
from streams import Streams


def tridiagonal_reference(n, d, s, lam, seed):
    """The generator of the 3PC code (quad_preprocessing.py), written out densely."""
    rs = np.random.RandomState(seed)
    T = (np.tri(d, d, 1, dtype=int) - np.tri(d, d, -2, dtype=int)) * (-1) + 3 * np.eye(d)
    A = np.zeros((n, d, d))
    b = np.zeros((n, d))
    for i in range(n):
        nu_s = 1 + s * rs.normal(loc=0, scale=1, size=1)[0]
        nu_b = s * rs.normal(loc=0, scale=1, size=1)[0]
        A[i] = (nu_s / 4) * T
        b[i, 0] = (nu_s / 4) * (-1 + nu_b)
    lam_min = np.linalg.eigvalsh(A.mean(0))[0]
    A += (lam - lam_min) * np.eye(d)
    return A, b


def dense_constants(A, b):
    n = A.shape[0]
    Abar, bbar = A.mean(0), b.mean(0)
    L_i = np.array([np.abs(np.linalg.eigvalsh(Ai)).max() for Ai in A])
    V = np.einsum("nij,njk->ik", A, A) / n - Abar @ Abar
    x = np.linalg.solve(Abar, bbar)
    G = np.einsum("nij,j->ni", A, x) - b
    return {
        "L_i": L_i,
        "L": np.abs(np.linalg.eigvalsh(Abar)).max(),
        "mu": np.linalg.eigvalsh(Abar)[0],
        "L_pm": math.sqrt(max(np.linalg.eigvalsh(V)[-1], 0.0)),
        "x": x,
        "f_star": 0.5 * x @ Abar @ x - bbar @ x,
        "zeta2": np.mean(np.sum(G * G, axis=1)),
    }


def hessians_from_oracle(p):
    """Q_i recovered column by column from the gradient oracle (independent of internals)."""
    d = p.d
    g0 = p.grad(torch.zeros(d, dtype=torch.float64))
    cols = [p.grad(e) - g0 for e in torch.eye(d, dtype=torch.float64)]
    return torch.stack(cols, dim=2).numpy(), -g0.numpy()


def test_tridiagonal_eigenvalues_closed_form():
    d = 13
    T = np.diag(np.full(d, 2.0)) - np.diag(np.ones(d - 1), 1) - np.diag(np.ones(d - 1), -1)
    k = np.arange(1, d + 1)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(T), 2 - 2 * np.cos(k * np.pi / (d + 1)), atol=1e-13
    )


@pytest.mark.parametrize("s", [0.0, 0.4, 3.0])
def test_tridiagonal_matches_the_reference_generator(s):
    n, d, lam, seed = 6, 30, 1e-3, 12345
    p = make_problem("quadratic", family="tridiagonal", nodes=n, dim=d, s=s, lam=lam, seed=seed)
    A, b = tridiagonal_reference(n, d, s, lam, seed)
    Q, q = hessians_from_oracle(p)
    np.testing.assert_allclose(Q, A, atol=1e-13)
    np.testing.assert_allclose(q, b, atol=1e-15)
    ref = dense_constants(A, b)
    c = p.consts
    np.testing.assert_allclose(c.L_i.numpy(), ref["L_i"], rtol=1e-11)
    assert c.L == pytest.approx(ref["L"], rel=1e-11)
    assert c.mu == pytest.approx(ref["mu"], rel=1e-7)
    assert c.L_pm**2 == pytest.approx(ref["L_pm"] ** 2, rel=1e-9, abs=1e-14)  # eigvalsh rounding
    assert c.f_star == pytest.approx(ref["f_star"], rel=1e-9)
    assert c.zeta2 == pytest.approx(ref["zeta2"], rel=1e-8)
    assert p.full_grad(p.x_star).norm() <= 1e-9
    x0 = torch.zeros(d, dtype=torch.float64)
    x0[0] = math.sqrt(d)
    assert torch.equal(p.x0, x0)
    if s == 0:
        assert c.L_pm == 0.0 and np.ptp(c.L_i.numpy()) == 0.0


def test_tridiagonal_closed_forms():
    n, d, s, lam = 5, 40, 0.3, 1e-6
    p = make_problem("quadratic", family="tridiagonal", nodes=n, dim=d, s=s, lam=lam, seed=7)
    xi = np.random.RandomState(7).normal(size=(n, 2))
    a = (1 + s * xi[:, 0]) / 4
    t1, td = 2 - 2 * np.cos(np.pi / (d + 1)), 2 - 2 * np.cos(d * np.pi / (d + 1))
    sigma = lam - a.mean() * t1
    c = p.consts
    np.testing.assert_allclose(c.L_i.numpy(), a * td + sigma, rtol=1e-14)
    assert c.L == pytest.approx(a.mean() * td + sigma, rel=1e-14)
    assert c.L_pm == pytest.approx(a.std() * td, rel=1e-14)
    assert c.mu == lam


def test_tridiagonal_thousand_dims_is_cheap_and_exact():
    p = make_problem(
        "quadratic", family="tridiagonal", nodes=100, dim=1000, s=0.1, seed=12345, lam=1e-6
    )
    c = p.consts
    assert c.mu == 1e-6 and c.L > 0.9
    assert p.full_grad(p.x_star).norm() <= 1e-9


@pytest.mark.parametrize("n", [1, 7])
def test_random_family_constants_are_the_knobs(n):
    p = make_problem("quadratic", nodes=n, dim=12, L=2.0, lam=0.05, zeta2=3.0, L_pm=0.4, seed=3)
    A, b = hessians_from_oracle(p)
    np.testing.assert_allclose(A, np.transpose(A, (0, 2, 1)), atol=1e-14)
    ref = dense_constants(A, b)
    c = p.consts
    assert c.L == pytest.approx(2.0, rel=1e-12) and c.L == pytest.approx(ref["L"], rel=1e-12)
    assert c.mu == pytest.approx(0.05, rel=1e-10) and c.mu == pytest.approx(ref["mu"], rel=1e-9)
    het = n > 1
    assert c.L_pm == pytest.approx(0.4 * het, rel=1e-10, abs=1e-7)
    assert c.L_pm**2 == pytest.approx(ref["L_pm"] ** 2, rel=1e-9, abs=1e-14)
    assert c.zeta2 == pytest.approx(3.0 * het, rel=1e-10, abs=1e-20)
    assert c.zeta2 == pytest.approx(ref["zeta2"], rel=1e-8, abs=1e-20)
    np.testing.assert_allclose(c.L_i.numpy(), ref["L_i"], rtol=1e-12)
    assert c.f_star == pytest.approx(ref["f_star"], rel=1e-12)
    assert p.full_grad(p.x_star).norm() <= 1e-9


@pytest.mark.parametrize("family", ["random", "tridiagonal"])
def test_quadratic_grads_autograd_and_fd(family):
    p = make_problem("quadratic", family=family, nodes=4, dim=9, seed=2)
    Q, q = hessians_from_oracle(p)
    Qt, qt = torch.from_numpy(Q), torch.from_numpy(q)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(4, 9, dtype=torch.float64, generator=gen)
    G = p.grad(X)
    for j in range(4):
        x = X[j].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(0.5 * x @ Qt[j] @ x - qt[j] @ x, x)
        torch.testing.assert_close(G[j], g, rtol=1e-13, atol=1e-13)
    V = torch.randn(4, 9, dtype=torch.float64, generator=gen)
    h = 1e-5
    fd = (p.node_loss(X + h * V) - p.node_loss(X - h * V)) / (2 * h)
    torch.testing.assert_close((G * V).sum(1), fd, rtol=1e-8, atol=1e-9)
    x = X[0]
    torch.testing.assert_close(p.loss(x), p.node_loss(x).mean(), rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(p.full_grad(x), p.grad(x).mean(0), rtol=1e-13, atol=1e-14)


def test_quadratic_stochastic_noise():
    p = make_problem("quadratic", nodes=400, dim=5, grad_noise=2.0, seed=1)
    rng = Streams.for_nodes(3, range(400))
    batch = p.sample(rng, 4)
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(5, dtype=torch.float64)
    noise = p.grad(x, batch) - p.grad(x)
    torch.testing.assert_close(
        p.grad(x, batch) - p.grad(y, batch), p.grad(x) - p.grad(y), rtol=1e-12, atol=1e-13
    )
    assert torch.equal(p.sample(rng, 4).noise, batch.noise)
    var = float((noise**2).sum(1).mean())  # E = grad_noise^2 d / B = 5; 400 nodes: se ~ 0.16
    assert abs(var - 5.0) < 0.8
    assert abs(float(noise.mean())) < 0.1
    exact = make_problem("quadratic", nodes=3, dim=5)  # grad_noise = 0: batches are exact
    assert torch.equal(exact.grad(x, exact.sample(0, 2)), exact.grad(x))


def test_quadratic_float32_and_local():
    p = make_problem("quadratic", family="tridiagonal", nodes=5, dim=8, dtype="float32")
    assert p.grad(p.x0).dtype == torch.float32 and p.x0.dtype == torch.float32
    q = make_problem("quadratic", nodes=5, dim=8)
    X = torch.randn(5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    loc = q.local([2, 0])
    torch.testing.assert_close(loc.grad(X[[2, 0]]), q.grad(X)[[2, 0]], rtol=0, atol=0)
    assert loc.consts is q.consts


@pytest.mark.parametrize(
    ("knobs", "match"),
    [
        ({"family": "banded"}, "banded"),
        ({"dim": 1}, "dim must be an integer >= 2, got 1"),
        ({"L": -1.0}, "L must be a finite number > 0, got -1.0"),
        ({"lam": 2.0}, "must be <= L = 1.0, got 2.0"),
        ({"lam": 0.0}, r"lambda \(mu\) must be a finite number > 0, got 0.0"),
        ({"zeta2": -0.5}, "zeta2 must be a finite number >= 0, got -0.5"),
        ({"family": "tridiagonal", "s": -1.0}, "s must be a finite number >= 0, got -1.0"),
        ({"family": "tridiagonal", "L": 2.0}, r"\['L'\] are not used by family tridiagonal"),
        ({"family": "tridiagonal", "lam": -1e-3}, "got -0.001"),
        ({"split": "iid"}, "got split 'iid'"),
        ({"dataset": "a9a"}, "got dataset 'a9a'"),
        ({"nodes": 2000, "dim": 200}, "family tridiagonal"),
    ],
)
def test_quadratic_bad_inputs(knobs, match):
    kw = {"nodes": 3, **knobs}
    with pytest.raises(ValueError, match=match):
        _ = make_problem("quadratic", **kw).consts


def test_random_quadratic_zero_knobs_give_exactly_zero():
    from problems.registry import make_problem

    homog = make_problem("quadratic", nodes=5, zeta2=0.0, L_pm=0.0)
    # L_pm is the square root of an eigenvalue at rounding level (~1e-16).
    assert homog.consts.zeta2 <= 1e-24 and homog.consts.L_pm <= 1e-7
    assert make_problem("quadratic", nodes=5, zeta2=0.0).consts.zeta2 <= 1e-24
    assert make_problem("quadratic", nodes=5, L_pm=0.0).consts.L_pm <= 1e-7
