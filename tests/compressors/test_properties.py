"""Declared constants against Monte Carlo, for every registered compressor.

Unbiased: the sample mean matches x within a tolerance set by the sample size, and
E||C(x) - x||^2 / ||x||^2 <= omega (one-sided, 5 standard errors). Contractive: the same ratio
<= 1 - delta. Tight where theory says so: at the declared worst-case vector the ratio reaches the
constant (at least 90%). Vectors include one-hot, constant, heavy-tailed, tiny and huge scales.
"""

from __future__ import annotations

import math

import pytest
import torch
from asserts import assert_mc_at_least, assert_mc_at_most, assert_mc_mean
from hypothesis import given, settings
from strategies import compressor_cases, make_vector, vectors

from compressors import Compressor, montecarlo, parse_spec
from compressors.dithering import elias_payload_bits
from compressors.montecarlo import draws_of
from compressors.perm_k import PermK
from streams import Streams

CASES = compressor_cases()
DRAWS = 4000


def pick(pred) -> dict:
    chosen = [(i, c) for i, c in CASES if pred(c)]
    return {"argvalues": [c for _, c in chosen], "ids": [i for i, _ in chosen]}


def error_ratios(c: Compressor, x: torch.Tensor, draws: int = DRAWS, seed: int = 0):
    return montecarlo.error_ratios(c, x, draws, seed)


def _contractive_random(c: Compressor) -> bool:
    return c.contractive and not c.unbiased and not c.deterministic


@pytest.mark.parametrize("c", **pick(lambda c: c.unbiased))
@settings(max_examples=6)
@given(x=vectors(min_d=10, max_d=40))
def test_unbiased_mean_and_omega(c, x):
    ratios, y = error_ratios(c, x)
    omega = c.omega(x.numel())
    assert_mc_mean(y, x, var_bound=omega * float((x**2).sum()))
    assert_mc_at_most(ratios, omega)


@pytest.mark.parametrize("c", **pick(_contractive_random))
@settings(max_examples=6)
@given(x=vectors(min_d=10, max_d=40))
def test_contractive_bound(c, x):
    ratios, _ = error_ratios(c, x)
    assert_mc_at_most(ratios, 1 - c.delta(x.numel()))


@pytest.mark.parametrize("c", **pick(lambda c: c.worst_case(100) is not None))
def test_constant_is_attained_at_the_worst_case(c):
    d = 100
    x = c.worst_case(d)
    ratios, _ = error_ratios(c, x, draws=20000, seed=5)
    const = c.omega(d) if c.unbiased else 1 - c.delta(d)
    assert_mc_at_most(ratios, const)
    assert_mc_at_least(ratios, 0.9 * const)


@pytest.mark.parametrize(
    "c", **pick(lambda c: not c.fixed_size and c.expected_bits(60) is not None)
)
def test_mean_bits_of_variable_size_payloads(c):
    d = 60
    _, packet = draws_of(c, make_vector("gaussian", d, 0), 20000)
    nb = packet.nbits.double()
    assert abs(float(nb.mean()) - c.expected_bits(d)) <= 5 * float(nb.std()) / 20000**0.5 + 1e-9


def _elias_reference(levels: list[int]) -> int:
    """QSGD's Elias code, counted one entry at a time."""

    def gamma(v: int) -> int:
        return 2 * (v.bit_length() - 1) + 1

    bits, prev = 0, -1
    for j, lv in enumerate(levels):
        if lv > 0:
            bits += gamma(j - prev) + 1 + gamma(lv)
            prev = j
    return bits


@pytest.mark.parametrize("c", **pick(lambda c: getattr(c, "coding", None) == "elias"))
@given(x=vectors(min_d=1, max_d=50))
def test_elias_bits_recounted_entry_by_entry(c, x):
    packet = c.encode(torch.stack([x, x]), Streams.for_nodes(3, [0, 1]))
    levels = packet.fields["levels"].tolist()
    expect = [c.float_bits + _elias_reference(row) for row in levels]
    assert packet.nbits.tolist() == expect
    # gap 2, sign, level 3; then gap 3, sign, level 1: (3 + 1 + 3) + (3 + 1 + 1)
    assert elias_payload_bits(torch.tensor([[0, 3, 0, 0, 1]])).tolist() == [12]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("d", [4, 17, 64, 100])
