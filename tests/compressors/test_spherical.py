"""Spherical compression (reconstruction): delta against closed forms, the error ratio equal for
every vector, and the codebook shared by sender and receiver. The registry-wide tests cover the
contract, the Monte-Carlo check of 1 - delta, the wire form and the non-finite policy."""

from __future__ import annotations

import math

import pytest
import torch
from asserts import assert_mc_at_least, assert_mc_at_most

from compressors import montecarlo, parse_spec
from compressors.spherical import Spherical, expected_best_cos2


def test_delta_closed_forms():
    for k in range(0, 9):
        K = 1 << k
        # d = 3: |<c, u>| is uniform on [0, 1], so E max of K squares is K / (K + 2)
        assert expected_best_cos2(3, K) == pytest.approx(K / (K + 2), rel=1e-9)
        assert expected_best_cos2(1, K) == 1.0
    for d in (2, 10, 1000):
        assert expected_best_cos2(d, 1) == pytest.approx(1 / d, rel=1e-9)
    # d = 2, K = 2: E max(X, Y) = 1/2 + E|cos 2a - cos 2b| / 4 with a, b uniform angles, and
    # E|cos p - cos q| = 8 / pi^2 for uniform p, q
    want = 0.5 + 2.0 / math.pi**2
    assert expected_best_cos2(2, 2) == pytest.approx(want, rel=1e-9)
    assert Spherical(k=5).bits(100) == 37 and Spherical().delta(3) == pytest.approx(16 / 18)


@pytest.mark.parametrize("kind", ["gaussian", "one-hot", "constant"])
def test_the_error_ratio_is_one_minus_delta_for_every_vector(kind):
    c = parse_spec("spherical:k=3")
    d = 6
    x = {
        "gaussian": torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(2)),
        "one-hot": torch.eye(d, dtype=torch.float64)[4],
        "constant": torch.ones(d, dtype=torch.float64),
    }[kind]
    ratios, y = montecarlo.error_ratios(c, x, 20000, seed=3)
    assert_mc_at_most(ratios, 1 - c.delta(d))
    assert_mc_at_least(ratios, 1 - c.delta(d))
    # each output is the projection of x on one line: <C(x), x - C(x)> = 0
    inner = ((y * (x - y)).sum(dim=1)).abs().max()
    assert float(inner) < 1e-12 * float((x**2).sum())


def test_k_zero_is_one_random_line():
    c = Spherical(k=0)
    assert c.bits(50) == 32 and c.delta(50) == pytest.approx(1 / 50, rel=1e-9)
