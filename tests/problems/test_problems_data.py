"""Data loading: LIBSVM files, label mapping, scaling, bundled sets, real LIBSVM sets."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from problems import make_problem
from problems.data import load_tabular, scale_features
from problems.linalg import gram_top_eig


def write(tmp_path, text, name="d.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("labels", "signed"),
    [
        ([1, 2, 2, 1], [-1, 1, 1, -1]),
        ([0, 1, 1, 0], [-1, 1, 1, -1]),
        ([-1, 1, 1, -1], [-1, 1, 1, -1]),
        ([3, 7, 7, 3], [-1, 1, 1, -1]),
    ],
)
def test_libsvm_labels_map_smaller_to_minus_one(tmp_path, labels, signed):
    rows = ["1:0.5 3:1", "2:1", "1:-1 2:2", "3:4"]
    path = write(tmp_path, "\n".join(f"{y} {r}" for y, r in zip(labels, rows, strict=True)))
    ds = load_tabular(f"libsvm:{path}", "logreg")
    assert sp.issparse(ds.X) and ds.X.shape == (4, 3)
    np.testing.assert_array_equal(ds.signed("logreg"), signed)
    np.testing.assert_array_equal(ds.X.toarray()[0], [0.5, 0, 1])


def test_multiclass_file(tmp_path):
    path = write(tmp_path, "1 1:1\n2 2:1\n3 1:2\n")
    with pytest.raises(ValueError, match="logreg: needs binary labels.*3 distinct"):
        make_problem("logreg", dataset=f"libsvm:{path}", nodes=1)
    p = make_problem("least-squares", dataset=f"libsvm:{path}", nodes=1)
    x = torch.zeros(2, dtype=torch.float64)
    assert float(p.loss(x)) == pytest.approx((1 + 4 + 9) / 6)  # raw targets


def test_missing_and_malformed_files_name_the_file(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="logreg-nonconvex: dataset file '.*nope.txt' not found"):
        make_problem("logreg-nonconvex", dataset=f"libsvm:{tmp_path}/nope.txt")
    bad = write(tmp_path, "1 1:0.5 2\n-1 x:y\n", "bad.txt")
    with pytest.raises(ValueError, match="logreg: LIBSVM file '.*bad.txt', line 1: '2' is not"):
        make_problem("logreg", dataset=f"libsvm:{bad}")
    empty = write(tmp_path, "", "empty.txt")
    with pytest.raises(ValueError, match="empty.txt"):
        make_problem("logreg", dataset=f"libsvm:{empty}")
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        make_problem("logreg", dataset="mnist")
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path))
    with pytest.raises(
        ValueError, match=r"'a9a' not found; looked for .*a9a\.txt \(\$COMPZOO_DATA\)"
    ):
        make_problem("logreg", dataset="a9a")


def test_libsvm_indices_are_one_based_unless_told(tmp_path):
    path = write(tmp_path, "1 1:1\n# a comment line\n\n-1 0:2 3:1\n")
    with pytest.raises(ValueError, match=r"line 4: feature index 0, but LIBSVM indices start at 1"):
        load_tabular(f"libsvm:{path}", "logreg")
    ds = load_tabular(f"libsvm:{path}", "logreg", index_base=0)
    np.testing.assert_array_equal(ds.X.toarray(), [[0, 1, 0, 0], [2, 0, 0, 1]])
    one_based = write(tmp_path, "1 1:1\n-1 3:2\n", "one.txt")
    one = load_tabular(f"libsvm:{one_based}", "logreg")
    np.testing.assert_array_equal(one.X.toarray(), [[1, 0, 0], [0, 0, 2]])
    with pytest.raises(ValueError, match="index_base must be 1 .LIBSVM. or 0, got 2"):
        load_tabular(f"libsvm:{path}", "logreg", index_base=2)


def test_libsvm_stray_index_is_refused_before_allocating(tmp_path):
    rows = "".join(f"{1 if i % 2 else -1} 1:1\n" for i in range(63)) + "1 99999999:1\n"
    path = write(tmp_path, rows)
    t0 = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=r"line 64: feature index 99999999 makes d = 99999999 columns, more than max_dim = "
        r"1048576 and more than the file's 64 stored entries.*--problem-opt max_dim=99999999",
    ):
        make_problem("logreg", dataset=f"libsvm:{path}", nodes=2)
    assert time.perf_counter() - t0 < 5.0
    with pytest.raises(
        ValueError, match=r"line 64: feature index 99999999 .* would need 47.7 GiB; allowed: 4 GiB"
    ):
        load_tabular(f"libsvm:{path}", "t", max_dim=10**8)
    small = write(tmp_path, "1 1:1\n-1 2:1\n", "small.txt")
    with pytest.raises(ValueError, match=r"line 2: feature index 2 .*allowed: 1e-08 GiB"):
        load_tabular(f"libsvm:{small}", "t", max_dense_gib=1e-8)
    wide = load_tabular(f"libsvm:{path}", "t", max_dense_gib=64, max_dim=10**8)
    assert wide.X.shape == (64, 99999999)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1 1:1\n-1 2:abc\n", r"line 2: value 'abc' in '2:abc' is not a number"),
        ("1 1:1\n-1 2 3:1\n", r"line 2: '2' is not INDEX:VALUE"),
        ("1 1:1\n-1 1.5:1\n", r"line 2: feature index '1.5' in '1.5:1' is not an integer"),
        ("1 1:1\n-1 3:1 2:1\n", r"line 2: feature index 2 in '2:1' after index 3"),
        ("1 2:1 2:1\n", r"line 1: feature index 2 in '2:1' after index 2"),
        ("1 1:1\n1,2 1:1\n", r"line 2: label '1,2' is not a number"),
        ("1 1:1\n-1 -3:1\n", r"line 2: feature index -3 in '-3:1'; allowed: integers >= 1"),
        ("1 1:1\n-1 1:inf\n", r"line 2: value inf of feature 1 is not finite"),
        ("1 1:1\nnan 1:1\n", r"line 2: label nan is not finite"),
        ("", r"has no samples"),
        ("1\n-1\n", r"has no features"),
    ],
)
def test_libsvm_malformed_lines_name_the_line(tmp_path, text, match):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match="logreg: LIBSVM file '.*d.txt'.*" + match):
        load_tabular(f"libsvm:{path}", "logreg")


def test_libsvm_paths_that_are_not_text_files(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="is a directory; libsvm:PATH needs a file"):
        load_tabular(f"libsvm:{tmp_path}", "logreg")
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="b.bin' is a binary file"):
        load_tabular(f"libsvm:{binary}", "logreg")
    with pytest.raises(ValueError, match="libsvm: needs a file path"):
        load_tabular("libsvm:", "logreg")
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"nowhere/a9a\.txt \(\$COMPZOO_DATA: no such folder\)"):
        load_tabular("a9a", "logreg")
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=r"'w8a' not found; looked for .*w8a\.txt"):
        load_tabular("w8a", "logreg")


def test_named_shortcut_reads_compzoo_data(tmp_path, monkeypatch):
    (tmp_path / "libsvm").mkdir()
    write(tmp_path / "libsvm", "1 1:1\n-1 2:1\n1 1:1 2:1\n", "a9a.txt")
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path))
    assert make_problem("logreg", dataset="a9a", nodes=3).counts.tolist() == [1, 1, 1]


def test_more_nodes_than_samples(tmp_path):
    path = write(tmp_path, "1 1:1\n-1 2:1\n")
    with pytest.raises(ValueError, match="logreg: 3 nodes but the data has only 2 samples"):
        make_problem("logreg", dataset=f"libsvm:{path}", nodes=3)


def test_scaling():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4)) * [1, 10, 100, 0] + [0, 5, 0, 3]
    S = scale_features(X, "standard")
    np.testing.assert_allclose(S.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(S.std(0), [1, 1, 1, 0], atol=1e-12)
    np.testing.assert_allclose(np.abs(scale_features(X, "maxabs")).max(0), [1, 1, 1, 1])
    R = scale_features(sp.csr_matrix(X), "rownorm")
    np.testing.assert_allclose(np.linalg.norm(R.toarray(), axis=1), 1.0)
    Ss = scale_features(sp.csr_matrix(X), "standard")  # sparse: divided, not centred
    assert sp.issparse(Ss)
    np.testing.assert_allclose(Ss.toarray(), X / np.where(X.std(0) > 0, X.std(0), 1))
    assert scale_features(X, "none") is X
    with pytest.raises(ValueError, match="got 'l2'"):
        scale_features(X, "l2")


def test_bundled_sets_and_synthetic():
    assert load_tabular("breast-cancer", "t").X.shape == (569, 30)
    y = load_tabular("digits-binary", "t").signed("t")
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert load_tabular("wine-binary", "t").signed("t").sum() == 178 - 2 * 59
    with pytest.raises(ValueError, match="'wine' has 3 distinct labels"):
        load_tabular("wine", "t").signed("t")
    a = load_tabular("synthetic", "t", seed=3, samples=400, features=30, density=0.1)
    b = load_tabular("synthetic", "t", seed=3, samples=400, features=30, density=0.1)
    assert sp.issparse(a.X) and (a.X != b.X).nnz == 0
    assert 0.08 < a.X.nnz / (400 * 30) < 0.12
    for kw, match in [
        ({"density": 0.0}, "density must be in"),
        ({"samples": 0}, "samples"),
        ({"label_noise": 0.5}, "label_noise must be in"),
    ]:
        with pytest.raises(ValueError, match=match):
            load_tabular("synthetic", "t", **kw)


@pytest.mark.parametrize(
    ("name", "shape", "labels"),
    [
        ("mushrooms", (8124, 112), {1.0, 2.0}),
        ("phishing", (11055, 68), {0.0, 1.0}),
    ],
)
def test_real_libsvm_sets(libsvm_dir, name, shape, labels):
    ds = load_tabular(f"libsvm:{libsvm_dir / (name + '.txt')}", "logreg")
    assert ds.X.shape == shape and set(np.unique(ds.y)) == labels
    p = make_problem(
        "logreg-nonconvex", dataset=f"libsvm:{libsvm_dir / (name + '.txt')}", nodes=20, lam=0.1
    )
    A = ds.X.toarray()
    off = (np.arange(21) * shape[0]) // 20
    Ai = A[off[3] : off[4]]
    top = np.linalg.eigvalsh(Ai.T @ Ai)[-1]
    assert float(p.consts.L_i[3]) == pytest.approx(top / (4 * len(Ai)) + 0.2, rel=1e-10)
    w = np.repeat(1.0 / (20 * np.diff(off)), np.diff(off))
    assert p.consts.L == pytest.approx(
        np.linalg.eigvalsh(A.T @ (w[:, None] * A))[-1] / 4 + 0.2, rel=1e-10
    )
    b = ds.signed("t")
    x = torch.randn(shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    xr = x.clone().requires_grad_(True)
    Ab, bb = torch.from_numpy(Ai), torch.from_numpy(b[off[3] : off[4]])
    ref = torch.log1p(torch.exp(-bb * (Ab @ xr))).mean() + 0.1 * (xr**2 / (1 + xr**2)).sum()
    (g,) = torch.autograd.grad(ref, xr)
    torch.testing.assert_close(p.grad(x)[3], g, rtol=1e-12, atol=1e-13)


def test_real_sparse_set_stays_sparse_and_is_fast(libsvm_dir):
    p = make_problem("logreg", dataset=f"libsvm:{libsvm_dir / 'w8a.txt'}", nodes=20, lam=0.1)
    c = p.consts
    assert p.full_grad(p.x_star).norm() <= 1e-9
    assert c.f_star == pytest.approx(float(p.loss(p.x_star)), rel=1e-13)
    # The gradients read CSR arrays (the compiled kernels', SciPy's or torch's block-sparse).
    if p._kernels:
        stored = p._kdata[1].size
    else:
        stored = p._S["B"].nnz if p._S is not None else p._B.values().numel()
    assert not p.dense and stored < 0.05 * 49749 * 300
    A = load_tabular(f"libsvm:{libsvm_dir / 'w8a.txt'}", "t").X
    assert c.L_max >= gram_top_eig(A[: 49749 // 20]) / (4 * (49749 // 20)) + 0.1 - 1e-12
