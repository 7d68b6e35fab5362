"""The count sketch: its exact variance, its linearity under shared hashes, and a gloo run that
all-reduces the table equal to the simulation. (The registry-wide compressor tests cover the
contract, the Monte-Carlo check of omega, the wire form and the non-finite policy.)"""

from __future__ import annotations

import pytest
import torch

from comm import SimulatedComm
from compressors import parse_spec
from tests.runs import torch_dist_helpers


def test_omega_is_the_exact_variance_for_every_x():
    C = parse_spec("countsketch:rows=2,cols=5")
    d, S = 12, 20000
    comm = SimulatedComm(S, seed=3)
    for x in (torch.ones(d), torch.arange(d, dtype=torch.float64), torch.eye(d)[0] * 7):
        x = x.to(torch.float64)
        rows = x.expand(S, d).clone()
        y = C.decode(C.encode(rows, comm.rng(0)))  # private draws: S independent sketches
        err = ((y - x) ** 2).sum(dim=1)
        want = C.omega(d) * float((x**2).sum())
        assert C.omega(d) == pytest.approx((d - 1) / 10)
        assert float(err.mean()) == pytest.approx(want, rel=0.05)
        assert torch.allclose(y.mean(dim=0), x, atol=0.1 * float(x.abs().max()) + 0.05)


def test_the_tables_of_several_nodes_sum_to_the_table_of_their_sum():
    C = parse_spec("countsketch:rows=3,cols=4")
    comm = SimulatedComm(5, seed=0)
    rows = torch.randn(5, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rng = comm.rng_for(C, 7)  # the shared stream: every node the same hashes
    packet = C.encode(rows, rng)
    total = C.encode(rows.sum(dim=0, keepdim=True).expand(5, -1).contiguous(), rng)
    assert torch.allclose(packet.fields["values"].sum(dim=0), total.fields["values"][0])
    assert torch.allclose(C.decode(packet).sum(dim=0), C.decode(total)[0], atol=1e-12)
    assert packet.nbits.tolist() == [3 * 4 * 32] * 5


@pytest.mark.dist
def test_gloo_all_reduces_the_table_and_equals_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["dcgd", "--compressor", "countsketch:rows=2,cols=5"])
