"""Data for the deep-net problems: class labels ``0..K-1`` and a held-out split.

* ``digits``: scikit-learn's 8x8 digits, ``(N, 1, 8, 8)`` scaled to [0, 1]; a seeded
  ``holdout`` fraction is held out, the rest stays in file order.
* ``wine``, ``breast-cancer``: the bundled tabular sets (for ``mlp``), standardised, same
  holdout.
* ``cifar10:PATH``: CIFAR-10 (Krizhevsky 2009), ``(N, 3, 32, 32)`` normalised per channel,
  batches 1-5 for training and the test batch held out. ``PATH`` (or its
  ``cifar-10-batches-bin`` or ``cifar-10-batches-py`` folder) holds either distribution:
  the binary one (``data_batch_1.bin`` .. ``data_batch_5.bin``, ``test_batch.bin``: records of
  1 label byte and 3072 pixel bytes, used whenever its files are there) or the python one
  (``data_batch_1`` .. ``data_batch_5``, ``test_batch``: pickled dicts). No file runs code: the
  python batches are read by an unpickler that builds only what a genuine batch holds (dicts,
  lists, bytes, str, numbers and numpy arrays of numbers, rebuilt from their raw bytes here, never
  by numpy's own unpickling code) and refuses any other global a file names (``os.system``,
  ``builtins.exec``, object arrays, ndarray subclasses, ...) with a ValueError naming the file
  and the global.
* ``synthetic``: Gaussian images of the problem's input shape with labels from a fixed random
  linear teacher on 2x2-average-pooled pixels (learnable, not memorisation), seeded.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np

from problems import datasets
from problems.data import Dataset
from streams import Streams, tags
from streams.suggest import did_you_mean

__all__ = ["load_images", "IMAGE_SETS"]

IMAGE_SETS = ("digits", "wine", "breast-cancer", "synthetic", "cifar10:PATH")
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)
_CIFAR_BIN = [f"data_batch_{k}.bin" for k in range(1, 6)] + ["test_batch.bin"]
_CIFAR_PY = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
_CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then the red, green and blue 32x32 planes


def _holdout(X: np.ndarray, y: np.ndarray, frac: float, seed: int, name: str) -> Dataset:
    if not 0 < frac < 1:
        raise ValueError(f"holdout must be in (0, 1), got {frac!r}")
    N = X.shape[0]
    k = max(1, int(round(frac * N)))
    test = np.sort(Streams.shared(seed, 1, tags.HOLDOUT).permutation(N)[0, :k].numpy())
    train = np.setdiff1d(np.arange(N), test)
    return Dataset(name, X[train], y[train], X[test], y[test], int(y.max()) + 1)


class _Refused(pickle.UnpicklingError):
    """A global that a CIFAR-10 batch does not need."""


class _ArrayType:
    """What the unpickler returns for ``numpy.ndarray``: a tag that only the array builders
    below accept (the class itself is never handed to the pickle machine)."""

    __slots__ = ()


_ARRAY = _ArrayType()


class _DType:
    """A numeric dtype named by a pickle, applied only by the array builders below: numpy's
    ``dtype.__setstate__`` never sees the file's state (its flags could claim object items)."""

    def __init__(self, spec: object) -> None:
        if not isinstance(spec, str | bytes):
            raise _Refused(f"dtype spec {spec!r} (only the name of a numeric dtype)")
        try:
            dt = np.dtype(spec.decode("ascii") if isinstance(spec, bytes) else spec)
        except (TypeError, ValueError, UnicodeDecodeError) as e:
            raise _Refused(f"dtype {spec!r} ({e})") from None
        if dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None:
            raise _Refused(f"dtype {dt} (only numeric dtypes: no objects, records or strings)")
        self.dtype = dt

    def __setstate__(self, state: object) -> None:
        order = state[1] if isinstance(state, tuple) and len(state) >= 8 else None
        order = order.decode("ascii", "replace") if isinstance(order, bytes) else order
        if order not in ("<", ">", "=", "|") or any(v is not None for v in state[2:5]):
            raise _Refused(f"dtype state {state!r} (only a plain numeric dtype's)")
        if order in "<>":
            self.dtype = self.dtype.newbyteorder(order)


