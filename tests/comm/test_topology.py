"""Communication graphs and mixing matrices (comm.topology): the weights, the exact spectral
gap, Erdős–Rényi draws, a user's file read as data, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from comm import topology as T


def _valid(top: T.Topology) -> None:
    W = top.W.numpy()
    assert np.allclose(W, W.T, atol=1e-15)
    assert np.allclose(W.sum(axis=1), 1.0, atol=1e-14)
    assert (W >= 0).all()
    off = W.copy()
    np.fill_diagonal(off, 0.0)
    for i, nb in enumerate(top.neighbours):  # support = the graph's edges
        assert tuple(np.flatnonzero(off[i])) == nb
    lam = np.sort(np.linalg.eigvalsh(W))[::-1]
    assert top.rho == pytest.approx(1 - max(abs(lam[1]), abs(lam[-1])), abs=1e-12)
    assert top.beta == pytest.approx(np.linalg.norm(np.eye(top.n) - W, 2), abs=1e-12)


@pytest.mark.parametrize("n", [3, 4, 8, 9, 16])
def test_ring_is_chocos_one_third_matrix_with_the_closed_form_gap(n):
    top = T.build("ring", n)
    _valid(top)
    if n > 3:
        assert np.allclose(np.unique(top.W.numpy()[top.W.numpy() > 0]), [1 / 3])
    # eigenvalues (1 + 2 cos(2 pi k / n)) / 3: the gap is set by k = 1 (and k = n/2 for small n)
    lam = [(1 + 2 * math.cos(2 * math.pi * k / n)) / 3 for k in range(n)]
    second = sorted(lam, reverse=True)[1]
    assert top.rho == pytest.approx(1 - max(abs(second), abs(min(lam))), abs=1e-12)


def test_the_other_metropolis_convention_would_stall_an_even_ring():
    # W_ij = 1/max(d_i, d_j) gives an even ring W = A/2, lambda_n = -1: gap 0. The convention
    # used here keeps W_ii = 1/3 and a positive gap; a file with the other one is refused.
    top = T.build("ring", 8)
    assert top.rho > 0.05 and min(top.eigenvalues) > -1 + 1e-9


def test_torus_complete_star_and_uniform_weights():
    tor = T.build("torus", 16)
    _valid(tor)
    assert set(tor.degrees.tolist()) == {4}
    assert np.allclose(np.unique(tor.W.numpy()[tor.W.numpy() > 0]), [0.2])  # (A + I)/5
    comp = T.build("complete", 6)
    assert np.allclose(comp.W.numpy(), 1 / 6) and comp.rho == pytest.approx(1.0)
    star = T.build("star", 7)
    _valid(star)
    assert star.degrees.tolist() == [6] + [1] * 6
    uni = T.build("star", 7, mixing="uniform")
    _valid(uni)
    assert uni.W[1, 1] == pytest.approx(1 - 1 / 7)  # 1 - d_i / (1 + d_max)


def test_erdos_renyi_is_seeded_connected_and_redrawn():
    a, b, c = (T.build("er:p=0.3", 12, seed=s) for s in (0, 0, 1))
    assert np.array_equal(a.W.numpy(), b.W.numpy())
    assert not np.array_equal(a.W.numpy(), c.W.numpy())
    for top in (a, c):
        _valid(top)
        assert top.rho > 0
    with pytest.raises(ValueError, match="no connected graph"):
        T.build("er:p=0.01", 40)


def test_a_users_file_adjacency_or_weights(tmp_path):
    ring = T.build("ring", 5)
    A = (ring.W.numpy() > 0).astype(int) - np.eye(5, dtype=int)
    adj = tmp_path / "adj.txt"
    np.savetxt(adj, A, fmt="%d")
    from_adj = T.build(f"file:{adj}", 5)
    assert np.allclose(from_adj.W.numpy(), ring.W.numpy())
    weights = tmp_path / "w.csv"
    np.savetxt(weights, ring.W.numpy(), delimiter=",")
    from_w = T.build(f"file:{weights}", 5)
    assert from_w.mixing == "file" and np.allclose(from_w.W.numpy(), ring.W.numpy())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0 1\n1 0\n", "a 3 x 3 matrix is needed"),
        ("0 1 0\n0 0 1\n0 1 0\n", "not symmetric"),
        ("0 1 0\n1 0 0\n0 0 0\n", "not connected"),
        ("0.5 0.5 0\n0.5 0.2 0.3\n0 0.3 0.6\n", "doubly stochastic; row 2"),
        ("0 1 x\n1 0 1\nx 1 0\n", "not a matrix of numbers"),
        ("__import__('os').system('echo no')\n", "not a matrix of numbers"),
        ("0 -1 1\n-1 0 1\n1 1 0\n", "finite and >= 0"),
    ],
)
def test_a_bad_file_is_refused_with_a_message(tmp_path, content, message):
    path = tmp_path / "g.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        T.build(f"file:{path}", 3)


@pytest.mark.parametrize(
    ("spec", "n", "message"),
    [
        ("hypercube", 8, "must be one of ring, torus"),
        ("er:p=0", 8, "0 < P <= 1"),
        ("er:q=0.5", 8, "0 < P <= 1"),
        ("torus", 7, "n = r x c with r, c >= 3"),
        ("ring", 1, "n >= 2"),
        ("ring", 5000, "allowed: n <= 4096"),
        ("file:/no/such/file", 3, "file not found"),
    ],
)
def test_bad_specs_name_what_is_allowed(spec, n, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        T.build(spec, n)
    with pytest.raises(ValueError, match="--mixing must be one of metropolis, uniform"):
        T.build("ring", 4, mixing="max-degree")


def test_the_record_names_the_constants():
    rec = T.build("ring", 8).to_dict()
    assert rec["edges"] == 8 and rec["degree_max"] == 2
    assert rec["spectral_gap"] == pytest.approx(1 - (1 + 2 * math.cos(math.pi / 4)) / 3)
