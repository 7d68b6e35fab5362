"""The compiled SSQ and MSQ give the same bits as the torch form (the same ``Streams``, the same
payload, bits and decode, the shared-scale form included), on ordinary and extreme inputs:
zeros of both signs, subnormals, the dtype's max, infinities and NaN."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_shared_scale, parse_spec
from streams import Streams

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


@contextlib.contextmanager
def _torch_form():
    """The torch form (the kernels switched off) inside the block."""
    compiled_shared_scale.ENABLED = False
    try:
        yield
    finally:
        compiled_shared_scale.ENABLED = True


def _bits(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _input(m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    fi = torch.finfo(dtype)
    if kind == 1:  # magnitudes over the whole range
        x = x * torch.exp(30 * torch.randn(m, d, generator=gen, dtype=torch.float64))
    elif kind == 2:  # extremes mixed in
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, math.inf, math.nan]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, vals[pick], x)
    elif kind == 3:  # exact grid points, ties and zeros
        x = torch.round(4 * x) / 4
    elif kind == 4:  # finite extremes only
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.5, vals[pick], x)
    return x.to(dtype)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    got = C.encode(x, rng)
    with _torch_form():
        want = C.encode(x, rng)
        want_dec = C.decode(want)
    assert set(got.fields) == set(want.fields)
    for name in want.fields:
        assert _same(got.fields[name], want.fields[name]), name
    assert torch.equal(got.nbits, want.nbits)
    assert _same(C.decode(got), want_dec)


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
            assert _same(got.fields[name], want.fields[name]), name
        assert _same(C.decode(got), C.decode(want))
        assert _same(C.decode_summed(C.integers(got).sum(dim=0), got, 3), want_sum)
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
            assert _same(compiled_shared_scale.max_abs(x), x.abs().amax(dim=1))