def test_permk_averages_back_exactly_and_messages_are_orthogonal(n, d):
    c = PermK(n=n)
    if d < n and n % d:
        with pytest.raises(ValueError, match="multiple of d"):
            c.omega(d)
        return
    x = make_vector("gaussian", d, n * 1000 + d)
    for seed in range(5):
        y = c(x.expand(n, d), Streams.shared(seed, n, 3))
        torch.testing.assert_close(y.mean(dim=0), x, rtol=1e-15, atol=0)
        if d >= n:
            gram = y @ y.T
            assert (gram - torch.diag(torch.diag(gram))).abs().max() == 0
            assert ((y != 0).sum(dim=0) <= 1).all()


# --- the worked numbers of the theory sheet (P1), at fixed instances -----------------------


def test_randk_ratio_is_exactly_d_over_k_minus_one():
    ratios, _ = error_ratios(parse_spec("randk:k=2"), make_vector("gaussian", 20, 4), 2000)
    # ||C(x)-x||^2 varies by draw for general x; its mean is exactly 9 at every x.
    assert abs(float(ratios.mean()) - 9.0) <= 5 * float(ratios.std()) / 2000**0.5
    ones, _ = error_ratios(parse_spec("randk:k=2"), torch.ones(20, dtype=torch.float64), 50)
    torch.testing.assert_close(ones, torch.full_like(ones, 9.0), rtol=1e-12, atol=0)


def test_terngrad_supremum_is_four_and_a_half_at_d_100():
    c = parse_spec("terngrad")
    assert c.omega(100) == 4.5
    x = c.worst_case(100)
    ratios, _ = error_ratios(c, x, 40000)
    assert abs(float(ratios.mean()) - 4.5) <= 5 * float(ratios.std()) / 40000**0.5
    # Nearby vectors do no better: the supremum is where theory puts it.
    for t in (0.05, 0.2):
        y = x.clone()
        y[1:] = t
        assert float(error_ratios(c, y, 40000)[0].mean()) < 4.5


def test_scaled_sign_worst_case_is_one_minus_one_over_d():
    d = 37
    e1 = torch.zeros(d, dtype=torch.float64)
    e1[0] = 1
    y = parse_spec("scaled-sign")(e1[None], 0)[0]
    assert float(((y - e1) ** 2).sum()) == pytest.approx(1 - 1 / d, rel=1e-14)


def test_scaled_randk_is_biased_randk():
    d, k = 20, 4
    c = parse_spec(f"scaled:randk:k={k}")
    assert c.delta(d) == pytest.approx(k / d)
    x = make_vector("heavy-tailed", d, 2)
    y, _ = draws_of(c, x, 500)
    kept = y != 0
    # No net scaling: biased Rand-K (to rounding of (d/k)/(d/k)).
    torch.testing.assert_close(y[kept], x.expand(500, d)[kept], rtol=1e-15, atol=0)
    assert (kept.sum(dim=1) <= k).all()


def test_composition_randk_then_natural_has_omega_one_and_a_quarter():
    c = parse_spec("compose:randk:k=10+natural")
    assert c.omega(20) == pytest.approx((1 + 1) * (1 + 1 / 8) - 1)
    ratios, y = error_ratios(c, make_vector("ramp", 20, 0), 20000)
    assert_mc_at_most(ratios, 1.25)
    x = make_vector("ramp", 20, 0)
    assert_mc_mean(y, x, var_bound=1.25 * float((x**2).sum()))


def test_topk_then_qsgd_contracts_as_declared():
    c = parse_spec("compose:topk:k=10+qsgd:levels=8")
    d = 200
    w = min(10 / (4 * 64), math.sqrt(10) / 8)
    assert c.delta(d) == pytest.approx(10 / d * (1 - w))
    with pytest.raises(ValueError, match="neither class"):
        parse_spec("compose:topk:k=100+qsgd:levels=1").delta(1000)


@pytest.mark.parametrize(
    "spec,d,bits",
    [
        ("identity", 1000, 32000),
        ("topk:k=10", 1000, 10 * (32 + 10)),
        ("randk:k=10", 1000, 10 * (32 + 10)),
        ("randk:k=10,shared=true", 1000, 320),
        ("randk:k=10,index=seed", 1000, 320 + 64),
        ("topk:k=600,index=auto", 1000, 600 * 32 + 1000),
        ("natural", 1000, 9000),
        ("natural:float_bits=64", 1000, 12000),
        ("scaled-sign", 1000, 1032),
        ("sign", 1000, 1000),
        ("qsgd:levels=4", 1000, 32 + 1000 * 4),
        ("qsgd:levels=1", 1000, 32 + 1000 * 2),
        ("natural-dithering:levels=8", 1000, 32 + 1000 * (1 + 4)),
        ("terngrad", 1000, 32 + 2000),
        ("rank:r=2", 1000, 32 * 2 * (32 + 32)),
        ("rank:r=1", 1024, 32 * (32 + 32)),
        ("compose:topk:k=10+natural", 1000, 10 * 10 + 10 * 9),
        ("compose:randk:k=10,shared=true+qsgd:levels=1", 1000, 32 + 10 * 2),
    ],
)
def test_bits_of_the_documented_encodings(spec, d, bits):
    c = parse_spec(spec)
    assert c.bits(d) == bits
    packet = c.encode(make_vector("gaussian", d, 0)[None], 0)
    assert packet.nbits.tolist() == [bits]


