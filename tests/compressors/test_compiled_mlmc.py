"""The compiled MLMC kernels (Top-K levels and bit levels) give the torch forms' bits: every
payload field, the bits and the decoded rows, also from the wire, on ordinary and extreme inputs
(zeros of both signs, ties, subnormals, the dtype's max, infinities, NaN), with every level
drawn; the radix sort's order is ``torch.sort``'s stable order, ties included; the norm's order
of additions is torch's, and where it is unknown the torch form of the norm gives the same."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_mlmc, parse_spec
from streams import Streams
from tests.compressors.compiled_cases import check_against_torch_form, same

pytestmark = pytest.mark.skipif(not compiled_mlmc.ENABLED, reason="numba is not installed")

SPECS = [
    "mlmc",
    "mlmc:k=1",
    "mlmc:k=3,float_bits=16",
    "mlmc:k=500",
    "mlmc-bits",
    "mlmc-bits:base_bits=1,depth=2",
    "mlmc-bits:base_bits=3,depth=3,step=2,float_bits=16",
    "mlmc-bits:depth=0",
    "mlmc-bits:base_bits=1,depth=12",
    "mlmc-bits:base_bits=20,depth=5,step=8",
]


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve inputs of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_mlmc, "FAST_FROM", 0)


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
    elif kind == 3:  # many ties, zeros of both signs
        x = torch.round(2 * x) / 2
        x = torch.where(torch.rand(m, d, generator=gen) < 0.2, -0.0, x)
    return x.to(dtype)


def _check(spec: str, x: torch.Tensor, seed: int) -> None:
    C = parse_spec(spec)
    m = x.shape[0]
    check_against_torch_form(compiled_mlmc, C, x, Streams.for_nodes(seed, range(m), 7), wire=True)


@settings(max_examples=40, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 4),
    d=st.integers(1, 300),
    kind=st.integers(0, 3),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_mlmc_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    _check(spec, _input(m, d, kind, dtype, torch.Generator().manual_seed(seed)), seed)


@pytest.mark.parametrize("spec", ["mlmc", "mlmc:k=2", "mlmc-bits", "mlmc-bits:base_bits=1,depth=2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_level_is_drawn_and_equal(spec, dtype):
    """Many rows of one vector: each draws its own level, all of them equal to the torch
    form's (the top and the truncation increments of the bit levels among them)."""
    x = _input(1, 40, 0, dtype, torch.Generator().manual_seed(1)).expand(300, -1).clone()
    x[5] = 0.0
    x[6, 3] = math.nan
    C = parse_spec(spec)
    levels = C.encode(x, Streams.for_nodes(2, range(300), 7)).fields["level"]
    assert len(set(levels.tolist())) == int(levels.max()) + 1 >= 3
    _check(spec, x, 2)


@pytest.mark.parametrize("kind", [0, 1, 2, 3])
def test_long_rows(kind):
    """Rows of several chunks of the bit-level kernels, and long radix sorts."""
    d = 2 * compiled_mlmc.CHUNK + 5
    for dtype in (torch.float32, torch.float64):
        x = _input(2, d, kind, dtype, torch.Generator().manual_seed(kind))
        for spec in ("mlmc", "mlmc-bits", "mlmc-bits:base_bits=20,depth=5,step=8"):
            _check(spec, x, kind)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_radix_order_is_the_stable_sort_order(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([_input(1, 3000, k, dtype, g) for k in range(4)], dim=1)
    x[0, :50] = torch.tensor([0.0, -0.0] * 25, dtype=dtype)  # ties of both zeros
    r = compiled_mlmc.rank(x, [x.shape[1]])
    w = int(r.where[0])
    got = r.idx[w, 0] if r.idx.shape[2] else r.keys[w, 0] & np.uint64(0xFFFFFFFF)
    a = x.abs().to(torch.float64)
    a = torch.where(torch.isfinite(a), a, torch.inf)
    want = torch.sort(-a, dim=1, stable=True).indices[0]
    assert np.array_equal(got.astype(np.int64), want.numpy())
    sq = torch.nan_to_num(a, posinf=0.0) ** 2
    csum = torch.gather(sq, 1, want[None]).cumsum(dim=1)[0, -1]
    assert same(r.csum[0, 0], csum)


def test_the_norm_form_is_torchs():
    form = compiled_mlmc.norm_form()
    if form is None:
        pytest.skip("torch's order of additions for vector_norm is not one of the known forms")
    g = torch.Generator().manual_seed(5)
    for n in [1, 3, 4, 5, 8, 9, 63, 64, 65, 1000, 4097]:
        for shape in [(1, n), (3, n), (2, 3, n)]:
            x = torch.randn(*shape, generator=g, dtype=torch.float64)
            x = x * torch.exp(5 * torch.randn(*shape, generator=g, dtype=torch.float64))
            want = torch.linalg.vector_norm(x, dim=-1).reshape(-1)
            rows = x.reshape(-1, n)
            got = torch.tensor(
                [compiled_mlmc._lanes_norm(r.numpy(), *form) for r in rows], dtype=torch.float64
            )
            assert same(got, want), (n, shape)


def test_without_the_norm_form_torch_adds(monkeypatch):
    monkeypatch.setattr(compiled_mlmc, "_FORM", [None])
    x = _input(3, 500, 1, torch.float32, torch.Generator().manual_seed(9))
    for spec in ("mlmc-bits", "mlmc-bits:depth=0"):
        _check(spec, x, 9)


@pytest.mark.parametrize("kind", [0, 2, 3])
def test_a_long_row_sorted_by_all_threads(kind, monkeypatch):
    """The wide sort (a row in chunks, each pass scattering all chunks at once) gives the same
    order and sums: a row of four chunks, with ties, zeros and non-finite entries."""
    monkeypatch.setattr(compiled_mlmc, "WIDE", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the wide sort serves fewer rows than threads
    try:
        x = _input(1, 3 * 65536 + 11, kind, torch.float32, torch.Generator().manual_seed(kind))
        _check("mlmc", x, kind)
        _check("mlmc:k=1", torch.zeros(1, 70000), kind)  # every key equal
    finally:
        torch.set_num_threads(threads)
