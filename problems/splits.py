"""Assigning samples to nodes.

A split returns ``(order, counts)``: node ``i`` owns rows ``order[offsets[i]:offsets[i+1]]`` of
the data (``offsets = [0, cumsum(counts)]``), each node's rows in file order. Splits:

* ``contiguous``: node ``i`` gets rows ``[floor(i N / n), floor((i+1) N / n))`` in file order,
  no shuffling (DESIGN.md);
* the papers' own contiguous conventions, each in file order without shuffling, with
  ``q = N // n`` and ``r = N % n``:

  - ``contiguous:last``: rows ``[i q, (i+1) q)`` for ``i < n - 1`` and ``[(n-1) q, N)`` for the
    last node, which takes the remainder (the EF21 experiments, ``generate_data.py`` of
    ``IgorSokoloff/ef21_experiments_source_code``);
  - ``contiguous:drop``: rows ``[i q, (i+1) q)``; the last ``r`` rows are dropped (the 3PC/CLAG
    logistic experiments, ``data_processing.py`` of ``IgorSokoloff/3pc_experiments_source_code``,
    which cut ``X[:-r]``; with ``r = 0`` that slice would be empty, here all rows are kept);
  - ``contiguous:array``: ``np.array_split``, the first ``r`` nodes ``q + 1`` rows, the others
    ``q`` (the DASHA code, ``Dataset.split`` in ``mysteryresearcher/dasha``, without its
    optional shuffle; its ``ignore_remainder`` variant is ``contiguous:drop``);
* ``iid``: the same chunk sizes over a seeded random permutation;
* ``sorted``: rows stably sorted by label, then contiguous chunks: maximal label skew;
* ``dirichlet:ALPHA``: for each class, node shares drawn from ``Dir(ALPHA 1_n)`` (Hsu, Qi &
  Brown 2019, arXiv 1909.06335); small ALPHA, strong skew. Draws are redone (deterministically)
  until no node is empty.
"""

from __future__ import annotations

import math

import numpy as np

from streams import Streams, tags

__all__ = ["SPLITS", "split", "parse_split"]

SPLITS = (
    "contiguous",
    "contiguous:last",
    "contiguous:drop",
    "contiguous:array",
    "iid",
    "sorted",
    "dirichlet:ALPHA",
)
# The contiguous conventions: ``kind`` of parse_split -> chunk sizes for (N, n).
_CONTIGUOUS = {
    "contiguous": lambda N, n: _chunks(N, n),
    "contiguous:last": lambda N, n: np.array([N // n] * (n - 1) + [N - (n - 1) * (N // n)]),
    "contiguous:drop": lambda N, n: np.full(n, N // n),
    "contiguous:array": lambda N, n: np.array([a.size for a in np.array_split(np.arange(N), n)]),
}

_DIRICHLET_TRIES = 1000


def parse_split(spec: str) -> tuple[str, float | None]:
    """``(kind, alpha)`` from a ``--split`` spec; alpha only for ``dirichlet``."""
    if not isinstance(spec, str):
        raise ValueError(f"split must be a string, got {spec!r}")
    if spec in _CONTIGUOUS:
        return spec, None
    kind, colon, arg = spec.partition(":")
    if kind in ("iid", "sorted") and not colon:
        return kind, None
    if kind == "dirichlet" and colon:
        try:
            alpha = float(arg)
        except ValueError:
            alpha = math.nan
        if not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"dirichlet alpha must be a positive number, got {arg!r}")
        return kind, alpha
    raise ValueError(f"unknown split {spec!r}; allowed: {', '.join(SPLITS)}")


def _chunks(N: int, n: int) -> np.ndarray:
    return np.diff((np.arange(n + 1, dtype=np.int64) * N) // n)


def _dirichlet(labels: np.ndarray, n: int, alpha: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, tags.SPLIT_DIRICHLET])
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(_DIRICHLET_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(n)]
        for idx in members:
            idx = rng.permutation(idx)
            cuts = (np.cumsum(rng.dirichlet(np.full(n, alpha))) * idx.size).astype(np.int64)
            for i, piece in enumerate(np.split(idx, cuts[:-1])):
                parts[i].append(piece)
        owned = [np.sort(np.concatenate(p)) for p in parts]
        if all(o.size > 0 for o in owned):
            return owned
    raise ValueError(
        f"dirichlet:{alpha} left a node empty in {_DIRICHLET_TRIES} draws with {n} nodes and "
        f"{labels.size} samples; use a larger alpha or fewer nodes"
    )


def split(
    spec: str, labels: np.ndarray, n: int, *, seed: int = 0, problem: str = "problem"
) -> tuple[np.ndarray, np.ndarray]:
    """Partition ``len(labels)`` samples among ``n`` nodes.

    Args:
        spec: one of :data:`SPLITS` (see the module docstring).
        labels: ``(N,)`` labels (used by ``sorted`` and ``dirichlet``).
        n: number of nodes, ``1 <= n <= N``.
        seed: seeds ``iid`` and ``dirichlet``; the result is a pure function of the arguments.
        problem: named in error messages.

    Returns:
        ``order`` int64, distinct rows of ``range(N)`` (all of them, except for
        ``contiguous:drop``, which leaves out the last ``N % n``), and ``counts`` int64 ``(n,)``
        with ``counts.sum() == len(order)``.
    """
    kind, alpha = parse_split(spec)
    labels = np.asarray(labels)
    N = labels.shape[0]
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"{problem}: nodes must be a positive integer, got {n!r}")
    if n > N:
        raise ValueError(f"{problem}: {n} nodes but the data has only {N} samples")
    if kind in _CONTIGUOUS:
        counts = _CONTIGUOUS[kind](N, n).astype(np.int64)
        return np.arange(int(counts.sum()), dtype=np.int64), counts
    if kind == "iid":
        perm = Streams.shared(seed, 1, tags.SPLIT_IID).permutation(N)[0].numpy()
        counts = _chunks(N, n)
        ends = np.cumsum(counts)
        owned = [np.sort(perm[e - c : e]) for e, c in zip(ends, counts, strict=True)]
        return np.concatenate(owned).astype(np.int64), counts
    if kind == "sorted":
        return np.argsort(labels, kind="stable").astype(np.int64), _chunks(N, n)
    owned = _dirichlet(labels, n, alpha, seed)
    counts = np.array([o.size for o in owned], dtype=np.int64)
    return np.concatenate(owned).astype(np.int64), counts
