"""SIGINT and SIGTERM: a clean exit instead of a traceback, from a command's first instruction.

``python -m algorithms.run`` (and every other command of the project) spends its first one to
two seconds importing torch, numba and SciPy, before its own ``main`` can install the handlers
that stop it cleanly. A Ctrl-C in that window would print a ``KeyboardInterrupt`` traceback from
deep inside an import, and a SIGTERM would kill the process with no word. :func:`guard` closes
the window: every package of the project imports :mod:`streams` first, which calls it before
importing torch. When the process is a ``python -m PACKAGE.MODULE`` command being started
(``runpy`` sets ``sys.argv[0]`` to ``"-m"`` while it imports the package), it catches both
signals until the command takes them over (:func:`release`, or the command installs handlers
of its own): the process prints one line and exits 130 (SIGINT) or 143 (SIGTERM), as a shell
reports a process stopped by that signal. Nothing has run yet, so nothing is lost.

Imported as a library (a notebook, the test suite), the project never touches signal handlers
at import.

Once started, a command that has no finer handling wraps its work in :func:`raising`: both
signals then raise :class:`Stopped` (a ``BaseException``, as ``KeyboardInterrupt`` is, so no
``except Exception`` swallows it), which the command turns into its message and exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = [
    "EXIT_SIGNAL", "SIGNALS", "Stopped", "guard", "guarding", "hold", "raising", "release",
]  # fmt: skip

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A process stopped by a signal exits 128 + the signal's number, as a shell reports it.
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
_state = {"on": False}


def _stop(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    try:
        sys.stderr.write(f"\ninterrupted by {name} while starting; nothing was run\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(EXIT_SIGNAL[signum])


def guard() -> None:
    """Catch SIGINT/SIGTERM from now until :func:`release`, if this process is a ``python -m``
    command being started in its main thread (see the module docstring); otherwise do nothing.
    """
    if _state["on"] or sys.argv[:1] != ["-m"]:
        return
    hold()


def hold() -> None:
    """Catch SIGINT/SIGTERM as the start-up guard does (one line, exit 130 or 143), whatever
    ``sys.argv`` says: for a process that is to become a command without being started as one
    (a child of the sweep's fork server). Main thread only; :func:`release` as for the guard."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        signal.signal(s, _stop)
    _state["on"] = True


def guarding() -> bool:
    """Whether the start-up guard holds the signals now."""
    return _state["on"]


def release() -> None:
    """Give the signals back to Python's defaults (a ``KeyboardInterrupt`` for SIGINT, the
    default action for SIGTERM), where the guard still holds them; a command calls this once it
    can handle them itself (or installs its own handlers, which replace the guard)."""
    if not _state["on"]:
        return
    _state["on"] = False
    if threading.current_thread() is not threading.main_thread():
        return
    for s, default in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGTERM, signal.SIG_DFL)):  # fmt: skip
        if signal.getsignal(s) is _stop:
            signal.signal(s, default)


class Stopped(BaseException):  # noqa: N818 (a signal, not an error)
    """SIGINT or SIGTERM received inside :func:`raising`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.code = EXIT_SIGNAL[signum]


def _raise(signum: int, frame) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """While active (in the main thread), SIGINT and SIGTERM raise :class:`Stopped`; the
    handlers in place before (the start-up guard's: released) come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    release()
    old = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
