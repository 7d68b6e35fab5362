"""Assigning samples to nodes.

A split returns ``(order, counts)``: node ``i`` owns rows ``order[offsets[i]:offsets[i+1]]`` of
the data (``offsets = [0, cumsum(counts)]``), each node's rows in file order. Splits:

* ``contiguous``: node ``i`` gets rows ``[floor(i N / n), floor((i+1) N / n))`` in file order,
  no shuffling (DESIGN.md; the EF21 experiments split the same way, up to where the remainder
  goes);
* ``iid``: the same chunk sizes over a seeded random permutation;
* ``sorted``: rows stably sorted by label, then contiguous chunks: maximal label skew;
* ``dirichlet:ALPHA``: for each class, node shares drawn from ``Dir(ALPHA 1_n)`` (Hsu, Qi &
  Brown 2019, arXiv 1909.06335); small ALPHA, strong skew. Draws are redone (deterministically)
  until no node is empty.
"""

from __future__ import annotations

import math

import numpy as np

from streams import Streams

__all__ = ["SPLITS", "split", "parse_split"]

SPLITS = ("contiguous", "iid", "sorted", "dirichlet:ALPHA")

# Stream tags, so that split draws never coincide with other seeded draws.
_IID_TAG = 0x5011
_DIRICHLET_TAG = 0xD112
_DIRICHLET_TRIES = 1000


def parse_split(spec: str) -> tuple[str, float | None]:
    """``(kind, alpha)`` from a ``--split`` spec; alpha only for ``dirichlet``."""
    if not isinstance(spec, str):
        raise ValueError(f"split must be a string, got {spec!r}")
    kind, colon, arg = spec.partition(":")
    if kind in ("contiguous", "iid", "sorted") and not colon:
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
    rng = np.random.default_rng([seed, _DIRICHLET_TAG])
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
        spec: ``contiguous``, ``iid``, ``sorted`` or ``dirichlet:ALPHA``.
        labels: ``(N,)`` labels (used by ``sorted`` and ``dirichlet``).
        n: number of nodes, ``1 <= n <= N``.
        seed: seeds ``iid`` and ``dirichlet``; the result is a pure function of the arguments.
        problem: named in error messages.

    Returns:
        ``order`` int64 ``(N,)``, a permutation of ``range(N)``, and ``counts`` int64 ``(n,)``.
    """
    kind, alpha = parse_split(spec)
    labels = np.asarray(labels)
    N = labels.shape[0]
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"{problem}: nodes must be a positive integer, got {n!r}")
    if n > N:
        raise ValueError(f"{problem}: {n} nodes but the data has only {N} samples")
    if kind == "contiguous":
        return np.arange(N, dtype=np.int64), _chunks(N, n)
    if kind == "iid":
        perm = Streams.shared(seed, 1, _IID_TAG).permutation(N)[0].numpy()
        counts = _chunks(N, n)
        ends = np.cumsum(counts)
        owned = [np.sort(perm[e - c : e]) for e, c in zip(ends, counts, strict=True)]
        return np.concatenate(owned).astype(np.int64), counts
    if kind == "sorted":
        return np.argsort(labels, kind="stable").astype(np.int64), _chunks(N, n)
    owned = _dirichlet(labels, n, alpha, seed)
    counts = np.array([o.size for o in owned], dtype=np.int64)
    return np.concatenate(owned).astype(np.int64), counts
