"""The compiled SSQ and MSQ give the same bits as the torch form (the same ``Streams``, the same
payload, bits and decode, the shared-scale form included), on ordinary and extreme inputs:
zeros of both signs, subnormals, the dtype's max, infinities and NaN."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_shared_scale, parse_spec
from streams import Streams
from tests.compressors.compiled_cases import (
    check_against_torch_form,
    same,
    spike_case,
    torch_form,
    varied_input,
)

pytestmark = pytest.mark.skipif(not compiled_shared_scale.ENABLED, reason="numba is missing")

SPECS = [
    "ssq",
    "ssq:width=1",
    "ssq:width=16,float_bits=64",
    "msq",
    "msq:widths=1/3",
    "msq:widths=2/4/7",
    "msq:widths=1/2/3/4/5/6",
    "msq:widths=3/16",
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _torch_form():
    return torch_form(compiled_shared_scale)


def _input(m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator):
    return varied_input(m, d, kind, dtype, gen)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    check_against_torch_form(compiled_shared_scale, C, x, rng)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 4),
    d=st.integers(1, 200),
    kind=st.integers(0, 4),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_shared_scale_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    _check(parse_spec(spec), _input(m, d, kind, dtype, gen), Streams.for_nodes(seed, range(m)))


@pytest.mark.parametrize("spec", SPECS)
def test_compiled_shared_scale_serves_long_rows(spec):
    """Rows of several chunks (each drawn from its own offset of the row's stream)."""
    from compressors.compiled_quant import CHUNK

    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        for kind in (0, 2):
            x = _input(2, 3 * CHUNK + 17, kind, dtype, gen)
            _check(parse_spec(spec), x, Streams.for_nodes(5, [0, 1]))


@pytest.mark.parametrize("spec", ["ssq", "msq", "msq:widths=2/4/7", "msq:widths=1/2/3/4/5/6"])
def test_compiled_shared_form_equals_the_torch_form(spec):
    """``encode_shared`` with a shared scale, its own choice of scale or a given one, and the
    all-reduce form; an out-of-range choice still raises torch's error."""
    C = parse_spec(spec)
    gen = torch.Generator().manual_seed(7)
    x = _input(3, 1000, 1, torch.float32, gen)
    rng = Streams.for_nodes(1, range(3))
    scale = float(x.abs().amax()) * 1.5
    K = len(C.levels)
    for res in (None, torch.randint(0, K, (1000,), generator=gen), torch.zeros(1000)):
        got = C.encode_shared(x, rng, scale, resolution=res)
        with _torch_form():
            want = C.encode_shared(x, rng, scale, resolution=res)
            want_sum = C.decode_summed(C.integers(want).sum(dim=0), want, 3)
        for name in want.fields:
            assert same(got.fields[name], want.fields[name]), name
        assert same(C.decode(got), C.decode(want))
        assert same(C.decode_summed(C.integers(got).sum(dim=0), got, 3), want_sum)
    with pytest.raises(IndexError):
        C.encode_shared(x, rng, scale, resolution=torch.full((1000,), K))
    got = C.resolution(x)
    with _torch_form():
        assert torch.equal(got, C.resolution(x))


def test_compiled_max_abs_equals_amax():
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for kind in range(5):
            x = _input(4, 70000, kind, dtype, gen)
            x[1, 5] = -math.nan if kind == 2 else x[1, 5]
            assert same(compiled_shared_scale.max_abs(x), x.abs().amax(dim=1))


@pytest.mark.parametrize(
    "spec, dtype",
    [
        ("ssq:width=7", torch.int8),
        ("ssq:width=8", torch.int16),
        ("ssq:width=15", torch.int16),
        ("ssq:width=16", torch.int32),
        ("msq", torch.int8),
        ("msq:widths=9/16", torch.int16),
    ],
)
def test_signed_levels_take_the_narrowest_integer_holding_s_1(spec, dtype):
    """A row of one non-zero entry (negative) reaches the top level ``-s_1``; the packet, its
    decode and its wire form equal the torch form's."""
    C = parse_spec(spec)
    got = spike_case(compiled_shared_scale, C, 3000, 11, 8)
    levels = got.fields["levels"]
    assert levels.dtype == dtype
    s1 = C.levels[0]
    assert int(levels[1, 11]) == -s1 == int(levels.min())
    narrower = [
        t for t in (torch.int8, torch.int16) if torch.iinfo(t).bits < torch.iinfo(dtype).bits
    ]
    assert all(s1 > torch.iinfo(t).max for t in narrower)  # the narrowest that holds it
