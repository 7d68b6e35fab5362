"""Sparse dithering: the operator, its exact variance constant, its Golomb-Rice code by hand."""

from __future__ import annotations

import math

import pytest
import torch

from compressors import parse_spec
from compressors.bitpack import BitReader
from compressors.montecarlo import draws_of
from compressors.sparse_dithering import SparseDithering, rice_parameter
from streams import Streams


def exact_variance(s: float, x: torch.Tensor) -> float:
    """``E||C(x) - x||^2`` in closed form: ``tau^2 sum_j f_j (1 - f_j)``."""
    norm = float(torch.linalg.vector_norm(x))
    r = s * x.abs() / norm
    f = r - r.floor()
    return (norm / s) ** 2 * float((f * (1 - f)).sum())


def test_unbiased_with_the_per_entry_variance_of_stochastic_rounding():
    x = torch.tensor([0.3, -1.0, 0.05, 2.0, 0.0, -0.7], dtype=torch.float64)
    n = 40000
    for s in (0.25, 1.7):
        y, _ = draws_of(SparseDithering(s=s), x, n, seed=3)
        norm = float(torch.linalg.vector_norm(x))
        r = s * x.abs() / norm
        f = r - r.floor()
        sd = (norm / s) * torch.sqrt(f * (1 - f))  # exact per-entry standard deviation
        assert (y.mean(0) - x).abs().le(5 * sd / math.sqrt(n) + 1e-12).all(), s
        # the support: non-zero with probability min(r_j, 1); at most s ||x||_1 / ||x||_2
        nnz = (y != 0).double().mean(0)
        assert (nnz - r.clamp(max=1)).abs().le(5 * 0.5 / math.sqrt(n)).all()
        assert float(r.clamp(max=1).sum()) <= s * float(x.abs().sum()) / norm * (1 + 1e-12)


def test_omega_is_the_supremum_attained_where_declared():
    d = 16
    for s in (0.1, 1.0, 2.0):  # s <= sqrt(d) / 2 = 2: attained at the constant vector
        c = SparseDithering(s=s)
        assert c.omega(d) == pytest.approx(math.sqrt(d) / s - 1.0)
        x = c.worst_case(d)
        assert exact_variance(s, x) / float((x**2).sum()) == pytest.approx(c.omega(d))
    # s > sqrt(d) / 2: d / (4 s^2), attained by half-integer r (s^2 = d/4 + 2a, a = 3)
    s = math.sqrt(d / 4 + 6)
    x = torch.full((d,), 0.5, dtype=torch.float64)
    x[:3] = 1.5
    c = SparseDithering(s=s)
    assert c.worst_case(d) is None
    assert exact_variance(s, x) / float((x**2).sum()) == pytest.approx(c.omega(d))
    assert c.omega(d) == pytest.approx(d / (4 * s * s))
    # never exceeded: random, sparse, heavy-tailed vectors over a range of s
    g = torch.Generator().manual_seed(0)
    for s in (0.05, 0.5, 1.0, 1.9, 2.1, 3.0, 7.5):
        c = SparseDithering(s=s)
        for _ in range(200):
            x = torch.randn(d, generator=g, dtype=torch.float64) ** 3
            x[torch.rand(d, generator=g) < 0.3] = 0
            if float(x.abs().sum()) == 0:
                continue
            assert exact_variance(s, x) <= c.omega(d) * float((x**2).sum()) * (1 + 1e-12)


