"""``history.csv``: one row per logged iteration, flushed as it goes (rank 0 writes it)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from algorithms.runner.common import fmt


class History:
    """The history of a run: appends to the rows a resumed run kept, or starts a new file.

    Attributes:
        f_logged: every ``f`` logged so far (the stability verdict reads its start and best).
        rows: every row logged, when ``keep`` (the Python API's in-memory history), else None.
    """

    def __init__(
        self, path: Path, columns: list[str], append: bool, write: bool, keep: bool = False
    ) -> None:
        self.f_logged = _logged_f(path) if append else []
        self.rows: list[dict[str, Any]] | None = [] if keep else None  # in memory, when kept
        self._fh = open(path, "a" if append else "w", newline="") if write else None  # noqa: SIM115
        self._writer = None
        if self._fh is not None:
            self._writer = csv.DictWriter(self._fh, fieldnames=columns)
            if not append:
                self._writer.writeheader()

    def add(self, row: dict[str, Any]) -> None:
        self.f_logged.append(row["f"])
        if self.rows is not None:
            self.rows.append(dict(row))
        if self._writer is not None:
            self._writer.writerow({k: fmt(row.get(k)) for k in self._writer.fieldnames})
            self._fh.flush()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        if self._fh is not None:
            self._fh.close()


def _logged_f(path: Path) -> list[float]:
    """The ``f`` column already in a resumed run's history."""
    try:
        with open(path, newline="") as fh:
            return [float(r["f"]) for r in csv.DictReader(fh) if r.get("f")]
    except (OSError, ValueError, KeyError):
        return []
