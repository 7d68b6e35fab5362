"""Where :mod:`experiments.plot` reads its data: run folders (the runner's ``--out``) and sweep
folders (:mod:`experiments.sweep`), checked as they are read so that a bad folder, file, column
or cell is a ``ValueError`` naming it and what is allowed.

A ``history.csv`` whose last row is incomplete (a run still writing, or a file cut off: the row
has missing or extra cells, a cell that is not a number where the row before has one, or no line
break after it, which the runner writes after every row) loses that row, with a warning naming
the file and the line. A lone incomplete row is an error, and so is a cell that is not a number
in any other row.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from experiments.config import Selection, load_config
from experiments.select import group_key

log = logging.getLogger("compzoo.plot")

X_AXES = {
    "bits": ("bits_up", "uplink bits per node"),
    "iters": ("iter", "iterations"),
    "time": ("wall_s", "seconds"),
    "modeled-time": (None, "modeled seconds"),
}
# Run arguments that say where or how a run was executed, not what was run.
_NOT_PARAMS = ("list", "out", "overwrite", "quiet", "resume", "checkpoint_every", "timeout",
               "backend", "device")  # fmt: skip


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{str(path)!r} is not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def runs_of(src: Path, select: Selection | None):
    """``(params, run_dir, chosen)`` for each run to plot from one source folder; ``chosen`` is
    the sweep's ``best`` row of the run's group, with ``tried`` (its multipliers, sorted) added
    (``None`` for a plain run folder).

    A sweep group whose chosen multiplier is the smallest or the largest of several tried is
    warned about: the best may lie outside the grid."""
    if (src / "sweep.json").is_file():
        from experiments.select import best
        from experiments.sweep import read_summary, table

        cfg = load_config(_read_json(src / "sweep.json"))
        sel = select or cfg.select
        by_id = {s.run_id: s for s in cfg.runs()}
        rows = table(cfg, src, sel)
        tried: dict[tuple, set[float]] = {}
        for r in rows:
            tried.setdefault(group_key(r), set()).add(float(r["step_mult"]))
        key_of = {r["run_id"]: group_key(r) for r in rows}
        lowest = best(rows, Selection(rule="min_final", metric=sel.metric))
        for row, low in zip(best(rows, sel), lowest, strict=True):
            what = f"{row.get('label')}, {row.get('compressor')}"
            if row.get("step_mult") is None and low.get("step_mult") is not None:
                log.warning(
                    "%s: no multiplier chosen (%s); drawn at step_mult=%s, its lowest final %s",
                    what, row["status"], _fmt(float(low["step_mult"])), sel.metric,
                )  # fmt: skip
                row = {**low, "fallback": row["status"]}
            elif row.get("step_mult") is None:
                log.warning("%s: no multiplier chosen (%s); not drawn", what, row["status"])
                continue
            mults = sorted(tried[key_of[row["run_ids"].split(";")[0]]])
            if "fallback" not in row:
                _warn_edge(what, float(row["step_mult"]), mults)
            row = {**row, "tried": mults}
            for run_id in row["run_ids"].split(";"):
                run_dir = src / "runs" / run_id
                if read_summary(run_dir) is not None:
                    yield by_id[run_id].params, run_dir, row
        return
    if (src / "config.json").is_file() and (src / "history.csv").is_file():
        yield run_params(src), src, None
        return
    if not src.exists():
        raise ValueError(f"{str(src)!r} does not exist; give run folders or sweep folders")
    raise ValueError(
        f"{str(src)!r} is neither a run folder (config.json, history.csv) nor a sweep folder "
        "(sweep.json)"
    )


def at_edge(mult: float, tried: list[float]) -> str | None:
    """``"smallest"`` or ``"largest"`` when ``mult`` is at that end of several ``tried``
    multipliers, else ``None``."""
    if len(tried) < 2:
        return None
    return "smallest" if mult == tried[0] else "largest" if mult == tried[-1] else None


def _warn_edge(what: str, mult: float, tried: list[float]) -> None:
    end = at_edge(mult, tried)
    if end is not None:
        log.warning(
            "%s: the chosen step_mult %s is the %s tried (%s); extend the grid %s it",
            what, _fmt(mult), end, ", ".join(map(_fmt, tried)),
            "below" if end == "smallest" else "above",
        )  # fmt: skip


def run_params(run_dir: Path) -> dict:
    """A run's parameters by runner flag name (``init``, ``ef_lambda``, ...: the names a sweep
    config uses), from its ``config.json``; unset (``None``) arguments and those that say where
    or how a run was executed are left out.

    Raises:
        ValueError: ``config.json`` unreadable, not an object, or its ``args`` not an object.
    """
    config = _read_json(run_dir / "config.json")
    args = config.get("args", {})
    if not isinstance(args, dict):
        raise ValueError(f"{str(run_dir / 'config.json')!r}: 'args' must be an object")
    params: dict[str, Any] = {"algorithm": config.get("algorithm", args.get("algorithm"))}
    params["label"] = params["algorithm"]
    names = _flag_names()
    for k, v in args.items():
        if k in _NOT_PARAMS or k == "algorithm" or v is None or v == []:
            continue
        name = names.get(k) or ("lambda" if k == "lam" else k.removeprefix("opt_"))
        params[name] = tuple(v) if isinstance(v, list) else v
    return params


@lru_cache(maxsize=1)
def _flag_names() -> dict[str, str]:
    """The runner's argument names (``opt_lam``) -> flag names (``ef_lambda``)."""
    from runner.cli import build_parser

    names = {}
    for action in build_parser(every=True)._actions:
        flags = [o for o in action.option_strings if o.startswith("--")]
        if flags:
            names[action.dest] = flags[0][2:].replace("-", "_")
    return names


