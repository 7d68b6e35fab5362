"""Data for the deep-net problems: class labels ``0..K-1`` and a held-out split.

* ``digits``: scikit-learn's 8x8 digits, ``(N, 1, 8, 8)`` scaled to [0, 1]; a seeded
  ``holdout`` fraction is held out, the rest stays in file order.
* ``wine``, ``breast-cancer``: the bundled tabular sets (for ``mlp``), standardised, same
  holdout.
* ``cifar10:PATH``: the python-pickle batches of CIFAR-10 (``PATH/data_batch_1..5`` for
  training, ``PATH/test_batch`` held out; Krizhevsky 2009), ``(N, 3, 32, 32)`` normalised per
  channel. Pickles can run code when loaded: only point this at the official archive.
* ``synthetic``: Gaussian images of the problem's input shape with labels from a fixed random
  linear teacher on 2x2-average-pooled pixels (learnable, not memorisation), seeded.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from problems.data import Dataset
from streams import Streams

__all__ = ["load_images", "IMAGE_SETS"]

IMAGE_SETS = ("digits", "wine", "breast-cancer", "synthetic", "cifar10:PATH")
_HOLDOUT_TAG = 0x40D0
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)


def _holdout(X: np.ndarray, y: np.ndarray, frac: float, seed: int, name: str) -> Dataset:
    if not 0 < frac < 1:
        raise ValueError(f"holdout must be in (0, 1), got {frac!r}")
    N = X.shape[0]
    k = max(1, int(round(frac * N)))
    test = np.sort(Streams.shared(seed, 1, _HOLDOUT_TAG).permutation(N)[0, :k].numpy())
    train = np.setdiff1d(np.arange(N), test)
    return Dataset(name, X[train], y[train], X[test], y[test], int(y.max()) + 1)


def _cifar(path: str, problem: str, samples: int | None) -> Dataset:
    root = Path(path).expanduser()
    files = [root / f"data_batch_{k}" for k in range(1, 6)] + [root / "test_batch"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"{problem}: CIFAR-10 batches not found under {path!r}: {missing[0]}")
    parts = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
            x = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            y = np.asarray(batch[b"labels"], dtype=np.int64)
        except Exception as e:  # any unpickling or format failure is a bad file
            raise ValueError(f"{problem}: malformed CIFAR-10 batch {str(f)!r}: {e}") from e
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{problem}: malformed CIFAR-10 batch {str(f)!r}: sizes differ")
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
    rng = np.random.default_rng([seed, 0x1A6E])
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
    from sklearn import datasets

    if spec == "synthetic":
        n = 1000 if samples is None else samples
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or test_samples < 1:
            raise ValueError(f"{problem}: samples must be a positive integer, got {n!r}")
        return _synthetic(shape, n, test_samples, seed)
    if spec.startswith("cifar10:"):
        return _cifar(spec.removeprefix("cifar10:"), problem, samples)
    if spec == "digits":
        X, y = datasets.load_digits(return_X_y=True)
        X = (X / 16.0).reshape(-1, 1, 8, 8)
    elif spec in ("wine", "breast-cancer"):
        loader = datasets.load_wine if spec == "wine" else datasets.load_breast_cancer
        X, y = loader(return_X_y=True)
        X = (X - X.mean(0)) / X.std(0)
    else:
        raise ValueError(f"{problem}: unknown dataset {spec!r}; allowed: {', '.join(IMAGE_SETS)}")
    ds = _holdout(X.astype(np.float32), y.astype(np.int64), holdout, seed, spec)
    if samples is not None:
        ds = Dataset(ds.name, ds.X[:samples], ds.y[:samples], ds.X_test, ds.y_test, ds.num_classes)
    return ds
