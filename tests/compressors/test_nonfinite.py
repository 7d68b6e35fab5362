"""The non-finite policy of :mod:`compressors.nonfinite`, over every registered compressor's
examples, the blockwise ones, and Top-K with and without its compiled kernel: finite rows (the
extremes of the dtype included) decode to finite rows, rows with a NaN or inf entry to rows with
a non-finite entry, and no payload changes size."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import compressor_cases

from compressors import Blockwise, compiled
from streams import Streams

CASES = compressor_cases() + [(c.spec(), c) for c in Blockwise.examples()]
IDS = [name for name, _ in CASES]
ALL = [c for _, c in CASES]
D_OF_BLOCKS = 40  # the blockwise examples' sizes add up to 40
DTYPES = [torch.float64, torch.float32, torch.bfloat16]
M = 4
# Each example checks M rows of extremes and the named extremes are tested on their own, so a
# third of the profile's examples keeps the default suite fast (the deep profile runs more).
FEW = settings(max_examples=max(8, settings.default.max_examples // 3))


def extremes(dtype: torch.dtype) -> list[float]:
    """The finite values at the edges of ``dtype``: largest, smallest normal, subnormals."""
    fi = torch.finfo(dtype)
    vals = [fi.max, fi.max / 3, fi.tiny, fi.smallest_normal * 0.5, fi.smallest_normal * fi.eps]
    return [s * v for v in vals for s in (1.0, -1.0)] + [0.0, 1.0, -2.5]


def rng_for(c, m: int) -> Streams:
    nodes = torch.arange(m) % (getattr(c, "n", None) or m)
    if c.shared_randomness:
        return Streams.shared(3, m, 11, nodes=nodes)
    return Streams.for_nodes(3, nodes, 11)


@pytest.fixture(params=["compiled", "torch"])
def kernel(request, monkeypatch):
    """Run with the compiled kernels (where installed) and with the plain torch code."""
    if request.param == "torch":
        monkeypatch.setattr(compiled, "ENABLED", False)
    elif not compiled.ENABLED:
        pytest.skip("numba not installed")
    return request.param


@st.composite
def rows(draw, dtype: torch.dtype, d: int):
    """``(M, d)`` finite rows whose entries are drawn from the dtype's extremes and ordinary
    values; one row of a single extreme repeated, the others mixed."""
    pool = extremes(dtype)
    fill = draw(st.sampled_from(pool))
    mixed = draw(st.lists(st.sampled_from(pool), min_size=(M - 1) * d, max_size=(M - 1) * d))
    x = torch.tensor([fill] * d + mixed, dtype=torch.float64).reshape(M, d)
    return x.to(dtype)


def encode(c, x):
    return c.encode(x, rng_for(c, x.shape[0]))


def check_bits(c, packet, d):
    if c.fixed_size:
        assert packet.nbits.tolist() == [c.bits(d)] * packet.m
    else:
        assert bool((packet.nbits <= c.max_bits(d)).all())


def dim_of(c) -> int:
    return D_OF_BLOCKS if isinstance(c, Blockwise) else 24


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_named_extremes_decode_finite(c, dtype, kernel):
    d = dim_of(c)
    fi = torch.finfo(dtype)
    named = [fi.max, -fi.max, fi.tiny, fi.smallest_normal * fi.eps]
    x = torch.tensor([[v] * d for v in named], dtype=torch.float64)
    x[3, ::2] = fi.max  # mixed: the largest and the smallest subnormal in one row
    x = x.to(dtype)
    packet = encode(c, x)
    y = c.decode(packet)
    assert torch.isfinite(y).all(), f"{c.spec()} {dtype}: {y}"
    check_bits(c, packet, d)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("c", ALL, ids=IDS)
@FEW
@given(data=st.data())
def test_finite_rows_decode_finite(c, dtype, data):
    d = dim_of(c)
    x = data.draw(rows(dtype, d))
    packet = encode(c, x)
    y = c.decode(packet)
    assert y.dtype == dtype and torch.isfinite(y).all(), f"{c.spec()}: {x} -> {y}"
    check_bits(c, packet, d)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("c", ALL, ids=IDS)
@FEW
@given(data=st.data())
def test_nonfinite_rows_decode_nonfinite(c, dtype, data):
    d = dim_of(c)
    x = data.draw(rows(dtype, d))
    bad = data.draw(st.lists(st.booleans(), min_size=M, max_size=M))
    for i in range(M):
        if bad[i]:
            j = data.draw(st.integers(0, d - 1))
            x[i, j] = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    packet = encode(c, x)
    y = c.decode(packet)
    fin = torch.isfinite(y).all(dim=1).tolist()
    assert fin == [not b for b in bad], f"{c.spec()}: {x} -> {y}"
    check_bits(c, packet, d)
    if any(bad):  # the reduction of the rows (what the comm layer sums) carries it too
        assert not bool(torch.isfinite(c.decode_sum(packet)).all())
    data_bytes, nbytes = c.to_bytes(packet)
    back = c.decode(c.from_bytes(data_bytes, nbytes, packet, rng_for(c, M).nodes))
    back_fin = torch.isfinite(back).all(dim=1).tolist()
    if c.nonfinite_on_wire:
        assert back_fin == fin
    else:  # the flag does not travel: finite rows still arrive finite
        assert all(back_fin[i] for i in range(M) if fin[i])


def test_ordinary_rows_decode_as_before_the_checks():
    """The policy's checks take no path on ordinary rows: the decoded rows are those of the
    plain formulas (here Rand-K and QSGD, against their unguarded expressions)."""
    x = torch.randn(5, 50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    from compressors import parse_spec

    randk = parse_spec("randk:k=5")
    p = encode(randk, x)
    plain = torch.zeros_like(x).scatter_(1, p.fields["indices"], p.fields["values"] * 10.0)
    assert torch.equal(randk.decode(p), plain)
    qsgd = parse_spec("qsgd")
    q = encode(qsgd, x)
    assert torch.equal(q.fields["norm"], torch.linalg.vector_norm(x, dim=1))


def test_the_compiled_finiteness_test_of_small_blocks():
    """``streams.sc.all_finite`` (small CPU blocks, in place of a row sum's test) finds a
    NaN or an infinity anywhere, and passes finite rows whose sum overflows; it declines what
    it does not serve (large, non-contiguous or integer tensors)."""
    from compressors.nonfinite import nonfinite_rows
    from streams import compiled as sc

    if not sc.ENABLED:
        pytest.skip("numba is not installed")
    for dtype in (torch.float32, torch.float64):
        big = torch.finfo(dtype).max
        x = torch.full((4, 9), big, dtype=dtype)  # each row's sum overflows; all finite
        assert sc.all_finite(x) is True
        assert nonfinite_rows(x) is None
        for bad in (float("nan"), float("inf"), -float("inf")):
            y = x.clone()
            y[2, 5] = bad
            assert sc.all_finite(y) is False
            assert nonfinite_rows(y).tolist() == [False, False, True, False]
    assert sc.all_finite(torch.zeros(200, 200)) is None
    assert sc.all_finite(torch.zeros(4, 9).T) is None
    assert sc.all_finite(torch.zeros(4, 9, dtype=torch.int64)) is None
