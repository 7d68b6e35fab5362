"""The compiled spherical codebook gives the torch form's bits: its ``ndtri`` is
``torch.special.ndtri`` on every branch (central, tails, far tails, ends), the codebook is
``(c / ||c||).to(dtype)``, and the packets, bits, decoded rows and rows rebuilt from the wire
are the torch form's, on ordinary and extreme inputs, also where torch's order of additions for
the norm is unknown (then torch takes the norm)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_mlmc, compiled_spherical, parse_spec
from streams import Streams, tags
from tests.compressors.compiled_cases import same, torch_form

pytestmark = pytest.mark.skipif(not compiled_spherical.ENABLED, reason="numba is not installed")

SPECS = ["spherical", "spherical:k=0", "spherical:k=2,float_bits=16", "spherical:k=7"]


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve codebooks of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_spherical, "FAST_FROM", 0)


def _torch_form():
    return torch_form(compiled_spherical)


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
    elif kind == 3:  # ties and zero rows
        x = torch.round(2 * x) / 2
        x[0] = 0.0
    return x.to(dtype)


def _check(spec: str, x: torch.Tensor, seed: int) -> None:
    C = parse_spec(spec)
    m = x.shape[0]
    rng = Streams.for_nodes(seed, range(m), 7)
    got = C.encode(x, rng)
    with _torch_form():
        want = C.encode(x, rng)
        want_dec = C.decode(want)
        data, nbytes = C.to_bytes(want)
        want_back = C.decode(C.from_bytes(data, nbytes, like=want, nodes=torch.arange(m)))
    assert set(got.fields) == set(want.fields)
    for name in want.fields:
        assert same(got.fields[name], want.fields[name]), name
    assert torch.equal(got.nbits, want.nbits)
    assert same(C.decode(got), want_dec)
    back = C.from_bytes(data, nbytes, like=got, nodes=torch.arange(m))  # the codebook, drawn here
    assert same(C.decode(back), want_back)


def test_ndtri_is_torchs_on_every_branch():
    assert compiled_spherical.ndtri_ok()
    g = torch.Generator().manual_seed(1)
    u = torch.randint(0, 2**53, (200000,), generator=g, dtype=torch.int64) * 2.0**-53
    k = torch.randint(0, 2**20, (20000,), generator=g).to(torch.float64) * 2.0**-53
    far = torch.exp(-torch.rand(20000, generator=g, dtype=torch.float64) * 740)
    y = torch.cat([u + 2.0**-54, k + 2.0**-54, 1 - k, far, 1 - far / 2**20])
    y = torch.cat([y, torch.tensor([0.0, 1.0, 0.5, 2.0**-1074, 1 - 2.0**-53])])
    got = torch.empty_like(y)
    compiled_spherical._ndtri_probe(y.numpy(), got.numpy())
    assert same(got, torch.special.ndtri(y))


@pytest.mark.parametrize("d", [1, 3, 512, 513, 5000])
def test_the_codebook_is_the_torch_forms(d):
    rng = Streams.for_nodes(3, range(2), 1)
    for k in (0, 4):
        C = parse_spec(f"spherical:k={k}")
        for dtype in (torch.float32, torch.float64):
            got = C._codebook(rng, d, dtype)
            with _torch_form():
                want = C._codebook(rng, d, dtype)
            assert same(got, want), (d, k, dtype)


@settings(max_examples=30, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 3),
    d=st.integers(1, 200),
    kind=st.integers(0, 3),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_spherical_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    _check(spec, _input(m, d, kind, dtype, torch.Generator().manual_seed(seed)), seed)


def test_long_rows_and_the_norm_without_its_form(monkeypatch):
    x = _input(2, 3000, 1, torch.float32, torch.Generator().manual_seed(4))
    _check("spherical", x, 4)
    monkeypatch.setattr(compiled_mlmc, "_FORM", [None])  # torch takes the codewords' norms
    _check("spherical", x, 4)
    _check("spherical:k=2", x.double(), 5)


def test_the_codeword_drawn_again_is_the_codebooks():
    keys = Streams.for_nodes(0, range(3), 1).split(tags.SPHERICAL_CODEBOOK).keys
    unit = torch.rand(3, 700, generator=torch.Generator().manual_seed(0))
    _, norm = compiled_spherical.products(keys, 8, unit)
    j = torch.tensor([0, 7, 3])
    book = compiled_spherical.codebook(keys, 8, 700, torch.float32)
    assert same(compiled_spherical.words(keys, 700, j, norm, torch.float32), book[range(3), j])
