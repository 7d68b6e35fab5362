"""Absolute compressors (``absolute``, ``abs_delta_sq``): the declared ``Delta^2`` against Monte
Carlo on vectors of every scale, nearly attained at the worst case; the hard threshold's and
the grid rounding's payloads recounted by hand; the class declarations."""

from __future__ import annotations

import math

import pytest
import torch
from asserts import assert_mc_at_least, assert_mc_at_most, assert_mc_mean
from hypothesis import given, settings
from strategies import compressor_cases, make_vector, vectors

from algorithms.base import check_compressor
from compressors import parse_spec
from compressors.grid_round import ESCAPE_BITS
from compressors.montecarlo import draws_of
from streams import Streams

CASES = [(i, c) for i, c in compressor_cases() if c.absolute]
IDS = [i for i, _ in CASES]
ALL = [c for _, c in CASES]
DRAWS = 2000


def errors(c, x: torch.Tensor, draws: int = DRAWS, seed: int = 0):
    y, packet = draws_of(c, x, 1 if c.deterministic else draws, seed)
    return ((y - x) ** 2).sum(dim=1), y, packet


def test_the_registry_has_absolute_compressors_and_no_other_class_claims_it():
    assert {type(c).__name__ for c in ALL} == {"Threshold", "GridRound"}
    for _, c in compressor_cases():
        if not c.absolute:
            with pytest.raises(ValueError, match="not absolute"):
                c.abs_delta_sq(10)
        else:
            assert not c.unbiased and not c.contractive


@pytest.mark.parametrize("c", ALL, ids=IDS)
@settings(max_examples=8)
@given(x=vectors(min_d=1, max_d=40, scales=(1e-20, 1e-3, 0.05, 1.0, 1e3, 1e20)))
def test_declared_delta_holds_whatever_the_norm(c, x):
    err, y, _ = errors(c, x)
    bound = c.abs_delta_sq(x.numel())
    assert_mc_at_most(err, bound)
    if c.deterministic:  # pointwise, not only in mean
        assert float(err.max()) <= bound * (1 + 1e-12)
    if getattr(c, "rounding", None) == "random":  # unbiased too
        assert_mc_mean(y, x, var_bound=bound)


@pytest.mark.parametrize("c", ALL, ids=IDS)
def test_constant_is_nearly_attained_at_the_worst_case(c):
    d = 100
    err, _, _ = errors(c, c.abs_worst_case(d), draws=20000, seed=5)
    assert_mc_at_most(err, c.abs_delta_sq(d))
    assert_mc_at_least(err, 0.9 * c.abs_delta_sq(d))


def test_random_rounding_is_unbiased_and_deterministic_rounding_is_nearest():
    x = make_vector("gaussian", 30, 1) * 0.37
    c = parse_spec("round:h=0.1,rounding=random")
    _, y, _ = errors(c, x, draws=20000)
    assert_mc_mean(y, x, var_bound=c.abs_delta_sq(30))
    assert float((y / 0.1 - (y / 0.1).round()).abs().max()) < 1e-9  # on the grid
    det = parse_spec("round:h=0.1")
    z = det(x[None], 0)[0]
    torch.testing.assert_close(z, torch.round(x / 0.1) * 0.1, rtol=0, atol=1e-15)


