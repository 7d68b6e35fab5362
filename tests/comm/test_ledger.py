"""The bit ledger: a payload whose rows all have one size is charged that int, without summing
its ``nbits``; the totals and a round's record are the same as from the tensor."""

import dataclasses

import pytest
import torch
from strategies import compressor_cases

from comm import SimulatedComm
from comm.base import Ledger
from comm.batched import BatchedSimulatedComm
from compressors import parse_spec
from streams import Streams


def test_an_int_charges_every_node_as_the_tensor_of_it_does():
    a, b = Ledger.zeros(5), Ledger.zeros(5)
    a.open_round(), b.open_round()
    a.charge_up(37)
    b.charge_up(torch.full((5,), 37, dtype=torch.int64))
    a.charge_up(torch.tensor([1, 2, 3, 4, 5]))
    b.charge_up(torch.tensor([1, 2, 3, 4, 5]))
    assert torch.equal(a.up, b.up) and a.up.tolist() == [38, 39, 40, 41, 42]
    assert a.close_round() == b.close_round() == (5 * 37 + 15, 0)
    assert a.up.dtype == torch.int64


@pytest.mark.parametrize("spec", ["topk:k=3", "randk:k=2", "scaled-sign", "natural"])
def test_a_fixed_size_payload_carries_its_row_size(spec):
    C = parse_spec(spec)
    assert C.fixed_size
    packet = C.encode(torch.randn(4, 50), SimulatedComm(4, seed=0).rng_for(C, 0))
    assert packet.row_bits == C.bits(50) and packet.nbits.tolist() == [C.bits(50)] * 4


@pytest.mark.parametrize(("name", "C"), compressor_cases(), ids=[c[0] for c in compressor_cases()])
def test_a_row_size_is_given_only_where_every_row_has_it(name, C):
    """Every registered compressor's examples: ``row_bits``, where a packet gives it, is every
    row's size (a variable-size compressor may give it where this draw's rows have one size:
    Perm-K when ``n`` divides ``d``)."""
    x = torch.randn(C.n if getattr(C, "n", None) else 4, 64, dtype=torch.float64)
    packet = C.encode(x, Streams.for_nodes(0, range(x.shape[0])))
    if packet.row_bits is not None:
        assert packet.nbits.tolist() == [packet.row_bits] * x.shape[0], name


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("decoded", [False, True])
def test_reduce_charges_the_row_size_as_it_charges_the_tensor(batched, weighted, decoded):
    """With and without the decoded rows, with and without weights (partial participation:
    a zero weight sends nothing), one run or a batch of three: the same totals, the same round
    record and the same mean as with ``row_bits`` dropped."""
    C = parse_spec("topk:k=2")
    n, d = 4, 30
    m = 3 * n if batched else n
    x = torch.randn(m, d, dtype=torch.float64)
    weight = None
    if weighted:
        weight = torch.tensor([0.5, 0.0, 0.5, 0.0] * (m // n), dtype=torch.float64)
    got = []
    for drop in (False, True):
        comm = BatchedSimulatedComm(n, 3, 0) if batched else SimulatedComm(n, seed=0)
        packet = C.encode(x, comm.rng_for(C, 0))
        assert packet.row_bits == C.bits(d)
        if drop:
            packet = dataclasses.replace(packet, row_bits=None)
        comm.ledger.open_round()
        mean = comm.reduce(packet, C, weight, decoded=C.decode(packet) if decoded else None)
        got.append((mean, comm.ledger.up.clone(), comm.ledger.close_round()))
    (m1, up1, rec1), (m2, up2, rec2) = got
    assert torch.equal(m1, m2) and torch.equal(up1, up2) and rec1 == rec2
    sending = m // 2 if weighted else m
    assert rec1 == (sending * C.bits(d), 0) and int(up1.sum()) == rec1[0]


def test_reduce_full_charges_a_float_per_entry_to_the_senders():
    comm = SimulatedComm(4, seed=0, float_bits=32)
    comm.ledger.open_round()
    rows = torch.randn(4, 10)
    assert torch.equal(comm.reduce_full(rows), rows.mean(dim=0))
    weight = torch.tensor([0.5, 0.0, 0.5, 0.0])
    assert torch.equal(comm.reduce_full(rows, weight), weight @ rows)
    assert comm.ledger.up.tolist() == [640, 320, 640, 320]
    assert comm.ledger.close_round() == (4 * 320 + 2 * 320, 0)
