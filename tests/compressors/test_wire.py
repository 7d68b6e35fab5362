"""The wire form of every registered compressor: bytes that decode bitwise, at the counted size.

Registry-driven: every compressor's examples are covered, and one that defines no wire form fails
the round-trip test.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import compressor_cases, make_vector

from compressors import Compressor
from compressors.bernoulli import Bernoulli
from compressors.bitpack import pack_bits, unpack_bits
from compressors.compose import Compose
from compressors.dithering import QSGD
from compressors.identity import Identity
from compressors.perm_k import PermK
from compressors.rand_k import RandK
from compressors.scaled import Scaled
from compressors.terngrad import TernGrad
from compressors.top_k import TopK
from streams import Streams

# Index codes and layouts the examples do not reach: seeds, bitmaps, shared supports under
# composition, int32 levels (s >= 256), a scaled correlated sparsifier.
EXTRA = [
    RandK(k=3, index="seed"),
    RandK(ratio=0.2, index="auto"),
    TopK(k=7, index="bitmap"),
    Compose((RandK(k=4, index="seed"), QSGD(coding="elias"))),
    Compose((RandK(k=5, shared=True), QSGD(levels=2))),
    Compose((TopK(k=6), TernGrad(coding="elias"))),
    QSGD(levels=300),
    QSGD(levels=300, coding="elias"),
    Scaled(PermK(n=4)),
]
CASES = compressor_cases() + [(c.spec(), c) for c in EXTRA]
IDS = [name for name, _ in CASES]
ALL = [c for _, c in CASES]
DIMS = (1, 3, 13, 64, 1000)
DTYPES = (torch.float32, torch.float64, torch.bfloat16)
KINDS = ("gaussian", "sparse", "one-hot", "heavy-tailed")


def with_float_bits(c: Compressor, float_bits: int) -> Compressor:
    """``c`` with every ``float_bits`` in it (inner compressors included) set to ``float_bits``."""
    changes = {}
    for f in dataclasses.fields(c):
        v = getattr(c, f.name)
        if f.name == "float_bits":
            changes[f.name] = float_bits
        elif isinstance(v, Compressor):
            changes[f.name] = with_float_bits(v, float_bits)
        elif isinstance(v, tuple) and v and all(isinstance(p, Compressor) for p in v):
            changes[f.name] = tuple(with_float_bits(p, float_bits) for p in v)
    return dataclasses.replace(c, **changes)


def float_bits_of(c: Compressor) -> set[int]:
    out = set()
    for f in dataclasses.fields(c):
        v = getattr(c, f.name)
        if f.name == "float_bits":
            out.add(v)
        elif isinstance(v, Compressor):
            out |= float_bits_of(v)
        elif isinstance(v, tuple):
            out |= {b for p in v if isinstance(p, Compressor) for b in float_bits_of(p)}
    return out


def setup(c: Compressor, m: int, seed: int = 3) -> tuple[Streams, torch.Tensor]:
    """The streams of ``m`` rows as the comm layer gives them, and their node ids."""
    n = getattr(c, "n", None) or m
    nodes = torch.arange(m) % n
    if c.shared_randomness:
        return Streams.shared(seed, m, 7, nodes=nodes), nodes
    return Streams.for_nodes(seed, nodes, 7), nodes


def rows(m: int, d: int, seed: int = 0) -> torch.Tensor:
    """``m`` float64 rows of different kinds and scales (sparse, dense, one-hot, heavy tails)."""
    kinds = [KINDS[j % len(KINDS)] for j in range(m)]
    return torch.stack([make_vector(k, d, seed + j, 10.0 ** (j - 1)) for j, k in enumerate(kinds)])


def encode_or_none(c: Compressor, x: torch.Tensor, rng: Streams):
    """The packet, or None where ``d`` is outside the compressor's domain (``k > d``, ...)."""
    try:
        return c.encode(x, rng)
    except ValueError:
        return None


def round_trip(c: Compressor, p, nodes: torch.Tensor):
    data, nbytes = c.to_bytes(p)
    assert data.dtype == torch.uint8 and data.shape[0] == p.m
    assert nbytes.dtype == torch.int64 and nbytes.shape == (p.m,)
    assert data.shape[1] == int(nbytes.max())
    return data, nbytes, c.from_bytes(data, nbytes, like=p, nodes=nodes)


