"""``history.csv``: one row per logged iteration, written as it goes (rank 0 writes it)."""

from __future__ import annotations

import contextlib
import csv
import io
import os
from pathlib import Path
from typing import Any

from runner.common import fmt
from runner.files import WriteFailed


class History:
    """The history of a run: appends to the rows a resumed run kept, or starts a new file.

    Each row reaches the file whole or not at all: it is written with one unbuffered write (a
    short write is completed), and a write that fails (a full disk) is cut off again, so the
    file ends with the last complete row. After a failure the history stops writing and keeps
    the error in :attr:`error` (the run loop stops on it); the rows still go to :attr:`rows`.

    Attributes:
        f_logged: every ``f`` logged so far (the stability verdict reads its start and best).
        g_logged: every ``grad_norm_sq`` logged so far (the stall verdict reads it).
        rows: every row logged, when ``keep`` (the Python API's in-memory history), else None.
        error: the :class:`WriteFailed` that stopped the writing, or None.
    """

    def __init__(
        self, path: Path, columns: list[str], append: bool, write: bool, keep: bool = False
    ) -> None:
        self.path = Path(path)
        self.columns = columns
        self.f_logged = _logged(path, "f") if append else []
        self.g_logged = _logged(path, "grad_norm_sq") if append else []
        self.rows: list[dict[str, Any]] | None = [] if keep else None  # in memory, when kept
        self.error: WriteFailed | None = None
        self._fh = None
        if write:
            try:
                self._fh = open(path, "ab" if append else "wb", buffering=0)  # noqa: SIM115
                if not append:
                    self._put(_line(columns))
            except OSError as e:
                raise WriteFailed(path, e) from None

    def add(self, row: dict[str, Any]) -> None:
        self.f_logged.append(row["f"])
        self.g_logged.append(row["grad_norm_sq"])
        if self.rows is not None:
            self.rows.append(dict(row))
        if self._fh is None or self.error is not None:
            return
        try:
            self._put(_line([fmt(row.get(k)) for k in self.columns]))
        except WriteFailed as e:
            self.error = e

    def _put(self, data: bytes) -> None:
        """Append ``data`` whole, or cut the file back to where it was and raise."""
        fh = self._fh
        start = fh.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[fh.write(view) :]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fh.fileno(), start)
            raise WriteFailed(self.path, e) from None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()


def _line(cells: list[str]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return buf.getvalue().encode()


def _logged(path: Path, column: str) -> list[float]:
    """A column (``f``, ``grad_norm_sq``) already in a resumed run's history."""
    try:
        with open(path, newline="") as fh:
            return [float(r[column]) for r in csv.DictReader(fh) if r.get(column)]
    except (OSError, ValueError, KeyError):
        return []
