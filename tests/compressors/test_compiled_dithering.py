"""The compiled sparse dithering gives the same bits as the torch form (the same ``Streams``, the
same payload, the same counted size and decode), on ordinary and extreme inputs: zeros of both
signs, subnormals, the dtype's max, infinities and NaN, sparse and dense outputs, rows of
several chunks and chunks with more non-zeros than the kernel notes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_dithering, parse_spec
from compressors.compiled_quant import CHUNK
from streams import Streams
from tests.compressors.compiled_cases import (
    check_against_torch_form,
    spike_case,
    torch_form,
    varied_input,
)

pytestmark = pytest.mark.skipif(not compiled_dithering.ENABLED, reason="numba is missing")

SPECS = [
    "sparse-dithering",
    "sparse-dithering:s=0.1",
    "sparse-dithering:s=0.5",
    "sparse-dithering:s=3.7,float_bits=64",
    "sparse-dithering:s=1000",
    "sparse-dithering:s=16777216",
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _torch_form():
    return torch_form(compiled_dithering)


def _input(m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator):
    return varied_input(m, d, kind, dtype, gen)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    check_against_torch_form(compiled_dithering, C, x, rng)


@settings(max_examples=80, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 4),
    d=st.integers(1, 300),
    kind=st.integers(0, 5),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_sparse_dithering_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    _check(parse_spec(spec), _input(m, d, kind, dtype, gen), Streams.for_nodes(seed, range(m)))


@pytest.mark.parametrize("spec", ["sparse-dithering", "sparse-dithering:s=8", *SPECS[4:]])
def test_compiled_sparse_dithering_serves_long_rows(spec):
    """Rows of several chunks, chunks with no non-zero (a row zero but for its ends) and chunks
    with more non-zeros than the kernel notes (large ``s``, which scans them again)."""
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        for kind in (0, 1, 2):
            x = _input(3, 3 * CHUNK + 17, kind, dtype, gen)
            x[1, 5:-5] = 0.0
            _check(parse_spec(spec), x, Streams.for_nodes(5, [0, 1, 2]))
    dense = parse_spec(spec).encode(_input(1, 2 * CHUNK, 0, torch.float32, gen), 0)
    if parse_spec(spec).s >= 1000:
        assert int((dense.fields["levels"] > 0).sum()) > 2 * compiled_dithering.HELD


def test_compiled_sparse_dithering_wire_form_is_unchanged():
    C = parse_spec("sparse-dithering:s=2")
    x = _input(2, 5000, 0, torch.float32, torch.Generator().manual_seed(1))
    rng = Streams.for_nodes(2, [0, 1])
    got = C.to_bytes(C.encode(x, rng))
    with _torch_form():
        want = C.to_bytes(C.encode(x, rng))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    "s, dtype", [(1.0, torch.uint8), (255, torch.uint8), (256, torch.int32), (300, torch.int32)]
)
def test_levels_take_one_byte_up_to_s_255(s, dtype):
    """``l_j <= ceil(s)``: a byte each while that is at most 255, int32 above; a row of one
    non-zero entry reaches the top level, ``s`` itself."""
    got = spike_case(compiled_dithering, parse_spec(f"sparse-dithering:s={s}"), 5000, 7, 5)
    levels = got.fields["levels"]
    assert levels.dtype == dtype
    assert int(levels[1, 7]) == s == int(levels.max()) and bool(got.fields["signs"][1, 7])
    if s == 255:  # just above: ceil(255.5) = 256 needs int32
        x = _input(1, 100, 0, torch.float32, torch.Generator().manual_seed(6))
        p = parse_spec("sparse-dithering:s=255.5").encode(x, Streams.for_nodes(0, [0]))
        assert p.fields["levels"].dtype == torch.int32
