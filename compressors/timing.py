"""Where a run's time goes: encoding, communicating and decoding payloads (the rest is compute).

A system that counts bits alone hides what compression costs; the runner therefore times every
``Compressor.encode``/``decode`` and every collective of the comm layer while a
:class:`Stopwatch` is recording. Sections do not nest: an encode that decodes internally (a
composition) is charged to ``encode`` once. Outside :func:`recording` a section costs one
attribute lookup.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

__all__ = ["KEYS", "Stopwatch", "recording", "section"]

KEYS = ("encode", "communicate", "decode")


class Stopwatch:
    """Cumulative seconds per section (``encode``, ``communicate``, ``decode``).

    Args:
        sync: called at both ends of a section so asynchronous devices are timed honestly
            (``torch.cuda.synchronize`` on CUDA); ``None`` on CPU.
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.totals = dict.fromkeys(KEYS, 0.0)
        self._sync = sync
        self._depth = 0

    @contextlib.contextmanager
    def section(self, key: str) -> Iterator[None]:
        if key not in self.totals:
            raise ValueError(f"unknown section {key!r}; allowed: {', '.join(KEYS)}")
        if self._depth:
            yield
            return
        self._depth += 1
        if self._sync is not None:
            self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            self.totals[key] += time.perf_counter() - t0
            self._depth -= 1


_ACTIVE: Stopwatch | None = None
_NULL = contextlib.nullcontext()


def section(key: str) -> contextlib.AbstractContextManager:
    """Time the enclosed code as ``key`` on the recording stopwatch, if any."""
    return _NULL if _ACTIVE is None else _ACTIVE.section(key)


@contextlib.contextmanager
def recording(watch: Stopwatch) -> Iterator[Stopwatch]:
    """Make ``watch`` the stopwatch that :func:`section` charges, for the enclosed code."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, watch
    try:
        yield watch
    finally:
        _ACTIVE = previous
