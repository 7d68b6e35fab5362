"""The quadratic game: the operator is the saddle function's (grad_x, -grad_y), the constants are
exact, and it is refused to methods that minimise."""

from __future__ import annotations

import math

import pytest
import torch

from problems import make_problem
from problems.capabilities import check_kind
from problems.quadratic_game import QuadraticGame

KNOBS = {"dim": 3, "mu": 0.2, "ell": 1.5, "coupling": 0.7, "similarity": 0.3, "zeta2": 2.0}


@pytest.fixture(scope="module")
def game():
    return make_problem("quadratic-game", nodes=4, seed=3, **KNOBS)


def _blocks(M: torch.Tensor, k: int):
    return M[:k, :k], M[:k, k:], M[k:, :k], M[k:, k:]


def test_operator_is_the_saddle_gradient(game):
    """Each ``M_i`` is ``[[A_i, B_i], [-B_i^T, C_i]]`` with symmetric ``A_i``, ``C_i``, and
    ``F_i = (grad_x f_i, -grad_y f_i)`` of ``f_i = x^T A x/2 + x^T B y - y^T C y/2 + a^T x -
    b^T y`` (autograd at random points)."""
    k, M = KNOBS["dim"], game.jacobians()
    m = game.grad(torch.zeros(game.d, dtype=torch.float64))  # F_i(0) = m_i = (a_i, b_i)
    Z = torch.randn(game.n, game.d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    F = game.grad(Z)
    for i in range(game.n):
        A, B, negBt, C = _blocks(M[i], k)
        torch.testing.assert_close(A, A.T, rtol=0, atol=1e-14)
        torch.testing.assert_close(C, C.T, rtol=0, atol=1e-14)
        torch.testing.assert_close(negBt, -B.T, rtol=0, atol=1e-14)
        a, b = m[i, :k], m[i, k:]
        x = Z[i, :k].clone().requires_grad_(True)
        y = Z[i, k:].clone().requires_grad_(True)
        f = x @ A @ x / 2 + x @ B @ y - y @ C @ y / 2 + a @ x - b @ y
        gx, gy = torch.autograd.grad(f, (x, y))
        torch.testing.assert_close(F[i], torch.cat([gx, -gy]), rtol=0, atol=1e-12)
    torch.testing.assert_close(game.full_grad(Z[0]), game.grad(Z[0]).mean(0))


def test_constants_are_exact(game):
    c, M = game.consts, game.jacobians()
    Mbar = M.mean(0)
    assert c.mu == pytest.approx(KNOBS["mu"], rel=1e-12)
    assert torch.linalg.eigvalsh((Mbar + Mbar.T) / 2)[0].item() == pytest.approx(c.mu, rel=1e-12)
    assert c.L == pytest.approx(torch.linalg.matrix_norm(Mbar, 2).item(), rel=1e-12)
    torch.testing.assert_close(c.L_i, torch.linalg.matrix_norm(M, 2), rtol=1e-12, atol=0)
    assert game.similarity == pytest.approx(KNOBS["similarity"], rel=1e-12)
    assert game.similarity == pytest.approx(
        torch.linalg.matrix_norm(M - Mbar, 2).max().item(), rel=1e-12
    )
    z = game.x_star
    assert game.full_grad(z).norm().item() <= 1e-12
    assert (game.grad(z) ** 2).sum(1).mean().item() == pytest.approx(KNOBS["zeta2"], rel=1e-12)
    assert c.zeta2 == pytest.approx(KNOBS["zeta2"], rel=1e-12)
    assert c.f_star == 0.0 and game.loss(z).item() == 0.0
    # the coupling: ||Bbar||_2
    assert torch.linalg.matrix_norm(_blocks(Mbar, 3)[1], 2).item() == pytest.approx(0.7, 1e-12)


def test_monotonicity_lipschitz_and_variance_hold_and_are_tight(game):
    """``<F(u) - F(v), u - v> >= mu ||u - v||^2``, ``||F(u) - F(v)|| <= L ||u - v||``, the
    operator variance ``L_pm``, each attained at its extreme direction."""
    c, M = game.consts, game.jacobians()
    Mbar = M.mean(0)
    gen = torch.Generator().manual_seed(1)
    U = torch.randn(200, game.d, dtype=torch.float64, generator=gen)
    zero = torch.zeros(game.d, dtype=torch.float64)
    F0 = game.full_grad(zero)
    dF = torch.stack([game.full_grad(u) - F0 for u in U])
    sq = (U * U).sum(1)
    assert ((dF * U).sum(1) >= c.mu * sq * (1 - 1e-12)).all()
    assert ((dF * dF).sum(1) <= c.L**2 * sq * (1 + 1e-12)).all()
    ev = torch.linalg.eigh((Mbar + Mbar.T) / 2).eigenvectors[:, 0]
    assert ((game.full_grad(ev) - F0) @ ev).item() == pytest.approx(c.mu, rel=1e-10)
    V = (M.transpose(1, 2) @ M).mean(0) - Mbar.T @ Mbar
    lam, vec = torch.linalg.eigh(V)
    assert math.sqrt(lam[-1].item()) == pytest.approx(c.L_pm, rel=1e-12)
    u = vec[:, -1]
    Fi = game.grad(u) - game.grad(zero)
    spread = (Fi**2).sum(1).mean() - ((Fi.mean(0)) ** 2).sum()
    assert spread.item() == pytest.approx(c.L_pm**2, rel=1e-9)


def test_distance_is_the_logged_loss_and_local_copies_share(game):
    z0 = game.x0
    assert game.loss(z0).item() == pytest.approx(((z0 - game.x_star) ** 2).sum().item())
    X = torch.ones(game.n, game.d, dtype=torch.float64)
    torch.testing.assert_close(game.node_loss(X), ((X - game.x_star) ** 2).sum(1))
    part = game.local([1, 3])
    torch.testing.assert_close(part.grad(X[:2]), game.grad(X)[[1, 3]], rtol=0, atol=0)
    assert part.similarity == game.similarity and part.consts is game.consts


def test_one_node_has_no_heterogeneity_and_seeds_fix_the_data():
    one = make_problem("quadratic-game", nodes=1, seed=0, dim=2)
    assert one.similarity == 0.0 and one.consts.zeta2 == pytest.approx(0.0, abs=1e-20)
    a = make_problem("quadratic-game", nodes=3, seed=5, dim=2)
    b = make_problem("quadratic-game", nodes=3, seed=5, dim=2)
    c = make_problem("quadratic-game", nodes=3, seed=6, dim=2)
    assert torch.equal(a.jacobians(), b.jacobians())
    assert not torch.equal(a.jacobians(), c.jacobians())


def test_stochastic_operator_reuses_its_batch(game):
    noisy = QuadraticGame.generate(3, dim=2, grad_noise=0.5, seed=1)
    batch = noisy.sample(7, 4)
    X = torch.randn(3, noisy.d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    d1 = noisy.grad(X, batch) - noisy.grad(X)
    d2 = noisy.grad(X + 1.0, batch) - noisy.grad(X + 1.0)
    torch.testing.assert_close(d1, d2, rtol=0, atol=1e-12)
    assert d1.abs().max() > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mu": 2.0, "ell": 1.0}, "mu must be <= ell"),
        ({"similarity": -1.0}, "similarity must be"),
        ({"lam": 0.1}, "takes no --lambda"),
        ({"dataset": "a9a"}, "generates its own data"),
        ({"dim": 0}, "dim must be a positive integer"),
    ],
)
def test_bad_knobs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_problem("quadratic-game", nodes=2, **kwargs)


def test_only_methods_that_solve_vis_take_it(game):
    from algorithms.registry import get_algorithm

    with pytest.raises(ValueError, match="variational inequality"):
        check_kind("EF21", get_algorithm("ef21"), game)
    check_kind("MASHA1", get_algorithm("masha1"), game)  # accepted
    check_kind("EF21", get_algorithm("ef21"), make_problem("quadratic", nodes=2, dim=3))
