"""Tabular data sets: loading, label mapping and feature scaling.

``--dataset`` names one of
* ``synthetic``: LIBSVM-like sparse data (knobs ``samples``, ``features``, ``density``,
  ``label_noise``; seeded);
* scikit-learn's bundled sets: ``breast-cancer`` (binary), ``digits`` (10 classes),
  ``digits-binary`` (0-4 vs 5-9), ``wine`` (3 classes), ``wine-binary`` (class 0 vs 1-2);
* ``libsvm:PATH``: any LIBSVM/svmlight file, read with scikit-learn's loader;
* ``a9a``, ``mushrooms``, ``phishing``, ``w8a``: shortcuts for ``libsvm:NAME.txt``, the file
  found by :func:`problems.datasets.find` (``$COMPZOO_DATA``, then ``$COMPZOO_LIBSVM_DIR``, else
  ``../shared/data/libsvm`` beside the repository or the working directory).
A name close to a known one is refused with the known one suggested.

LIBSVM files: one sample per line, ``LABEL INDEX:VALUE ...``, ``#`` starts a comment, blank lines
are skipped, a UTF-8 byte-order mark at the start is ignored. Feature indices are 1-based, as
LIBSVM defines them, and increase along a line: index 0 is refused (naming the line) unless the
data option ``index_base=0`` says the file is zero-based; the file is never re-based by
guessing. Feature ``j`` becomes column ``j - index_base``, so ``d`` is the largest index minus
``index_base`` plus one. The data options are ``--problem-opt index_base=0`` for the runner and
``--index-base 0`` for ``python -m problems`` (likewise ``max_dense_gib`` and ``max_dim``).
Refused before anything is built, each with the file, the line and the value: a line that is
not ``LABEL INDEX:VALUE ...``, a non-numeric or non-finite label or value, a non-increasing
index, a file whose dense ``N x d`` float64 design would exceed ``max_dense_gib`` GiB (data
option, default 4), an empty, binary or missing file, a directory, and a path that is not a
regular file (a FIFO, a socket, a device).

The dimension a file may claim is bounded by what the file justifies: ``d`` is allowed when
``d <= max(max_dim, E)``, ``E`` the number of ``INDEX:VALUE`` entries stored in the file and
``max_dim`` a data option (default ``2**20 = 1,048,576`` columns). A file of ``E`` entries can
fill ``E`` columns; beyond that and beyond ``max_dim``, ``d`` comes from a stray index (a single
``99999999:1`` makes ``d = 10^8``, and every per-node vector of the run would then take
800 MB). The largest index is found by a vectorised scan of the file's bytes before the
parser runs, so such a file is refused (naming the line, the index and ``d``) before any
array of ``d`` entries exists; raise the bound with ``--problem-opt max_dim=D`` (runner) or
``--max-dim D`` (``python -m problems``).

Labels: with exactly two distinct values the smaller maps to -1 and the larger to +1 (LIBSVM's
{0, 1} and {1, 2} as DESIGN.md pins it); more values are kept as they are (classes, or targets
for least squares). Features are float64, CSR when sparse.

A LIBSVM file is parsed once: the parsed arrays are kept in the cache of :mod:`problems.cache`
under the sha256 of the file's bytes, and a later run on the same bytes reads them back (with
``allow_pickle=False``) instead of parsing the text again.
"""

from __future__ import annotations

import codecs
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from problems import cache, datasets
from problems.datasets import NAMED_LIBSVM
from streams import tags
from streams.suggest import did_you_mean

__all__ = ["Dataset", "load_tabular", "scale_features", "SCALINGS", "TABULAR", "MAX_DIM"]

TABULAR = ("synthetic", *datasets.BUNDLED)
# Default of the data option ``max_dim``: the columns a LIBSVM file may claim beyond its entries.
MAX_DIM = 2**20
# Bytes of a LIBSVM file scanned at a time for its largest index (bounds the scan's memory).
_SCAN_CHUNK = 1 << 26
# Digits of an index read as int64 by the scan (10^18 - 1 fits); longer ones are read as text.
_MAX_DIGITS = 18
SCALINGS = ("none", "standard", "maxabs", "rownorm")
# The parsed form's version, part of its cache key: bump it when parsing changes.
LIBSVM_FORMAT = "libsvm-csr-v1"


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
    rng = np.random.default_rng([seed, tags.TABULAR_SYNTHETIC])
    mask = rng.random((samples, features)) < density
    X = sp.csr_matrix(np.where(mask, rng.standard_normal((samples, features)), 0.0))
    w = rng.standard_normal(features)
    y = np.where(X @ w >= 0, 1.0, -1.0)
    flip = rng.random(samples) < label_noise
    return X, np.where(flip, -y, y)


