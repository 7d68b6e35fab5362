"""The compiled Top-K selection picks the same entries, in the same order, as the torch form,
ties at the threshold included (they go to the lower index); on small inputs Top-K and Rand-K
write the decoded rows as they encode, the same bits as their decode."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled
from compressors.top_k import top_k_indices

pytestmark = pytest.mark.skipif(not compiled.ENABLED, reason="numba is not installed")


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 6),
    d=st.integers(1, 70),
    frac=st.floats(0.0, 1.0),
    levels=st.sampled_from([0, 1, 3]),  # 0: continuous values; else few distinct values: ties
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_compiled_top_k_equals_the_torch_form(m, d, frac, levels, seed, dtype):
    k = max(1, round(frac * d))
    gen = torch.Generator().manual_seed(seed)
    if levels:
        x = torch.randint(-levels, levels + 1, (m, d), generator=gen).to(dtype)
    else:
        x = torch.randn(m, d, generator=gen, dtype=torch.float64).to(dtype)
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want)
    assert torch.equal(values, torch.gather(x, 1, want))


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 4),
    d=st.integers(64, 3000),
    k=st.integers(2, compiled.HEAP_MAX_K),
    kind=st.sampled_from(["normal", "ties", "ascending", "descending", "special"]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_the_heap_threshold_selects_what_the_torch_form_selects(m, d, k, kind, seed, dtype):
    """A small ``k`` of a long row takes the heap for its threshold (:func:`heap_serves`): the
    same entries in the same order as the torch form, with ties at the threshold (few distinct
    values), rows sorted by magnitude either way (the heap's worst and best cases), and NaN,
    infinities and signed zeros (NaN ranked above everything)."""
    k = min(k, d // compiled.HEAP_RATIO)
    assert compiled.heap_serves(k, d)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    if kind == "ties":
        x = torch.randint(-3, 4, (m, d), generator=gen).to(torch.float64)
    elif kind in ("ascending", "descending"):
        x = x.abs().sort(dim=1, descending=kind == "descending").values
        x = x * torch.where(torch.rand(m, d, generator=gen) < 0.5, -1.0, 1.0)
    elif kind == "special":
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
        picks = table[torch.randint(0, 5, (m, d), generator=gen)].to(torch.float64)
        x = torch.where(torch.rand(m, d, generator=gen) < 3 / d, picks, x)
    x = x.to(dtype)
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want)
    assert torch.equal(values.view(torch.uint8), torch.gather(x, 1, want).view(torch.uint8))


@settings(max_examples=80, deadline=None)
@given(
    m=st.integers(1, 5),
    d=st.integers(1, 40),
    kind=st.sampled_from(["normal", "ties", "equal", "special", "last"]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_top_1_takes_the_first_entry_of_largest_magnitude(m, d, kind, seed, dtype):
    """Top-1's two passes (the largest magnitude, then the first entry that has it), in Top-K
    and in its shifted form: the torch form's entry, on rows shorter and longer than eight and
    not a multiple of it, with ties (few distinct values, a constant row), NaN, infinities and
    signed zeros (NaN and infinities tie at the top: the first of them), and the largest entry
    last (in the tail that the vector passes leave to scalar code)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    if kind == "ties":
        x = torch.randint(-2, 3, (m, d), generator=gen).to(torch.float64)
    elif kind == "equal":
        x = torch.full((m, d), -1.5, dtype=torch.float64)
    elif kind == "special":
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
        picks = table[torch.randint(0, 5, (m, d), generator=gen)].to(torch.float64)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, picks, x)
    elif kind == "last":
        x[:, -1] = -10.0
    x = x.to(dtype)
    want = top_k_indices(x.abs(), 1)
    for idx, values in (compiled.top_k(x, 1), compiled.top_k_rows(x, 1)[:2]):
        assert torch.equal(idx, want)
        assert torch.equal(values.view(torch.uint8), torch.gather(x, 1, want).view(torch.uint8))
    # the shifted form's own pass (EF21's node side), by a shift of zeros (x - 0 is x)
    idx, values = compiled.top_k_shifted(x.clone(), torch.zeros_like(x), 1)[:2]
    assert torch.equal(idx, want)
    assert torch.equal(values.view(torch.uint8), torch.gather(x, 1, want).view(torch.uint8))


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 3),
    d=st.integers(4096, 20000),
    frac=st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5, 0.97]),
    kind=st.sampled_from(["normal", "ties", "ascending", "zeros", "special", "decoy"]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_rows_selected_through_a_sample_equal_the_torch_form(m, d, frac, kind, seed, dtype):
    """Long rows where the heap does not serve bound the threshold from a sample and select
    from the entries above the bound: the same entries in the same order as the torch form.
    Ties at the bound and the threshold (few distinct values; an all-zero row, where every
    entry is at the bound and the gather overflows its room), rows sorted by magnitude, NaN and
    infinities, and a decoy row whose sampled entries (every ``d // s``-th) are its largest, so
    that the bound misses and the row takes the quickselect."""
    k = max(compiled.HEAP_MAX_K + 1, round(frac * d))
    assert not compiled.heap_serves(k, d) and d >= compiled.SAMPLE_FROM
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64)
    if kind == "ties":
        x = torch.randint(-3, 4, (m, d), generator=gen).to(torch.float64)
    elif kind == "ascending":
        x = x.abs().sort(dim=1).values * torch.where(torch.rand(m, d, generator=gen) < 0.5, -1, 1)
    elif kind == "zeros":
        x = torch.zeros(m, d, dtype=torch.float64)
    elif kind == "special":
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
        picks = table[torch.randint(0, 5, (m, d), generator=gen)].to(torch.float64)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.01, picks, x)
    elif kind == "decoy":
        stride = d // min(compiled.SAMPLE_SIZE, d // 8)
        x[:, ::stride] = 100.0 + x[:, ::stride].abs()
    x = x.to(dtype)
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want)
    assert torch.equal(values.view(torch.uint8), torch.gather(x, 1, want).view(torch.uint8))


