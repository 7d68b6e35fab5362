"""Layer-wise compression: blocks of a row compressed separately, with the declared constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from asserts import assert_mc_at_least, assert_mc_at_most, assert_mc_mean
from strategies import compressor_cases, make_vector

from compressors import Blockwise, Compressor, Packet, montecarlo, parse_spec
from compressors.base import ceil_log2
from compressors.bernoulli import Bernoulli
from compressors.blockwise import HEADER_BYTES, block_streams
from compressors.dithering import QSGD
from compressors.perm_k import PermK
from compressors.rand_k import RandK
from compressors.sign import Sign
from compressors.top_k import TopK
from streams import Streams

SIZES = (10, 30, 20)  # d = 60
D = sum(SIZES)
CASES = compressor_cases()


def rows_rng(c: Compressor, m: int, seed: int = 0) -> Streams:
    """The nodes 0..m-1 of one step, shared keys where the compressor needs them."""
    nodes = torch.arange(m) % (getattr(c, "n", None) or m)
    if c.shared_randomness:
        return Streams.shared(seed, m, 7, nodes=nodes)
    return Streams.for_nodes(seed, nodes, 7)


def batch(d: int, seed: int = 0) -> torch.Tensor:
    x = make_vector("gaussian", d, seed)
    return torch.stack([x, x.flip(0), 3 * x, make_vector("heavy-tailed", d, seed)])


# --- (a) one block is the inner compressor -----------------------------------------------


@pytest.mark.parametrize("c", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_one_block_is_the_inner_compressor(c):
    x = batch(40)
    rng = rows_rng(c, 4, seed=3)
    p_in, p_bw = c.encode(x, rng), Blockwise(c, (40,)).encode(x, rng)
    assert torch.equal(Blockwise(c, (40,)).decode(p_bw), c.decode(p_in))
    assert torch.equal(p_bw.nbits, p_in.nbits)


@pytest.mark.parametrize("c", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_each_block_is_the_inner_on_its_slice_with_its_own_streams(c):
    sizes, x = (12, 20, 10), batch(42, seed=5)
    rng = rows_rng(c, 4, seed=6)
    packet = Blockwise(c, sizes).encode(x, rng)
    y = Blockwise(c, sizes).decode(packet)
    expect_bits = torch.zeros(4, dtype=torch.int64)
    for b, (x_b, y_b) in enumerate(zip(x.split(sizes, 1), y.split(sizes, 1), strict=True)):
        alone = c.encode(x_b.contiguous(), block_streams(rng, b))
        assert torch.equal(y_b, c.decode(alone))
        expect_bits += alone.nbits
    assert torch.equal(packet.nbits, expect_bits)
    if c.fixed_size:
        assert packet.nbits.tolist() == [sum(c.bits(s) for s in sizes)] * 4


def test_first_block_is_the_inner_on_its_slice_and_later_blocks_draw_afresh():
    c, x = RandK(k=5), make_vector("gaussian", 40, 1).expand(200, 40)
    rng = Streams.for_nodes(0, range(200))
    y = Blockwise(c, (20, 20))(x, rng)
    assert torch.equal(y[:, :20], c(x[:, :20], rng))
    # Independent blocks: the same subset in both halves has probability 1/C(20, 5) per draw.
    same = ((y[:, :20] != 0) == (y[:, 20:] != 0)).all(dim=1)
    assert int(same.sum()) == 0


# --- (b) Top-K per block ------------------------------------------------------------------


def test_topk_per_block_keeps_the_top_k_of_each_block_and_counts_its_bits():
    c = Blockwise(TopK(ratio=0.2), (7, 20, 13))
    ks = [TopK(ratio=0.2).k_of(s) for s in c.sizes]
    assert ks == [1, 4, 3]
    x = batch(40, seed=2)
    packet = c.encode(x, 0)
    y = c.decode(packet)
    for x_b, y_b, k in zip(x.split(c.sizes, 1), y.split(c.sizes, 1), ks, strict=True):
        top = torch.topk(x_b.abs(), k, dim=1).indices.sort(dim=1).values
        assert torch.equal((y_b != 0).nonzero()[:, 1].reshape(4, k), top)
        assert torch.equal(torch.gather(y_b, 1, top), torch.gather(x_b, 1, top))
    expect = sum(k * (32 + ceil_log2(s)) for k, s in zip(ks, c.sizes, strict=True))
    assert expect == 1 * 35 + 4 * 37 + 3 * 36 == 291
    assert c.bits(40) == 291 and packet.nbits.tolist() == [291] * 4
    assert c.support(40) == 8 and c.delta(40) == pytest.approx(1 / 7)


# --- (c), (d) declared constants by Monte Carlo --------------------------------------------


def test_blockwise_randk_omega_is_the_largest_block_omega_and_it_holds():
    c = Blockwise(RandK(k=2), SIZES)
    assert [RandK(k=2).omega(s) for s in SIZES] == [4.0, 14.0, 9.0]
    assert c.omega(D) == 14.0 and c.delta(D) == 1 / 15
    for kind, seed in [("gaussian", 0), ("heavy-tailed", 1), ("sparse", 2), ("ramp", 0)]:
        x = make_vector(kind, D, seed)
        ratios, y = montecarlo.error_ratios(c, x, 4000, seed=seed)
        assert_mc_at_most(ratios, c.omega(D))
        # E ratio = sum_b omega_b ||x_b||^2 / ||x||^2 exactly.
        exact = sum(
            w * float((x_b**2).sum()) for w, x_b in zip([4, 14, 9], x.split(SIZES), strict=True)
        )
        exact /= float((x**2).sum())
        assert abs(float(ratios.mean()) - exact) <= 5 * float(ratios.std()) / 4000**0.5
        # (d) unbiased, to the Monte-Carlo standard error.
        assert_mc_mean(y, x, var_bound=c.omega(D) * float((x**2).sum()))
    worst = c.worst_case(D)
    assert torch.equal(worst != 0, torch.arange(D).ge(10) & torch.arange(D).lt(40))
    ratios, _ = montecarlo.error_ratios(c, worst, 2000, seed=5)
    assert_mc_at_least(ratios, 0.99 * 14.0)
    torch.testing.assert_close(ratios, torch.full_like(ratios, 14.0), rtol=1e-12, atol=0)


def test_blockwise_topk_delta_is_the_smallest_block_delta_and_it_holds():
    c = Blockwise(TopK(k=3), SIZES)
    assert montecarlo.declared_constant(c, D) == ("1 - delta", pytest.approx(0.9))
    for kind in ("gaussian", "heavy-tailed", "one-hot", "constant", "ramp"):
        ratios, _ = montecarlo.error_ratios(c, make_vector(kind, D, 4), 4)
        assert_mc_at_most(ratios, 1 - c.delta(D))
        assert float(ratios.max()) <= 0.9 * (1 + 1e-12)
    ratios, _ = montecarlo.error_ratios(c, c.worst_case(D), 4)
    torch.testing.assert_close(ratios, torch.full_like(ratios, 27 / 30), rtol=1e-12, atol=0)


def test_blockwise_of_a_variable_size_quantizer_holds_its_omega_and_mean_bits():
    inner = QSGD(levels=2, coding="elias")
    c = Blockwise(inner, (30, 10))
    assert c.omega(40) == max(inner.omega(30), inner.omega(10))
    assert c.expected_bits(40) is None and c.max_bits(40) == inner.max_bits(30) + inner.max_bits(10)
    x = make_vector("gaussian", 40, 6)
    ratios, y = montecarlo.error_ratios(c, x, 4000)
    assert_mc_at_most(ratios, c.omega(40))
    assert_mc_mean(y, x, var_bound=c.omega(40) * float((x**2).sum()))
    _, packet = montecarlo.draws_of(c, x, 50)
    per_block = [p.nbits for p in packet.meta["blocks"]]
    assert torch.equal(packet.nbits, per_block[0] + per_block[1])
    assert (packet.nbits <= c.max_bits(40)).all()


# --- declarations -------------------------------------------------------------------------


def test_declarations_follow_the_inner():
    topk, randk = Blockwise(TopK(k=2), SIZES), Blockwise(RandK(ratio=0.25), (8, 12))
    assert (topk.contractive, topk.unbiased, topk.deterministic, topk.projection) == (
        True,
        False,
        True,
        True,
    )
    assert (topk.sparsifier, topk.scaled_projection, topk.fixed_size) == (False, False, True)
    assert (randk.unbiased, randk.linear, randk.scaled_projection, randk.projection) == (
        True,
        True,
        True,
        False,
    )
    assert randk.omega(20) == 3.0 and randk.bits(20) == 2 * (32 + 3) + 3 * (32 + 4)
    # k = 2 of 8 and round(2.5) = 2 of 10: omega 3 and 4, not one scaled projection.
    assert not Blockwise(RandK(ratio=0.25), (8, 10)).scaled_projection
    assert Blockwise(RandK(k=2, shared=True), SIZES).shared_randomness
    bound = Blockwise(PermK(), (6, 6)).bind(3)
    assert bound.needs_node_count and bound.inner == PermK(n=3) and bound.sizes == (6, 6)
    assert not Blockwise(parse_spec("bernoulli:p=0.5"), (5, 5)).fixed_size
    assert Blockwise.for_sizes(TopK(k=1), [torch.Size([3, 4]), (5,), 2, ()]).sizes == (12, 5, 2, 1)
    assert topk.spec() == "blockwise[3 blocks]:topk:k=2"


# --- (e) bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(), (3, 0), (4, -1), (2.5, 3), (True, 3), "ab", 7])
def test_bad_sizes_raise(sizes):
    with pytest.raises(ValueError, match="sizes must be a non-empty sequence of positive"):
        Blockwise(TopK(k=1), sizes)


def test_dimension_must_match_the_blocks():
    c = Blockwise(RandK(k=2), SIZES)
    for method in (c.omega, c.delta, c.bits, c.expected_bits, c.max_bits, c.support):
        with pytest.raises(ValueError, match=r"d=61 does not match .* sum\(sizes\)=60"):
            method(61)
    with pytest.raises(ValueError, match=r"d=59 does not match .* sum\(sizes\)=60"):
        c.encode(torch.zeros(2, 59), 0)
    with pytest.raises(ValueError, match="inner must be a compressor"):
        Blockwise("topk", (3,))
    with pytest.raises(ValueError, match="not unbiased"):
        Blockwise(TopK(k=1), SIZES).omega(D)


# --- (f) rows -----------------------------------------------------------------------------


@pytest.mark.parametrize("inner", [RandK(k=3), TopK(k=2), QSGD(levels=2, coding="elias")])
def test_a_row_alone_equals_that_row_of_the_batch(inner):
    c, x = Blockwise(inner, SIZES), batch(D, seed=8)
    rng = rows_rng(c, 4, seed=9)
    packet = c.encode(x, rng)
    y = c.decode(packet)
    for j in range(4):
        alone = c.encode(x[j : j + 1], rng[j : j + 1])
        assert torch.equal(c.decode(alone), y[j : j + 1])
        assert alone.nbits.tolist() == [int(packet.nbits[j])]


# --- the wire form ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prefix(Compressor):
    """A variable-size test payload: each row's entries up to its last non-zero, as float64."""

    deterministic: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        d = x_i.shape[1]
        last = torch.where(x_i != 0, torch.arange(1, d + 1), 0).max(dim=1).values
        return self._packet(x_i, 64 * last, {"values"}, {}, values=x_i.double(), length=last)

    def _decode(self, packet: Packet) -> torch.Tensor:
        return packet.fields["values"]

    def to_bytes(self, packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
        values = packet.fields["values"].contiguous()
        return values.view(torch.uint8).reshape(packet.m, -1), 8 * packet.fields["length"]

    def from_bytes(self, data, nbytes, like, nodes) -> Packet:
        full = torch.zeros(data.shape[0], 8 * like.d, dtype=torch.uint8)
        full[:, : data.shape[1]] = data
        values = full.view(torch.float64)
        x = torch.zeros(data.shape[0], like.d, dtype=like.dtype)
        return self._packet(x, 8 * nbytes, {"values"}, {}, values=values, length=nbytes // 8)


def test_bytes_carry_a_length_header_and_round_trip_variable_size_blocks():
    c = Blockwise(_Prefix(), (3, 4, 2))
    x = torch.tensor(
        [[1.0, 0, 0, 2, 3, 0, 0, 0, 0], [0, 0, 5, 0, 0, 0, 6, 7, 8], [0, 0, 0, 0, 0, 0, 0, 0, 0]]
    )
    packet = c.encode(x, 0)
    data, nbytes = c.to_bytes(packet)
    lens = [[8, 16, 0], [24, 32, 16], [0, 0, 0]]
    assert nbytes.tolist() == [HEADER_BYTES * 3 + sum(r) for r in lens] == [36, 84, 12]
    assert data.shape == (3, 84) and data.dtype == torch.uint8
    assert data[1, :12].tolist() == [24, 0, 0, 0, 32, 0, 0, 0, 16, 0, 0, 0]
    assert packet.nbits.tolist() == [8 * sum(r) for r in lens]
    back = c.from_bytes(data, nbytes, packet, torch.arange(3))
    assert torch.equal(c.decode(back), x) and torch.equal(back.nbits, packet.nbits)
    # A row alone goes through the same bytes (row independence on the wire).
    one, nb_one = c.to_bytes(c.encode(x[1:2], 0))
    assert torch.equal(one[0, : nb_one[0]], data[1, : nbytes[1]])
    with pytest.raises(ValueError, match="do not add up to nbytes"):
        c.from_bytes(data, nbytes + 1, packet, torch.arange(3))


@pytest.mark.skipif(not hasattr(Compressor, "to_bytes"), reason="wire form not available")
@pytest.mark.parametrize(
    "inner",
    [TopK(k=2), RandK(k=3), QSGD(levels=2, coding="elias"), Bernoulli(p=0.5), Sign()],
    ids=["topk", "randk", "qsgd-elias", "bernoulli", "sign"],
)
def test_bytes_round_trip_with_the_library_wire_form(inner):
    c, x = Blockwise(inner, SIZES), batch(D, seed=11)
    rng = rows_rng(c, 4, seed=12)
    packet = c.encode(x, rng)
    data, nbytes = c.to_bytes(packet)
    inner_bytes = sum(inner.to_bytes(p)[1] for p in packet.meta["blocks"])
    head = 0 if inner.fixed_size else HEADER_BYTES * 3  # lengths travel only if they vary
    assert torch.equal(nbytes, head + inner_bytes)
    if inner.fixed_size:  # float32 values at the model's 32 bits: only the blocks' padding
        p32 = c.encode(x.float(), rng)
        gap = 8 * c.to_bytes(p32)[1] - p32.nbits
        assert bool(((gap >= 0) & (gap < 8 * 3)).all()), gap
    back = c.from_bytes(data, nbytes, packet, rng.nodes)
    assert torch.equal(c.decode(back), c.decode(packet))
    assert torch.equal(back.nbits, packet.nbits)
