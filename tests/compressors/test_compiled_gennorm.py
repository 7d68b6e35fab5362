"""The compiled GenNorm encoder gives the same bits as the torch form (QSGD's draws, the signs,
the fitted ``beta`` and ``alpha``, whose means must be ``torch.mean``'s to the bit, the counted
size and the decode), on ordinary and extreme inputs, for rows that torch sums whole and for
single long rows that it sums in one share per thread, at several thread counts."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled_gennorm, parse_spec
from compressors.gennorm import huffman_lengths
from streams import Streams
from tests.compressors.compiled_cases import (
    check_against_torch_form,
    varied_input,
)

pytestmark = pytest.mark.skipif(
    not compiled_gennorm.ENABLED or compiled_gennorm.lanes() is None,
    reason="numba is missing, or torch's sum is not the one the kernel reproduces",
)

SPECS = ["gennorm", "gennorm:levels=1", "gennorm:levels=3,float_bits=64", "gennorm:levels=30"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _input(m: int, d: int, kind: int, dtype: torch.dtype, gen: torch.Generator):
    return varied_input(m, d, kind, dtype, gen, tail=True)


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check(C, x: torch.Tensor, rng: Streams) -> None:
    check_against_torch_form(compiled_gennorm, C, x, rng)


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    m=st.integers(1, 4),
    d=st.integers(1, 300),
    kind=st.integers(0, 5),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_gennorm_equals_the_torch_form(spec, m, d, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    _check(parse_spec(spec), _input(m, d, kind, dtype, gen), Streams.for_nodes(seed, range(m)))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_compiled_gennorm_serves_long_rows_at_any_thread_count(threads):
    """A single row of several ``GRAIN``s (torch sums it in one share per thread, then the
    shares), and rows of it summed whole."""
    gen = torch.Generator().manual_seed(threads)
    G = compiled_gennorm.GRAIN
    with _threads(threads):
        assert compiled_gennorm.lanes() is not None
        for spec in ("gennorm", "gennorm:levels=30"):
            for m, d, kind in [(1, 3 * G + 77, 0), (1, G, 5), (1, G - 1, 1), (2, 2 * G + 5, 0)]:
                for dtype in (torch.float32, torch.float64):
                    x = _input(m, d, kind, dtype, gen)
                    _check(parse_spec(spec), x, Streams.for_nodes(7, range(m)))


def test_compiled_means_hold_for_the_cascades_larger_blocks():
    """Over 2^19 rows of four vectors in one sum, torch's cascade takes blocks of 2^5 rows."""
    x = torch.randn(1, (1 << 23) + 999, generator=torch.Generator().manual_seed(4))
    x = x.to(torch.float64)
    factor = torch.tensor([0.75], dtype=torch.float64)
    y = x * factor[:, None]
    with _threads(1):
        m1, m2 = compiled_gennorm.encode(x, y.abs().amax(dim=1), factor, 8, torch.zeros(1).long())[
            3:
        ]
        assert torch.equal(m1, y.abs().mean(dim=1)) and torch.equal(m2, (y * y).mean(dim=1))


def test_compiled_gennorm_rows_with_nan_or_inf_take_torchs_fit():
    gen = torch.Generator().manual_seed(1)
    for bad in (math.nan, -math.inf):
        x = _input(3, 5000, 0, torch.float32, gen)
        x[1, 17] = bad
        _check(parse_spec("gennorm"), x, Streams.for_nodes(2, range(3)))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_abs_sums_are_torchs_sums_at_any_thread_count(threads):
    """SIDCo's ``sum_j |x_j|`` in float64 (:func:`compiled_gennorm.abs_sums`): torch's bits
    for short rows, long rows, a single row summed in shares, float32 and float64."""
    gen = torch.Generator().manual_seed(10 + threads)
    G = compiled_gennorm.GRAIN
    with _threads(threads):
        assert compiled_gennorm.sums_match()
        for m, d, kind in [(1, 3 * G + 77, 0), (1, G, 5), (4, 333, 1), (2, 2 * G + 5, 0)]:
            for dtype in (torch.float32, torch.float64):
                x = _input(m, d, kind, dtype, gen)
                want = x.abs().sum(dim=1, dtype=torch.float64)
                got = compiled_gennorm.abs_sums(x)
                finite = torch.isfinite(want)
                assert torch.equal(finite, torch.isfinite(got))
                assert torch.equal(got[finite].view(torch.int64), want[finite].view(torch.int64))


def test_abs_sums_check_refuses_another_order(monkeypatch):
    """With a lane count that is not torch's, the check fails and no sums are given (the
    caller then takes torch's): the check can tell the orders apart."""
    wrong = 8 if compiled_gennorm.lanes() != 8 else 4
    monkeypatch.setattr(compiled_gennorm, "_SUMS", {})
    monkeypatch.setattr(compiled_gennorm, "lanes", lambda: wrong)
    assert not compiled_gennorm.sums_match()
    x = torch.randn(2, 5000, generator=torch.Generator().manual_seed(0))
    assert compiled_gennorm.abs_sums(x) is None


@settings(max_examples=200, deadline=None)
@given(
    m=st.integers(1, 4),
    K=st.integers(3, 61),
    top=st.sampled_from([2, 3, 100, 2**40]),
    seed=st.integers(0, 2**31 - 1),
)
def test_compiled_huffman_lengths_are_the_torch_forms(m, K, top, seed):
    """The code's lengths from one compiled call equal the torch form's merges, ties included
    (weights below ``top``: all equal at 2, many ties at 3 and 100)."""
    w = torch.randint(1, top, (m, K), generator=torch.Generator().manual_seed(seed))
    assert torch.equal(compiled_gennorm.huffman_lengths(w), huffman_lengths(w))