def test_the_heap_serves_small_k_of_long_rows_only():
    """The bounds of :func:`heap_serves`: ``2 <= k <= HEAP_MAX_K`` and ``k HEAP_RATIO <= d``
    (Top-1 has its own scan; larger ``k`` take the quickselect)."""
    K, R = compiled.HEAP_MAX_K, compiled.HEAP_RATIO
    assert compiled.heap_serves(2, 2 * R) and not compiled.heap_serves(2, 2 * R - 1)
    assert compiled.heap_serves(K, K * R) and not compiled.heap_serves(K + 1, 10 * K * R)
    assert not compiled.heap_serves(1, 1000)


@pytest.mark.parametrize("k", [1, 7])
def test_the_parallel_kernel_and_its_serial_twin_agree(k):
    """Blocks of fewer than ``SERIAL_BELOW`` entries take the one-thread twin, larger ones the
    parallel kernel (the test above only sees the twin): both equal the torch form."""
    from streams.compiled import SERIAL_BELOW

    gen = torch.Generator().manual_seed(k)
    x = torch.randint(-3, 4, (200, 300), generator=gen).to(torch.float64)  # ties
    assert x.numel() >= SERIAL_BELOW
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want) and torch.equal(values, torch.gather(x, 1, want))
    small = [compiled.top_k(x[i : i + 50], k) for i in range(0, 200, 50)]
    assert torch.equal(torch.cat([s[0] for s in small]), idx)


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(["topk", "randk"]),
    m=st.integers(1, 6),
    d=st.integers(1, 70),
    frac=st.floats(0.0, 1.0),
    special=st.sampled_from(["", "nonfinite", "huge"]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_rows_made_by_the_encoder_are_the_decoded_rows(name, m, d, frac, special, seed, dtype):
    """On a small input Top-K's and Rand-K's encoders write the decoded rows as they go, for
    the first decode: bit for bit the rows the torch decode makes (Rand-K's scaled values,
    saturated where the scale overflows a finite value, NaN first in a row with a NaN or
    infinity; a scatter into zeros), the payload unchanged; the rows are handed out once (a
    second decode makes fresh ones, so no two callers share memory), and a packet rebuilt from
    the wire or copied has none."""
    import dataclasses

    from compressors import parse_spec
    from streams import Streams

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64).to(dtype)
    if special == "nonfinite":
        picks = torch.randint(0, 5, (m, d), generator=gen)
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0], dtype=dtype)
        x = torch.where(torch.rand(m, d, generator=gen) < 0.3, table[picks], x)
    elif special == "huge":  # Rand-K's d/k times these overflows: saturated
        x = x * (torch.finfo(dtype).max / 4)
    C = parse_spec(f"{name}:k={max(1, round(frac * d))}")
    streams = Streams.for_nodes(seed, range(m))
    assert compiled.small(x)
    packet = C.encode(x, streams)
    assert len(packet._rows) == 1
    first = C.decode(packet)
    assert not packet._rows
    again = C.decode(packet)  # the torch decode of the same payload
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    assert first.dtype == dtype and torch.equal(first.view(bits), again.view(bits))
    assert first.data_ptr() != again.data_ptr() and first.data_ptr() != x.data_ptr()
    with pytest.MonkeyPatch.context() as mp:  # the payload the torch encoder makes
        mp.setattr(compiled, "small", lambda x: False)
        torch_packet = C.encode(x, streams)
    assert not torch_packet._rows
    for key, field in torch_packet.fields.items():
        assert torch.equal(packet.fields[key].view(torch.int64 if key == "indices" else bits),
                           field.view(torch.int64 if key == "indices" else bits))  # fmt: skip
    assert torch.equal(first.view(bits), C.decode(torch_packet).view(bits))
    if name == "topk":
        want = top_k_indices(x.abs(), C.k_of(d))
        ref = torch.zeros_like(x).scatter_(1, want, torch.gather(x, 1, want))
        assert torch.equal(first.view(bits), ref.view(bits))
    data, nbytes = C.to_bytes(packet)
    back = C.from_bytes(data, nbytes, packet, torch.arange(m))
    assert not back._rows and not dataclasses.replace(packet)._rows
    assert torch.equal(C.decode(back).view(bits), first.view(bits))


