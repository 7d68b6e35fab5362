"""The worked instances of the theory sheet have the constants it prints."""

from __future__ import annotations

import pytest
import torch

from problems.instances import beznosikov, heterogeneous_ridge


def test_heterogeneous_ridge_constants():
    c = heterogeneous_ridge().consts
    assert (c.L, c.mu, c.L_tilde, c.L_max) == pytest.approx((1.611, 0.734, 2.991, 3.933), abs=6e-4)
    assert c.zeta2 == pytest.approx(59.3, abs=0.06)
    copies = heterogeneous_ridge(copies=4)
    assert copies.n == 40 and copies.consts.L == pytest.approx(c.L, rel=1e-12)
    assert heterogeneous_ridge(identical=True).consts.zeta2 < 1e-20


def test_beznosikov_constants_and_dcgd_top1_closed_form():
    p = beznosikov()
    c = p.consts
    assert c.L_i.tolist() == pytest.approx([34.5] * 3, rel=1e-12)
    assert (c.L, c.mu, c.f_star) == pytest.approx((103 / 6, 7 / 6, 0.0), abs=1e-12)
    # One DCGD + Top-1 step from t(1, 1, 1) multiplies x by (1 + 11 gamma / 6).
    x, gamma = torch.ones(3, dtype=torch.float64), 0.01
    g = p.grad(x)
    top1 = torch.zeros_like(g).scatter_(
        1, g.abs().argmax(1, keepdim=True), g.gather(1, g.abs().argmax(1, keepdim=True))
    )
    x1 = x - gamma * top1.mean(0)
    torch.testing.assert_close(x1, (1 + 11 * gamma / 6) * x, rtol=1e-14, atol=0)
