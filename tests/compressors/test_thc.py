"""THC: the table rounding, the authors' tables, and the homomorphic sum (the nodes' table values
summed and rotated back once). The registry-wide tests cover the contract, the Monte-Carlo check
of omega, the wire form and the non-finite policy."""

from __future__ import annotations

import pytest
import torch
from asserts import assert_mc_at_most, assert_mc_mean

from compressors import montecarlo, parse_spec
from compressors.fosgd import padded_dim, rwht
from compressors.thc import THC, THC_TABLES
from streams import Streams, tags


def test_tables_bits_and_parameters():
    assert THC().grid == (15, tuple(range(16)))
    g, t = THC(width=3, table="thc").grid
    assert g == 16 and t == (0, 3, 5, 7, 9, 11, 13, 16)
    assert all(
        t[0] == 0 and t[-1] == g and list(t) == sorted(set(t)) for g, t in THC_TABLES.values()
    )
    assert THC().bits(1000) == 32 + 1024 * 4 and THC(width=1).bits(9) == 32 + 16
    assert THC().omega(1) == 0.0
    with pytest.raises(ValueError, match="table=thc has widths"):
        THC(width=5, table="thc")
    with pytest.raises(ValueError, match="table must be"):
        parse_spec("thc:table=lloyd")


def test_decoded_values_are_table_points_of_the_rotated_row():
    c = THC(width=2, table="thc")  # g = 34, T = (0, 13, 21, 34)
    x = Streams.for_nodes(0, [0], 1).normal(12)
    rng = Streams.shared(4, 1, 9)
    packet = c.encode(x, rng)
    signs = 1.0 - 2.0 * (rng.split(tags.THC_SIGNS).bits64(16) & 1).double()
    y = rwht(x, signs)
    lam = y.abs().max()
    assert float(packet.fields["scale"][0]) == pytest.approx(float(lam), rel=1e-12)
    p = (y[0] / lam + 1) * 17  # the position on 0..34
    got = torch.tensor([0, 13, 21, 34])[packet.fields["index"][0].long()]
    lo = torch.tensor([max(v for v in (0, 13, 21, 34) if v <= q + 1e-9) for q in p.tolist()])
    hi = torch.tensor([min(v for v in (0, 13, 21, 34) if v >= q - 1e-9) for q in p.tolist()])
    assert ((got == lo) | (got == hi)).all()


@pytest.mark.parametrize("spec", ["thc", "thc:width=3,table=thc", "thc:width=1"])
def test_table_values_sum_to_the_sum_of_decoded_rows(spec):
    c = parse_spec(spec)
    n, d = 4, 37
    x = Streams.for_nodes(1, range(n), 7).normal(d) * torch.arange(1, n + 1)[:, None]
    x[2] = 0.0  # a zero row still quantizes against the shared range
    rng = Streams.shared(3, n, 11)  # shared keys: every node the same signs
    scale = c.scale_of(x, rng).max()  # the all-reduce MAX
    packet = c.encode_shared(x, rng, scale)
    total = c.integers(packet).sum(dim=0)  # what the server sums
    assert int(total.max()) < 2 ** c.sum_width(n)
    summed = c.decode_summed(total, packet, n)
    torch.testing.assert_close(summed, c.decode(packet).sum(dim=0), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="shared range"):
        c.encode_shared(x, rng, 0.5 * scale)


def test_unbiased_in_shared_form_and_omega_holds_at_adversarial_vectors():
    c = THC(width=3, table="thc")
    d, draws = 8, 20000
    x = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0, 0.25, -1.0, 0.1], dtype=torch.float64)
    rows = x.expand(draws, -1).contiguous()
    keys = Streams.shared(5, draws, 2)  # shared signs, one rounding stream per node id
    rng = Streams(keys.keys, torch.arange(draws))
    scale = 2.0 * float(c.scale_of(rows[:1], rng[:1])[0])
    y = c.decode(c.encode_shared(rows, rng, scale))
    assert_mc_mean(y, x, var_bound=float(scale**2 * padded_dim(d)))
    for v in (x, torch.ones(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64)[1]):
        ratios, y = montecarlo.error_ratios(c, v, 4000, seed=1)
        assert_mc_at_most(ratios, c.omega(d))
