"""The on-disk memo (problems.cache): a LIBSVM file is parsed once and read back bit for bit;
the GLM smoothness constants are computed once per data, split, node count and lam; entries
that are corrupt, of the wrong kind or pickled are ignored (and nothing in them runs); the memo
can be switched off, and a folder that cannot be written costs only the memo."""

from __future__ import annotations

import numpy as np
import pytest

from problems import cache, data, glm_consts
from problems.data import load_tabular
from problems.logreg_nonconvex import LogRegNonconvex

TEXT = "+1 1:0.5 3:2\n-1 2:1\n+1 1:1 2:-1 4:0.25\n-1 3:3\n"


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("COMPZOO_CACHE", str(folder))
    return folder


def _file(tmp_path, text=TEXT, name="set.txt"):
    path = tmp_path / name
    path.write_text(text)
    return f"libsvm:{path}"


def _no_parse(*a, **k):
    raise AssertionError("parsed again")


def _same(a, b):
    assert (a.X != b.X).nnz == 0 and a.X.shape == b.X.shape
    assert np.array_equal(a.X.indptr, b.X.indptr) and np.array_equal(a.X.indices, b.X.indices)
    assert np.array_equal(a.y, b.y)


def test_a_file_is_parsed_once(tmp_path, store, monkeypatch):
    spec = _file(tmp_path)
    first = load_tabular(spec, "logreg")
    assert len(list(store.glob("libsvm-*.npz"))) == 1
    monkeypatch.setattr(data, "_parse_libsvm", _no_parse)
    _same(first, load_tabular(spec, "logreg"))
    # another name, same bytes: the same entry
    _same(first, load_tabular(_file(tmp_path, name="copy.txt"), "logreg"))


def test_changed_bytes_are_parsed_again(tmp_path, store):
    spec = _file(tmp_path)
    load_tabular(spec, "logreg")
    changed = load_tabular(_file(tmp_path, TEXT.replace("3:3", "3:4")), "logreg")
    assert changed.X[3, 2] == 4.0
    assert len(list(store.glob("libsvm-*.npz"))) == 2


def test_index_base_is_part_of_the_key(tmp_path, store):
    spec = _file(tmp_path)
    one = load_tabular(spec, "logreg")
    zero = load_tabular(spec, "logreg", index_base=0)
    assert one.X.shape[1] == 4 and zero.X.shape[1] == 5


@pytest.mark.parametrize("bad", ["garbage", "pickle", "kind"])
def test_bad_entries_are_ignored_and_nothing_in_them_runs(tmp_path, store, bad):
    spec = _file(tmp_path)
    want = load_tabular(spec, "logreg")
    (entry,) = store.glob("libsvm-*.npz")
    marker = tmp_path / "ran"
    if bad == "garbage":
        entry.write_bytes(b"PK\x03\x04 not a zip")
    elif bad == "pickle":

        class Payload:
            def __reduce__(self):
                return (marker.write_text, ("pwned",))

        arr = np.empty(1, dtype=object)
        arr[0] = Payload()
        with entry.open("wb") as fh:
            np.savez(fh, data=arr, indices=arr, indptr=arr, d=arr, y=arr)
    else:  # right names, wrong kinds
        with entry.open("wb") as fh:
            np.savez(fh, data=np.zeros(2), indices=np.zeros(2), indptr=np.zeros(2), d=0, y=0)
    _same(want, load_tabular(spec, "logreg"))
    assert not marker.exists()
    with np.load(entry) as z:  # rewritten
        assert z["indices"].dtype.kind == "i"


def test_the_dense_size_limit_still_names_the_line(tmp_path, store):
    spec = _file(tmp_path, "+1 1:1\n-1 5000:1\n")
    load_tabular(spec, "logreg")
    with pytest.raises(ValueError, match="line 2: feature index 5000"):
        load_tabular(spec, "logreg", max_dense_gib=1e-6)


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPZOO_CACHE", "off")
    monkeypatch.setattr(cache.Path, "home", lambda: tmp_path / "home")
    load_tabular(_file(tmp_path), "logreg")
    assert not cache.enabled() and not (tmp_path / "home").exists()


def test_an_unwritable_folder_costs_only_the_memo(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COMPZOO_CACHE", str(blocker / "sub"))
    got = load_tabular(_file(tmp_path), "logreg")
    assert got.X.shape == (4, 4) and "cannot write the cache file" in caplog.text


def _problem(nodes=2, lam=0.1):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((40, 6))
    b = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    counts = np.full(nodes, 40 // nodes)
    return LogRegNonconvex(A, b, counts, lam=lam)


def test_smoothness_is_computed_once_per_data_split_and_lam(store, monkeypatch):
    calls = []
    real = glm_consts.smoothness

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(glm_consts, "smoothness", counted)
    first = _problem().consts
    again = _problem().consts
    assert len(calls) == 1
    assert np.array_equal(first.L_i.numpy(), again.L_i.numpy()) and first.L == again.L
    other = _problem(nodes=4).consts
    _problem(lam=0.2).consts  # noqa: B018
    assert len(calls) == 3 and other.L_i.shape == (4,)
    L_i, L = real(_problem()._A64, np.array([0, 20, 40]), np.full(40, 1 / 40), 0.25, 0.2)
    assert np.allclose(first.L_i.numpy(), L_i) and first.L == pytest.approx(L)
