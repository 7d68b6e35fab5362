"""The compiled quantizers, the compiled sign decoders and Perm-K's compiled permutation give
the same bits as the torch forms (the same ``Streams``, the same payload and decode), on
ordinary and extreme inputs: zeros of both signs, subnormals, the dtype's max, infinities and
NaN."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_perm, compiled_quant, parse_spec
from streams import Streams

pytestmark = pytest.mark.skipif(not compiled_quant.ENABLED, reason="numba is not installed")

SPECS = [
    "natural",
    "natural:float_bits=16",
    "qsgd",
    "qsgd:levels=1,norm=inf",
    "qsgd:levels=300",
    "qsgd:levels=16,coding=elias",
    "terngrad",
    "terngrad:coding=elias",
    "natural-dithering",
    "natural-dithering:levels=1",
    "natural-dithering:levels=3,norm=inf",
    "natural-dithering:levels=30",
    "sign",
    "scaled-sign",
]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@contextlib.contextmanager
def _torch_form():
    """The torch form of every quantizer (the kernels switched off) inside the block."""
    compiled_quant.ENABLED = False
    try:
        yield
    finally:
        compiled_quant.ENABLED = True


def _bits(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _input(m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    if kind == 1:  # magnitudes over the whole range
        x = x * torch.exp(30 * torch.randn(m, d, generator=gen, dtype=torch.float64))
    elif kind == 2:  # extremes mixed in
        fi = torch.finfo(dtype)
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, math.inf, math.nan]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, vals[pick], x)
    elif kind == 3:  # exact grid points and zeros
        x = torch.round(4 * x) / 4
    return x.to(dtype)


@settings(max_examples=40, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 4),
    d=st.integers(1, 200),
    kind=st.integers(0, 3),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_quantizer_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = _input(m, d, kind, dtype, gen)
    C = parse_spec(spec)
    rng = Streams.for_nodes(seed, range(m))
    got = C.encode(x, rng)
    with _torch_form():
        want = C.encode(x, rng)
        want_dec = C.decode(want)
    assert set(got.fields) == set(want.fields)
    for name in want.fields:
        assert _same(got.fields[name], want.fields[name]), name
    assert torch.equal(got.nbits, want.nbits)
    assert _same(C.decode(got), want_dec)


def test_compiled_quantizers_serve_long_rows():
    """A row of several chunks (each drawn from its own offset of the row's stream)."""
    d = 3 * compiled_quant.CHUNK + 17
    x = _input(2, d, 1, torch.float32, torch.Generator().manual_seed(3))
    rng = Streams.for_nodes(5, [0, 1])
    for spec in ("natural", "qsgd", "terngrad", "natural-dithering", "sign", "scaled-sign"):
        C = parse_spec(spec)
        got = C.decode(C.encode(x, rng))
        with _torch_form():
            want = C.decode(C.encode(x, rng))
        assert _same(got, want), spec


@pytest.mark.parametrize("d", [1, 2, 3, 17, 1000, 4096, 5000, 70000])
def test_compiled_permutation_equals_argsort(d):
    rng = Streams.for_nodes(d, [0, 1, 2])
    assert torch.equal(compiled_perm.permutation(rng.keys, d), rng.permutation(d))
    assert torch.equal(compiled_perm.permutation(rng.keys[:1], d), rng[:1].permutation(d))


@pytest.mark.parametrize(
    "spec",
    ["qsgd", "qsgd:levels=300", "terngrad", "natural-dithering", "natural-dithering:levels=1",
     "natural-dithering:levels=100", "natural-dithering:levels=3,norm=inf"],
)  # fmt: skip
@pytest.mark.parametrize("kind", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dithering_kernels_equal_the_torch_form(spec, kind, dtype):
    """The dithering kernel (:func:`compiled_quant._dither`: float32 rows in 32-bit lanes,
    float64 rows in float64) gives the torch form's payload and decoded rows on every grid,
    input kind (magnitudes over the whole range put many entries below natural dithering's
    least level ``2^(1 - s)``, and subnormal ones; exact grid points, entries equal to the
    norm) and a row of several chunks; the kernel is the one that ran."""
    ran = []
    launch = compiled_quant.launch

    def spy(kernel, *args):
        ran.append(kernel)
        return launch(kernel, *args)

    C = parse_spec(spec)
    gen = torch.Generator().manual_seed(kind)
    for m, d in ((3, 257), (1, 2 * compiled_quant.CHUNK + 5)):
        x = _input(m, d, kind, dtype, gen)
        rng = Streams.for_nodes(kind, range(m))
        compiled_quant.launch = spy
        try:
            got = C.encode(x, rng)
        finally:
            compiled_quant.launch = launch
        with _torch_form():
            want = C.encode(x, rng)
            want_dec = C.decode(want)
        for name in want.fields:
            assert _same(got.fields[name], want.fields[name]), (name, m, d)
        assert torch.equal(got.nbits, want.nbits)
        assert _same(C.decode(got), want_dec)
    assert compiled_quant._dither in ran
