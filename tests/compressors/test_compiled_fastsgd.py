"""FastSGD's compiled kernels give the torch form's numbers, bit for bit: the scale, the levels,
the kept keys, the signs, the key widths, the bits and the decoded rows, on ordinary and extreme
inputs (zeros, subnormals, the dtype's max, rows with a NaN or inf), rows crossing the kernels'
chunks (where the key deltas are joined). Two places where the kernel cannot compute torch's
numbers itself is exercised: entries next to a rounding boundary of the level (their rows are
redone in torch). Decode's powers ``b^-q`` are one table for every form (correctly rounded), so
a decoded row is the same on any thread count."""

from __future__ import annotations

import contextlib
import decimal
import math

import numpy as np
import pytest
import torch

from compressors import compiled_dense, compiled_fastsgd, parse_spec
from compressors.fastsgd import FastSGD
from tests.compressors.compiled_cases import check_against_torch_form, torch_form

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


@pytest.mark.parametrize(
    "spec,top", [("fastsgd:base=4,levels=8", 1.0), ("fastsgd", 1.0002650022506714),
                 ("fastsgd", 1.0)],
)  # fmt: skip
def test_float32_rows_take_the_bits_kernel_and_settle_what_it_cannot(spec, top, monkeypatch):
    """Float32 rows of base 2 or 4 take :func:`compiled_fastsgd._levels_f32`, which counts the
    runs in the same pass (no second launch), and still give the torch form's numbers.
    Where the row's maximum ``M`` puts ``theta`` within ``2^-35`` of a float32 mantissa (base
    4 and ``M = 1``: ``theta = 1``, the entries ``2^(odd)`` on a rounding boundary; base 2 and
    ``M`` this float32, one of the 4,097 in ``[1, 2)`` that do so: ``theta`` rounded to float32
    times powers of two), the entries on the boundary are left to torch's logarithm, and so are
    subnormal ones; with ``M = 1`` in base 2 (``theta = sqrt 2``) none is."""
    launched, settled = [], []
    launch, settle = compiled_fastsgd.launch, compiled_fastsgd._settle
    monkeypatch.setattr(
        compiled_fastsgd, "launch", lambda k, *a: launched.append(k) or launch(k, *a)
    )
    monkeypatch.setattr(compiled_fastsgd, "_settle", lambda *a: settled.append(1) or settle(*a))
    C = parse_spec(spec)
    s = {2.0: 1, 4.0: 2}[C.base]
    F = math.log(top) / math.log(2.0) + s / 2  # as the kernel's caller takes theta, in torch
    theta = float(torch.exp2(torch.tensor(F - math.floor(F), dtype=torch.float64)))
    gen = torch.Generator().manual_seed(5)
    e = torch.randint(-12, 0, (2, 3000), generator=gen).to(torch.float64)
    x = torch.where(torch.rand(2, 3000, generator=gen) < 0.5, -1.0, 1.0) * 2.0**e
    x[:, 11:40] *= float(torch.tensor(theta).float())
    x[:, 7] = top
    _check(C, x.float())
    kernels = [k.__name__ for k in launched if hasattr(k, "__name__")]
    assert "_levels_f32" in kernels and "_runs" not in kernels[: kernels.index("_levels_f32") + 1]
    assert bool(settled) == (top != 1.0 or s == 2), (kernels, theta)
    launched.clear(), settled.clear()
    x[0, 100] = torch.finfo(torch.float32).tiny / 4  # a subnormal in float32
    _check(C, x.float())
    assert settled


@pytest.mark.parametrize(
    "base,levels", [(2.0, 256), (4.0, 256), (1.5, 20), (1.01, 256), (3.7, 100)]
)
def test_the_powers_are_correctly_rounded(base, levels):
    """Each ``b^-k`` is the float nearest the exact power (worked out here in 60-digit decimals);
    for ``b = 2^s`` that is ``2^(-s k)``, what the kernel builds from the exponent."""
    pw = compiled_fastsgd.powers(base, levels)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        exact = [decimal.Decimal(base) ** -k for k in range(levels)]
    for k in range(levels):
        got = decimal.Decimal(float(pw[k]))
        ulp = decimal.Decimal(math.ulp(float(pw[k])))
        assert abs(got - exact[k]) <= ulp / 2, (base, k)
    s = {2.0: 1, 4.0: 2}.get(base)
    if s:
        two = torch.ldexp(torch.ones(levels, dtype=torch.float64), -s * torch.arange(levels))
        assert torch.equal(pw, two)
    assert FastSGD().levels <= 256