def _sklearn(name: str):
    from sklearn import datasets as sk

    loader = {"breast-cancer": sk.load_breast_cancer, "wine": sk.load_wine}.get(
        name.removesuffix("-binary"), sk.load_digits
    )
    X, y = loader(return_X_y=True)
    X = np.asarray(X, dtype=np.float64)
    if name == "digits-binary":
        y = (y >= 5).astype(np.int64)
    elif name == "wine-binary":
        y = (y != 0).astype(np.int64)
    return X, y


def _libsvm(
    path: str,
    problem: str,
    index_base: int = 1,
    max_dense_gib: float = 4.0,
    max_dim: int = MAX_DIM,
):
    """Read a LIBSVM file into CSR features and labels, refusing bad files with a message that
    names the file, the line and the value (see the module docstring for the rules)."""
    if index_base not in (0, 1):
        raise ValueError(f"{problem}: index_base must be 1 (LIBSVM) or 0, got {index_base!r}")
    if not max_dense_gib > 0:
        raise ValueError(f"{problem}: max_dense_gib must be > 0, got {max_dense_gib!r}")
    if isinstance(max_dim, bool) or not isinstance(max_dim, int) or max_dim < 1:
        raise ValueError(f"{problem}: max_dim must be a positive integer, got {max_dim!r}")
    if not path:
        raise ValueError(f"{problem}: libsvm: needs a file path, as in libsvm:PATH")
    p = Path(path).expanduser()
    where = f"LIBSVM file {path!r}"
    if p.is_dir():
        raise ValueError(f"{problem}: {where} is a directory; libsvm:PATH needs a file")
    if not p.is_file():
        kind = datasets.not_regular(p)
        if kind:
            raise ValueError(
                f"{problem}: {where} is {kind}, not a regular file; libsvm:PATH needs a file"
            )
        raise ValueError(f"{problem}: dataset file {path!r} not found")
    try:
        with p.open("rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise ValueError(f"{problem}: cannot read {where}: {e.strerror or e}") from e
    if b"\0" in head:
        raise ValueError(f"{problem}: {where} is a binary file, not LIBSVM text (label i:v ...)")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ValueError(f"{problem}: cannot read {where}: {e.strerror or e}") from e
    # A file parsed before (same bytes, same index base) is read back from the cache; its
    # limits are checked again, and a file over one takes the full path below, which names the
    # line.
    k = cache.key(LIBSVM_FORMAT, hashlib.sha256(raw).digest(), index_base)
    hit = cache.load("libsvm", k, {"data": "f", "indices": "i", "indptr": "i", "d": "i", "y": "f"})
    if hit is not None:
        shape = (hit["y"].size, int(hit["d"]))
        dense_ok = shape[0] * shape[1] * 8 <= max_dense_gib * 2**30
        if dense_ok and shape[1] <= max(max_dim, hit["data"].size):
            return sp.csr_matrix((hit["data"], hit["indices"], hit["indptr"]), shape), hit["y"]
    body = raw.removeprefix(codecs.BOM_UTF8)
    entries, top, at = _scan_indices(body, len(str(max_dim + index_base - 1)))
    if top - index_base + 1 > max(max_dim, entries):
        line = body.count(b"\n", 0, at) + 1
        raise ValueError(
            _too_wide(problem, f"{where}, line {line}", top, index_base, entries, max_dim)
        )
    X, y = _parse_libsvm(body, p, where, problem, index_base, max_dense_gib, max_dim)
    arrays = {"data": X.data, "indices": X.indices, "indptr": X.indptr, "d": np.int64(X.shape[1])}
    cache.store("libsvm", k, {**arrays, "y": np.asarray(y, dtype=np.float64)})
    return X, y


def _too_wide(problem: str, at: str, top: int, index_base: int, entries: int, max_dim: int) -> str:
    d = top - index_base + 1
    return (
        f"{problem}: {at}: feature index {top} makes d = {d} columns, more than max_dim = "
        f"{max_dim} and more than the file's {entries} stored entries (allowed: d <= "
        f"max(max_dim, stored entries)); if the file is meant to be that wide, raise the limit "
        f"with --problem-opt max_dim={d} (runner) or --max-dim {d} (python -m problems)"
    )


def _scan_indices(text: bytes, digits: int) -> tuple[int, int, int]:
    """``(entries, largest feature index, byte offset of its token)`` of LIBSVM text, by
    vectorised passes over its bytes (about 10 ms per MB; no array grows with the index).

    ``entries`` counts the ``:`` outside comments (each ``INDEX:VALUE`` pair, and ``qid:``); the
    largest index is looked for among the tokens of at least ``digits`` decimal digits before a
    ``:`` (``(-1, 0)`` when there is none), which holds every index above ``10^(digits-1)``.
    """
    top, at, entries = -1, 0, 0
    start = 0
    while start < len(text):
        end = text.find(b"\n", min(start + _SCAN_CHUNK, len(text)))
        end = len(text) if end < 0 else end + 1
        a = np.frombuffer(text, np.uint8, count=end - start, offset=start)
        colons = np.flatnonzero(a == ord(":"))
        if colons.size and text.find(b"#", start, end) >= 0:
            # keep the colons with no '#' between the start of their line and them
            hashes, newlines = np.flatnonzero(a == ord("#")), np.flatnonzero(a == ord("\n"))
            colons = colons[_last_before(hashes, colons) <= _last_before(newlines, colons)]
        entries += colons.size
        long = colons
        for j in range(1, digits + 1):  # the colons with `digits` digits before them
            byte = a[np.maximum(long - j, 0)]
            long = long[(long >= j) & (byte >= ord("0")) & (byte <= ord("9"))]
        if long.size:
            c_top, c_at = _index_tokens(a, long)
            if c_top > top:
                top, at = c_top, start + c_at
        start = end
    return entries, top, at


def _last_before(marks: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each position of ``at``, the last of the sorted ``marks`` before it (-1: none)."""
    if marks.size == 0:
        return np.full(at.shape, -1, dtype=np.int64)
    i = np.searchsorted(marks, at)
    return np.where(i > 0, marks[np.maximum(i - 1, 0)], -1)


def _index_tokens(a: np.ndarray, colons: np.ndarray) -> tuple[int, int]:
    """``(largest value, offset of its token)`` of the tokens of decimal digits that end at
    ``colons`` and start after whitespace or at ``a``'s start; ``(-1, 0)`` if none does.
    Reads the digits backwards from every colon at once, dropping a token once it ends."""
    value = np.zeros(colons.size, dtype=np.int64)
    length = np.zeros(colons.size, dtype=np.int64)
    ok = np.zeros(colons.size, dtype=bool)
    live = np.arange(colons.size)  # tokens whose digits are still being read
    for j in range(1, _MAX_DIGITS + 1):
        pos = colons[live] - j
        byte = a[np.maximum(pos, 0)].astype(np.int64)
        digit = (pos >= 0) & (byte >= ord("0")) & (byte <= ord("9"))
        end, b = live[~digit], byte[~digit]
        ok[end] = (j > 1) & ((pos[~digit] < 0) | (b == ord(" ")) | ((b >= 9) & (b <= 13)))
        length[end] = j - 1
        live, byte = live[digit], byte[digit]
        value[live] += (byte - ord("0")) * 10 ** (j - 1)
        if not live.size:
            break
    top, at = -1, 0
    if ok.any():
        k = int(np.argmax(np.where(ok, value, -1)))
        top, at = int(value[k]), int(colons[k] - length[k])
    if live.size:  # _MAX_DIGITS digits or more: maybe beyond int64, read as text
        space = np.flatnonzero((a == ord(" ")) | ((a >= 9) & (a <= 13)))
        ends = colons[live]
        for s, c in zip((_last_before(space, ends) + 1).tolist(), ends.tolist(), strict=True):
            token = a[s:c].tobytes()
            if token.isdigit() and int(token) > top:
                top, at = int(token), s
    return top, at


def _parse_libsvm(
    body: bytes,
    p: Path,
    where: str,
    problem: str,
    index_base: int,
    max_dense_gib: float,
    max_dim: int,
):
    from sklearn.datasets import load_svmlight_file

    try:
        X, y = load_svmlight_file(io.BytesIO(body), dtype=np.float64, zero_based=True)
    except (ValueError, UnicodeDecodeError, OSError) as e:
        line, why = _first_bad_line(p, index_base)
        if line:
            raise ValueError(f"{problem}: {where}, line {line}: {why}") from e
        raise ValueError(f"{problem}: cannot parse {where}: {e}") from e
    if X.shape[0] == 0:
        raise ValueError(f"{problem}: {where} has no samples (no data lines)")
    if X.nnz == 0:
        raise ValueError(f"{problem}: {where} has no features (every line is a label alone)")
    X = sp.csr_matrix(X)
    row_of = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))  # the row of each stored entry
    if int(X.indices.min()) < index_base:
        r = int(row_of[int(np.argmax(X.indices < index_base))])
        raise ValueError(
            f"{problem}: {where}, line {_line_of_row(p, r)}: feature index 0, but LIBSVM indices "
            f"start at 1; for a zero-based file pass --problem-opt index_base=0 (runner) or "
            f"--index-base 0 (python -m problems)"
        )
    top = int(X.indices.max())
    d = top - index_base + 1
    need = X.shape[0] * d * 8
    if need > max_dense_gib * 2**30:
        r = int(row_of[int(np.argmax(X.indices))])
        raise ValueError(
            f"{problem}: {where}, line {_line_of_row(p, r)}: feature index {top} makes "
            f"d = {d}, and the dense {X.shape[0]} x {d} float64 design would need "
            f"{_gib(need)}; allowed: {_gib(max_dense_gib * 2**30)} (data option max_dense_gib: "
            f"--problem-opt max_dense_gib=G, or --max-dense-gib G for python -m problems)"
        )
    if d > max(max_dim, X.nnz):  # an index the scan did not read as one (e.g. "+7:1")
        at = f"{where}, line {_line_of_row(p, int(row_of[int(np.argmax(X.indices))]))}"
        raise ValueError(_too_wide(problem, at, top, index_base, X.nnz, max_dim))
    bad = ~np.isfinite(X.data)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(
            f"{problem}: {where}, line {_line_of_row(p, int(row_of[k]))}: value {X.data[k]} of "
            f"feature {int(X.indices[k])} is not finite; allowed: finite numbers"
        )
    if not np.all(np.isfinite(y)):
        r = int(np.argmax(~np.isfinite(y)))
        raise ValueError(
            f"{problem}: {where}, line {_line_of_row(p, r)}: label {y[r]} is not finite; "
            f"allowed: finite numbers"
        )
    X = sp.csr_matrix((X.data, X.indices - index_base, X.indptr), shape=(X.shape[0], d))
    return X, y


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _data_lines(p: Path):
    """``(line number, tokens)`` of each data line, as scikit-learn's reader counts rows: text
    after ``#`` is a comment, and lines with nothing else are skipped."""
    with p.open("rb") as f:
        for no, raw in enumerate(f, start=1):
            if no == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            tokens = raw.split(b"#", 1)[0].split()
            if tokens:
                yield no, tokens


def _line_of_row(p: Path, row: int) -> int:
    for i, (no, _) in enumerate(_data_lines(p)):
        if i == row:
            return no
    return 0


def _first_bad_line(p: Path, index_base: int) -> tuple[int, str]:
    """The first line of a LIBSVM file that breaks the format and what is wrong with it (the
    slow, exact scan behind a failed fast parse); ``(0, "")`` if none is found."""
    for no, tokens in _data_lines(p):
        label = tokens[0].decode(errors="replace")
        try:
            float(label)
        except ValueError:
            return no, f"label {label!r} is not a number; expected: LABEL INDEX:VALUE ..."
        last = index_base - 1
        for tok in tokens[1:]:
            text = tok.decode(errors="replace")
            idx, colon, val = text.partition(":")
            if idx == "qid":
                continue
            if not colon:
                return no, f"{text!r} is not INDEX:VALUE"
            try:
                j = int(idx)
            except ValueError:
                return no, f"feature index {idx!r} in {text!r} is not an integer"
            try:
                float(val)
            except ValueError:
                return no, f"value {val!r} in {text!r} is not a number"
            if j < index_base:
                return no, f"feature index {j} in {text!r}; allowed: integers >= {index_base}"
            if j <= last:
                return no, (
                    f"feature index {j} in {text!r} after index {last}; indices must increase "
                    "along a line"
                )
            last = j
    return 0, ""


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
    index_base: int = 1,
    max_dense_gib: float = 4.0,
    max_dim: int = MAX_DIM,
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
        X, y = _libsvm(spec.removeprefix("libsvm:"), problem, index_base, max_dense_gib, max_dim)
    elif spec in NAMED_LIBSVM:
        path = str(datasets.locate(spec, problem))
        X, y = _libsvm(path, problem, index_base, max_dense_gib, max_dim)
    else:
        known = (*TABULAR, *NAMED_LIBSVM)
        raise ValueError(
            f"{problem}: unknown dataset {spec!r}{did_you_mean(spec, known)}; allowed: "
            f"{', '.join(known)}, libsvm:PATH"
        )
    return Dataset(spec, scale_features(X, scale), np.asarray(y))
