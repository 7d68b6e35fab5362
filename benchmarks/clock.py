"""One timer for every benchmark: the median of repeated calls, synchronised on CUDA."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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