def _dtype(spec: object, align: object = False, copy: object = False) -> _DType:
    """``numpy.dtype`` as a pickle calls it."""
    return _DType(spec)


class _Array:
    """An ndarray named by a pickle: its data comes from the raw bytes of its state."""

    array: np.ndarray | None = None

    def __setstate__(self, state: object) -> None:
        if self.array is not None or not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _Refused(f"ndarray state of {type(state).__name__} (malformed)")
        shape, dt, fortran, raw = state[-4:]
        self.array = _from_bytes(raw, dt, shape, "F" if fortran else "C")


def _reconstruct(cls: object, shape: object, dtype: object) -> _Array:
    """``numpy.core.multiarray._reconstruct``: a plain ndarray, filled by its state."""
    if cls is not _ARRAY:
        raise _Refused(f"array of class {cls!r} (only numpy.ndarray)")
    return _Array()


def _frombuffer(buf: object, dtype: object, shape: object, order: object) -> _Array:
    """``numpy.core.numeric._frombuffer``, the array of a protocol-5 pickle."""
    out = _Array()
    out.array = _from_bytes(buf, dtype, shape, order)
    return out


def _scalar(dt: object, raw: object) -> np.generic:
    """``numpy.core.multiarray.scalar``: a numpy number (e.g. a label kept as ``np.int64``)."""
    return _from_bytes(raw, dt, (), "C")[()]


def _from_bytes(raw: object, dt: object, shape: object, order: object) -> np.ndarray:
    if not isinstance(dt, _DType):
        raise _Refused(f"array of dtype {dt!r} (only numeric dtypes)")
    if isinstance(raw, str):  # a python 2 str unpickled as text
        raw = raw.encode("latin-1")
    ok_shape = isinstance(shape, tuple) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    )
    if not isinstance(raw, bytes | bytearray) or not ok_shape or order not in ("C", "F"):
        raise _Refused("array state (malformed: shape, order or raw bytes)")
    if math.prod(shape) * dt.dtype.itemsize != len(raw):
        raise _Refused(f"array state (shape {shape} does not match {len(raw)} bytes)")
    return np.frombuffer(raw, dt.dtype).reshape(shape, order=order).copy()


def _latin1(text: object, encoding: object = "latin1") -> bytes:
    """``_codecs.encode``, which python 3 pickles bytes with under protocol 2."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "latin_1"):
        raise _Refused(f"_codecs.encode of {type(text).__name__} as {encoding!r}")
    return text.encode("latin-1")


def _from_iterable(kind: type):
    """A builtin container or bytes built from an iterable or latin-1 text only
    (``bytes(10**12)`` would allocate what the file never held)."""

    def build(data: object = (), encoding: object = None) -> object:
        if isinstance(data, int) or encoding not in (None, "latin1", "latin-1", "latin_1"):
            raise _Refused(f"{kind.__name__} of {type(data).__name__} ({encoding!r})")
        return kind(data) if encoding is None else kind(data, encoding)

    return build


_BUILTINS = {
    name: _from_iterable(kind)
    for name, kind in (
        ("dict", dict), ("list", list), ("tuple", tuple), ("set", set),
        ("frozenset", frozenset), ("bytes", bytes), ("bytearray", bytearray),
    )
}  # fmt: skip
_MULTIARRAY = ("numpy.core.multiarray", "numpy._core.multiarray")  # numpy 1 and numpy 2 names
_ALLOWED = {
    **{(m, "_reconstruct"): _reconstruct for m in _MULTIARRAY},
    **{(m, "scalar"): _scalar for m in _MULTIARRAY},
    **{(m, "_frombuffer"): _frombuffer for m in ("numpy.core.numeric", "numpy._core.numeric")},
    ("numpy", "ndarray"): _ARRAY,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _latin1,
    **{(m, name): f for m in ("builtins", "__builtin__") for name, f in _BUILTINS.items()},
}  # fmt: skip


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 python batch and nothing else: every global the file names is
    looked up in ``_ALLOWED``, whose entries build plain values; any other is refused."""

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(f"the global {module}.{name}") from None

    def persistent_load(self, pid: object) -> object:
        raise _Refused(f"the persistent id {pid!r}")