@pytest.mark.parametrize("spec", ["fastsgd:base=1.01,levels=256", "fastsgd:base=3.7,levels=100"])
@pytest.mark.parametrize("compiled", [False, True])
def test_grid_values_come_back_exactly_on_any_thread_count(spec, compiled):
    """Rows whose entries are ``M b^-q`` (every level, both signs) decode to themselves bit for
    bit, in both forms and on one and on two threads: rows long enough (and of odd length) for
    torch to split them between threads, where a power per entry from ``torch.pow`` would come
    from its vectorized or its scalar form by the entry's place and differ in the last bit for
    some levels of these bases."""
    C = parse_spec(spec)
    d = 100_001
    gen = torch.Generator().manual_seed(7)
    q = torch.randint(0, C.levels, (2, d), generator=gen)
    sign = torch.where(torch.rand(2, d, generator=gen) < 0.5, -1.0, 1.0).double()
    M = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    x = sign * (M * compiled_fastsgd.powers(C.base, C.levels)[q])
    x[:, 0] = M[:, 0]
    for threads in (1, 2):
        was = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with contextlib.nullcontext() if compiled else torch_form(compiled_fastsgd):
                y = C.decode(C.encode(x, 0))
        finally:
            torch.set_num_threads(was)
        assert y.view(torch.int64).equal(x.view(torch.int64)), threads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_single_dropped_entries_are_counted_at_once_and_the_rest_one_by_one(dtype):
    """The run counter takes the gaps of one dropped entry inside a 64-entry word by a
    population count, and the others (longer gaps, gaps at a word's or a chunk's edge, the
    leading and trailing runs) one by one: every such gap, on both sides of word and chunk
    edges, gives the torch form's widths and bits."""
    d = 2 * compiled_fastsgd.CHUNK + 300
    x = torch.ones(3, d, dtype=torch.float64)
    edges = [0, 1, 2, 62, 63, 64, 65, 126, 127, 128, 129, 191, 192]
    edges += [compiled_fastsgd.CHUNK + e for e in (-2, -1, 0, 1)]
    x[0, edges] = 0.0  # single gaps at and next to word and chunk edges
    for start, length in ((300, 2), (400, 3), (500, 7), (637, 64), (900, 130)):
        x[1, start : start + length] = 0.0  # longer gaps, some across words
    x[2, ::2] = 0.0  # every other entry: a single gap everywhere
    x[2, -5:] = 0.0  # a trailing run
    for spec in ("fastsgd", "fastsgd:base=4,levels=8"):
        got, _ = check_against_torch_form(compiled_fastsgd, parse_spec(spec), x.to(dtype), 0)
        assert int(got.nbits[2]) < int(got.nbits[0])


def _runs_reference(keep: np.ndarray, B: int):
    """Per task of ``CHUNK`` entries: (kept, dropped before the first kept or -1, dropped after
    the last kept) and the histogram of the bit lengths of the gaps between kept entries."""
    C = compiled_fastsgd.CHUNK
    tasks = -(-keep.size // C)
    summary, hist = np.zeros((tasks, 3), np.int64), np.zeros((tasks, B + 1), np.int64)
    for t in range(tasks):
        chunk = keep[t * C : (t + 1) * C]
        pos = np.flatnonzero(chunk)
        gaps = np.diff(pos) - 1
        for g in gaps[gaps > 0]:
            hist[t, int(g).bit_length()] += 1
        first = int(pos[0]) if pos.size else -1
        summary[t] = (pos.size, first, chunk.size - 1 - (int(pos[-1]) if pos.size else -1))
    return summary, hist


def test_the_run_counter_counts_every_gap_by_its_bit_length():
    """:func:`compiled_fastsgd._runs` (whose per-word count takes the gaps of one entry inside
    a word by a population count) against a count gap by gap: random patterns of every
    density, and single gaps at and next to the words' and the chunk's edges."""
    C = compiled_fastsgd.CHUNK
    d, B = 2 * C + 300, 20
    gen = np.random.default_rng(0)
    rows = [gen.random(d) < p for p in (0.0, 0.02, 0.5, 0.977, 0.999, 1.0)]
    edge = np.ones(d, bool)
    edge[[0, 1, 2, 62, 63, 64, 65, 126, 127, 128, 129, 191, 192, C - 2, C - 1, C, C + 1]] = False
    edge[300:302] = edge[400:403] = False  # gaps of two and three
    rows.append(edge)
    for keep in rows:
        summary = np.empty((1, 3, 3), np.int64)
        hist = np.zeros((1, 3, B + 1), np.int64)
        compiled_fastsgd.launch(compiled_fastsgd._runs, keep[None].view(np.uint8), summary, hist)
        want_summary, want_hist = _runs_reference(keep, B)
        assert np.array_equal(summary[0], want_summary)
        assert np.array_equal(hist[0], want_hist)
