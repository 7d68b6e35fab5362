"""A sweep folder's run folders read back: whether each run has finished, was interrupted or
failed, and the tables built from them (``summary.csv``, ``best.csv``; the columns are described
in :mod:`experiments.sweep`).

The tables are rebuilt from the run folders alone, so a resumed or re-tabled sweep gives the same
rows as one that ran in one go.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from experiments.config import RunSpec, Selection, SweepConfig
from experiments.select import HISTORY_COLUMNS, best, bits_to_tol

# Stop reasons of runs that did not end by themselves: stopped by a signal, or by a file they
# could not write (a full disk). The next sweep continues them from their checkpoint.
UNFINISHED_REASONS = ("interrupted", "write_failed")


def table(cfg: SweepConfig, out: str | Path, selection: Selection | None = None) -> list[dict]:
    """The summary rows of a sweep folder, one per run of ``cfg`` in run order.

    Args:
        cfg: the sweep's config.
        out: the sweep folder.
        selection: sets the ``bits_to_tol`` column's metric and tol (default ``cfg.select``);
            the column is present only when the tol is set.
    """
    sel = selection or cfg.select
    out = Path(out)
    rows = []
    for spec in cfg.runs():
        rows.append(_row(spec, out / "runs" / spec.run_id, sel))
    return rows


def write_tables(cfg: SweepConfig, out: str | Path) -> tuple[Path, Path]:
    """Rewrite ``summary.csv`` and ``best.csv`` of a sweep folder from its run folders."""
    out = Path(out)
    rows = table(cfg, out)
    summary, best_csv = out / "summary.csv", out / "best.csv"
    _write_csv(summary, rows)
    _write_csv(best_csv, best(rows, cfg.select))
    return summary, best_csv


def read_summary(path: str | Path) -> dict | None:
    """A run folder's ``summary.json``, or ``None`` if it is absent or unreadable."""
    return _summary(Path(path))


def _summary(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _finished(run_dir: Path) -> bool:
    """Whether a run folder holds a run that ended (a summary, not an interruption)."""
    summary = _summary(run_dir)
    return summary is not None and summary.get("reason") not in UNFINISHED_REASONS


def _interrupted(run_dir: Path) -> bool:
    """Whether a run folder holds a run stopped by a signal or a failed write, with a
    checkpoint to go on from."""
    summary = _summary(run_dir)
    return (
        summary is not None
        and summary.get("reason") in UNFINISHED_REASONS
        and (run_dir / "checkpoint" / "meta.json").is_file()
    )


def _row(spec: RunSpec, run_dir: Path, sel: Selection) -> dict[str, Any]:
    row: dict[str, Any] = {"run_id": spec.run_id, "status": "missing"}
    row.update(spec.params)
    summary = _summary(run_dir)
    if summary is None:
        err = run_dir / "stderr.txt"
        if err.is_file():
            lines = err.read_text(errors="replace").strip().splitlines()
            row["status"] = "failed"
            row["error"] = " | ".join([lines[0], lines[-1]] if len(lines) > 1 else lines)
        return row
    row["status"] = str(summary.get("reason", "completed"))
    row["iters_run"] = summary.get("iters")
    row["gamma"] = summary.get("gamma")
    final = summary.get("final", {})
    for col in HISTORY_COLUMNS:
        if col in final:
            row[col] = final[col]
    if sel.tol is not None:
        row["bits_to_tol"] = bits_to_tol(_history(run_dir), sel.metric, sel.tol)
    return row


def _history(run_dir: Path) -> list[dict]:
    path = run_dir / "history.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ";".join(map(str, v))
    return v


def _write_csv(path: Path, rows: list[dict]) -> None:
    cols: dict[str, None] = {}
    for row in rows:
        cols.update(dict.fromkeys(row))
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cols), restval="")
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(v) for k, v in row.items()})
    tmp.replace(path)
