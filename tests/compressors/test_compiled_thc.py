"""THC's compiled kernels give the torch form's numbers, bit for bit: the signs, the range, the
indices (each entry's table neighbours and its uniform from the row's stream), the bits and the
decoded rows, for the uniform tables and the authors' ones, with a range of its own or one
shared by the nodes, on ordinary and extreme inputs (zeros, subnormals, the dtype's max; rows
with a NaN or inf take the torch form), rows crossing the kernels' chunks."""

from __future__ import annotations

import math

import pytest
import torch

from compressors import compiled_dense, compiled_thc, parse_spec
from streams import Streams
from tests.compressors.compiled_cases import same, same_packet, torch_form

pytestmark = pytest.mark.skipif(not compiled_thc.ENABLED, reason="numba is not installed")

SPECS = ["thc", "thc:width=1", "thc:width=9", "thc:width=16", "thc:width=2,table=thc",
         "thc:width=3,table=thc", "thc:width=4,table=thc"]  # fmt: skip


def _torch_form():
    return torch_form(compiled_thc)


@pytest.fixture(autouse=True)
def _kernels_at_every_size(monkeypatch):
    """The kernels serve inputs of every size here (in use, only from FAST_FROM entries)."""
    monkeypatch.setattr(compiled_dense, "FAST_FROM", 0)


def _input(m: int, d: int, kind: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    fi = torch.finfo(dtype)
    if kind == "wide":  # magnitudes over the whole range, zeros, a zero row
        x = x * torch.exp(30 * torch.randn(m, d, generator=gen, dtype=torch.float64))
        x[torch.rand(m, d, generator=gen) < 0.3] = 0.0
        x[-1] = 0.0
    elif kind == "extreme":
        special = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny / 8, 1.0]
        vals = torch.tensor(special, dtype=torch.float64)
        pick = torch.randint(0, len(special), (m, d), generator=gen)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.5, vals[pick], x)
    elif kind == "nonfinite":
        x[0, d // 2] = math.nan
        x[-1, 0] = -math.inf
    return x.to(dtype)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    got = C.encode(x, rng)
    with _torch_form():
        want = C.encode(x, rng)
        want_dec = C.decode(want)
    same_packet(got, want)
    assert same(C.decode(got), want_dec)
    scale = C.scale_of(x, rng).max()
    if bool(torch.isfinite(scale)):
        got = C.encode_shared(x, rng, scale)
        with _torch_form():
            want = C.encode_shared(x, rng, scale)
        same_packet(got, want)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["normal", "wide", "extreme", "nonfinite"])
def test_compiled_thc_equals_the_torch_form(spec, dtype, kind):
    C = parse_spec(spec)
    for m, d in ((1, 1), (1, 7), (3, 300), (2, 2500)):
        x = _input(m, d, kind, dtype, seed=m * d)
        _check(C, x, Streams.shared(d, m, 1))  # shared signs, each node its own rounding
        _check(C, x, Streams.for_nodes(d, range(m), 2))


def test_compiled_thc_serves_long_rows_and_half_precision_inputs():
    d = 2 * compiled_thc.CHUNK + 17
    for spec in ("thc", "thc:width=3,table=thc"):
        C = parse_spec(spec)
        x = _input(2, d, "wide", torch.float32, seed=3)
        _check(C, x, Streams.shared(7, 2, 1))
        _check(C, x[:, :1000].to(torch.float16), Streams.shared(7, 2, 1))
