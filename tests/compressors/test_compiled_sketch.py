"""The count sketch's compiled kernels give the torch form's numbers, bit for bit: the table (each
bucket's float64 sum in the same order), the decoded rows (the estimates summed as torch sums
them, or by torch for more than three hash rows) and the bits, on ordinary and extreme inputs
(zeros of both signs, subnormals, the dtype's max, infinities and NaN, whose sign is kept), with
shared and private hashes, rows crossing the kernels' blocks and chunks."""

from __future__ import annotations

import math

import pytest
import torch

from compressors import compiled_dense, compiled_sketch, parse_spec
from streams import Streams
from tests.compressors.compiled_cases import check_against_torch_form

pytestmark = pytest.mark.skipif(not compiled_sketch.ENABLED, reason="numba is not installed")

SPECS = [
    "countsketch",
    "countsketch:rows=1,cols=4",
    "countsketch:rows=2,ratio=1.0",
    "countsketch:rows=5,ratio=0.5",
]


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve inputs of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_dense, "FAST_FROM", 0)


def _input(m: int, d: int, kind: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    fi = torch.finfo(dtype)
    if kind == "wide":  # magnitudes over the whole range, and zeros
        x = x * torch.exp(30 * torch.randn(m, d, generator=gen, dtype=torch.float64))
        x[torch.rand(m, d, generator=gen) < 0.3] = 0.0
    elif kind == "extreme":
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, math.inf, -math.inf, math.nan]
        vals = torch.tensor(special, dtype=torch.float64)
        vals[-1] = -vals[-1]  # a NaN with its sign bit set too
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, vals[pick], x)
    elif kind == "max":  # sums that overflow the dtype: the table and the rows saturate
        x = torch.where(x < 0, -1.0, 1.0) * fi.max
    return x.to(dtype)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    got, want = check_against_torch_form(compiled_sketch, C, x, rng, fields=["values"], cross=True)
    assert got.meta["width"] == want.meta["width"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["normal", "wide", "extreme", "max"])
def test_compiled_sketch_equals_the_torch_form(spec, dtype, kind):
    C = parse_spec(spec)
    for m, d in ((1, 1), (1, 7), (3, 300), (2, 2500)):
        x = _input(m, d, kind, dtype, seed=m * d)
        _check(C, x, Streams.shared(d, m, 1))  # one set of hashes for every row
        _check(C, x, Streams.for_nodes(d, range(m), 2))  # each row its own


def test_compiled_sketch_serves_long_rows():
    """Rows of several blocks and decode chunks, the hashes drawn from each one's offset."""
    d = 2 * compiled_sketch.CHUNK + 3 * compiled_sketch.BLOCK + 5
    for spec in ("countsketch", "countsketch:rows=4,cols=1000"):
        C = parse_spec(spec)
        x = _input(2, d, "wide", torch.float32, seed=3)
        _check(C, x, Streams.shared(7, 2, 1))
        _check(C, x, Streams.for_nodes(7, [0, 1], 2))


def test_compiled_sketch_follows_the_default_dtype_of_the_signs():
    """The torch form's signs take torch's default dtype, so do its estimates."""
    C = parse_spec("countsketch")
    x = _input(2, 3000, "wide", torch.float32, seed=5)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _check(C, x, Streams.shared(7, 2, 1))
        _check(parse_spec("countsketch:rows=4,cols=50"), x, Streams.shared(7, 2, 1))
    finally:
        torch.set_default_dtype(default)
