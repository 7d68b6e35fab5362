"""SSQ and MSQ: the exact omega, the choice of scale, and the all-reduce form (one shared scale,
the nodes' integer levels summed and decoded once). The registry-wide tests cover the contract,
the Monte-Carlo check of omega at the worst case, the wire form and the non-finite policy."""

from __future__ import annotations

import math

import pytest
import torch
from asserts import assert_mc_mean

from compressors import parse_spec
from compressors.shared_scale import MSQ, SSQ
from streams import Streams


def test_ssq_omega_is_the_closed_form_and_terngrad_at_width_one():
    for d in (1, 2, 10, 100, 1000):
        assert SSQ(width=1).omega(d) == pytest.approx((math.sqrt(d) - 1) / 2, abs=1e-12)
        s = 15
        want = (math.sqrt(1 + (d - 1) / s**2) - 1) / 2
        assert SSQ().omega(d) == pytest.approx(want, rel=1e-12, abs=1e-15)
        # the generic supremum of the multi-scale code agrees with one scale
        assert MSQ(widths="4").omega(d) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert SSQ().bits(1000) == 32 + 1000 * 5
    assert MSQ().bits(1000) == 32 + 1000 * (1 + 1 + 6)
    assert MSQ(widths="2/4/7").bits(10) == 32 + 10 * (2 + 1 + 2)


def test_msq_scale_choice_is_the_finest_whose_level_fits():
    c = MSQ(widths="1/3")  # s = (1, 7): |x|/B <= 1/7 takes the fine scale
    x = torch.tensor([[1.0, 1 / 7, 0.15, -0.01, 0.0, 0.5]], dtype=torch.float64)
    assert c.resolution(x).tolist() == [[0, 1, 0, 1, 1, 0]]
    y = c.decode(c.encode(x, 0))
    # every decoded value is a level of its scale: B * l / s
    assert torch.allclose(y[0, [1, 3, 4]] * 7, (y[0, [1, 3, 4]] * 7).round())
    assert torch.all((y[0, [0, 2, 5]] == 0) | (y[0, [0, 2, 5]].abs() == 1))


def test_a_shared_scale_below_a_rows_magnitude_is_refused():
    with pytest.raises(ValueError, match="at least every row"):
        SSQ().encode_shared(torch.ones(2, 4), 0, 0.5)
    with pytest.raises(ValueError, match="widths must be increasing"):
        MSQ(widths="6/4")
    with pytest.raises(ValueError, match="width must be"):
        parse_spec("ssq:width=17")


@pytest.mark.parametrize(
    "spec", ["ssq", "ssq:width=1", "msq", "msq:widths=1/3", "msq:widths=2/4/7"]
)
def test_integer_levels_sum_to_the_sum_of_decoded_rows(spec):
    c = parse_spec(spec)
    assert c.integer_allreduce
    n, d = 5, 33
    x = Streams.for_nodes(1, range(n), 7).normal(d) * torch.arange(1, n + 1)[:, None]
    scale = c.scale_of(x).max()  # the all-reduce MAX
    res = c.resolution(x, scale.expand(n)).amin(dim=0)  # the all-reduce MIN
    packet = c.encode_shared(x, Streams.for_nodes(2, range(n), 3), scale, res)
    total = c.integers(packet).sum(dim=0)  # the integer all-reduce
    assert total.abs().max() < 2 ** (c.sum_width(n) - 1)
    summed = c.decode_summed(total, packet, n)
    torch.testing.assert_close(summed, c.decode(packet).sum(dim=0), rtol=1e-12, atol=1e-12)
    assert packet.nbits.tolist() == [c.bits(d)] * n


@pytest.mark.parametrize("spec", ["ssq:width=2", "msq:widths=1/3"])
def test_the_shared_scale_form_is_unbiased(spec):
    c = parse_spec(spec)
    x = torch.tensor([0.3, -0.05, 0.9, 0.0, -0.6, 0.011], dtype=torch.float64)
    draws = 20000
    scale = 2.0  # a larger node's scale
    rows = x.expand(draws, -1).contiguous()
    res = c.resolution(rows[:1], torch.tensor([scale]))[0]
    y = c.decode(c.encode_shared(rows, Streams.for_nodes(3, range(draws), 5), scale, res))
    assert_mc_mean(y, x, var_bound=float(((scale**2) / 4 * torch.ones(6)).sum()))