def test_large_inputs_leave_the_rows_to_decode():
    """At or above ``SERIAL_BELOW`` entries the encoder makes no rows (a sum-only reduction
    would not read them); decode makes them, the same bits."""
    from compressors import parse_spec
    from streams import Streams
    from streams.compiled import SERIAL_BELOW

    x = torch.randn(4, SERIAL_BELOW // 4, generator=torch.Generator().manual_seed(1))
    C = parse_spec("topk:k=3")
    assert not compiled.small(x) and compiled.small(x[:, :-1])
    packet = C.encode(x, Streams.for_nodes(0, range(4)))
    assert not packet._rows
    want = top_k_indices(x.abs(), 3)
    ref = torch.zeros_like(x).scatter_(1, want, torch.gather(x, 1, want))
    assert torch.equal(C.decode(packet), ref)


def test_a_wrapper_that_decodes_its_own_way_does_not_take_the_inner_rows():
    """``scaled:randk`` encodes through Rand-K and divides on decode: the rows Rand-K's encoder
    left are Rand-K's decode, so the wrapper's decode does not take them."""
    from compressors import parse_spec
    from streams import Streams

    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    S, R = parse_spec("scaled:randk:k=4"), parse_spec("randk:k=4")
    streams = Streams.for_nodes(5, range(3))
    packet = S.encode(x, streams)
    assert len(packet._rows) == 1 and packet._rows[0][0] is S.inner
    assert torch.equal(S.decode(packet), R.decode(R.encode(x, streams)) / 10.0)
    assert len(packet._rows) == 1  # still there: only Rand-K itself takes them


@settings(max_examples=80, deadline=None)
@given(
    spec=st.sampled_from(["randk:k={k}", "topk:k={k}", "permk", "randk:shared=true,k={k}"]),
    m=st.integers(1, 25),
    d=st.integers(1, 150),
    frac=st.floats(0.0, 1.0),
    weighted=st.booleans(),
    special=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_small_sparse_sums_are_the_torch_sums(spec, m, d, frac, weighted, special, seed, dtype):
    """A small sparse packet's ``decode_sum`` runs in one compiled call: bit for bit torch's
    (each value times its row's factor in the dtype, then ``index_add_`` in row order), with and
    without weights, with NaN and infinities."""
    from compressors import parse_spec
    from compressors.base import scatter_sum
    from streams import Streams

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=gen, dtype=torch.float64).to(dtype)
    x = x * 10.0 ** torch.randint(-6, 6, (m, d), generator=gen).to(dtype)
    if special:
        x[0, 0], x[-1, -1] = float("nan"), float("-inf")
    k = max(1, round(frac * d))
    C = parse_spec(spec.format(k=k)).bind(m)
    shared = C.shared_randomness
    streams = Streams.for_nodes(seed, [0] * m if shared else range(m))
    packet = C.encode(x, streams)
    w = torch.rand(m, generator=gen, dtype=torch.float64) if weighted else None
    assert compiled.small(packet.fields["values"])
    fast = scatter_sum(packet, w)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled, "small", lambda x: False)
        slow = scatter_sum(packet, w)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    assert fast.dtype == dtype and fast.shape == (d,)
    assert torch.equal(torch.isnan(fast), torch.isnan(slow))
    assert torch.equal(fast.nan_to_num().view(bits), slow.nan_to_num().view(bits))


