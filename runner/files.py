"""Writing a run's files so that a full disk (or any other I/O error) never leaves a half-written
file that a later reader takes for a good one.

``config.json``, ``summary.json`` and the checkpoint's files are written whole to a temporary
file in the same folder, flushed to the disk (``fsync``) and renamed over the old one, so a
reader sees the old file or the new one, never a part. ``history.csv`` grows one row at a time
(:class:`runner.history.History`): a row that cannot be written whole is cut off
again, so the file always ends with a complete row. Every failure is a :class:`WriteFailed`
naming the file and the system's reason; the run stops with exit status
:data:`EXIT_WRITE_FAILED`, keeping its last complete checkpoint.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["EXIT_WRITE_FAILED", "WriteFailed", "reason", "write_atomic", "write_text_atomic"]

# The exit status of a run that could not write its files (a full disk, a lost mount, ...).
EXIT_WRITE_FAILED = 5


class WriteFailed(Exception):  # noqa: N818 (an outcome, reported with its file)
    """A run file could not be written; ``str`` names the file and why."""

    def __init__(self, path: Path | str, error: BaseException) -> None:
        self.path = str(path)
        self.why = reason(error)
        super().__init__(f"cannot write {self.path!r}: {self.why}")


def reason(error: BaseException) -> str:
    """An I/O error as one line: the system's words (``No space left on device``) where there
    are some, else the exception's first line."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} (errno {error.errno})"
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` whole or not at all: ``write(fh)`` fills a temporary file beside it, which
    is flushed to the disk and renamed over ``path``. Raises :class:`WriteFailed` (the temporary
    file removed, ``path`` untouched) on any error of the file system or of ``write``'s
    serialiser (torch reports a full disk as a ``RuntimeError``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteFailed(path, e) from None
    _sync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """:func:`write_atomic` of a UTF-8 text."""
    data = text.encode()
    write_atomic(path, lambda fh: fh.write(data))


def _sync_dir(folder: Path) -> None:
    """Make a rename durable (where the platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
