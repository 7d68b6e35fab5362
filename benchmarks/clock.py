"""The benchmarks' timers: the median of repeated calls (of one function, or of several in
turn), synchronised on CUDA."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median_seconds(
    fn: Callable[[], object],
    repeats: int,
    sync: Callable[[], None] | None = None,
    warmup: bool = True,
) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (after one untimed call if ``warmup``);
    ``sync`` waits for asynchronous devices before each clock read."""
    sync = sync or (lambda: None)
    if warmup:
        fn()
        sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_medians(
    fns: Sequence[Callable[[], object]],
    repeats: int,
    sync: Callable[[], None] | None = None,
) -> list[float]:
    """Median wall time of each of ``fns``, timed in turn ``repeats`` times (after one untimed
    call of each): what is compared shares the machine's state (its load, its allocator's
    pages) round by round instead of one after the other."""
    sync = sync or (lambda: None)
    for fn in fns:
        fn()
        sync()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, took in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            sync()
            took.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]
