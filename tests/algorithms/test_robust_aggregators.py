"""Robust aggregators and attacks: exact small cases, permutation invariance, the (delta, c)
robustness definition on a constructed instance, bucketing, and the attacks' rows."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.robust.aggregators import (
    aggregate,
    bucketing,
    centered_clipping,
    coordinate_median,
    geometric_median,
    krum,
    trimmed_mean,
)
from algorithms.robust.attacks import alie_z, attack, byzantine_mask

D64 = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=D64)


def test_coordinate_median_exact():
    torch.testing.assert_close(coordinate_median(t([[1, 5], [2, 3], [100, -7]])), t([2, 3]))
    # even count: the mean of the two middle values (numpy.median), not torch's lower median
    torch.testing.assert_close(coordinate_median(t([[1], [2], [3], [10]])), t([2.5]))


def test_krum_exact():
    x = t([[0.0], [1.0], [2.0], [3.0], [100.0]])
    # n - f - 2 = 2 nearest: scores 5, 2, 2, 5, huge; the tie goes to the lower index
    torch.testing.assert_close(krum(x, f=1), t([1.0]))
    torch.testing.assert_close(krum(x, f=1, m=2), t([1.5]))


def test_trimmed_mean_exact():
    x = t([[1, 50], [2, 3], [100, -7], [4, 4], [5, 5]])
    # per coordinate: drop 1 smallest and 1 largest, average the middle 3
    torch.testing.assert_close(trimmed_mean(x, 1), t([11 / 3, 4]))
    torch.testing.assert_close(trimmed_mean(x, 0), x.mean(0))
    torch.testing.assert_close(trimmed_mean(x, 9), coordinate_median(x))  # capped: the median
    torch.testing.assert_close(aggregate("tm", x, f=1), t([11 / 3, 4]))


def test_geometric_median_converges_to_the_1d_median():
    x = t([[0.0], [1.0], [10.0]])
    torch.testing.assert_close(geometric_median(x, iters=200, nu=1e-9), t([1.0]), atol=1e-6, rtol=0)
    square = t([[1, 1], [1, -1], [-1, 1], [-1, -1], [0, 0]]) + 3.0
    torch.testing.assert_close(geometric_median(square, iters=100, nu=1e-9), t([3, 3]))


def test_centered_clipping():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(7, 4, generator=gen, dtype=D64)
    # a radius beyond every distance: one iteration is the mean
    torch.testing.assert_close(centered_clipping(x, None, tau=1e9, iters=1), x.mean(0))
    x[-1] = 1e6
    out = centered_clipping(x, torch.zeros(4, dtype=D64), tau=1.0, iters=3)
    assert float(out.norm()) <= 3.0 + 1e-12  # each iteration moves at most tau


@pytest.mark.parametrize("name", ["mean", "cm", "gm", "krum", "cc", "tm"])
def test_permutation_invariance(name):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(9, 5, generator=gen, dtype=D64)
    perm = torch.randperm(9, generator=gen)
    c = torch.zeros(5, dtype=D64)
    a = aggregate(name, x, f=2, bucket=1, center=c)
    b = aggregate(name, x[perm], f=2, bucket=1, center=c)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_bucketing_means_and_uneven_last_bucket():
    x = t([[0.0], [2.0], [4.0], [6.0], [8.0]])
    perm = torch.tensor([4, 0, 1, 3, 2])
    torch.testing.assert_close(bucketing(x, 2, perm), t([[4.0], [4.0], [4.0]]))
    torch.testing.assert_close(bucketing(x, 2, torch.arange(5)), t([[1.0], [5.0], [8.0]]))
    torch.testing.assert_close(bucketing(x, 1, perm), x[perm])
    with pytest.raises(ValueError, match="permutation"):
        aggregate("cm", x, bucket=2)


def pairwise_sigma2(h: torch.Tensor) -> float:
    G = h.shape[0]
    return float(torch.cdist(h, h).square().sum()) / (G * (G - 1))


@pytest.mark.parametrize("name", ["cm", "gm", "krum", "tm"])
@pytest.mark.parametrize("bad", ["far", "alie", "ipm"])
def test_delta_c_robustness_on_a_constructed_instance(name, bad):
    """(delta, c)-robustness (arXiv 2206.00529, Def. 1.1) with bucketing s = 2: the output's
    squared distance to the honest mean, averaged over the server's permutations, is at most
    c delta sigma^2 with c = 8 here; plain averaging violates it by orders of magnitude."""
    gen = torch.Generator().manual_seed(2)
    G, K, d = 16, 3, 5
    honest = 3.0 + torch.randn(G, d, generator=gen, dtype=D64)
    rows = torch.cat([honest, torch.zeros(K, d, dtype=D64)])
    if bad == "far":
        rows[G:] = 1e6
    else:
        rows = attack(bad, rows, K, ipm_eps=10.0)
    n, delta, sig2 = G + K, K / (G + K), pairwise_sigma2(honest)
    xbar = honest.mean(0)

    def err(agg: str) -> float:
        out = []
        for s in range(64):
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(s))
            y = aggregate(agg, rows, f=K, bucket=2, perm=perm)
            out.append(float((y - xbar).square().sum()))
        return sum(out) / len(out)

    assert err(name) <= 8.0 * delta * sig2, (err(name), delta * sig2)
    if bad != "alie":  # ALIE hides within the spread: it moves the mean only by O(delta sigma)
        assert err("mean") > 8.0 * delta * sig2


def test_attacks_rows():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 3, generator=gen, dtype=D64)
    K, h = 2, x[:4]
    torch.testing.assert_close(attack("bf", x, K)[4:], -x[4:])
    ipm = attack("ipm", x, K, ipm_eps=0.5)[4:]
    torch.testing.assert_close(ipm, (-0.5 * h.mean(0)).expand(2, 3))
    z = alie_z(6, 2)
    torch.testing.assert_close(attack("alie", x, K)[4:], (h.mean(0) - z * h.std(0)).expand(2, 3))
    for name in ("bf", "ipm", "alie", "lf", "none"):
        torch.testing.assert_close(attack(name, x, K)[:4], h)  # honest rows untouched
        torch.testing.assert_close(attack(name, x, 0), x)
    torch.testing.assert_close(attack("lf", x, K), x)
    with pytest.raises(ValueError, match="attack must be one of"):
        attack("nope", x, K)


def test_alie_z_and_mask():
    # n = 20, K = 5: s = floor(n/2 + 1) - K = 6, z = Phi^{-1}((20 - 6)/20)
    assert alie_z(20, 5) == pytest.approx(0.5244005127080407)
    assert not math.isnan(alie_z(3, 1))
    mask = byzantine_mask(torch.arange(5), 5, 2)
    assert mask.tolist() == [False, False, False, True, True]
