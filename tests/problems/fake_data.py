"""Small CIFAR-10 folders in each distribution's layout, and crafted files whose loading would
run code (each would write a marker file): shared by the data tests and the bad-input
catalogue."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np

PY_NAMES = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
BIN_NAMES = [f"{n}.bin" for n in PY_NAMES]


def batches(per_batch: int = 20, seed: int = 0) -> list[tuple[np.ndarray, list[int]]]:
    """Six batches of ``per_batch`` random images (uint8 rows of 3072) with labels 0..9."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in PY_NAMES:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        out.append((data, rng.integers(0, 10, per_batch).tolist()))
    return out


def _str(b: bytes) -> bytes:
    """A python 2 ``str`` as cPickle writes it (SHORT_BINSTRING or BINSTRING)."""
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def py2_batch(data: np.ndarray, labels: list[int], label: bytes) -> bytes:
    """The bytes python 2's ``cPickle.dump(batch, f, 2)`` writes for a CIFAR-10 batch: a dict of
    ``str`` keys, ``labels`` a list of ints, ``data`` an ndarray pickled through
    ``numpy.core.multiarray._reconstruct`` and a ``dtype`` state, its pixels one ``str``."""
    n, m = data.shape
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\nq\x03cnumpy\nndarray\nq\x04K\x00\x85U\x01b\x87Rq\x05"
        + b"(K\x01M" + struct.pack("<H", n) + b"M" + struct.pack("<H", m) + b"\x86"
        + b"cnumpy\ndtype\nq\x06U\x02u1K\x00K\x01\x87Rq\x07"
        + b"(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
        + b"\x89" + _str(data.tobytes()) + b"tb"
    )  # fmt: skip
    names = b"".join(_str(b"img_%05d.png" % i) for i in range(n))
    return (
        b"\x80\x02}q\x01(" + _str(b"batch_label") + _str(label)
        + _str(b"labels") + b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"e"
        + _str(b"data") + array
        + _str(b"filenames") + b"](" + names + b"eu."
    )  # fmt: skip


def write_py(root: Path, parts, protocol: int | None = None) -> Path:
    """The python distribution: ``protocol=None`` writes python 2's bytes (:func:`py2_batch`),
    an integer pickles the same dict (bytes keys) with this python at that protocol."""
    root.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in zip(PY_NAMES, parts, strict=True):
        label = f"batch {name}".encode()
        if protocol is None:
            raw = py2_batch(data, labels, label)
        else:
            batch = {b"batch_label": label, b"labels": labels, b"data": data, b"filenames": []}
            raw = pickle.dumps(batch, protocol=protocol)
        (root / name).write_bytes(raw)
    return root


def write_bin(root: Path, parts) -> Path:
    """The binary distribution: records of one label byte and 3072 pixel bytes."""
    root.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in zip(BIN_NAMES, parts, strict=True):
        rec = np.concatenate([np.asarray(labels, dtype=np.uint8)[:, None], data], axis=1)
        (root / name).write_bytes(rec.tobytes())
    return root


class WritesMarker:
    """Unpickling it runs ``exec`` of code that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write('x')",))


class RunsShell:
    """Unpickling it runs ``os.system('touch path')``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        import os

        return (os.system, (f"touch '{self.path}'",))


def crafted_batch(payload: object, protocol: int = 2) -> bytes:
    """A batch whose ``data`` is ``payload`` (e.g. :class:`WritesMarker`)."""
    return pickle.dumps({b"batch_label": b"x", b"labels": [0], b"data": payload}, protocol)


def write_crafted_cifar(root: Path, marker: Path, bad: str = "data_batch_3") -> Path:
    """A python-distribution folder whose batch ``bad`` would create ``marker`` when unpickled
    (the others are genuine)."""
    write_py(root, batches(per_batch=2), protocol=2)
    (root / bad).write_bytes(crafted_batch(WritesMarker(marker)))
    return root


def crafted_npz(path: Path, fields: list[str], marker: Path) -> None:
    """An ``.npz`` whose every field is an object array that creates ``marker`` when unpickled."""
    arr = np.empty(1, dtype=object)
    arr[0] = WritesMarker(marker)
    with open(path, "wb") as fh:
        np.savez(fh, **{name: arr for name in fields})
