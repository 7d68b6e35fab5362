"""LIBSVM files: the dimension a file may claim (``max_dim`` or its stored entries), checked
before anything of size d exists; the index scan against scikit-learn's parser; byte-order
marks; paths that are not regular files; suggestions for misspelt data set names."""

from __future__ import annotations

import os
import time
import tracemalloc

import numpy as np
import pytest

from problems import make_problem
from problems.data import MAX_DIM, _scan_indices, load_tabular
from problems.images import load_images

HUGE = "1 1:1 99999999:1\n-1 2:1\n"


def write(tmp_path, text: str | bytes, name: str = "d.txt") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def test_a_stray_index_is_refused_at_once_without_allocating_d(tmp_path):
    path = write(tmp_path, HUGE, "h.svm")
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as err:
        make_problem("logreg", dataset=f"libsvm:{path}", nodes=2)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert str(err.value) == (
        f"logreg: LIBSVM file '{path}', line 1: feature index 99999999 makes d = 99999999 "
        "columns, more than max_dim = 1048576 and more than the file's 3 stored entries "
        "(allowed: d <= max(max_dim, stored entries)); if the file is meant to be that wide, "
        "raise the limit with --problem-opt max_dim=99999999 (runner) or --max-dim 99999999 "
        "(python -m problems)"
    )
    assert elapsed < 1.0
    assert peak < 8 * 2**20  # one float64 vector of d would be 800 MB


def test_the_limit_is_max_dim_or_the_stored_entries(tmp_path):
    assert MAX_DIM == 2**20
    square = write(tmp_path, "1 1:1 2:1 3:1\n-1 4:1\n")  # d = 4 = entries
    assert load_tabular(f"libsvm:{square}", "t", max_dim=2).X.shape == (2, 4)
    wide = write(tmp_path, "1 1:1\n# 9:9 in a comment\n-1 5:1\n", "w.txt")  # d = 5, 2 entries
    with pytest.raises(
        ValueError, match=r"w\.txt', line 3: feature index 5 makes d = 5 .*2 stored"
    ):
        load_tabular(f"libsvm:{wide}", "t", max_dim=4)
    assert load_tabular(f"libsvm:{wide}", "t", max_dim=5).X.shape == (2, 5)
    zero = write(tmp_path, "1 0:1\n-1 4:1\n", "z.txt")  # zero-based: d = 5
    with pytest.raises(ValueError, match=r"feature index 4 makes d = 5 columns"):
        load_tabular(f"libsvm:{zero}", "t", index_base=0, max_dim=4)
    huge = write(tmp_path, HUGE, "h.svm")
    X = load_tabular(f"libsvm:{huge}", "t", max_dim=10**8).X
    assert X.shape == (2, 99999999) and X.nnz == 3


def test_a_file_read_back_from_the_cache_meets_the_limit_again(tmp_path):
    huge = write(tmp_path, HUGE, "h.svm")
    assert load_tabular(f"libsvm:{huge}", "t", max_dim=10**8).X.shape[1] == 99999999
    with pytest.raises(ValueError, match=r"h\.svm', line 1: feature index 99999999"):
        load_tabular(f"libsvm:{huge}", "t")


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "8"])
def test_max_dim_must_be_a_positive_integer(tmp_path, bad):
    with pytest.raises(ValueError, match=rf"t: max_dim must be a positive integer, got {bad!r}"):
        load_tabular(f"libsvm:{write(tmp_path, HUGE)}", "t", max_dim=bad)


@pytest.mark.parametrize(
    ("text", "entries", "top"),
    [
        (b"1 1:1 99999999:1\n-1 2:1\n", 3, 99999999),
        (b"1 qid:3 2:1 # 77:1 in a comment\n-1 3:4\n", 3, 3),  # qid counts, the comment not
        (b"#99:1\n1 2:1\n1 007:1\r\n", 2, 7),
        (b"1 123456789012345678:1 12345678901234567890123:2\n", 2, 12345678901234567890123),
        (b"1 x12345678:1 +22345678:1\n", 2, -1),  # not indices: the parser refuses them
        (b"", 0, -1),
    ],
)
def test_index_scan(text, entries, top):
    got_entries, got_top, at = _scan_indices(text, 1)
    assert (got_entries, got_top) == (entries, top)
    if top >= 0:
        assert text[at:].startswith(str(top).encode()) or text[at:].startswith(b"00")


