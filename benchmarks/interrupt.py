"""SIGINT and SIGTERM during a benchmark: a clean stop instead of a traceback.

While :func:`catching` is active (``python -m benchmarks`` enters it on the first line of its
``main``), the first SIGINT or SIGTERM raises :class:`Interrupted` where the program is (from
the :func:`ready` that follows the ``try`` it is caught by; one arriving before is held until
then); later ones, while it stops and writes what it has, are dropped. Outside it (a part
called from Python, the tests) nothing changes.

The parts that start processes (:mod:`benchmarks.memory`, :mod:`benchmarks.scale`) start them
inside :func:`shielded`, so that a signal cannot land between the fork and the moment the
process is recorded (it is raised as the block ends), in a session of their own (a terminal's
Ctrl-C reaches this process only), and end them with :func:`stop` in a ``finally``: no process
outlives an interrupted benchmark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator

from streams import interrupts
from streams.interrupts import SIGNALS

__all__ = ["Interrupted", "catching", "ready", "shielded", "stop", "SIGNALS"]

# signum: the signal being handled (later ones are dropped); shield: > 0 while signals are held;
# pending: a signal held back.
_state: dict = {"signum": None, "shield": 0, "pending": None}


class Interrupted(interrupts.Stopped):  # noqa: N818 (a signal, not an error)
    """SIGINT or SIGTERM received; ``code`` is the exit status a shell gives it (128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


def _handler(signum: int, frame) -> None:
    if _state["signum"] is not None:  # already stopping
        return
    if _state["shield"]:
        _state["pending"] = _state["pending"] or signum
        return
    _state["signum"] = signum
    raise Interrupted(signum)


@contextlib.contextmanager
def catching(then=None) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` (once) from the :func:`ready` call that
    starts the block's work on (one arriving before it is held until then); afterwards the
    handlers in place before come back, or ``then`` (``signal.SIG_IGN`` for a process about to
    end). Main thread only."""
    _state.update(signum=None, shield=1, pending=None)
    interrupts.release()  # from here on these handlers, not the start-up guard's
    old = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield
    finally:
        _state.update(shield=0, pending=None)
        for s, h in old.items():
            signal.signal(s, h if then is None else then)


def ready() -> None:
    """Inside :func:`catching`: signals raise from here on (a held one at once)."""
    _state["shield"] = max(0, _state["shield"] - 1)
    _raise_held()


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold a signal back until the block ends (start a process and record it in here)."""
    _state["shield"] += 1
    try:
        yield
    finally:
        _state["shield"] = max(0, _state["shield"] - 1)
    _raise_held()


def _raise_held() -> None:
    pending = _state["pending"]
    if not _state["shield"] and pending is not None and _state["signum"] is None:
        _state["pending"] = None
        _state["signum"] = pending
        raise Interrupted(pending)


def stop(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and every process of its session's group (it was started with
    ``start_new_session=True``) unless it has ended and been waited for, then wait for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
