"""Tabular data sets: loading, label mapping and feature scaling.

``--dataset`` names one of
* ``synthetic``: LIBSVM-like sparse data (knobs ``samples``, ``features``, ``density``,
  ``label_noise``; seeded);
* scikit-learn's bundled sets: ``breast-cancer`` (binary), ``digits`` (10 classes),
  ``digits-binary`` (0-4 vs 5-9), ``wine`` (3 classes), ``wine-binary`` (class 0 vs 1-2);
* ``libsvm:PATH``: any LIBSVM/svmlight file, read with scikit-learn's loader;
* ``a9a``, ``mushrooms``, ``phishing``, ``w8a``: shortcuts for ``libsvm:$COMPZOO_DATA/NAME.txt``.

Labels: with exactly two distinct values the smaller maps to -1 and the larger to +1 (LIBSVM's
{0, 1} and {1, 2} as DESIGN.md pins it); more values are kept as they are (classes, or targets
for least squares). Features are float64, CSR when sparse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["Dataset", "load_tabular", "scale_features", "SCALINGS", "TABULAR"]

TABULAR = ("synthetic", "breast-cancer", "digits", "digits-binary", "wine", "wine-binary")
NAMED_LIBSVM = ("a9a", "mushrooms", "phishing", "w8a")
SCALINGS = ("none", "standard", "maxabs", "rownorm")


@dataclass(frozen=True, eq=False)
class Dataset:
    """Rows of features with labels, in file order.

    Attributes:
        name: the ``--dataset`` spec it came from.
        X: ``(N, d)`` float64 ndarray or CSR matrix (tabular), or ``(N, C, H, W)`` images.
        y: ``(N,)`` labels as loaded (before any mapping).
        X_test, y_test: a held-out split, where the data set has one.
        num_classes: the number of classes of integer labels ``0..K-1`` (deep-net data).
    """

    name: str
    X: np.ndarray | sp.csr_matrix
    y: np.ndarray
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    num_classes: int | None = None

    @property
    def N(self) -> int:
        return self.X.shape[0]

    def signed(self, problem: str) -> np.ndarray:
        """Labels in {-1, +1}: the smaller of two distinct labels maps to -1."""
        values = np.unique(self.y)
        if values.size != 2:
            raise ValueError(
                f"{problem}: needs binary labels, but dataset {self.name!r} has {values.size} "
                f"distinct labels {values[:10].tolist()}; use a binary set such as "
                f"'digits-binary' or a two-class LIBSVM file"
            )
        return np.where(self.y == values[1], 1.0, -1.0)

    def targets(self) -> np.ndarray:
        """Least-squares targets: +-1 for two labels, the raw values otherwise."""
        if np.unique(self.y).size == 2:
            return self.signed("least-squares")
        return self.y.astype(np.float64)


def _synthetic(samples: int, features: int, density: float, label_noise: float, seed: int):
    for key, v in (("samples", samples), ("features", features)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density!r}")
    if not 0 <= label_noise < 0.5:
        raise ValueError(f"label_noise must be in [0, 0.5), got {label_noise!r}")
    rng = np.random.default_rng([seed, 0x5D17])
    mask = rng.random((samples, features)) < density
    X = sp.csr_matrix(np.where(mask, rng.standard_normal((samples, features)), 0.0))
    w = rng.standard_normal(features)
    y = np.where(X @ w >= 0, 1.0, -1.0)
    flip = rng.random(samples) < label_noise
    return X, np.where(flip, -y, y)


def _sklearn(name: str):
    from sklearn import datasets

    loader = {"breast-cancer": datasets.load_breast_cancer, "wine": datasets.load_wine}.get(
        name.removesuffix("-binary"), datasets.load_digits
    )
    X, y = loader(return_X_y=True)
    X = np.asarray(X, dtype=np.float64)
    if name == "digits-binary":
        y = (y >= 5).astype(np.int64)
    elif name == "wine-binary":
        y = (y != 0).astype(np.int64)
    return X, y


def _libsvm(path: str, problem: str):
    from sklearn.datasets import load_svmlight_file

    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"{problem}: dataset file {path!r} not found")
    try:
        X, y = load_svmlight_file(str(p), dtype=np.float64)
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{problem}: cannot parse LIBSVM file {path!r}: {e}") from e
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{problem}: LIBSVM file {path!r} has no samples or no features")
    if not np.all(np.isfinite(X.data)) or not np.all(np.isfinite(y)):
        raise ValueError(f"{problem}: LIBSVM file {path!r} holds non-finite values")
    return sp.csr_matrix(X), y


def _named(name: str, problem: str) -> str:
    root = os.environ.get("COMPZOO_DATA")
    if not root:
        raise ValueError(
            f"{problem}: dataset {name!r} is looked up in $COMPZOO_DATA, which is not set; "
            f"set it or pass libsvm:PATH"
        )
    for cand in (Path(root) / f"{name}.txt", Path(root) / "libsvm" / f"{name}.txt"):
        if cand.is_file():
            return str(cand)
    raise ValueError(f"{problem}: dataset {name!r} not found under COMPZOO_DATA={root!r}")


def scale_features(X: np.ndarray | sp.csr_matrix, scale: str) -> np.ndarray | sp.csr_matrix:
    """Scale features: ``none``; ``standard`` (zero mean and unit variance per feature; sparse
    data is only divided by the standard deviation, so it stays sparse); ``maxabs`` (each
    feature into [-1, 1]); ``rownorm`` (each row to unit Euclidean norm; zero rows stay zero)."""
    if scale not in SCALINGS:
        raise ValueError(f"scale must be one of {', '.join(SCALINGS)}, got {scale!r}")
    if scale == "none":
        return X
    if scale == "rownorm":
        sq = np.asarray(X.multiply(X).sum(1) if sp.issparse(X) else (X * X).sum(1)).ravel()
        inv = np.where(sq > 0, 1.0 / np.sqrt(np.where(sq > 0, sq, 1.0)), 0.0)
        return sp.csr_matrix(sp.diags(inv) @ X) if sp.issparse(X) else X * inv[:, None]
    if scale == "maxabs":
        mx = abs(X).max(axis=0)
        mx = np.asarray(mx.toarray() if sp.issparse(mx) else mx).ravel()
        inv = 1.0 / np.where(mx > 0, mx, 1.0)
    else:
        if sp.issparse(X):
            mean = np.asarray(X.mean(0)).ravel()
            var = np.asarray(X.multiply(X).mean(0)).ravel() - mean**2
        else:
            mean, var = X.mean(0), X.var(0)
        std = np.sqrt(np.maximum(var, 0.0))
        inv = 1.0 / np.where(std > 0, std, 1.0)
        if not sp.issparse(X):
            return (X - mean) * inv
    return sp.csr_matrix(X @ sp.diags(inv)) if sp.issparse(X) else X * inv


def load_tabular(
    spec: str,
    problem: str,
    *,
    seed: int = 0,
    samples: int = 1000,
    features: int = 50,
    density: float = 0.2,
    label_noise: float = 0.05,
    scale: str = "none",
) -> Dataset:
    """Load the data set named by ``spec`` (see the module docstring), rows in file order.

    ``synthetic`` draws a ``samples x features`` matrix whose entries are nonzero with
    probability ``density`` and then N(0, 1), labels ``sign(A w)`` for ``w ~ N(0, I)``, each
    flipped with probability ``label_noise``; everything from ``seed``.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{problem}: dataset must be a non-empty string, got {spec!r}")
    if spec == "synthetic":
        X, y = _synthetic(samples, features, density, label_noise, seed)
    elif spec in TABULAR:
        X, y = _sklearn(spec)
    elif spec.startswith("libsvm:"):
        X, y = _libsvm(spec.removeprefix("libsvm:"), problem)
    elif spec in NAMED_LIBSVM:
        X, y = _libsvm(_named(spec, problem), problem)
    else:
        allowed = ", ".join((*TABULAR, *NAMED_LIBSVM, "libsvm:PATH"))
        raise ValueError(f"{problem}: unknown dataset {spec!r}; allowed: {allowed}")
    return Dataset(spec, scale_features(X, scale), np.asarray(y))