def test_index_scan_agrees_with_the_parser_on_random_files():
    from io import BytesIO

    from sklearn.datasets import load_svmlight_file

    rng = np.random.default_rng(7)
    for _ in range(20):
        lines = []
        for _ in range(int(rng.integers(1, 40))):
            idx = np.unique(rng.integers(1, 10 ** int(rng.integers(1, 9)), int(rng.integers(1, 6))))
            entries = " ".join(f"{j}:{rng.normal():.3g}" for j in idx)
            comment = " # 999999999:1" if rng.random() < 0.2 else ""
            lines.append(f"{rng.choice([-1, 1])} {entries}{comment}")
        text = "\n".join(lines).encode()
        X, _ = load_svmlight_file(BytesIO(text), zero_based=True)
        assert _scan_indices(text, 1)[:2] == (X.nnz, int(X.indices.max()))
        # with `digits`, only indices of that many digits or more are looked for
        top = _scan_indices(text, 6)[1]
        assert top == (int(X.indices.max()) if X.indices.max() >= 10**5 else -1)


def test_a_byte_order_mark_is_ignored(tmp_path):
    text = "1 1:0.5 3:1\n-1 2:1\n"
    plain = load_tabular(f"libsvm:{write(tmp_path, text, 'plain.txt')}", "t")
    marked = load_tabular(f"libsvm:{write(tmp_path, chr(0xFEFF) + text, 'bom.txt')}", "t")
    assert (plain.X != marked.X).nnz == 0 and np.array_equal(plain.y, marked.y)
    bad = write(tmp_path, "\ufeff1 0:1\n-1 2:1\n", "bad.txt")
    with pytest.raises(ValueError, match=r"bad\.txt', line 1: feature index 0, but LIBSVM"):
        load_tabular(f"libsvm:{bad}", "t")
    label = write(tmp_path, "\ufeffspam 1:1\n", "label.txt")
    with pytest.raises(ValueError, match=r"label\.txt', line 1: label 'spam' is not a number"):
        load_tabular(f"libsvm:{label}", "t")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(
        ValueError,
        match=r"logreg: LIBSVM file '.*pipe\.txt' is a FIFO/named pipe, not a regular file",
    ):
        load_tabular(f"libsvm:{tmp_path / 'pipe.txt'}", "logreg")
    (tmp_path / "c").mkdir()
    os.mkfifo(tmp_path / "c" / "data_batch_1.bin")
    with pytest.raises(ValueError, match=r"data_batch_1\.bin' is a FIFO/named pipe, not a regular"):
        load_images(f"cifar10:{tmp_path / 'c'}", "cnn", shape=(3, 32, 32))


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("mushroom", "mushrooms"), ("a9", "a9a"), ("phising", "phishing"),
     ("breast_cancer", "breast-cancer"), ("W8A", "w8a")],
)  # fmt: skip
def test_a_misspelt_data_set_gets_a_suggestion(name, suggestion):
    with pytest.raises(
        ValueError, match=rf"unknown dataset '{name}' \(did you mean '{suggestion}'\?\); allowed: "
    ):
        load_tabular(name, "logreg")


def test_unknown_names_without_a_close_one_and_image_sets():
    with pytest.raises(ValueError) as err:
        load_tabular("mnist", "logreg")
    assert "did you mean" not in str(err.value)
    with pytest.raises(ValueError, match=r"unknown dataset 'digit' \(did you mean 'digits'\?\)"):
        load_images("digit", "cnn", shape=(1, 8, 8))
    with pytest.raises(
        ValueError, match=r"'cifar10' needs the folder of its batches: cifar10:PATH"
    ):
        load_images("cifar10", "cnn", shape=(3, 32, 32))