@pytest.mark.parametrize("c", ALL, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_bitwise_also_for_other_nodes_rows(c, dtype):
    m = 4
    tested = 0
    for d in DIMS:
        rng, nodes = setup(c, m)
        x = rows(m, d).to(dtype)
        p = encode_or_none(c, x, rng)
        if p is None:
            continue
        tested += 1
        y = c.decode(p)
        data, nbytes, q = round_trip(c, p, nodes)
        assert torch.equal(c.decode(q), y), f"d={d}"
        assert torch.equal(q.nbits, p.nbits) and q.m == m
        # Rank 0 decodes rank j's message alone, knowing only its own packet and j.
        own = c.encode(x[:1], rng[:1])
        for j in range(1, m):
            msg = data[j : j + 1, : int(nbytes[j])]
            qj = c.from_bytes(msg, nbytes[j : j + 1], like=own, nodes=nodes[j : j + 1])
            assert torch.equal(c.decode(qj), y[j : j + 1]), f"d={d}, row {j}"
            assert qj.nbits.tolist() == [int(p.nbits[j])]
    assert tested >= 2, "the compressor accepted fewer than two of the dimensions"


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_size_law_float32_exact_and_float64_pays_for_stored_width(c):
    if float_bits_of(c) - {32}:
        pytest.skip("the law below is stated for float_bits=32 instances")
    c64 = with_float_bits(c, 64)
    m, checked = 4, 0
    for d in DIMS:
        rng, nodes = setup(c, m)
        x = rows(m, d, seed=d)
        p32 = encode_or_none(c, x.float(), rng)
        if p32 is None:
            continue
        checked += 1
        # Stored width = counted width: the bytes are the counted bits up to the padding.
        slack = 8 * c.to_bytes(p32)[1] - p32.nbits
        assert ((slack >= 0) & (slack < 8)).all(), f"d={d}: {slack.tolist()}"
        p64 = c.encode(x, rng)
        nbytes64 = c.to_bytes(p64)[1]
        # A float64 run sends its values at 64 bits (Natural: 11-bit exponents), so it pays
        # exactly what the bit model charges when float_bits goes from 32 to 64: (64 - 32) bits
        # per float value sent (3 per Natural exponent), up to the padding.
        extra = c64.encode(x, rng).nbits - p64.nbits
        assert (extra >= 0).all()
        slack = 8 * nbytes64 - p64.nbits - extra
        assert ((slack >= 0) & (slack < 8)).all(), f"d={d}: {slack.tolist()}"
        slack = 8 * c64.to_bytes(c64.encode(x, rng))[1] - c64.encode(x, rng).nbits
        assert ((slack >= 0) & (slack < 8)).all(), f"d={d}: {slack.tolist()}"
    assert checked >= 2


def test_identity_bytes_are_the_little_endian_values():
    x = rows(3, 5).float()
    data, nbytes = Identity().to_bytes(Identity().encode(x, 0))
    assert nbytes.tolist() == [20, 20, 20]
    assert torch.equal(data, x.contiguous().view(torch.uint8))


def test_known_layouts_have_the_counted_sizes():
    d = 1000
    x = rows(2, d).float()
    # Top-K: k values and k 10-bit indices; QSGD fixed: the norm and 4-bit codes (s = 4).
    assert TopK(k=3).to_bytes(TopK(k=3).encode(x, 0))[1].tolist() == [(3 * 42 + 7) // 8] * 2
    assert QSGD().to_bytes(QSGD().encode(x, 0))[1].tolist() == [(32 + 4 * d) // 8] * 2
    # Shared Rand-K sends its values only: the support is the shared seed's.
    c = RandK(k=5, shared=True)
    assert c.to_bytes(c.encode(x, Streams.shared(0, 2, 1)))[1].tolist() == [20, 20]
    # The seed code sends the row's 64-bit key instead of the support.
    c = RandK(k=5, index="seed")
    assert c.to_bytes(c.encode(x, 0))[1].tolist() == [(5 * 32 + 64) // 8] * 2


@pytest.mark.parametrize("d", [1000, 20000])
def test_elias_rows_have_their_own_size(d):
    c = QSGD(levels=16, coding="elias")
    kinds = ("gaussian", "sparse", "one-hot", "ramp")
    x = torch.stack([make_vector(k, d, 1) for k in kinds]).float()
    p = c.encode(x, 5)
    data, nbytes, q = round_trip(c, p, torch.arange(4))
    assert torch.equal(nbytes, (p.nbits + 7) // 8)
    assert len(set(nbytes.tolist())) == 4
    # One non-zero (level 16 at position j): the norm, gamma(j + 1), the sign, gamma(16).
    gap_bits = 2 * math.floor(math.log2(int(x[2].nonzero()) + 1)) + 1
    assert int(nbytes[2]) == (32 + gap_bits + 1 + 9 + 7) // 8
    assert torch.equal(c.decode(q), c.decode(p))


def test_bernoulli_rows_sent_or_not():
    c = Bernoulli(p=0.5)
    x = rows(16, 10).float()
    p = c.encode(x, 2)
    sent = p.fields["sent"]
    assert 0 < int(sent.sum()) < 16
    data, nbytes, q = round_trip(c, p, torch.arange(16))
    assert torch.equal(nbytes, torch.where(sent, (1 + 320 + 7) // 8, 1))
    assert torch.equal(c.decode(q), c.decode(p))


def test_permk_blocks_of_other_nodes_are_rebuilt_from_the_shared_keys():
    c = PermK(n=3)
    x = rows(3, 14).float()
    rng = Streams.shared(9, 3, 4)
    p = c.encode(x, rng)
    data, nbytes = c.to_bytes(p)
    assert nbytes.tolist() == [20, 20, 16]  # blocks of 5, 5 and 4 values (shift-dependent)
    for j in range(3):
        own = c.encode(x[j : j + 1], rng[j : j + 1])
        other = (j + 1) % 3
        sel = slice(other, other + 1)
        q = c.from_bytes(data[sel], nbytes[sel], own, rng.nodes[sel])
        assert torch.equal(c.decode(q), c.decode(p)[sel])


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_bad_input_raises(c):
    rng, nodes = setup(c, 3)
    p = c.encode(rows(3, 64).float(), rng)
    data, nbytes = c.to_bytes(p)
    for bad in (data.to(torch.int64), data.float(), data[0]):
        with pytest.raises(ValueError, match="uint8"):
            c.from_bytes(bad, nbytes, p, nodes)
    with pytest.raises(ValueError, match="nbytes"):
        c.from_bytes(data[:, :-1], nbytes, p, nodes)  # rows cut short
    with pytest.raises(ValueError, match="nbytes"):
        c.from_bytes(data, nbytes.int(), p, nodes)
    with pytest.raises(ValueError, match="nodes"):
        c.from_bytes(data, nbytes, p, nodes[:2])
    wide = torch.cat([data, torch.zeros(3, 1, dtype=torch.uint8)], dim=1)
    with pytest.raises(ValueError, match="width"):
        c.from_bytes(wide, nbytes + 1, p, nodes)  # one byte more than the message
    if c.fixed_size:
        with pytest.raises(ValueError, match="width"):
            c.from_bytes(data, nbytes - 1, p, nodes)  # one byte less


def test_a_compressor_without_a_wire_form_fails():
    @dataclasses.dataclass(frozen=True)
    class Bare(Compressor):
        def _encode(self, x_i, rng):
            return self._packet(x_i, 1, {"v"}, v=x_i)

    p = Bare().encode(torch.ones(1, 3), 0)
    with pytest.raises(NotImplementedError, match="Bare"):
        Bare().to_bytes(p)


@given(
    width=st.integers(0, 64),
    m=st.integers(1, 3),
    L=st.integers(0, 9),
    seed=st.integers(0, 2**31 - 1),
)
def test_pack_bits_round_trip_and_size(width, m, L, seed):
    v = Streams.for_nodes(seed, range(m)).bits64(L)
    if width < 64:
        v = v & ((1 << width) - 1)
    data, nbytes = pack_bits(v, width)
    assert nbytes.tolist() == [(L * width + 7) // 8] * m
    assert torch.equal(unpack_bits(data, nbytes, L, width), v)


def test_pack_bits_rejects_values_wider_than_the_width():
    with pytest.raises(ValueError, match="width=3"):
        pack_bits(torch.tensor([[8]]), 3)
    with pytest.raises(ValueError, match="width"):
        pack_bits(torch.tensor([[1]]), 65)