@settings(max_examples=80, deadline=None)
@given(
    m=st.integers(1, 6),
    d=st.integers(1, 70),
    frac=st.floats(0.0, 1.0),
    special=st.sampled_from(["", "nonfinite", "ties"]),
    large=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_top_k_shifted_in_one_pass_is_the_torch_form(m, d, frac, special, large, seed, dtype):
    """Top-K's shifted form ``h + C(x - h)`` in one compiled pass (EF21's node side) gives the
    packet, the decoded rows and the new shift ``c + h`` of the compressor's generic form
    (``encode``, ``decode``, torch's add: the same bits, ``-0.0`` and NaN included), and each
    row's squared error ``||x - h - c||^2`` to rounding; large blocks take the parallel kernel
    (``SERIAL_BELOW`` entries and up), with the same rows."""
    from compressors import parse_spec
    from compressors.base import Compressor
    from streams import Streams
    from streams.compiled import SERIAL_BELOW

    gen = torch.Generator().manual_seed(seed)
    rows = m * (SERIAL_BELOW // (m * d) + 1) if large else m
    x = torch.randn(rows, d, generator=gen, dtype=torch.float64).to(dtype)
    h = torch.randn(rows, d, generator=gen, dtype=torch.float64).to(dtype)
    if special == "nonfinite":
        table = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0], dtype=dtype)
        picks = table[torch.randint(0, 5, (rows, d), generator=gen)]
        x = torch.where(torch.rand(rows, d, generator=gen) < 0.2, picks, x)
        h = torch.where(torch.rand(rows, d, generator=gen) < 0.2, -0.0, h)
    elif special == "ties":
        x = torch.randint(-2, 3, (rows, d), generator=gen).to(dtype)
        h = torch.randint(-1, 2, (rows, d), generator=gen).to(dtype)
    assert compiled.small(x) != large
    C = parse_spec(f"topk:k={max(1, round(frac * d))}")
    streams = Streams.for_nodes(seed, range(rows))
    new = x.clone()
    packet, c, sq = C.encode_shifted(new, h, streams)
    ref_new = x.clone()
    ref_packet, ref_c, ref_sq = Compressor.encode_shifted(C, ref_new, h, streams)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    assert torch.equal(packet.fields["indices"], ref_packet.fields["indices"])
    assert torch.equal(packet.fields["values"].view(bits), ref_packet.fields["values"].view(bits))
    assert torch.equal(packet.nbits, ref_packet.nbits)
    assert torch.equal(c.view(bits), ref_c.view(bits))
    assert torch.equal(new.view(bits), ref_new.view(bits))  # c + h, as torch adds them
    if special != "nonfinite":  # the errors of the values sent: the difference rounded
        err = (x - h) - c
        want = (err.double() ** 2).sum(1)
        torch.testing.assert_close(sq, want, rtol=1e-12, atol=0)
        torch.testing.assert_close(sq, ref_sq.double(), rtol=1e-5, atol=0)
    else:
        assert torch.equal(sq.isnan(), ref_sq.isnan())
        assert torch.equal(sq.isinf(), ref_sq.isinf())
    assert c.data_ptr() not in (x.data_ptr(), h.data_ptr(), new.data_ptr())


def test_the_generic_shifted_form_is_encode_and_decode():
    """A compressor without a one-pass form shifts by its own ``encode`` and ``decode``."""
    from compressors import parse_spec
    from streams import Streams

    gen = torch.Generator().manual_seed(4)
    x, h = torch.randn(3, 30, generator=gen), torch.randn(3, 30, generator=gen)
    C, streams = parse_spec("randk:k=5"), Streams.for_nodes(9, range(3))
    new = x.clone()
    packet, c, sq = C.encode_shifted(new, h, streams)
    want = C.decode(C.encode(x - h, streams))
    assert torch.equal(c, want) and torch.equal(new, want + h)
    assert torch.equal(packet.fields["indices"], C.encode(x - h, streams).fields["indices"])
    torch.testing.assert_close(sq, ((x - h - want) ** 2).sum(1))