def series(run_dir: Path, x: str, y: str, net: tuple) -> tuple[np.ndarray, np.ndarray]:
    """A run's ``(x, y)`` values (non-finite ``y`` kept, and noted; empty cells are NaN).

    Args:
        run_dir: the run folder.
        x: a key of :data:`X_AXES`.
        y: a ``history.csv`` column.
        net: ``(bandwidth, workers, latency)`` for ``x="modeled-time"``.

    Raises:
        ValueError: an unreadable or empty history, a column absent or empty, a cell that is
            not a number (except in an incomplete last row: see :func:`read_history`).
    """
    path = run_dir / "history.csv"
    rows = read_history(path)
    if not rows:
        raise ValueError(f"{str(path)!r} has no rows: the run logged nothing")
    have = list(rows[0])
    filled = [c for c in have if any(r.get(c) not in (None, "") for r in rows)]
    need = [y] + (["bits_up", "t_compute", "t_encode", "t_decode"] if x == "modeled-time"
                  else [X_AXES[x][0]])  # fmt: skip
    for col in need:
        if col not in have:
            raise ValueError(f"column {col!r} is not in {path}; have: {', '.join(filled)}")
        if col not in filled:
            why = " (f* is unknown for this run's problem)" if col == "f_gap" else ""
            raise ValueError(
                f"column {col!r} of {path} is empty{why}; columns with values: " + ", ".join(filled)
            )
    ys = _column(rows, y, path)
    if x == "modeled-time":
        xs = _modeled_seconds(run_dir, rows, *net)
    else:
        xs = _column(rows, X_AXES[x][0], path)
    bad = ~np.isfinite(ys) & np.array([r.get(y) not in (None, "") for r in rows])
    if bad.any():
        first = rows[int(np.argmax(bad))].get("iter", "?")
        reason = _reason(run_dir)
        log.warning(
            "%s: dropped %d non-finite %s value(s), from iteration %s on%s",
            run_dir, int(bad.sum()), y, first, f" (the run {reason})" if reason else "",
        )  # fmt: skip
    return xs, ys


def read_history(path: Path) -> list[dict[str, str]]:
    """The rows of a ``history.csv`` (column -> cell text), without an incomplete last row
    (see the module doc), which is dropped with a warning naming the file and its line.

    Raises:
        ValueError: an unreadable file, or one whose only row has missing or extra cells.
    """
    try:
        with path.open(newline="") as fh:
            text = fh.read()
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, [])
        rows, lines = [], []
        for cells in reader:
            if cells:
                rows.append(cells)
                lines.append(reader.line_num)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{str(path)!r} is not a readable CSV file ({e})") from None
    why = _incomplete(header, rows, text) if rows else None
    if why is not None and len(rows) > 1:
        log.warning(
            "%s: line %d is incomplete (%s), as if the file was cut off there; plotted the %d "
            "complete rows before it",
            path, lines[-1], why, len(rows) - 1,
        )  # fmt: skip
        rows.pop()
    elif why is not None and len(rows[0]) != len(header):
        raise ValueError(
            f"{str(path)!r}: line {lines[0]}, its only row, is incomplete ({why}); the run "
            "logged no complete row"
        )
    return [dict(zip(header, [*cells, *[None] * (len(header) - len(cells))], strict=False))
            for cells in rows]  # fmt: skip


def _incomplete(header: list[str], rows: list[list[str]], text: str) -> str | None:
    """Why the last of ``rows`` is incomplete, or ``None`` when it is not."""
    last = rows[-1]
    if len(last) < len(header):
        return f"{len(last)} of {len(header)} cells"
    if len(last) > len(header):
        return f"{len(last)} cells for {len(header)} columns"
    if len(rows) > 1:
        for col, before, cell in zip(header, rows[-2], last, strict=False):
            if cell and _is_number(before) and not _is_number(cell):
                return f"{col} holds {cell!r}, not a number"
    if not text.endswith(("\n", "\r")):
        return "no line break at its end"
    return None


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _reason(run_dir: Path) -> str | None:
    try:
        return str(json.loads((run_dir / "summary.json").read_text()).get("reason"))
    except (OSError, ValueError, AttributeError):
        return None


def _modeled_seconds(run_dir: Path, rows: list[dict], bandwidth, workers, latency):
    from compressors.registry import parse_spec
    from systems.measure import collective_of
    from systems.model import modeled_run_seconds

    cfg = _read_json(run_dir / "config.json")
    args = cfg.get("args", {})
    spec = args.get("compressor") or cfg["compressor"]["spec"]
    held = 1 if cfg.get("world_size") else int(args.get("nodes") or 1)
    path = run_dir / "history.csv"
    cols = {c: np.nan_to_num(_column(rows, c, path)) for c in ("t_compute", "t_encode", "t_decode")}
    return modeled_run_seconds(
        _column(rows, "iter", path),
        _column(rows, "bits_up", path),
        cols["t_compute"],
        cols["t_encode"],
        cols["t_decode"],
        bandwidth,
        workers,
        collective_of(parse_spec(spec)),
        alpha=latency,
        held=held,
    )


def _column(rows: list[dict], col: str, path: Path | None = None) -> np.ndarray:
    out = np.full(len(rows), np.nan)
    for i, r in enumerate(rows):
        v = r.get(col)
        if v in (None, ""):
            continue
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            where = f" of {path}" if path is not None else ""
            raise ValueError(
                f"column {col!r}{where} holds {v!r} at row {i + 1}; allowed: numbers, inf, nan"
            ) from None
    return out


def _fmt(v: float) -> str:
    return format(v, "g")