def test_threshold_keeps_exactly_the_large_entries_and_counts_its_bits():
    d = 1000
    x = make_vector("heavy-tailed", d, 2)[None]
    for index in ("list", "bitmap", "auto"):
        c = parse_spec(f"threshold:lam=3.0,index={index}")
        p = c.encode(x, 0)
        keep = x.abs() >= 3.0
        nnz = int(keep.sum())
        assert 0 < nnz < d
        torch.testing.assert_close(c.decode(p), torch.where(keep, x, 0.0), rtol=0, atol=0)
        listed, bitmap = 10 + nnz * (10 + 32), d + nnz * 32  # ceil(log2 1001) = 10
        expect = {"list": listed, "bitmap": bitmap, "auto": 1 + min(listed, bitmap)}[index]
        assert p.nbits.tolist() == [expect]
        assert c.to_bytes(p)[1].tolist() == [(expect + 32 * nnz + 7) // 8]  # float64 values
    # nothing above the threshold: only the count travels
    assert parse_spec("threshold:lam=10").encode(torch.zeros(1, 8), 0).nbits.tolist() == [4]


def _gamma(v: int) -> int:
    return 2 * (v.bit_length() - 1) + 1


def test_grid_rounding_bits_are_recounted_entry_by_entry_escapes_included():
    c = parse_spec("round:h=0.5")
    x = torch.tensor([[0.1, -1.2, 0.0, 2.6, 1e12, float("nan"), -0.74]], dtype=torch.float64)
    p = c.encode(x, 0)
    levels = [0, -2, 0, 5, None, None, -1]  # None: escaped (raw value sent)
    bits, prev = 3, -1  # ceil(log2(7 + 1)) bits of escape count
    for j, lv in enumerate(levels):
        if lv == 0:
            continue
        code = (1 << ESCAPE_BITS) if lv is None else abs(lv)
        bits += _gamma(j - prev) + 1 + _gamma(code) + (32 if lv is None else 0)
        prev = j
    assert p.nbits.tolist() == [bits]
    y = c.decode(p)[0]
    assert y[4] == 1e12 and math.isnan(float(y[5]))  # escaped entries arrive exactly
    torch.testing.assert_close(y[[0, 1, 2, 3, 6]], torch.tensor([0.0, -1.0, 0.0, 2.5, -0.5],
                                                               dtype=torch.float64))  # fmt: skip


@pytest.mark.parametrize("d", [7, 1 << 16])  # the torch form, the compiled one
def test_grid_rounding_sends_each_rows_escaped_values_in_turn(d):
    """``raw`` holds row ``r``'s escaped values in column order, then zeros, as wide as the row
    with the most; decode and the wire put each back in its place."""
    c = parse_spec("round:h=0.5")
    x = torch.zeros(3, d, dtype=torch.float32)
    x[0, [1, d - 1]] = torch.tensor([2.0**40, -(2.0**35)])
    x[2, [0, 3, 5]] = torch.tensor([float("inf"), 2.0**32, float("nan")])
    x[1, 2], x[2, 4] = 2.6, -1.2  # rounded to the grid: 2.5, -1.0
    p = c.encode(x, 0)
    raw = p.fields["raw"]
    assert raw.shape == (3, 3) and p.fields["escaped"].sum(dim=1).tolist() == [2, 0, 3]
    assert raw[0].tolist()[:2] == [2.0**40, -(2.0**35)] and raw[0, 2] == 0 and (raw[1] == 0).all()
    assert raw[2, 0] == float("inf") and raw[2, 1] == 2.0**32 and math.isnan(float(raw[2, 2]))
    want = torch.zeros(3, d)
    want[0, [1, d - 1]] = torch.tensor([2.0**40, -(2.0**35)])
    want[2, [0, 3, 5]] = torch.tensor([float("inf"), 2.0**32, float("nan")])
    want[1, 2], want[2, 4] = 2.5, -1.0
    for y in (c.decode(p), c.decode(c.from_bytes(*c.to_bytes(p), p, torch.arange(3)))):
        assert torch.equal(y.isnan(), want.isnan())
        assert torch.equal(y.nan_to_num(0.0), want.nan_to_num(0.0))
    none = c.encode(torch.full((2, d), 0.3), 0)  # nothing escapes: no column
    assert none.fields["raw"].shape == (2, 0)
    assert torch.equal(c.decode(c.from_bytes(*c.to_bytes(none), none, torch.arange(2))),
                       torch.full((2, d), 0.5))  # fmt: skip


def test_methods_needing_absolute_compressors_refuse_others():
    check_compressor("EC", "absolute", parse_spec("threshold"), 10, force=False)
    with pytest.raises(ValueError, match="needs an absolute compressor"):
        check_compressor("EC", "absolute", parse_spec("topk:k=2"), 10, force=False)
    check_compressor("EC", "absolute", parse_spec("topk:k=2"), 10, force=True)


def test_random_rounding_draws_from_each_rows_stream():
    c = parse_spec("round:h=1.0,rounding=random")
    x = torch.full((2, 64), 0.5, dtype=torch.float64)
    a = c(x, Streams.for_nodes(1, [0, 1]))
    assert not torch.equal(a[0], a[1])
    assert torch.equal(a, c(x, Streams.for_nodes(1, [0, 1])))
