"""The per-node random streams: reproducible, row-independent, uniform."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from streams import Streams


@given(
    seed=st.integers(-(2**63), 2**63 - 1),
    nodes=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
)
def test_a_row_depends_on_its_own_key_only(seed, nodes):
    batch = Streams.for_nodes(seed, nodes, 3).uniform(17)
    for j, node in enumerate(nodes):
        alone = Streams.for_nodes(seed, [node], 3).uniform(17)
        assert torch.equal(batch[j], alone[0])


def test_draws_are_reproducible_and_splits_differ():
    s = Streams.for_nodes(5, range(4))
    assert torch.equal(s.uniform(100), s.uniform(100))
    assert not torch.equal(s.split(1).uniform(100), s.split(2).uniform(100))
    assert not torch.equal(s.uniform(100)[0], s.uniform(100)[1])
    assert not torch.equal(
        Streams.for_nodes(5, [0], 1).bits64(8), Streams.for_nodes(5, [0], 2).bits64(8)
    )


def test_shared_rows_draw_the_same_numbers():
    s = Streams.shared(9, 5, 4)
    u = s.uniform(50)
    assert (u == u[0]).all()
    assert s.nodes.tolist() == [0, 1, 2, 3, 4]


def test_uniform_moments_and_range():
    u = Streams.for_nodes(0, range(4)).uniform(100_000)
    assert float(u.min()) >= 0 and float(u.max()) < 1
    n = u.numel()
    assert abs(float(u.mean()) - 0.5) < 5 * (1 / 12) ** 0.5 / n**0.5
    assert abs(float(u.var()) - 1 / 12) < 5 * 0.0745 / n**0.5  # sd of (U - 1/2)^2 is 0.0745
    # lag-1 correlation of the counter sequence
    x = u[:, 1:] - 0.5
    y = u[:, :-1] - 0.5
    assert abs(float((x * y).mean()) * 12) < 5 / n**0.5
    u32 = Streams.for_nodes(0, range(2)).uniform(10, dtype=torch.float32)
    assert u32.dtype == torch.float32


def test_normal_moments():
    z = Streams.for_nodes(1, range(2)).normal(200_000)
    n = z.numel()
    assert abs(float(z.mean())) < 5 / n**0.5
    assert abs(float(z.var()) - 1) < 5 * 2**0.5 / n**0.5
    assert abs(float((z**4).mean()) - 3) < 5 * 96**0.5 / n**0.5


def test_subsets_are_uniform_and_permutations_valid():
    s = Streams.for_nodes(2, range(20000))
    sub = s.subset(10, 3)
    assert sub.shape == (20000, 3)
    assert (sub[:, 1:] > sub[:, :-1]).all()  # sorted, no repeats
    counts = torch.bincount(sub.flatten(), minlength=10).double()
    expect = 20000 * 3 / 10
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < 33.7  # chi-square, 9 degrees of freedom, p = 1e-4
    perm = Streams.for_nodes(3, range(5)).permutation(50)
    assert torch.equal(perm.sort(dim=1).values, torch.arange(50).expand(5, 50))


def test_integers_in_range_with_per_row_bounds():
    s = Streams.for_nodes(4, range(3))
    v = s.integers(torch.tensor([[1], [7], [1000]]), 5000)
    assert (v >= 0).all() and (v[0] == 0).all() and v[1].max() == 6 and v[2].max() < 1000


def test_coerce_accepts_generators_and_seeds():
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    a = Streams.coerce(gens, 3).uniform(4)
    b = Streams.coerce([torch.Generator().manual_seed(i) for i in range(3)], 3).uniform(4)
    assert torch.equal(a, b)
    assert torch.equal(Streams.coerce(7, 2).keys, Streams.for_nodes(7, range(2)).keys)
    with pytest.raises(ValueError, match="sequence of 3 torch.Generator"):
        Streams.coerce([torch.Generator()], 3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def testcompiled_draws_equal_the_torch_form(dtype, monkeypatch):
    """The compiled SplitMix64 kernels return the same bits, uniforms, subsets and derived keys
    as the torch form."""
    from streams import _derive as streams_derive
    from streams import compiled

    if not compiled.ENABLED:
        pytest.skip("numba is not installed")
    s = Streams.for_nodes(11, range(37), 3, 4)
    fast_bits, fast_u = s.bits64(5, 13), s.uniform(65, dtype=dtype)
    monkeypatch.setattr(compiled, "SUBSET_HEAP_D", 1)  # every subset through the heap kernel
    # one block of outputs and several (1024 a block), a heap larger than a block, the sorts
    # of a few and of many positions
    shapes = ((1, 1), (13, 13), (100, 1), (2000, 37), (2500, 32), (3000, 1100), (1025, 1024))
    fast_sets = [s.subset(d, k) for d, k in shapes]
    many = Streams.for_nodes(11, range(3000), 3, 4)  # rows above and below the cut's count
    fast_many = many.subset(112, 10)
    per_row = torch.arange(37, dtype=torch.int64) * 7 - 100
    fast_keys = [s.split(5).keys, s.split(-3).keys, s.split(2**63 - 1).keys]
    fast_keys.append(streams_derive(s.keys, per_row))
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert torch.equal(fast_bits, s.bits64(5, 13))
    slow_keys = [s.split(5).keys, s.split(-3).keys, s.split(2**63 - 1).keys]
    slow_keys.append(streams_derive(s.keys, per_row))
    assert all(torch.equal(a, b) for a, b in zip(fast_keys, slow_keys, strict=True))
    assert torch.equal(fast_u, s.uniform(65, dtype=dtype)) and fast_u.dtype == dtype
    for got, (d, k) in zip(fast_sets, shapes, strict=True):
        assert torch.equal(got, s.subset(d, k))
    assert torch.equal(fast_many, many.subset(112, 10))


def test_long_subsets_through_the_cut_equal_the_torch_form(monkeypatch):
    """Rows longer than the in-memory cut's, with ``k >= 64`` and ``k 1000 >= d``, draw their
    subset through a cut made a block at a time (:func:`streams.compiled._subset_long_row`):
    the positions of the ``k`` largest words, ascending, as the torch form draws them; rows
    outside those bounds (``k`` near ``d``, a small ``k`` of a long row) take the heap."""
    from streams import compiled

    if not compiled.ENABLED:
        pytest.skip("numba is not installed")
    s = Streams.for_nodes(7, range(5), 2)
    shapes = ((5000, 64), (4097, 100), (20000, 2000), (100000, 100), (9000, 8990), (50000, 63))
    fast = [s.subset(d, k) for d, k in shapes]
    monkeypatch.setattr(compiled, "ENABLED", False)
    for got, (d, k) in zip(fast, shapes, strict=True):
        assert torch.equal(got, s.subset(d, k))


def test_a_long_cut_that_misses_leaves_the_row_to_the_heap():
    """The long cut reports a miss, writing nothing, when fewer than ``k`` words pass it or more
    than its room; where it does not miss it writes the heap's subset."""
    from streams import compiled

    if not compiled.ENABLED:
        pytest.skip("numba is not installed")
    key, d, k, cap = np.uint64(0x9E3779B97F4A7C15), 10000, 100, 400
    buf, cv, ci = (np.empty(n, np.int64) for n in (1024, cap + 1024, cap + 1024))
    heap, want = np.empty(k, np.int64), np.empty(k, np.int64)
    compiled._subset_row(key, d, heap, want, buf)
    for tau, hit in ((np.iinfo(np.int64).max, False), (np.iinfo(np.int64).min, False),
                     (np.int64(2.0**63 - 150 / d * 2.0**64), True)):  # fmt: skip
        pos = np.full(k, -1, np.int64)
        assert compiled._subset_long_row(key, d, tau, cap, pos, buf, cv, ci) == hit
        assert (pos == want).all() if hit else (pos == -1).all()


