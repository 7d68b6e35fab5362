"""The memory-bandwidth bound: a STREAM-like triad and the bytes a GLM iteration must move.

The bound on one iteration's time is ``bytes / bandwidth``, where ``bytes`` counts the data
pass every method needs (each node's ``A_i x`` and ``A_i^T s``: the data read twice) and the
method's state (every tensor of the state read once and written once). The achieved fraction
``bound / measured`` says how close an implementation runs to the hardware's limit.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

__all__ = ["data_bytes", "state_bytes", "iteration_bytes", "triad", "percent_of_bound"]

INDEX_BYTES = 8  # compzoo's CSR tensors hold int64 column indices and row pointers


def data_bytes(rows: int, d: int, itemsize: int, nnz: int | None = None) -> int:
    """Bytes of one data pass (``A_i x`` and ``A_i^T s`` over all nodes' ``rows`` rows).

    Dense data is read twice: ``2 rows d itemsize``. Sparse (CSR) data reads, twice, its
    ``nnz`` values and column indices and its ``rows + 1`` row pointers.
    """
    for name, v in (("rows", rows), ("d", d), ("itemsize", itemsize)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if nnz is None:
        return 2 * rows * d * itemsize
    if isinstance(nnz, bool) or not isinstance(nnz, int) or not 0 <= nnz <= rows * d:
        raise ValueError(f"nnz must be an integer in [0, rows*d={rows * d}], got {nnz!r}")
    return 2 * (nnz * (itemsize + INDEX_BYTES) + (rows + 1) * INDEX_BYTES)


def state_bytes(state) -> int:
    """Bytes of the distinct tensors a method's state dataclass holds (aliases counted once)."""
    if not dataclasses.is_dataclass(state):
        raise ValueError(f"state must be a dataclass instance, got {type(state).__name__}")
    seen: dict[tuple[int, int], int] = {}
    for f in dataclasses.fields(state):
        v = getattr(state, f.name)
        if isinstance(v, torch.Tensor):
            seen[(v.data_ptr(), v.nbytes)] = v.nbytes
    return sum(seen.values())


def iteration_bytes(data: int, state: int) -> int:
    """The bytes one iteration must move: the data pass plus the state read and written."""
    return data + 2 * state


def percent_of_bound(nbytes: int, bandwidth: float, seconds: float) -> float:
    """``100 * (nbytes / bandwidth) / seconds``: the achieved share of the bandwidth bound."""
    if not bandwidth > 0 or not seconds > 0:
        raise ValueError(f"bandwidth and seconds must be > 0, got {bandwidth}, {seconds}")
    return 100.0 * nbytes / bandwidth / seconds


def _best(fn, repeats: int, sync) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def triad(elements: int, repeats: int = 5, device: str = "cpu") -> dict[str, float]:
    """Bandwidth (bytes/s) of ``a = b + s c`` in float64 with NumPy and torch (STREAM counts
    ``3 * 8`` bytes per element: read ``b`` and ``c``, write ``a``); ``best`` is the larger.

    NumPy has no fused triad, so its two passes make its figure a lower estimate.
    """
    nbytes = 3 * 8 * elements
    out: dict[str, float] = {}
    if device == "cpu":
        a, b, c = (np.full(elements, v) for v in (0.0, 1.0, 2.0))

        def np_triad():
            np.multiply(c, 3.0, out=a)
            np.add(a, b, out=a)

        out["numpy"] = nbytes / _best(np_triad, repeats, lambda: None)
        del a, b, c
    dev = torch.device(device)
    ta, tb, tc = (torch.full((elements,), v, dtype=torch.float64, device=dev) for v in (0, 1, 2))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out["torch"] = nbytes / _best(lambda: torch.add(tb, tc, alpha=3.0, out=ta), repeats, sync)
    out["best"] = max(out.values())
    return out
