"""SIDCo: the fitted threshold keeps about ``ratio d`` coordinates when the law fits (the
paper's claim), the multi-stage fit repairs a misfit, and what is kept is the largest entries.
(The registry-wide compressor tests cover the contract, the wire form and non-finite rows.)"""

from __future__ import annotations

import math

import pytest
import torch

from comm import SimulatedComm
from compressors import compiled_dense, parse_spec

D = 100_000


def _kept(spec: str, x: torch.Tensor) -> torch.Tensor:
    C = parse_spec(spec)
    packet = C.encode(x, SimulatedComm(x.shape[0], seed=0).rng_for(C, 0))
    return packet.fields["keep"]


def _rows(kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if kind == "laplace":  # |x| exponential: the exponential law fits
        u = torch.rand(4, D, generator=g, dtype=torch.float64)
        return torch.where(u < 0.5, 1.0, -1.0) * -torch.log1p(
            -torch.rand(4, D, generator=g, dtype=torch.float64)
        )
    return torch.randn(4, D, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("spec", ["sidco:ratio=0.01", "sidco:ratio=0.01,dist=gpd",
                                  "sidco:ratio=0.01,stages=3"])  # fmt: skip
def test_the_achieved_ratio_is_near_the_target_when_the_law_fits(spec):
    ratio = _kept(spec, _rows("laplace")).double().mean(dim=1)
    assert torch.all((ratio > 0.009) & (ratio < 0.011)), ratio


def test_stages_repair_an_exponential_misfit_on_gaussian_data():
    one = _kept("sidco:ratio=0.01", _rows("gauss")).double().mean()
    three = _kept("sidco:ratio=0.01,stages=3", _rows("gauss")).double().mean()
    assert one < 0.001  # one exponential fit puts the threshold far too high
    assert 0.009 < three < 0.012


def test_what_is_kept_is_the_largest_entries():
    x = _rows("gauss")[:1]
    keep = _kept("sidco:ratio=0.01,dist=gpd,stages=3", x)[0]
    assert x[0, keep].abs().min() >= x[0, ~keep].abs().max()


def test_bad_parameters_are_refused():
    for spec, message in (("sidco:ratio=1", "ratio must be in"), ("sidco:dist=t", "dist must be"),
                          ("sidco:stages=0", "stages must be")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_spec(spec)


@pytest.mark.skipif(not compiled_dense.ENABLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_one_pass_form_gives_the_torch_forms_payload(dtype, monkeypatch):
    """The default fit (one exponential stage) from ``sum |x_j|`` and the compiled per-row
    threshold give what the float64 copy of ``|x|`` and torch's comparisons give, bit for bit:
    rows crossing the kernel's chunk edges, entries at the threshold and a ulp below it, NaN,
    inf, zero and huge rows."""
    monkeypatch.setattr(compiled_dense, "FAST_FROM", 0)
    C = parse_spec("sidco:ratio=0.05")
    g = torch.Generator().manual_seed(1)
    for m, d in [(1, 7), (3, 1000), (2, 2 * compiled_dense.CHUNK + 5), (1, 3 * 32768 + 77)]:
        x = (torch.randn(m, d, generator=g, dtype=torch.float64) * 3).to(dtype)
        x[0, 3] = math.nan if m > 1 else x[0, 3]
        x[-1, :2] = torch.finfo(dtype).max / 2
        t = C.thresholds(x)
        if m > 1:
            x[1, 0] = t[1].to(dtype)  # at (or rounded about) its row's threshold
            x[1, 1] = -torch.nextafter(t[1], torch.zeros(())).to(dtype)
        cases = [x, torch.zeros(m, d, dtype=dtype), torch.full((m, d), math.inf, dtype=dtype)]
        for y in cases:
            fast = C.encode(y, 0)
            t_fast = C.thresholds(y)
            monkeypatch.setattr(compiled_dense, "ENABLED", False)
            slow = C.encode(y, 0)
            t_slow = C.thresholds(y)
            monkeypatch.setattr(compiled_dense, "ENABLED", True)
            assert torch.equal(t_fast.view(torch.int64), t_slow.view(torch.int64))
            assert torch.equal(fast.fields["keep"], slow.fields["keep"]), (dtype, m, d)
            fv, sv = fast.fields["values"], slow.fields["values"]
            assert fv.dtype == sv.dtype == dtype
            bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
            assert torch.equal(fv.view(bits), sv.view(bits)), (dtype, m, d)
            assert torch.equal(fast.nbits, slow.nbits)
            assert torch.equal(C.decode(fast).view(bits), C.decode(slow).view(bits))