def test_serial_twins_equal_the_parallel_kernels():
    """Small draws skip the parallel launch for a one-thread twin of each kernel: the twin
    and the parallel kernel give the same words, uniforms and subsets, and so do the public
    draws above and below the size where the twin takes over."""
    import numpy as np

    from streams import compiled

    if not compiled.ENABLED:
        pytest.skip("numba is not installed")
    keys = Streams.for_nodes(5, range(3000), 2).keys.numpy().view(np.uint64)
    for shift, scale, dt in ((np.uint64(0), np.uint64(1), np.uint64),
                             (np.uint64(11), 2.0**-53, np.float64)):  # fmt: skip
        a, b = np.empty((3000, 17), dt), np.empty((3000, 17), dt)
        compiled._draw(keys, shift, scale, a)
        compiled._draw_serial(keys, shift, scale, b)
        assert np.array_equal(a, b)
    a, b = np.empty((3000, 12), np.int64), np.empty((3000, 12), np.int64)
    compiled._subset(keys, 100, a)
    compiled._subset_serial(keys, 100, b)
    assert np.array_equal(a, b)
    # 3000 rows at once (the parallel draw; for subsets, torch.topk) against blocks of 10 (twins)
    s = Streams.for_nodes(9, range(3000), 1)
    assert s.uniform(17).numel() >= compiled.SERIAL_BELOW
    small = torch.cat([s[i : i + 10].uniform(17) for i in range(0, 3000, 10)])
    assert torch.equal(s.uniform(17), small)
    sets = torch.cat([s[i : i + 10].subset(100, 12) for i in range(0, 3000, 10)])
    assert torch.equal(s.subset(100, 12), sets)


def test_a_shared_uniform_is_the_shared_streams_first_draw():
    """:func:`streams.shared_uniform` (Python integers) equals the first uniform of
    ``Streams.shared`` (MARINA's coin), for seeds and tags across the int64 range."""
    from streams import shared_uniform

    for seed, tags in [(0, ()), (1, (2, 3, 4)), (-(2**63), (2**63 - 1, 0)), (123, (-5, 7, 10**9))]:
        want = float(Streams.shared(seed, 1, *tags).uniform(1)[0, 0])
        assert shared_uniform(seed, *tags) == want


