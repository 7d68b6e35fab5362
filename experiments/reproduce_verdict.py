"""A reproduction's runs judged: each run's bits to the tolerance under the claim's convention,
the best multiplier per setting and method by the median over seeds (the cells), the claim's
verdict on them, and the verdict as plain text (the rules: :mod:`experiments.reproduce`)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from experiments.reproduce_config import Claim, Paper, _label
from experiments.select import pool_seeds

FINISHED = ("completed", "stalled", "tolerance", "max_bits")
UNFINISHED = ("failed", "interrupted", "write_failed")  # runs that did not end by themselves


def _status(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "summary.json").read_text()).get("reason", "completed"))
    except (OSError, ValueError, AttributeError):
        return "failed"


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _num(v: Any) -> float | None:
    """A float from a CSV/JSON cell; None for empty, missing or non-finite values."""
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_bits(history: list[dict], status: str, claim: Claim) -> float:
    """One run's bits to tolerance under the claim's convention (``inf``: never, or bad end).

    Args:
        history: the run's ``history.csv`` rows, iteration 0 first.
        status: the run's stop reason; anything but a normal end counts as never.
        claim: gives ``metric``, ``tol`` and the bit convention.
    """
    if status not in FINISHED or not history:
        return math.inf
    offset = (_num(history[0].get("bits_up")) or 0.0) if claim.bits == "exclude-initial" else 0.0
    for row in history:
        v = _num(row.get(claim.metric))
        if v is not None and v <= claim.tol:
            return float(row["bits_up"]) - offset
    return math.inf


def _median(values: list[float]) -> float:
    """The median, with ``inf`` entries (never reached) sorting last."""
    return pool_seeds(values, "median")


def aggregate(rows: list[dict], paper: Paper, grid_keys: list[str]) -> list[dict]:
    """Per setting and method: the best multiplier by median bits over seeds.

    Args:
        rows: one per run: the run's params plus ``bits`` (see :func:`run_bits`).
        paper: the reproduction.
        grid_keys: the sweep's grid keys.

    Returns:
        One dict per (setting, method): ``setting`` (the grid values other than the method's
        own, the multiplier and the seed), ``label``, ``step_mult``, ``bits_to_tol`` (the
        median; None: never), ``bits_min``/``bits_max`` over the seeds (None: some never),
        ``reached`` (seeds that got there) and ``seeds``.
    """
    method_keys = {"algorithm", "label"}
    for m in paper.sweep.get("methods", []):
        method_keys |= {k.replace("-", "_") for k in m}
    setting_keys = [k for k in grid_keys if k not in method_keys | {"step_mult", "seed"}]
    groups: dict[tuple, dict[float, list[float]]] = {}
    meta: dict[tuple, tuple[dict, str]] = {}
    for row in rows:
        label = str(row.get("label") or row.get("algorithm"))
        setting = {k: row.get(k) for k in setting_keys}
        key = (tuple(sorted((k, str(v)) for k, v in setting.items())), label)
        meta.setdefault(key, (setting, label))
        groups.setdefault(key, {}).setdefault(float(row["step_mult"]), []).append(row["bits"])
    out = []
    for key, by_mult in groups.items():
        setting, label = meta[key]
        scored = sorted((_median(v), m) for m, v in by_mult.items())
        value, mult = scored[0]
        runs = by_mult[mult]
        finite = [b for b in runs if math.isfinite(b)]
        out.append(
            {
                "setting": setting,
                "label": label,
                "step_mult": mult if math.isfinite(value) else None,
                "bits_to_tol": value if math.isfinite(value) else None,
                "bits_min": min(runs) if finite and math.isfinite(min(runs)) else None,
                "bits_max": max(runs) if len(finite) == len(runs) else None,
                "reached": len(finite),
                "seeds": len(runs),
                "mults": sorted(by_mult),
            }
        )
    return out


def _bits(m: dict | None) -> float:
    return math.inf if m is None or m["bits_to_tol"] is None else m["bits_to_tol"]


def evaluate(cells: list[dict], paper: Paper) -> dict[str, Any]:
    """The claim against the aggregated rows (:func:`aggregate`).

    ``order``: per setting (e.g. data set), the methods' median bits must be strictly increasing
    along ``order`` (never reached counts as infinite, so two such methods never order).
    ``beats``: per setting, each winner's median bits strictly below the baseline's (with
    ``any``: the best winner's).
    ``heatmap``: per setting other than the two heatmap keys, the best cell outside the baseline
    row and column must need strictly fewer bits than every baseline cell.
    ``slowdown``: per setting other than the claim's axis, see :func:`slowdown_holds`.

    Returns:
        ``{"holds": bool, "settings": [{"setting", "holds", "methods" or "cells", ...}]}``.
    """
    claim = paper.claim
    hm = claim.kind == "heatmap"
    drop = {claim.rows, claim.cols} if hm else {claim.axis} if claim.kind == "slowdown" else set()
    settings: dict[tuple, dict[str, Any]] = {}
    for c in cells:
        outer = {k: v for k, v in c["setting"].items() if k not in drop}
        key = tuple(sorted((k, str(v)) for k, v in outer.items()))
        settings.setdefault(key, {"setting": outer, "cells": []})["cells"].append(c)
    out = []
    for key in sorted(settings):
        entry = settings[key]
        if hm:
            out.append(_heatmap_verdict(entry["setting"], entry["cells"], claim))
            continue
        if claim.kind == "slowdown":
            out.append(_slowdown_verdict(entry["setting"], entry["cells"], claim))
            continue
        by_label = {c["label"]: c for c in entry["cells"]}
        methods = []
        for label in claim.order:
            c = by_label.get(label)
            methods.append(_public(c) if c else {"label": label, "bits_to_tol": None})
        bits = [_bits(m) for m in methods]
        if claim.kind == "beats":
            wins = [b < bits[-1] for b in bits[:-1]]
            holds = any(wins) if claim.any else all(wins)
        else:
            holds = all(a < b for a, b in zip(bits, bits[1:], strict=False))
        out.append({"setting": entry["setting"], "holds": holds, "methods": methods})
    return {"holds": bool(out) and all(s["holds"] for s in out), "settings": out}


def _public(c: dict) -> dict:
    keep = ("label", "step_mult", "bits_to_tol", "bits_min", "bits_max", "reached", "seeds")
    return {k: c.get(k) for k in keep}


def _heatmap_verdict(setting: dict, cells: list[dict], claim: Claim) -> dict:
    def is_row(c):
        return str(c["setting"].get(claim.rows)) == str(claim.base_row)

    def is_col(c):
        return _num(c["setting"].get(claim.cols)) == _num(claim.base_col)

    table = [
        {claim.rows: c["setting"].get(claim.rows), claim.cols: c["setting"].get(claim.cols),
         **_public(c)}
        for c in cells
    ]  # fmt: skip
    inner = [c for c in cells if not is_row(c) and not is_col(c)]
    col_best = min((_bits(c) for c in cells if is_col(c)), default=math.inf)
    row_best = min((_bits(c) for c in cells if is_row(c)), default=math.inf)
    best = min(inner, key=_bits, default=None)
    best_bits = _bits(best)
    holds = math.isfinite(best_bits) and best_bits < col_best and best_bits < row_best
    return {
        "setting": setting,
        "holds": holds,
        "best": None if best is None else {
            claim.rows: best["setting"].get(claim.rows),
            claim.cols: best["setting"].get(claim.cols), **_public(best),
        },
        "baseline_col_best": None if math.isinf(col_best) else col_best,
        "baseline_row_best": None if math.isinf(row_best) else row_best,
        "cells": table,
    }  # fmt: skip


def slowdown_of(at_level: float, at_base: float) -> float | None:
    """Bits at a level over bits at the base level: ``inf`` when only the base level reached the
    tolerance; None when the base level never did (no slowdown can be measured)."""
    if not math.isfinite(at_base):
        return None
    return math.inf if not math.isfinite(at_level) else at_level / at_base


def slowdown_holds(table: dict[str, dict[str, float | None]], claim: Claim) -> dict[str, Any]:
    """The slowdown claim on one setting's slowdowns ``table[label][level]``.

    With ``A`` the affected method (``claim.order[0]``) and ``R`` each of the others:
    (a) *less affected*: at every level other than the base where ``A`` suffers (slowdown
    ``>= claim.suffer``), ``A``'s slowdown is at least ``claim.factor`` times each ``R``'s
    (``inf`` against a finite value counts as larger; ``inf`` against ``inf`` does not), and
    ``A`` suffers at one level or more; (b) *both suffer*: at ``claim.high_level`` every method's
    slowdown is at least ``claim.suffer``. A slowdown that cannot be measured (None: the method
    never reached the tolerance at the base level) fails both parts.
    """
    affected, *robust = claim.order
    base = str(claim.base_level)
    levels = [lv for lv in table[affected] if lv != base]
    a = table[affected]
    suffering = [lv for lv in levels if a[lv] is not None and a[lv] >= claim.suffer]

    def much_more(x: float | None, y: float | None) -> bool:
        if x is None or y is None:
            return False
        if math.isinf(x):
            return not math.isinf(y)
        return x >= claim.factor * y

    less = bool(suffering) and all(
        much_more(a[lv], table[r].get(lv)) for lv in suffering for r in robust
    )
    high = str(claim.high_level)
    both = all((s := table[m].get(high)) is not None and s >= claim.suffer for m in claim.order)
    return {"less_affected": less, "levels_affected_suffers": suffering, "both_suffer": both}


def _slowdown_verdict(setting: dict, cells: list[dict], claim: Claim) -> dict:
    base = str(claim.base_level)
    rows = {}
    for c in cells:
        level = str(c["setting"].get(claim.axis))
        rows.setdefault(c["label"], {})[level] = c
    table: dict[str, dict[str, float | None]] = {}
    methods = []
    for label in claim.order:
        by_level = rows.get(label, {})
        at_base = _bits(by_level.get(base))
        table[label] = {}
        for level, c in by_level.items():
            slow = slowdown_of(_bits(c), at_base)
            table[label][level] = slow
            methods.append({claim.axis: c["setting"].get(claim.axis), **_public(c),
                            "slowdown": None if slow is None or math.isinf(slow) else slow,
                            "slowdown_inf": slow is not None and math.isinf(slow)})  # fmt: skip
        if base not in by_level:
            table[label][base] = None
    parts = slowdown_holds(table, claim)
    return {
        "setting": setting,
        "holds": parts["less_affected"] and parts["both_suffer"],
        **parts,
        "methods": methods,
    }


def _fmt_bits(v: Any) -> str:
    return "never" if v is None else f"{v:.6g}"


def _spread(m: dict) -> str:
    lo, hi = m.get("bits_min"), m.get("bits_max")
    seeds, reached = m.get("seeds"), m.get("reached")
    if not seeds:
        return "-"
    rng = f"{_fmt_bits(lo)}..{_fmt_bits(hi)}" if seeds > 1 and reached else ""
    return f"{rng} ({reached}/{seeds} seeds)".strip()


def verdict_table(verdict: dict[str, Any]) -> str:
    """The verdict as plain text: per setting, each method (or cell) and whether it holds."""
    lines = []
    if verdict.get("statement"):
        lines.append(f"claim: {verdict['statement']}")
    what = f"bits to {verdict['metric']} <= {verdict['tol']:g}, {verdict['bits']}"
    if verdict["kind"] == "order":
        lines.append(f"order: {' < '.join(verdict['order'])} ({what}; median over seeds)")
    elif verdict["kind"] == "beats":
        *win, base = verdict["order"]
        which = "the best of" if verdict.get("any") else "each of"
        lines.append(f"{which} {', '.join(win)} < {base} ({what}; median over seeds)")
    elif verdict["kind"] == "slowdown":
        affected, *robust = verdict["order"]
        lines.append(
            f"slowdown along {verdict['axis']} (bits at a level / bits at "
            f"{verdict['axis']}={verdict['base']}; {what}; best multiplier per level, median over "
            f"seeds): wherever {affected} slows down >= {verdict['suffer']:g}x, its slowdown >= "
            f"{verdict['factor']:g}x that of {', '.join(robust)}; at {verdict['axis']}="
            f"{verdict['high']} every method slows down >= {verdict['suffer']:g}x"
        )
    else:
        lines.append(f"heatmap: a cell off the baselines beats them ({what}; median over seeds)")
    if verdict.get("dataset"):
        lines.append(f"data: {_label(verdict['dataset'])}")
    if verdict.get("slice"):
        lines.append(f"slice of the grid: {verdict['slice']}")
    for s in verdict["settings"]:
        setting = ", ".join(f"{k}={_label(v)}" for k, v in s["setting"].items())
        lines.append(f"[{setting or 'all runs'}]  {'holds' if s['holds'] else 'FAILS'}")
        if verdict["kind"] == "slowdown":
            axis = verdict["axis"]
            lines.append(
                f"  {'method':<24}{axis:>16}{'best mult':>11}{'median bits':>14}{'slowdown':>10}"
                "  spread"
            )
            for m in s["methods"]:
                mult = "-" if m.get("step_mult") is None else f"{m['step_mult']:g}"
                slow = ("inf" if m.get("slowdown_inf") else "-" if m.get("slowdown") is None
                        else f"{m['slowdown']:.3g}")  # fmt: skip
                lines.append(
                    f"  {m['label']:<24}{_label(m[axis]):>16}{mult:>11}"
                    f"{_fmt_bits(m['bits_to_tol']):>14}{slow:>10}  {_spread(m)}"
                )
            suffers = ", ".join(s["levels_affected_suffers"]) or "none"
            lines.append(
                f"  less affected: {'yes' if s['less_affected'] else 'no'} (levels where "
                f"{verdict['order'][0]} suffers: {suffers}); all suffer at "
                f"{axis}={verdict['high']}: {'yes' if s['both_suffer'] else 'no'}"
            )
        elif verdict["kind"] != "heatmap":
            lines.append(f"  {'method':<12}{'best mult':>11}{'median bits':>14}  spread")
            for m in s["methods"]:
                mult = "-" if m.get("step_mult") is None else f"{m['step_mult']:g}"
                lines.append(
                    f"  {m['label']:<12}{mult:>11}{_fmt_bits(m['bits_to_tol']):>14}  {_spread(m)}"
                )
        else:
            rows, cols = verdict["rows"], verdict["cols"]
            lines.append(f"  {rows:<20}{cols:>8}{'best mult':>11}{'median bits':>14}")
            for c in s["cells"]:
                mult = "-" if c.get("step_mult") is None else f"{c['step_mult']:g}"
                lines.append(
                    f"  {str(c[rows]):<20}{c[cols]!s:>8}{mult:>11}{_fmt_bits(c['bits_to_tol']):>14}"
                )
            b = s["best"] or {}
            lines.append(
                f"  best off-baseline cell: {b.get(rows)} / {cols}={b.get(cols)}: "
                f"{_fmt_bits(b.get('bits_to_tol'))}; best {cols}={verdict['base_col']}: "
                f"{_fmt_bits(s['baseline_col_best'])}; best {rows}={verdict['base_row']}: "
                f"{_fmt_bits(s['baseline_row_best'])}"
            )
    lines.append(f"verdict: the claim {'holds' if verdict['holds'] else 'FAILS'}")
    return "\n".join(lines)


def ranking(methods: list[dict]) -> list[str]:
    """Labels by bits to tolerance, fewest first (never reached: last, in claim order)."""
    keyed = [(_bits(m), i, m["label"]) for i, m in enumerate(methods)]
    return [label for _, _, label in sorted(keyed)]
