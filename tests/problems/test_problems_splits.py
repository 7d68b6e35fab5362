"""Splits partition the data exactly and deterministically."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from problems import make_problem
from problems.data import load_tabular
from problems.least_squares import LeastSquares
from problems.splits import parse_split, split


def check_partition(order, counts, N, n):
    assert order.dtype == np.int64 and counts.dtype == np.int64
    assert counts.shape == (n,) and counts.sum() == N and (counts > 0).all()
    assert np.array_equal(np.sort(order), np.arange(N))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    N=st.integers(1, 300),
    kind=st.sampled_from(["contiguous", "iid", "sorted", "dirichlet:0.5", "dirichlet:5"]),
    seed=st.integers(0, 2**31),
)
def test_partition_property(data, N, kind, seed):
    n = data.draw(st.integers(1, min(N, 12) if kind.startswith("dirichlet") else N))
    labels = data.draw(st.lists(st.integers(0, 3), min_size=N, max_size=N))
    labels = np.array(labels)
    try:
        order, counts = split(kind, labels, n, seed=seed)
    except ValueError as e:  # dirichlet may be unable to fill every node of tiny data
        assert kind.startswith("dirichlet") and "empty" in str(e)
        return
    check_partition(order, counts, N, n)
    again = split(kind, labels, n, seed=seed)
    assert np.array_equal(order, again[0]) and np.array_equal(counts, again[1])
    off = np.concatenate([[0], np.cumsum(counts)])
    if kind == "contiguous":
        assert np.array_equal(order, np.arange(N))
        i = np.arange(n + 1)
        assert np.array_equal(off, (i * N) // n)
    if kind == "iid":
        assert np.array_equal(off, (np.arange(n + 1) * N) // n)
    if kind == "sorted":
        assert (np.diff(labels[order]) >= 0).all()
    if kind in ("iid",) or kind.startswith("dirichlet"):
        for i in range(n):
            assert (np.diff(order[off[i] : off[i + 1]]) > 0).all()  # file order inside a node


def test_contiguous_exact_example():
    order, counts = split("contiguous", np.zeros(569), 20)
    assert counts.tolist() == [(i + 1) * 569 // 20 - i * 569 // 20 for i in range(20)]
    assert counts.tolist()[:3] == [28, 28, 29]


def test_iid_depends_on_the_seed_only():
    y = np.zeros(100)
    a, _ = split("iid", y, 4, seed=1)
    b, _ = split("iid", y, 4, seed=1)
    c, _ = split("iid", y, 4, seed=2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_sorted_is_maximally_skewed():
    y = np.repeat([0, 1], 50)
    order, counts = split("sorted", np.tile([0, 1], 50), 2)
    assert np.array_equal(np.tile([0, 1], 50)[order], y)


def test_dirichlet_skew_grows_as_alpha_shrinks():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 2000)

    def mean_entropy(alpha):
        order, counts = split(f"dirichlet:{alpha}", y, 10, seed=3)
        off = np.concatenate([[0], np.cumsum(counts)])
        ent = []
        for i in range(10):
            p = np.bincount(y[order[off[i] : off[i + 1]]], minlength=5) / counts[i]
            ent.append(-(p[p > 0] * np.log(p[p > 0])).sum())
        return np.mean(ent)

    assert mean_entropy(0.1) < mean_entropy(1.0) < mean_entropy(100.0) <= np.log(5)
    assert mean_entropy(100.0) > 0.95 * np.log(5)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("shuffled", "unknown split 'shuffled'"),
        ("dirichlet", "unknown split 'dirichlet'"),
        ("dirichlet:0", "alpha must be a positive number, got '0'"),
        ("dirichlet:-1", "got '-1'"),
        ("dirichlet:abc", "got 'abc'"),
        ("dirichlet:inf", "got 'inf'"),
        ("iid:3", "unknown split 'iid:3'"),
    ],
)
def test_bad_split_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_split(spec)


def test_bad_node_counts_name_the_problem():
    with pytest.raises(ValueError, match="logreg: 30 nodes but the data has only 20 samples"):
        split("contiguous", np.zeros(20), 30, problem="logreg")
    with pytest.raises(ValueError, match="nodes must be a positive integer, got 0"):
        split("iid", np.zeros(20), 0)
    with pytest.raises(ValueError, match="dirichlet:0.01 left a node empty"):
        split("dirichlet:0.01", np.zeros(30), 25, seed=0)
    with pytest.raises(ValueError, match="logreg: 600 nodes but the data has only 569 samples"):
        make_problem("logreg", dataset="breast-cancer", nodes=600)


@pytest.mark.parametrize("spec", ["iid", "sorted", "dirichlet:0.3"])
def test_problem_rows_follow_the_split(spec):
    p = make_problem(
        "least-squares", dataset="synthetic", split=spec, nodes=6, samples=90, features=4, seed=5
    )
    ds = load_tabular("synthetic", "t", seed=5, samples=90, features=4)
    y = ds.targets()
    order, counts = split(spec, y, 6, seed=5)
    ref = LeastSquares(ds.X[order], y[order], counts, lam=0.0)
    assert p.counts.tolist() == counts.tolist()
    x = torch.randn(4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(p.grad(x), ref.grad(x), rtol=0, atol=0)


def _ef21_last(N, n):
    """The EF21 code's rule, written from its description: N // n rows per node, the last node
    also takes the remainder."""
    q = N // n
    return [(i * q, (i + 1) * q if i < n - 1 else N) for i in range(n)]


def _clag_drop(N, n):
    """The 3PC/CLAG code's rule: drop the last N % n rows, then np.array_split (equal chunks)."""
    keep = N - N % n
    return [(int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(keep), n)]