def test_a_one_element_subset_is_the_top_word_as_before():
    """``subset(d, 1)`` takes the largest of the row's ``d`` words by ``argmax``: the index
    ``topk`` (the general path) gives, so no run's draws changed with the shortcut."""
    for seed in range(20):
        st = Streams.for_nodes(seed, range(300), 5, 2)
        want = torch.topk(st.bits64(57), 1, dim=1, sorted=False).indices
        assert torch.equal(st.subset(57, 1), want)


@pytest.mark.parametrize("given", [None, "0"])
def test_huge_pages_for_large_tensors_by_default_and_a_users_choice_kept(given):
    """Importing the project asks torch's allocator for transparent huge pages (before the
    first allocation, where torch reads it) unless the user set THP_MEM_ALLOC_ENABLE."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if given is not None:
        env["THP_MEM_ALLOC_ENABLE"] = given
    code = "import os, streams; print(os.environ['THP_MEM_ALLOC_ENABLE'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("1" if given is None else given)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator policy")
@pytest.mark.parametrize("user_set", [False, True])
def test_freed_tensor_memory_is_reused_without_page_faults_unless_the_user_set_glibcs_policy(
    user_set,
):
    """Importing the project fixes glibc's mmap and trim thresholds, so a 64 MiB tensor freed
    and made again, step after step, reuses the same pages (with torch's huge-page
    allocations, the project's default): the kernel counts no page faults (``ru_minflt``) in
    most steps once the heap has reached its size. A threshold the user set (here the trim
    threshold, at glibc's own default) is kept, and then every such tensor is mapped and
    faulted in afresh, at every step. Reuse is not certain at first: an object allocated
    above a tensor before it is freed keeps its chunk apart from the heap's top, and an
    aligned request may not fit that chunk exactly, so the tensor can land a little higher
    each step until the heap holds room for it. Measured over 10 steps in 25 processes: the
    first step faulted 576-1,089 pages in, every later one at most 1; on another day 12
    processes faulted 544 pages in the first 0 to 5 of the 11 later steps, then none, a loaded
    suite once saw 6 of 11 fault, and a clean CI run 14 of its first 23 (then none). Under
    pytest with two workers, 42 processes faulted in none of their later steps past the sixth.
    So the steady state is asserted, the last 12 of 47 steps. Without the policy every step
    faulted about 544 pages in."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if user_set:
        env["MALLOC_TRIM_THRESHOLD_"] = str(128 * 1024)
    code = (
        "import resource, streams, torch\n"
        "def make():\n"
        "    t = torch.empty(64 << 20, dtype=torch.uint8); t.fill_(1); return t\n"
        "for _ in range(48):\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    t = make(); del t\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    faults = [int(v) for v in out.stdout.split()][1:]  # the first step maps the heap
    free = [f < 32 for f in faults]  # 64 MiB mapped afresh: 32 huge pages or more
    if user_set:
        assert not any(free), faults
    else:
        assert sum(free[-12:]) >= 11, faults  # the steady state


@given(
    seed=st.integers(0, 2**63 - 1),
    nodes=st.lists(st.integers(0, 10**6), min_size=1, max_size=30),
    tags=st.lists(st.integers(-(2**62), 2**62), min_size=0, max_size=3),
    steps=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=4),
    compiled=st.booleans(),
)
def test_node_keys_step_after_step_are_for_nodes(seed, nodes, tags, steps, compiled):
    """``NodeKeys(seed, nodes, *tags).at(t)`` (the t-free part computed once, what
    ``Comm.rng`` uses) gives ``Streams.for_nodes(seed, nodes, *tags, t)``'s keys, bit for bit,
    on the compiled pass and on torch's."""
    from streams import NodeKeys

    nk = NodeKeys(seed, torch.tensor(nodes), *tags)
    nk._compiled = nk._compiled and compiled
    for t in steps:
        got = nk.at(t)
        want = Streams.for_nodes(seed, nodes, *tags, t)
        assert torch.equal(got.keys, want.keys) and torch.equal(got.nodes, want.nodes)


def test_comm_streams_are_keyed_by_seed_step_node_and_tag():
    """``Comm.rng`` (cached per tag) is ``Streams.for_nodes(seed, nodes, NODE, tag, t)`` for
    every tag and step, also in a scratch copy and a batched comm's repeated nodes."""
    from comm import SimulatedComm
    from comm.batched import BatchedSimulatedComm
    from streams.tags import NODE

    for comm in (SimulatedComm(7, seed=11), BatchedSimulatedComm(5, 3, seed=2)):
        for t in (0, 1, 9, 12345):
            for tag in (0, 3, 17):
                want = Streams.for_nodes(comm.seed, comm.nodes, NODE, tag, t)
                assert torch.equal(comm.rng(t, tag=tag).keys, want.keys)
                assert torch.equal(comm.scratch().rng(t, tag=tag).keys, want.keys)