def _plain(obj: object, seen: dict[int, object] | None = None, depth: int = 0) -> object:
    """``obj`` with the unpickler's arrays replaced by ndarrays; refuses anything else that is
    not a dict, list, tuple, set, bytes, str or number. Each container is converted once (a
    pickle can refer to one list many times), and nesting is bounded (it can also hold a list
    that contains itself)."""
    seen = {} if seen is None else seen
    if id(obj) in seen:
        return seen[id(obj)]
    if depth > 20:
        raise _Refused("nesting deeper than a batch's")
    if isinstance(obj, _Array):
        if obj.array is None:
            raise _Refused("an array without data")
        out = obj.array
    elif isinstance(obj, dict):
        out = {_plain(k, seen, depth + 1): _plain(v, seen, depth + 1) for k, v in obj.items()}
    elif isinstance(obj, list | tuple | set | frozenset):
        out = type(obj)(_plain(v, seen, depth + 1) for v in obj)
    elif obj is None or isinstance(obj, bytes | bytearray | str | int | float | np.number):
        return obj
    else:
        raise _Refused(f"a value of type {type(obj).__name__}")
    seen[id(obj)] = out
    return out


def _read_py_batch(f: Path, problem: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(f, "rb") as fh:
            batch = _plain(_BatchUnpickler(fh, encoding="bytes").load())
    except _Refused as e:
        raise ValueError(
            f"{problem}: CIFAR-10 batch {str(f)!r} refused: it asks for {e}, which a genuine "
            "batch never holds, and nothing of it was run (allowed: dicts, lists, bytes, str, "
            "numbers and numpy arrays of numbers; the binary distribution, "
            "cifar-10-batches-bin, needs no unpickling)"
        ) from None
    except Exception as e:  # any other unpickling failure is a malformed file
        raise ValueError(f"{problem}: malformed CIFAR-10 batch {str(f)!r}: {e}") from e
    if not isinstance(batch, dict):
        raise ValueError(
            f"{problem}: malformed CIFAR-10 batch {str(f)!r}: a {type(batch).__name__}, not a dict"
        )
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.size % 3072:
        raise ValueError(
            f"{problem}: malformed CIFAR-10 batch {str(f)!r}: 'data' must be uint8 rows of 3072 "
            f"pixels, got {type(data).__name__} {getattr(data, 'dtype', '')}"
        )
    try:
        y = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{problem}: malformed CIFAR-10 batch {str(f)!r}: labels: {e}") from e
    return data.reshape(-1, 3, 32, 32), y


def _read_bin_batch(f: Path, problem: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        raw = np.fromfile(f, dtype=np.uint8)
    except OSError as e:
        raise ValueError(f"{problem}: cannot read CIFAR-10 batch {str(f)!r}: {e}") from e
    if raw.size == 0 or raw.size % _CIFAR_RECORD:
        raise ValueError(
            f"{problem}: malformed CIFAR-10 batch {str(f)!r}: {raw.size} bytes, not a whole "
            f"number of {_CIFAR_RECORD}-byte records (1 label byte, 3072 pixel bytes)"
        )
    rec = raw.reshape(-1, _CIFAR_RECORD)
    return rec[:, 1:].reshape(-1, 3, 32, 32).copy(), rec[:, 0].astype(np.int64)


def _cifar_files(path: str, problem: str) -> tuple[list[Path], bool]:
    """The six batch files under ``path`` and whether they are the binary distribution."""
    root = Path(path).expanduser()
    where = f"CIFAR-10 batches not found under {path!r}"
    if not path or not root.is_dir():
        raise ValueError(
            f"{problem}: {where}: " + ("not a folder" if root.exists() else "no such folder")
        )
    folders = (root, root / "cifar-10-batches-bin", root / "cifar-10-batches-py")
    for names, binary in ((_CIFAR_BIN, True), (_CIFAR_PY, False)):
        for folder in folders:
            files = [folder / n for n in names]
            if all(f.is_file() for f in files):
                return files, binary
    for f in [folder / n for folder in folders for n in (*_CIFAR_BIN, *_CIFAR_PY)]:
        kind = datasets.not_regular(f)
        if kind:
            raise ValueError(f"{problem}: CIFAR-10 batch {str(f)!r} is {kind}, not a regular file")
    missing = next(str(root / n) for n in _CIFAR_PY if not (root / n).is_file())
    raise ValueError(
        f"{problem}: {where}: {missing} is missing (expected, in the folder or its "
        f"cifar-10-batches-bin or cifar-10-batches-py: {', '.join(_CIFAR_BIN)} for the binary "
        f"version, or {', '.join(_CIFAR_PY)} for the python version)"
    )


def _cifar(path: str, problem: str, samples: int | None) -> Dataset:
    files, binary = _cifar_files(path, problem)
    parts = []
    for f in files:
        x, y = (_read_bin_batch if binary else _read_py_batch)(f, problem)
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{problem}: malformed CIFAR-10 batch {str(f)!r}: {x.shape[0]} images but "
                f"{y.shape[0]} labels"
            )
        if y.size and (y.min() < 0 or y.max() > 9):
            raise ValueError(
                f"{problem}: malformed CIFAR-10 batch {str(f)!r}: label {int(y.max())} "
                f"(allowed: 0..9)"
            )
        parts.append((x, y))

    def norm(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float32) / 255.0
        return (x - _CIFAR_MEAN[:, None, None]) / _CIFAR_STD[:, None, None]

    X = np.concatenate([p[0] for p in parts[:5]])
    y = np.concatenate([p[1] for p in parts[:5]])
    if samples is not None:
        X, y = X[:samples], y[:samples]
    return Dataset(f"cifar10:{path}", norm(X), y, norm(parts[5][0]), parts[5][1], 10)


def _synthetic(shape: tuple[int, ...], samples: int, test_samples: int, seed: int) -> Dataset:
    rng = np.random.default_rng([seed, tags.IMAGES_SYNTHETIC])
    X = rng.standard_normal((samples + test_samples, *shape)).astype(np.float32)
    pooled = X
    if len(shape) == 3:
        c, h, w = shape
        pooled = X.reshape(-1, c, h // 2, 2, w // 2, 2).mean((3, 5))
    feats = pooled.reshape(X.shape[0], -1)
    teacher = rng.standard_normal((feats.shape[1], 10))
    y = np.argmax(feats @ teacher, axis=1).astype(np.int64)
    return Dataset("synthetic", X[:samples], y[:samples], X[samples:], y[samples:], 10)


def load_images(
    spec: str,
    problem: str,
    *,
    shape: tuple[int, ...],
    seed: int = 0,
    samples: int | None = None,
    test_samples: int = 200,
    holdout: float = 0.2,
) -> Dataset:
    """Load ``spec`` for a network whose input has ``shape`` (see the module docstring)."""
    from sklearn import datasets as sk

    if spec == "synthetic":
        n = 1000 if samples is None else samples
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or test_samples < 1:
            raise ValueError(f"{problem}: samples must be a positive integer, got {n!r}")
        return _synthetic(shape, n, test_samples, seed)
    if spec.startswith("cifar10:"):
        return _cifar(spec.removeprefix("cifar10:"), problem, samples)
    if spec == "digits":
        X, y = sk.load_digits(return_X_y=True)
        X = (X / 16.0).reshape(-1, 1, 8, 8)
    elif spec in ("wine", "breast-cancer"):
        loader = sk.load_wine if spec == "wine" else sk.load_breast_cancer
        X, y = loader(return_X_y=True)
        X = (X - X.mean(0)) / X.std(0)
    elif spec == "cifar10":
        raise ValueError(
            f"{problem}: dataset 'cifar10' needs the folder of its batches: cifar10:PATH"
        )
    else:
        hint = did_you_mean(spec.split(":", 1)[0], [n.removesuffix(":PATH") for n in IMAGE_SETS])
        raise ValueError(
            f"{problem}: unknown dataset {spec!r}{hint}; allowed: {', '.join(IMAGE_SETS)}"
        )
    ds = _holdout(X.astype(np.float32), y.astype(np.int64), holdout, seed, spec)
    if samples is not None:
        ds = Dataset(ds.name, ds.X[:samples], ds.y[:samples], ds.X_test, ds.y_test, ds.num_classes)
    return ds
