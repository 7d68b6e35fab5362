"""The sigmoid-squared loss: its curvature constant, smoothness bounds, gradients against
autograd and finite differences, extreme margins, the registry and the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from problems import glm, glm_kernels, make_problem
from problems.__main__ import main
from problems.sigmoid_squared import PHI_CURV_EXACT, S_CURV, SigmoidSquared


def phi_ref(t: torch.Tensor) -> torch.Tensor:
    """phi(t) = (1 - 1/(1 + e^-t))^2 as the papers write it."""
    return (1 - 1 / (1 + torch.exp(-t))) ** 2


def test_curvature_constant_is_max_abs_second_derivative():
    # Closed form against a fine grid of the second derivative (autograd of the paper's phi).
    t = torch.linspace(-40, 40, 400_001, dtype=torch.float64, requires_grad=True)
    (d1,) = torch.autograd.grad(phi_ref(t).sum(), t, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), t)
    grid_max = float(d2.abs().max())
    assert grid_max <= PHI_CURV_EXACT * (1 + 1e-12)
    assert grid_max == pytest.approx(PHI_CURV_EXACT, rel=1e-8)
    # The maximiser is s = sigma(-t) = (15 - sqrt 33)/24, i.e. t = log(1/s - 1).
    t_star = math.log(1 / S_CURV - 1)
    assert float(t.detach()[d2.abs().argmax()]) == pytest.approx(t_star, abs=1e-3)
    # The sheet's rounded 0.1540586 and the DASHA code's 0.15406 round this constant.
    assert round(PHI_CURV_EXACT, 7) == 0.1540586 and round(PHI_CURV_EXACT, 5) == 0.15406
    assert SigmoidSquared.PHI_CURV == PHI_CURV_EXACT


def test_derivatives_match_autograd_and_are_finite_at_extreme_margins():
    z = torch.tensor([-800.0, -60.0, -3.0, -0.5, 0.0, 0.7, 4.0, 60.0, 800.0], dtype=torch.float64)
    for b in (1.0, -1.0):
        bt = torch.full_like(z, b)
        zz = z.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(SigmoidSquared.phi(zz, bt).sum(), zz, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), zz)
        d1, d2 = SigmoidSquared.dphi(z, bt), SigmoidSquared.d2phi(z, bt)
        assert torch.isfinite(d1).all() and torch.isfinite(d2).all()
        # Moderate margins: equal to autograd. Extreme ones: autograd's sigmoid backward rounds
        # 1 - s to 0 where s ~ 1, while 1 - s = sigma(t) keeps it; both are tiny there.
        mid = z.abs() <= 30
        torch.testing.assert_close(d1[mid], g[mid], rtol=1e-12, atol=1e-300)
        torch.testing.assert_close(d2[mid], h[mid], rtol=1e-10, atol=1e-300)
        assert (d1[~mid].abs() <= 1e-25).all() and (d2[~mid].abs() <= 1e-25).all()
        torch.testing.assert_close(
            SigmoidSquared.phi(z, bt), phi_ref(b * z), rtol=1e-12, atol=1e-50
        )


def _problem(dense=True, lam=0.0, seed=0, kernels=True, monkeypatch=None):
    rng = np.random.default_rng(seed)
    counts = np.array([9, 14, 6, 11])
    N, d = int(counts.sum()), 5
    A = rng.standard_normal((N, d)) * 1.5
    if not dense:
        A = sp.csr_matrix(A * (rng.random((N, d)) < 0.4))
    b = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    if kernels:
        return SigmoidSquared(A, b, counts, lam=lam), A, b, counts
    with monkeypatch.context() as m:
        m.setattr(glm.glm_kernels, "available", lambda *a: False)
        return SigmoidSquared(A, b, counts, lam=lam), A, b, counts


def _node_f(A_i, b_i, lam):
    A_i, b_i = torch.as_tensor(A_i), torch.as_tensor(b_i)
    return lambda x: phi_ref(b_i * (A_i @ x)).mean() + 0.5 * lam * (x @ x)


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_smoothness_bounds_every_hessian(lam):
    p, A, b, counts = _problem(lam=lam)
    c = p.consts
    off = np.concatenate([[0], np.cumsum(counts)])
    for i in range(p.n):
        A_i = A[off[i] : off[i + 1]]
        want = PHI_CURV_EXACT * np.linalg.eigvalsh(A_i.T @ A_i)[-1] / counts[i] + lam
        assert float(c.L_i[i]) == pytest.approx(want, rel=1e-10)
    w = 1.0 / (p.n * np.repeat(counts, counts))
    want_L = PHI_CURV_EXACT * np.linalg.eigvalsh((A * w[:, None]).T @ A)[-1] + lam
    assert c.L == pytest.approx(want_L, rel=1e-10)
    assert c.f_star is None and c.mu is None and p.f_lower_bound == 0.0
    gen = torch.Generator().manual_seed(4)
    worst = 0.0
    for _ in range(20):
        x = 3 * torch.randn(p.d, dtype=torch.float64, generator=gen)
        for i in range(p.n):
            f_i = _node_f(A[off[i] : off[i + 1]], b[off[i] : off[i + 1]], lam)
            H = torch.autograd.functional.hessian(f_i, x)
            ratio = float(torch.linalg.eigvalsh(H).abs().max()) / float(c.L_i[i])
            assert ratio <= 1 + 1e-12
            worst = max(worst, ratio)
    assert worst > 0.2  # the bound is not vacuous on these points


@pytest.mark.parametrize("dense", [True, False])
def test_gradient_matches_autograd_and_finite_differences(dense):
    p, A, b, counts = _problem(dense=dense, lam=0.2)
    A = A.toarray() if sp.issparse(A) else A
    off = np.concatenate([[0], np.cumsum(counts)])
    X = torch.randn(p.n, p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    G = p.grad(X)
    for i in range(p.n):
        f_i = _node_f(A[off[i] : off[i + 1]], b[off[i] : off[i + 1]], 0.2)
        x = X[i].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f_i(x), x)
        torch.testing.assert_close(G[i], g, rtol=1e-10, atol=1e-13)
        fd = torch.stack(
            [
                (f_i(X[i] + 1e-6 * e) - f_i(X[i] - 1e-6 * e)) / 2e-6
                for e in torch.eye(p.d, dtype=torch.float64)
            ]
        )
        torch.testing.assert_close(G[i], fd, rtol=1e-6, atol=1e-9)
    x = X[0]
    f = float(torch.stack([_node_f(A[off[i] : off[i + 1]], b[off[i] : off[i + 1]], 0.2)(x)
                           for i in range(p.n)]).mean())  # fmt: skip
    assert float(p.loss(x)) == pytest.approx(f, rel=1e-12)
    torch.testing.assert_close(p.full_grad(x), p.grad(x).mean(0), rtol=1e-10, atol=1e-13)


@pytest.mark.skipif(glm_kernels.numba is None, reason="numba is not installed")
@pytest.mark.parametrize("dense", [True, False])
def test_kernel_path_equals_torch_path_at_extreme_points(dense, monkeypatch):
    fast, *_ = _problem(dense=dense)
    slow, *_ = _problem(dense=dense, kernels=False, monkeypatch=monkeypatch)
    assert fast._kernels and not slow._kernels
    for scale in (0.1, 1.0, 50.0, 1e4):
        X = scale * torch.randn(4, fast.d, dtype=torch.float64,
                                generator=torch.Generator().manual_seed(2))  # fmt: skip
        g = fast.grad(X)
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, slow.grad(X), rtol=1e-11, atol=1e-14)


def test_registry_default_lambda_and_cli(capsys):
    p = make_problem("sigmoid-squared", nodes=3, samples=60, features=5)
    assert p.lam == 0.0 and p.name == "sigmoid-squared" and not p.convex
    assert make_problem("sigmoid-squared", nodes=3, samples=60, features=5, lam=0.1).lam == 0.1
    x = torch.zeros(p.d, dtype=torch.float64)
    assert float(p.loss(x)) == pytest.approx(0.25)  # phi(0) = 1/4
    assert (
        main(["--problem", "sigmoid-squared", "--nodes", "3", "--samples", "60", "--features", "5"])
        == 0
    )
    out = capsys.readouterr().out
    assert "sigmoid-squared" in out and "f_inf >=" in out
    L = float(out.split("\nL ")[1].split()[0])
    assert L == pytest.approx(p.consts.L, rel=1e-9)
    assert main(["--problem", "sigmoid-squared", "--lambda", "-1"]) == 2
    assert "lambda must be >= 0, got -1.0" in capsys.readouterr().err
