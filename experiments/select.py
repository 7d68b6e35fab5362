"""The papers' tuning protocol: per group of runs, the best step-size multiplier.

A group is every run that shares all parameters except ``step_mult`` and ``seed``. Within a
group each multiplier is scored by the mean over its seeds of a per-run value, and the lowest
score wins (ties go to the smaller multiplier, the safer step):

- ``min_final``: the final value of ``metric`` (a diverged, unstable or failed run counts as
  ``+inf``);
- ``bits_to_tol``: the uplink bits per node spent until ``metric <= tol`` first held at a
  logged iteration (``+inf`` if it never did, if the run diverged, was unstable or failed, or if
  after reaching ``tol`` it blew up: its history ends more than 10 times above
  ``max(best, tol)`` or above its start, :func:`runner.stability.verdict`). A run's status
  ``unstable`` comes from the runner; the history test also catches runs written before the
  runner had that status.

A winner at either end of the tried multipliers is flagged (``at_edge``): the papers then extend
the grid, since the true optimum may lie outside it. A group where every multiplier scores
``+inf`` has no winner: its ``step_mult`` is empty and its ``status`` says why (``all
diverged``, ``all failed``, ``none reached tol``, ``no finite METRIC``, ``none finished``); a
group with a winner has status ``chosen``.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from experiments.config import Selection
from runner.stability import verdict

# Columns of a summary table that are results, not parameters: never part of a group key.
HISTORY_COLUMNS = (
    "iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s",
    "bits_up_max", "bits_down_max", "wire_bytes_up", "test_loss", "test_acc",
    "t_compute", "t_encode", "t_communicate", "t_decode",
)  # fmt: skip
RESULT_COLUMNS = frozenset(
    {"run_id", "status", "error", "reason", "iters_run", "gamma", "gamma_theory", "bits_to_tol"}
    | set(HISTORY_COLUMNS)
)
FINISHED = ("completed", "stalled", "tolerance", "max_bits")


def bits_to_tol(rows: list[dict], metric: str, tol: float) -> float | None:
    """Uplink bits per node at the first logged iteration with ``metric <= tol``.

    Args:
        rows: ``history.csv`` rows (strings as read by ``csv.DictReader``, or numbers).
        metric: the column compared with ``tol``.
        tol: the threshold.

    Returns:
        That row's ``bits_up``, or ``None`` if no row reaches ``tol`` (empty cells and NaN never
        do) or if the history blows up after reaching it (:func:`blew_up`).

    Raises:
        ValueError: ``metric`` or ``bits_up`` is not a column of the rows.
    """
    if rows and metric not in rows[0]:
        raise ValueError(f"metric {metric!r} is not a history column; have: {', '.join(rows[0])}")
    if rows and "bits_up" not in rows[0]:
        raise ValueError("history rows have no 'bits_up' column")
    for row in rows:
        v = _num(row.get(metric))
        if v is not None and v <= tol:
            return None if blew_up(rows, metric, tol) else float(row["bits_up"])
    return None


def blew_up(rows: list[dict], metric: str, tol: float = 0.0) -> bool:
    """Whether ``metric`` ends unstable: non-finite, above its first value, or more than 10
    times above ``max(its best, tol)`` (``tol`` is the noise floor: a run that reached the
    target and stays within 10x of it has not blown up)."""
    vals = [v for v in (_num(r.get(metric)) for r in rows) if v is not None]
    if vals and not math.isfinite(vals[-1]):
        return True
    return verdict(vals, floor=max(tol, 0.0)) is not None


def group_key(params: dict) -> tuple:
    """Every parameter except ``step_mult`` and ``seed`` (and result columns), as sorted pairs.

    Lists become tuples so that the key is hashable; the order of the keys in ``params`` does
    not matter.
    """
    return tuple(
        sorted(
            (k, tuple(v) if isinstance(v, list) else v)
            for k, v in params.items()
            if k not in ("step_mult", "seed") and k not in RESULT_COLUMNS
        )
    )


def run_score(row: dict, selection: Selection) -> float:
    """One run's value under ``selection`` (``+inf`` for a diverged, unstable, failed or missing
    run: only the statuses in ``FINISHED`` score)."""
    if str(row.get("status", "")) not in FINISHED:
        return math.inf
    if selection.rule == "min_final":
        if selection.metric not in row:
            raise ValueError(
                f"metric {selection.metric!r} is not a column of the summary table; "
                f"have: {', '.join(row)}"
            )
        v = _num(row[selection.metric])
    else:
        if "bits_to_tol" not in row:
            raise ValueError(
                "select rule 'bits_to_tol' needs a 'bits_to_tol' column (tabulate with a tol)"
            )
        v = _num(row["bits_to_tol"])
    return math.inf if v is None or math.isnan(v) else v


def best(table: list[dict], selection: Selection) -> list[dict]:
    """One row per group: the multiplier the rule chooses.

    Args:
        table: summary rows (``summary.csv`` as read by ``csv.DictReader``, or the same rows
            with numbers), each with ``run_id``, ``status``, ``step_mult``, ``seed``, the other
            parameters and the final metrics (and ``bits_to_tol`` for that rule).
        selection: the rule.

    Returns:
        Rows in order of each group's first run: the group's parameters, then ``step_mult``
        (the winner), ``status`` (``chosen``, or why there is no winner: see the module doc),
        ``rule``, ``metric``, ``select_tol``, ``value`` (its mean over seeds), ``n_mults``
        (multipliers tried), ``n_seeds`` (runs averaged for the winner), ``at_edge`` (winner at
        the smallest or largest multiplier tried) and ``run_ids`` (the winner's runs, joined by
        ``;``). Without a winner, ``step_mult``, ``value``, ``n_seeds``, ``at_edge`` and
        ``run_ids`` are ``None`` (empty in a CSV).
    """
    groups: dict[tuple, dict[float, list[tuple[float, str]]]] = {}
    params_of: dict[tuple, dict] = {}
    statuses: dict[tuple, list[str]] = {}
    for row in table:
        key = group_key(row)
        params_of.setdefault(key, dict(key))
        mult = float(row["step_mult"])
        groups.setdefault(key, {}).setdefault(mult, []).append(
            (run_score(row, selection), str(row["run_id"]))
        )
        statuses.setdefault(key, []).append(str(row.get("status", "")))
    out = []
    for key, by_mult in groups.items():
        scored = sorted((_mean([s for s, _ in runs]), m) for m, runs in by_mult.items())
        value, mult = scored[0]
        mults = sorted(by_mult)
        common = {"rule": selection.rule, "metric": selection.metric, "select_tol": selection.tol}
        if math.isinf(value):
            out.append(
                {**params_of[key], "step_mult": None,
                 "status": _no_winner(statuses[key], selection), **common, "value": None,
                 "n_mults": len(mults), "n_seeds": None, "at_edge": None, "run_ids": None}
            )  # fmt: skip
            continue
        out.append(
            {**params_of[key], "step_mult": mult, "status": "chosen", **common, "value": value,
             "n_mults": len(mults), "n_seeds": len(by_mult[mult]),
             "at_edge": mult in (mults[0], mults[-1]),
             "run_ids": ";".join(r for _, r in by_mult[mult])}
        )  # fmt: skip
    return out


def _no_winner(statuses: list[str], selection: Selection) -> str:
    """Why no multiplier of a group scores: what its runs have in common."""
    unstable = ("diverged", "unstable")
    if all(s in unstable for s in statuses):
        return "all diverged"
    if all(s == "failed" for s in statuses):
        return "all failed"
    if all(s == "missing" for s in statuses):
        return "none finished"
    if any(s in FINISHED for s in statuses):
        return (
            "none reached tol"
            if selection.rule == "bits_to_tol"
            else f"no finite {selection.metric}"
        )
    return "none finished normally (" + ", ".join(sorted(set(statuses))) + ")"


def _mean(values: list[float]) -> float:
    if any(math.isinf(v) for v in values):
        return math.inf
    return sum(values) / len(values)


POOLS = ("mean", "median")


def pool_seeds(values: list[float], how: str = "mean") -> float:
    """One multiplier's value from its seeds' values: the mean (``inf`` if any seed is
    ``inf``, this module's rule) or the median (``inf`` entries sort last, the reproductions'
    rule)."""
    if how == "median":
        return float(statistics.median(sorted(values)))
    if how != "mean":
        raise ValueError(f"seeds are pooled by one of {', '.join(POOLS)}, got {how!r}")
    return _mean(values)


def _num(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
