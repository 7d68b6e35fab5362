"""FastSGD's compiled kernels give the torch form's numbers, bit for bit: the scale, the levels,
the kept keys, the signs, the key widths, the bits and the decoded rows, on ordinary and extreme
inputs (zeros, subnormals, the dtype's max, rows with a NaN or inf), rows crossing the kernels'
chunks (where the key deltas are joined). Two places where the kernel cannot compute torch's
numbers itself are exercised: entries next to a rounding boundary of the level (their rows are
redone in torch) and bases whose powers torch computes differently by the entry's place (decode
then takes torch's powers)."""

from __future__ import annotations

import math

import pytest
import torch

from compressors import compiled_dense, compiled_fastsgd, parse_spec
from compressors.fastsgd import FastSGD
from tests.compressors.compiled_cases import check_against_torch_form

pytestmark = pytest.mark.skipif(not compiled_fastsgd.ENABLED, reason="numba is not installed")

SPECS = ["fastsgd", "fastsgd:base=1.5,levels=20", "fastsgd:base=4,levels=3", "fastsgd:levels=1",
         "fastsgd:base=1.01,levels=256", "fastsgd:base=3.7,levels=100"]  # fmt: skip


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve inputs of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_dense, "FAST_FROM", 0)


def _input(m: int, d: int, kind: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    fi = torch.finfo(dtype)
    if kind == "wide":  # magnitudes over the whole range, runs of zeros, a zero row
        x = x * torch.exp(10 * torch.randn(m, d, generator=gen, dtype=torch.float64))
        x[torch.rand(m, d, generator=gen) < 0.3] = 0.0
        x[:, d // 3 : d // 2] = 0.0
        x[-1] = 0.0
    elif kind == "extreme":
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, 1.0]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.5, vals[pick], x)
    elif kind == "nonfinite":
        x[0, d // 2] = math.nan
        x[-1, 0] = -math.inf
    elif kind == "boundary":  # |x| / M = b^-(q + 1/2), to the dtype's precision
        q = torch.randint(0, 8, (m, d), generator=gen).to(torch.float64)
        x = torch.where(x < 0, -1.0, 1.0) * 2.0 ** -(q + 0.5)
        x[:, 0] = 1.0
    return x.to(dtype)


def _check(C, x: torch.Tensor) -> None:
    check_against_torch_form(compiled_fastsgd, C, x, 0, cross=True)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["normal", "wide", "extreme", "nonfinite", "boundary"])
def test_compiled_fastsgd_equals_the_torch_form(spec, dtype, kind):
    C = parse_spec(spec)
    for m, d in ((1, 1), (1, 7), (3, 300), (2, 2500)):
        _check(C, _input(m, d, kind, dtype, seed=m * d))


def test_compiled_fastsgd_serves_long_rows():
    """Runs of dropped entries across the chunks' edges, and chunks with no kept entry."""
    d = 3 * compiled_fastsgd.CHUNK + 17
    x = _input(2, d, "wide", torch.float64, seed=3)
    x[0, compiled_fastsgd.CHUNK - 5 : 2 * compiled_fastsgd.CHUNK + 9] = 0.0
    x[1, : compiled_fastsgd.CHUNK + 3] = 0.0
    for spec in ("fastsgd", "fastsgd:base=1.5,levels=20"):
        _check(parse_spec(spec), x)
        _check(parse_spec(spec), x.float())


@pytest.mark.parametrize("spec", ["fastsgd", "fastsgd:base=4,levels=8", "fastsgd:base=1.5"])
def test_entries_at_a_rounding_boundary_are_settled_by_torch(spec, monkeypatch):
    """The kernel leaves those entries to torch's logarithm; no others."""
    calls = []
    settle = compiled_fastsgd._settle
    monkeypatch.setattr(compiled_fastsgd, "_settle", lambda *a: calls.append(1) or settle(*a))
    C = parse_spec(spec)
    _check(C, _input(2, 500, "normal", torch.float64, seed=1))
    assert not calls
    x = _input(2, 500, "boundary", torch.float64, seed=1)
    x = torch.sign(x) * C.base ** (torch.log(x.abs()) / math.log(2.0))  # b^-(q + 1/2)
    _check(C, x)
    assert calls


def test_the_powers_of_two_are_the_same_in_every_form():
    """Base 2 (the default) never needs torch's powers in decode."""
    assert not bool(compiled_fastsgd.powers(2.0, 256)[1].any())
    assert FastSGD().levels <= 256