def test_rice_parameter_minimises_the_geometric_mean_length():
    for d in (1, 2, 12, 40, 1000):
        for n in range(0, d + 1, max(1, d // 50)):
            best, arg = math.inf, 0
            for k in range((d - 1).bit_length() + 1):
                t = (1 - n / d) ** (2**k) if n else 1.0
                cost = k + (t / (1 - t) if t < 1 else math.inf)
                if cost < best - 1e-12:
                    best, arg = cost, k
            assert int(rice_parameter(torch.tensor([n]), d)) == arg, (d, n)
    # by hand: d = 12, n = 2 (p = 1/6): lengths 5.0, 3.27, 2.93, 3.30, 4.06 for k = 0..4
    assert int(rice_parameter(torch.tensor([2]), 12)) == 2
    assert int(rice_parameter(torch.tensor([2]), 40)) == 4


def test_exact_bits_and_bytes_of_a_hand_built_vector():
    """``x = (0, 3, 0, 0, -4, 0, ...)``, ``||x|| = 5``, ``s = 5``: every ``r_j`` an integer, so
    the levels are 3 and 4 at every draw and ``C(x) = x``."""
    x = torch.zeros(1, 12)
    x[0, 1], x[0, 4] = 3.0, -4.0
    c = SparseDithering(s=5.0)
    for seed in range(3):
        p = c.encode(x, seed)
        assert torch.equal(c.decode(p), x)
        # norm 32 + k (3 bits: ceil(log2 12) = 4 fits in 3) + two codewords with k = 2:
        # gap 2: Rice(1) = "1" + "01", sign "0", gamma(3) = "011"  -> 7 bits
        # gap 3: Rice(2) = "1" + "10", sign "1", gamma(4) = "00100" -> 9 bits
        assert p.nbits.tolist() == [32 + 3 + 7 + 9]
    data, nbytes = c.to_bytes(p)
    assert nbytes.tolist() == [7]
    bits = BitReader(data, nbytes).bits[0].tolist()
    norm = torch.tensor([5.0]).view(torch.int32).item()
    head = [(norm >> b) & 1 for b in range(32)] + [0, 1, 0]  # k = 2, least significant first
    code = [1, 0, 1, 0, 0, 1, 1] + [1, 1, 0, 1, 0, 0, 1, 0, 0]
    assert bits == head + code + [0] * 5


def test_golomb_lengths_with_a_quotient():
    """``d = 40``, non-zeros at 0 and 30 (levels 3 and 4, exact): ``k = 4``; the second gap is
    30, so ``29 >> 4 = 1``: one zero, the one, 4 bits."""
    x = torch.zeros(1, 40, dtype=torch.float64)
    x[0, 0], x[0, 30] = 3.0, 4.0
    p = SparseDithering(s=5.0).encode(x, 0)
    assert int(p.fields["rice"][0]) == 4
    width = 3  # ceil(log2 40) = 6 -> 3 bits
    assert p.nbits.tolist() == [32 + width + (1 + 4 + 1 + 3) + (1 + 1 + 4 + 1 + 5)]


@pytest.mark.parametrize("s", [0.1, 0.5, 1.0, 2.5, 40.0])
def test_wire_round_trip_rows_of_their_own_size(s):
    c = SparseDithering(s=s)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 300, generator=g)
    x[1] = 0
    x[2, 7:] = 0  # a few entries only
    x[3] = x[3] ** 5  # heavy tails: levels above 1 when s > 1
    p = c.encode(x, Streams.for_nodes(2, range(5), 9))
    data, nbytes = c.to_bytes(p)
    assert torch.equal(nbytes, (p.nbits + 7) // 8)  # float32: the counted bits, padded
    q = c.from_bytes(data, nbytes, like=p, nodes=torch.arange(5))
    assert torch.equal(q.nbits, p.nbits)
    assert torch.equal(c.decode(q), c.decode(p))
    assert p.nbits[1] == 32 + 4  # a zero row: the norm and k
    with pytest.raises(ValueError):
        c.from_bytes(data[:, :-1], nbytes - 1, like=p, nodes=torch.arange(5))


def test_same_operator_as_qsgd_one_level_at_s_one_with_a_shorter_code():
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(4))
    rng = Streams.for_nodes(5, range(64), 3)
    ours, qsgd = SparseDithering(), parse_spec("qsgd:levels=1,coding=elias")
    p, q = ours.encode(x, rng), qsgd.encode(x, rng)
    torch.testing.assert_close(ours.decode(p), qsgd.decode(q), rtol=1e-6, atol=0)
    assert float(p.nbits.double().mean()) < 0.85 * float(q.nbits.double().mean())


@pytest.mark.parametrize("s", [0, -1.0, math.nan, math.inf, True, 2.0**25, "1"])
def test_bad_density_is_refused(s):
    with pytest.raises(ValueError, match="s must be"):
        SparseDithering(s=s)


def test_spec_keeps_a_real_density():
    c = parse_spec("sparse-dithering:s=0.3")
    assert c.s == 0.3 and c.spec() == "sparse-dithering:s=0.3"
    assert SparseDithering(s=2).spec() == "sparse-dithering:s=2.0"


def test_max_bits_bounds_every_level_pattern():
    from compressors.sparse_dithering import _layout

    g = torch.Generator().manual_seed(2)
    for d, s in ((1, 0.5), (12, 3.0), (40, 1.0), (300, 8.0)):
        c = SparseDithering(s=s)
        top = max(1, math.ceil(s))
        head = 32 + (math.ceil(math.log2(d)) if d > 1 else 0).bit_length()
        level = torch.randint(0, top + 1, (400, d), generator=g)
        level[torch.rand(400, d, generator=g) < torch.rand(400, 1, generator=g)] = 0
        level[0], level[1] = top, 0  # every entry at the top level; none
        k = rice_parameter((level > 0).sum(dim=1), d)
        bits = head + _layout(level, k)[3].sum(dim=1)
        assert int(bits.max()) <= c.max_bits(d)
    # s = 1, d = 1000: every entry sent at level 1 with k = 0, 3 bits each, is the largest
    assert SparseDithering().max_bits(1000) == 32 + 4 + 3 * 1000