def test_expected_bits_of_random_size_payloads():
    assert parse_spec("bernoulli:p=0.25").expected_bits(100) == 1 + 0.25 * 3200
    assert parse_spec("permk:n=10").expected_bits(1000) == 3200
    assert parse_spec("permk:n=8").expected_bits(4) == 32


# ---------------------------------------------------------------- EF-BV's class C(eta, omega)
def _has_class(c: Compressor) -> bool:
    return c.unbiased or c.contractive


def bias_and_variance(c: Compressor, x: torch.Tensor, draws: int, seed: int = 0):
    """Sample ``||mean C(x) - x||``, its standard error, and per-draw
    ``||C(x) - mean C(x)||^2 / ||x||^2`` (the variance ratio)."""
    y, _ = draws_of(c, x, draws, seed)
    mean = y.mean(dim=0)
    var = ((y - mean) ** 2).sum(dim=1)
    nx2 = float((x**2).sum())
    bias = float(torch.linalg.vector_norm(mean - x))
    return bias, math.sqrt(float(var.mean()) / draws), var / nx2


@pytest.mark.parametrize("c", **pick(_has_class))
@pytest.mark.parametrize("kind", ["gaussian", "one-hot", "constant", "heavy-tailed", "ramp"])
def test_declared_bias_variance_pair_holds(c, kind):
    """||E C(x) - x|| <= eta ||x|| and E||C(x) - E C(x)||^2 <= omega ||x||^2 (Monte Carlo)."""
    d = 24
    x = make_vector(kind, d, 3)
    eta, omega = c.bias_variance(d)
    assert 0 <= eta <= 1 and omega >= 0
    bias, se, var_ratios = bias_and_variance(c, x, DRAWS)
    nx = float(torch.linalg.vector_norm(x))
    assert bias <= eta * nx + 5 * se + 1e-12 * nx, (bias, eta * nx, se)
    assert_mc_at_most(var_ratios, omega)


@pytest.mark.parametrize(
    "c",
    **pick(
        lambda c: _has_class(c) and c.bias_variance_exact(100) and c.worst_case(100) is not None
    ),
)
def test_declared_bias_variance_pair_is_tight(c):
    """Where the pair is declared exact, both constants are reached at the worst case."""
    d = 100
    x = c.worst_case(d)
    eta, omega = c.bias_variance(d)
    bias, se, var_ratios = bias_and_variance(c, x, 20000, seed=7)
    nx = float(torch.linalg.vector_norm(x))
    assert bias >= eta * nx - 5 * se - 1e-12 * nx - 0.02 * eta * nx, (bias, eta * nx)
    assert_mc_at_least(var_ratios, 0.9 * omega)


def test_scaled_randk_class_pair_is_exact_and_tighter_than_the_delta_bound():
    """Scaled Rand-2 at d = 10: (eta, omega) = (0.8, 0.16) at every x, against the bound
    (sqrt(0.8), 0.8) that delta = 0.2 alone gives."""
    c = parse_spec("scaled:randk:k=2")
    assert c.bias_variance(10) == (pytest.approx(0.8), pytest.approx(0.16))
    assert c.bias_variance_exact(10)
    for kind in ("gaussian", "heavy-tailed", "one-hot"):
        x = make_vector(kind, 10, 1)
        bias, se, var_ratios = bias_and_variance(c, x, 40000, seed=2)
        nx = float(torch.linalg.vector_norm(x))
        assert abs(bias - 0.8 * nx) <= 5 * se + 1e-9
        assert_mc_at_most(var_ratios, 0.16)
        assert_mc_at_least(var_ratios, 0.16)
    # the fallback from delta is labelled a bound
    comp = parse_spec("compose:topk:k=3+qsgd:levels=2")
    if comp.contractive and not comp.unbiased:
        assert not comp.bias_variance_exact(24)