def _dasha_array(N, n):
    return [(int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(N), n)]


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ("contiguous:last", _ef21_last),
        ("contiguous:drop", _clag_drop),
        ("contiguous:array", _dasha_array),
    ],
)
@pytest.mark.parametrize(("N", "n"), [(10, 3), (11, 4), (12, 4), (7, 7), (5, 1), (569, 20)])
def test_papers_contiguous_conventions(spec, rule, N, n):
    order, counts = split(spec, np.zeros(N), n)
    off = np.concatenate([[0], np.cumsum(counts)])
    assert [(int(a), int(b)) for a, b in zip(off[:-1], off[1:], strict=True)] == rule(N, n)
    assert order.dtype == np.int64 and counts.dtype == np.int64 and (counts > 0).all()
    assert np.array_equal(order, np.arange(off[-1]))  # file order, no shuffling
    assert off[-1] == (N - N % n if spec == "contiguous:drop" else N)


def test_papers_contiguous_small_examples():
    N, n = 10, 3
    assert split("contiguous", np.zeros(N), n)[1].tolist() == [3, 3, 4]
    assert split("contiguous:last", np.zeros(N), n)[1].tolist() == [3, 3, 4]
    assert split("contiguous:drop", np.zeros(N), n)[1].tolist() == [3, 3, 3]
    assert split("contiguous:array", np.zeros(N), n)[1].tolist() == [4, 3, 3]
    # Where the conventions differ: floor(i N / n) spreads the remainder, EF21 piles it last.
    assert split("contiguous", np.zeros(11), 4)[1].tolist() == [2, 3, 3, 3]
    assert split("contiguous:last", np.zeros(11), 4)[1].tolist() == [2, 2, 2, 5]
    assert split("contiguous:array", np.zeros(11), 4)[1].tolist() == [3, 3, 3, 2]


@pytest.mark.parametrize("spec", ["contiguous:last", "contiguous:drop", "contiguous:array"])
def test_problem_rows_follow_the_papers_splits(spec):
    p = make_problem(
        "least-squares", dataset="synthetic", split=spec, nodes=4, samples=90, features=4, seed=5
    )
    ds = load_tabular("synthetic", "t", seed=5, samples=90, features=4)
    y = ds.targets()
    order, counts = split(spec, y, 4)
    ref = LeastSquares(ds.X[order], y[order], counts, lam=0.0)
    assert p.counts.tolist() == counts.tolist() and int(p.counts.sum()) == len(order)
    x = torch.randn(4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(p.grad(x), ref.grad(x), rtol=0, atol=0)


@pytest.mark.parametrize("spec", ["contiguous:lst", "contiguous:", "contiguous:drop:1"])
def test_bad_contiguous_variants(spec):
    with pytest.raises(ValueError, match="allowed: contiguous, contiguous:last"):
        parse_split(spec)
