"""No data file runs code: CIFAR-10 in its binary distribution and its python batches through
the restricted unpickler (genuine batches of every pickle protocol load, crafted ones are
refused naming the file and the global), and a crafted cache entry is ignored."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from problems.images import load_images
from tests.problems.fake_data import (
    RunsShell,
    WritesMarker,
    batches,
    crafted_batch,
    crafted_npz,
    write_bin,
    write_crafted_cifar,
    write_py,
)

REPO = Path(__file__).resolve().parents[2]
MEAN, STD = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])


def cifar(path: Path, **kw):
    return load_images(f"cifar10:{path}", "cnn", shape=(3, 32, 32), **kw)


def normalised(data: np.ndarray) -> np.ndarray:
    x = data.reshape(-1, 3, 32, 32) / 255.0
    return (x - MEAN[:, None, None]) / STD[:, None, None]


def test_both_distributions_and_every_protocol_load_the_same_arrays(tmp_path):
    parts = batches(per_batch=20)
    folders = {
        "bin": write_bin(tmp_path / "bin", parts),
        "python2": write_py(tmp_path / "py2", parts),
        **{f"protocol {p}": write_py(tmp_path / f"p{p}", parts, protocol=p) for p in (2, 4, 5)},
    }
    # the python 2 layout is a valid pickle: python's own loader reads the same batch back
    with open(folders["python2"] / "data_batch_1", "rb") as fh:
        genuine = pickle.load(fh, encoding="bytes")
    assert np.array_equal(genuine[b"data"], parts[0][0]) and genuine[b"labels"] == parts[0][1]
    want_X = normalised(np.concatenate([d for d, _ in parts[:5]]))
    want_y = np.concatenate([y for _, y in parts[:5]])
    ref = cifar(folders["bin"])
    np.testing.assert_allclose(ref.X, want_X, rtol=1e-5, atol=1e-5)
    assert np.array_equal(ref.y, want_y) and ref.X.shape == (100, 3, 32, 32)
    np.testing.assert_allclose(ref.X_test, normalised(parts[5][0]), rtol=1e-5, atol=1e-5)
    assert np.array_equal(ref.y_test, parts[5][1]) and ref.num_classes == 10
    for label, folder in folders.items():
        ds = cifar(folder)
        assert np.array_equal(ds.X, ref.X) and np.array_equal(ds.y, ref.y), label
        assert np.array_equal(ds.X_test, ref.X_test) and np.array_equal(ds.y_test, ref.y_test)
    assert cifar(folders["protocol 5"], samples=7).X.shape == (7, 3, 32, 32)


def test_binary_batches_are_preferred_and_found_in_the_archive_folders(tmp_path):
    bin_parts, py_parts = batches(per_batch=3, seed=1), batches(per_batch=3, seed=2)
    write_bin(tmp_path, bin_parts)
    write_py(tmp_path, py_parts)
    assert np.array_equal(cifar(tmp_path).y_test, bin_parts[5][1])
    write_bin(tmp_path / "archive" / "cifar-10-batches-bin", bin_parts)
    assert np.array_equal(cifar(tmp_path / "archive").y_test, bin_parts[5][1])
    write_py(tmp_path / "other" / "cifar-10-batches-py", py_parts)
    assert np.array_equal(cifar(tmp_path / "other").y_test, py_parts[5][1])


def test_malformed_binary_batches_are_refused(tmp_path):
    write_bin(tmp_path, batches(per_batch=2))
    (tmp_path / "data_batch_2.bin").write_bytes(b"\0" * 3074)
    with pytest.raises(ValueError, match=r"data_batch_2\.bin': 3074 bytes, not a whole number"):
        cifar(tmp_path)
    write_bin(tmp_path, batches(per_batch=2))
    raw = bytearray((tmp_path / "test_batch.bin").read_bytes())
    raw[3073] = 12  # the second record's label
    (tmp_path / "test_batch.bin").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"test_batch\.bin': label 12 \(allowed: 0\.\.9\)"):
        cifar(tmp_path)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize(
    ("payload", "global_name"),
    [(WritesMarker, r"(builtins|__builtin__)\.exec"), (RunsShell, r"posix\.system")],
)
def test_a_crafted_batch_is_refused_and_runs_nothing(tmp_path, protocol, payload, global_name):
    marker = tmp_path / "marker"
    write_py(tmp_path / "c", batches(per_batch=2), protocol=2)
    (tmp_path / "c" / "data_batch_4").write_bytes(crafted_batch(payload(marker), protocol))
    with pytest.raises(
        ValueError,
        match=rf"cnn: CIFAR-10 batch '.*data_batch_4' refused: it asks for the global "
        rf"{global_name}, which a genuine batch never holds",
    ):
        cifar(tmp_path / "c")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        (np.array([1, "a"], dtype=object), "dtype object"),
        (np.zeros(3, dtype=[("a", "u1")]), r"dtype \|V1"),
        (np.array(["ab"]), "dtype <U2"),
        (np.ma.array([1, 2]), r"the global numpy\.ma\.core\._mareconstruct"),
        (np.matrix([[1]]), r"the global numpy\.matrix,"),
        ({1, 2}.__iter__(), r"the global (builtins|__builtin__)\.iter"),
    ],
)
def test_object_arrays_subclasses_and_other_objects_are_refused(tmp_path, value, refused):
    write_py(tmp_path, batches(per_batch=2), protocol=2)
    (tmp_path / "test_batch").write_bytes(crafted_batch(value))
    with pytest.raises(ValueError, match=rf"test_batch' refused: it asks for {refused}"):
        cifar(tmp_path)


@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [
        # a dtype state naming fields (numpy's own __setstate__ would take its flags as given)
        (b"K\x03U\x01|NNN", b"K\x03U\x01|N(U\x01atN", "dtype state"),
        # a shape that the raw bytes do not fill
        (b"(K\x01M\x02\x00", b"(K\x01M\x09\x00", r"array state \(shape \(9, 3072\) does not"),
        # an ndarray subclass in numpy's array reconstruction
        (b"cnumpy\nndarray\n", b"cnumpy\nrecarray\n", r"the global numpy\.recarray"),
    ],
)
def test_tampered_python2_batches_are_refused(tmp_path, old, new, refused):
    write_py(tmp_path, batches(per_batch=2))
    raw = (tmp_path / "data_batch_1").read_bytes()
    assert raw.count(old) == 1
    (tmp_path / "data_batch_1").write_bytes(raw.replace(old, new))
    with pytest.raises(ValueError, match=rf"data_batch_1' refused: it asks for {refused}"):
        cifar(tmp_path)


def test_crafted_batch_through_the_runner_exits_2_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    folder = write_crafted_cifar(tmp_path / "cifar", marker)
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.run", "ef21", "--problem", "cnn"]
        + ["--dataset", f"cifar10:{folder}", "--nodes", "2", "--iters", "1"]
        + ["--out", str(tmp_path / "r")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"CIFAR-10 batch '{folder / 'data_batch_3'}' refused" in proc.stderr
    assert "__builtin__.exec" in proc.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_a_crafted_cache_entry_is_ignored_and_runs_nothing(tmp_path, monkeypatch, caplog):
    from algorithms.run import run

    cache = tmp_path / "cache"
    monkeypatch.setenv("COMPZOO_CACHE", str(cache))
    data = tmp_path / "d.txt"
    data.write_text(
        "".join(f"{1 if i % 3 else -1} 1:{i % 5} 2:1 {3 + i % 4}:0.5\n" for i in range(40))
    )
    argv = ["ef21", "--compressor", "topk:k=2", "--problem", "logreg"]
    argv += ["--dataset", f"libsvm:{data}", "--nodes", "2", "--iters", "5", "--quiet"]
    assert run([*argv, "--out", str(tmp_path / "r1")]) == 0
    entries = sorted(cache.glob("*.npz"))
    assert {p.name.split("-")[0] for p in entries} >= {"libsvm", "fstar"}
    marker = tmp_path / "marker"
    for path in entries:
        with np.load(path, allow_pickle=False) as z:
            fields = list(z.files)
        crafted_npz(path, fields, marker)
    with caplog.at_level(logging.WARNING, logger="problems.cache"):
        assert run([*argv, "--out", str(tmp_path / "r2")]) == 0
    ignored = [
        r.getMessage() for r in caplog.records if "ignoring unreadable cache" in r.getMessage()
    ]
    assert len(ignored) >= len(entries), caplog.text
    assert "Object arrays cannot be loaded when allow_pickle=False" in ignored[0]
    assert not marker.exists()
    for path in entries:  # rewritten with numbers only
        with np.load(path, allow_pickle=False) as z:
            assert all(z[name].dtype != object for name in z.files)
