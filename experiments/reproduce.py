"""``python -m experiments.reproduce NAME``: rerun a paper's experiment and check its claim.

A reproduction is a folder ``experiments/papers/NAME/`` with

* ``config.toml``: a sweep config (see :mod:`experiments.config`) plus tables of its own:

  - ``[claim]``: ``statement`` (the paper's claim in one line), ``tol`` (on ``metric``, default
    ``grad_norm_sq``), ``bits`` (``"exclude-initial"``: uplink bits counted from iteration 1, the
    initial full gradients not charged, as the papers' plots do; ``"include-initial"``: charged),
    ``seeds`` (how seeds are combined, only ``"median"``) and ``kind``:
    ``"order"`` (``order``: method labels whose bits to tolerance must be strictly increasing
    along the list), ``"beats"`` (each of ``winners`` strictly below ``baseline``) or
    ``"heatmap"`` (one method over a grid of ``rows`` x ``cols`` cells;
    ``base_col`` is the column of the first baseline, ``base_row`` the row of the second: the
    claim is that a cell outside both needs strictly fewer bits than every baseline cell);
  - ``[quick]``: overrides for the small version that the slow tests and the golden record use
    (subtables ``base``, ``grid``, ``select``, ``claim`` and ``data`` are merged key by key,
    ``methods`` and ``name`` replace);
  - ``[data]``: ``libsvm`` (names of LIBSVM sets, swept as a grid over ``--dataset``; found as
    the runner finds them, by :func:`problems.datasets.find`: ``$COMPZOO_DATA``, then
    ``$COMPZOO_LIBSVM_DIR``, else ``../shared/data/libsvm`` beside the repository or the working
    directory; when a file is missing the reproduction is skipped with a message naming every
    place looked), or nothing for generated problems;
* ``README.md``: the paper's claim with its citation, the setting, the rule, and what was found;
* ``golden.json``: what the quick version gave when it was recorded;
* ``results.json``: the verdict of the last full run, with its date, command and wall time
  (written by ``--record``; ``--list`` shows it).

Selection across seeds (``seeds = "median"``): a run's value is its uplink bits per node until
``metric <= tol`` first held at a logged iteration (``inf`` if never, or if the run did not end
normally: diverged, unstable, failed); for each setting, method and multiplier the value is the
median over seeds (``inf`` when half or more of the seeds never get there); the best multiplier
has the smallest median (ties: the smaller multiplier). The verdict reports that median with the
smallest and largest value over the seeds and how many seeds reached the tolerance.

``--prune`` (for grids too large to run every multiplier to the end): runs start largest
multiplier first and each is cut at its method's best median so far (the sweep's pruning,
:mod:`experiments.sweep`). The winners and their medians are those of the unpruned grid; a seed
cut there counts as not reached, so ``reached`` and ``bits_max`` can be lower than unpruned for
the winner's seeds above its median. The verdict says ``"pruned": true``. The sweep's own
``best.csv`` and the figure's chosen runs pool seeds by their mean, which a median budget does
not preserve: with several seeds, only the verdict is exact under ``--prune``.

The command runs the sweep (:func:`experiments.sweep.run_sweep`) into ``OUT`` (default
``runs/reproduce/NAME``, with ``-quick`` and the data set's name appended when they apply),
draws ``OUT/figure.png`` (and ``.pdf``), writes ``OUT/verdict.json``, prints the verdict and
where it wrote the figure, the verdict and the runs.

Exit status: 0 the claim holds, or the data is absent (skipped, with a message); 1 it fails (a
legitimate finding, not an error); 2 bad input, or ``--record`` with runs that did not finish;
130/143 stopped by SIGINT (Ctrl-C) / SIGTERM, at any moment (finished runs are kept, the runs in
flight keep their checkpoints, nothing is recorded, and the same command continues them).
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime
import json
import logging
import math
import shlex
import shutil
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.select import pool_seeds
from streams import interrupts

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

log = logging.getLogger("compzoo.reproduce")

ROOT = Path(__file__).resolve().parents[1]
PAPERS = Path(__file__).resolve().with_name("papers")
LIBSVM_ENV = "COMPZOO_LIBSVM_DIR"
EXIT_HOLDS, EXIT_FAILS, EXIT_BAD_INPUT = 0, 1, 2
OWN_TABLES = ("claim", "quick", "data")
QUICK_MERGED = ("base", "grid", "select", "claim", "data")
QUICK_REPLACED = ("name", "methods")
CLAIM_KEYS = (
    "kind", "order", "statement", "metric", "tol", "bits", "seeds",
    "rows", "cols", "base_row", "base_col", "winners", "baseline",
)  # fmt: skip
KINDS = ("order", "beats", "heatmap")
BITS = ("exclude-initial", "include-initial")
DATA_KEYS = ("libsvm",)
FINISHED = ("completed", "tolerance", "max_bits")
# A method's step given as this string is resolved here to the problem's 1/L (gradient descent's
# step): DCGD has no theoretical step for a biased compressor.
STEP_ONE_OVER_L = "1/L"


class DataMissing(Exception):
    """The reproduction's data files are not on this machine (the run is skipped)."""


@dataclass(frozen=True)
class Claim:
    """What a reproduction checks.

    Attributes:
        kind: ``"order"``, ``"beats"`` or ``"heatmap"``.
        statement: the paper's claim in one line.
        metric: the history column compared with ``tol``.
        tol: the tolerance on ``metric``.
        bits: ``"exclude-initial"`` or ``"include-initial"`` (the initial full gradients).
        order: for ``order``: method labels, fewest bits to tolerance first; for ``beats``:
            the winners followed by the baseline.
        rows, cols: for ``heatmap``: the two grid keys spanning the cells.
        base_row, base_col: for ``heatmap``: the baselines' row and column values.
    """

    kind: str
    statement: str
    metric: str
    tol: float
    bits: str
    order: tuple[str, ...] = ()
    rows: str = ""
    cols: str = ""
    base_row: Any = None
    base_col: Any = None


@dataclass(frozen=True)
class Paper:
    """One reproduction, resolved: the sweep config (as a dict) and its claim."""

    name: str
    folder: Path
    sweep: dict[str, Any]
    claim: Claim
    quick: bool
    dataset: str | None
    only: dict[str, list[Any]] | None = None


def available() -> list[str]:
    """Names of the reproductions: the folders of ``experiments/papers`` with a config.toml."""
    if not PAPERS.is_dir():
        return []
    return sorted(p.name for p in PAPERS.iterdir() if (p / "config.toml").is_file())


def libsvm_dir() -> Path:
    """The first folder of :func:`problems.datasets.places` that exists (else the first one):
    where the LIBSVM sets are looked for first; each set is found by
    :func:`problems.datasets.find`."""
    from problems import datasets

    folders = [folder for _, folder in datasets.places()]
    return next((f for f in folders if f.is_dir()), folders[0])


def _apply_quick(raw: dict, quick: dict, name: str) -> dict:
    unknown = sorted(set(quick) - set(QUICK_MERGED) - set(QUICK_REPLACED))
    if unknown:
        raise ValueError(
            f"{name}: unknown [quick] key(s) {unknown}; allowed: "
            f"{', '.join(QUICK_MERGED + QUICK_REPLACED)}"
        )
    out = dict(raw)
    for key, val in quick.items():
        if key in QUICK_MERGED:
            if not isinstance(val, dict):
                raise ValueError(f"{name}: [quick].{key} must be a table, got {val!r}")
            out[key] = {**out.get(key, {}), **val}
        else:
            out[key] = val
    return out


def dataset_spec(dataset: str) -> str:
    """The runner's ``--dataset`` for the user's: a file path (or the name of a set that
    :func:`problems.datasets.find` finds, e.g. ``mushrooms``) becomes ``libsvm:PATH``."""
    from problems import datasets

    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"--dataset must be a non-empty string, got {dataset!r}")
    if ":" not in dataset and Path(dataset).is_file():
        return f"libsvm:{Path(dataset).resolve()}"
    named = datasets.find(dataset) if ":" not in dataset and "/" not in dataset else None
    if named is not None:
        return f"libsvm:{named.resolve()}"
    if dataset.startswith("libsvm:") and not Path(dataset[len("libsvm:") :]).is_file():
        raise ValueError(f"--dataset {dataset!r}: file not found")
    return dataset


def _libsvm_specs(names: Any, name: str) -> list[str]:
    if not isinstance(names, list) or not names or not all(isinstance(s, str) for s in names):
        raise ValueError(f"{name}: [data].libsvm must list LIBSVM set names, got {names!r}")
    from problems import datasets

    found = {s: datasets.find(s) for s in names}
    missing = [s for s, path in found.items() if path is None]
    if missing:
        looked = ", ".join(str(folder) for _, folder in datasets.places())
        raise DataMissing(
            f"{name}: skipped: the LIBSVM set(s) {', '.join(missing)} are not in {looked} "
            f"(set {LIBSVM_ENV} or {datasets.DATA_ENV} to the folder holding NAME.txt)"
        )
    return [f"libsvm:{found[s].resolve()}" for s in names]


def _resolve_steps(sweep: dict) -> None:
    """Replace a method's ``step = "1/L"`` by the number for this sweep's problem."""
    wanted = [m for m in sweep.get("methods", []) if m.get("step") == STEP_ONE_OVER_L]
    if not wanted:
        return
    if "dataset" in sweep.get("grid", {}):
        raise ValueError('step = "1/L" needs one data set, not a grid over datasets')
    from algorithms.run import configure
    from algorithms.runner.cli import parse_run

    argv = ["dcgd", "--compressor", "identity"]
    for key, val in sweep.get("base", {}).items():
        if key in ("compressor", "step", "step_mult", "iters", "tol", "log_every"):
            continue
        flag = "--" + key.replace("_", "-")
        for v in val if isinstance(val, list) else [val]:
            argv += [flag, str(v)]
    args = parse_run(argv)
    args.nodes = 10 if args.nodes is None else args.nodes
    _algo, _problem, config = configure(args)
    gamma = float(config["step"]["gamma_theory"])
    for m in wanted:
        m["step"] = float(f"{gamma:.12g}")


def _claim(raw: Any, name: str, labels: list[str], select: dict) -> Claim:
    if not isinstance(raw, dict):
        raise ValueError(f"{name}: config.toml needs a [claim] table")
    unknown = sorted(set(raw) - set(CLAIM_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [claim] key(s) {unknown}; allowed: {CLAIM_KEYS}")
    kind = raw.get("kind", "order")
    if kind not in KINDS:
        raise ValueError(f"{name}: [claim].kind must be one of {KINDS}, got {kind!r}")
    bits = raw.get("bits")
    if bits not in BITS:
        raise ValueError(f"{name}: [claim].bits must be one of {BITS} (stated before running)")
    if raw.get("seeds", "median") != "median":
        raise ValueError(f"{name}: [claim].seeds must be 'median', got {raw.get('seeds')!r}")
    metric = str(raw.get("metric", select.get("metric", "grad_norm_sq")))
    tol = raw.get("tol", select.get("tol"))
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise ValueError(f"{name}: the claim needs a tolerance > 0 ([claim] tol), got {tol!r}")
    common = {"statement": str(raw.get("statement", "")), "metric": metric, "tol": float(tol)}
    if kind == "beats":
        winners, baseline = raw.get("winners"), raw.get("baseline")
        if not isinstance(winners, list) or not winners or baseline is None:
            raise ValueError(f"{name}: a 'beats' claim needs [claim].winners and .baseline")
        raw = {**raw, "order": [*winners, baseline]}
    if kind in ("order", "beats"):
        order = raw.get("order")
        if (
            not isinstance(order, list)
            or len(order) < 2
            or not all(isinstance(o, str) for o in order)
        ):
            raise ValueError(f"{name}: [claim].order must list two or more labels, got {order!r}")
        missing = [o for o in order if o not in labels]
        if missing:
            raise ValueError(f"{name}: [claim].order names {missing}, not among methods {labels}")
        return Claim(kind, bits=bits, order=tuple(order), **common)
    for key in ("rows", "cols", "base_row", "base_col"):
        if key not in raw:
            raise ValueError(f"{name}: a heatmap claim needs [claim].{key}")
    if len(labels) != 1:
        raise ValueError(f"{name}: a heatmap claim sweeps one method, got {labels}")
    return Claim(
        "heatmap", bits=bits, rows=str(raw["rows"]), cols=str(raw["cols"]),
        base_row=raw["base_row"], base_col=raw["base_col"], **common,
    )  # fmt: skip


def parse_only(text: str) -> tuple[str, list[str]]:
    """``AXIS=V1,V2`` (``--only``) as the axis and its values, as strings.

    Raises:
        ValueError: not of the form ``AXIS=V[,V...]``.
    """
    axis, sep, vals = text.partition("=")
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not sep or not axis.strip() or not values:
        raise ValueError(f"--only must be AXIS=V1[,V2...] (e.g. nodes=10), got {text!r}")
    return axis.strip(), values


def _restrict(grid: dict[str, Any], only: dict[str, list[str]], name: str) -> dict[str, list]:
    """The grid with each axis of ``only`` cut to the listed values (matched on their text)."""
    kept: dict[str, list] = {}
    for axis, wanted in only.items():
        if axis not in grid or not isinstance(grid[axis], list):
            listed = sorted(k for k, v in grid.items() if isinstance(v, list))
            raise ValueError(
                f"{name}: --only {axis}=...: no grid axis {axis!r}; axes: {', '.join(listed)}"
            )
        texts = {_axis_text(v): v for v in grid[axis]}
        if ",".join(wanted) in texts and not all(w in texts for w in wanted):
            wanted = [",".join(wanted)]  # one value whose text has commas (a problem_opt list)
        missing = [w for w in wanted if w not in texts]
        if missing:
            raise ValueError(
                f"{name}: --only {axis}: value(s) {missing} not in the grid; allowed: "
                f"{', '.join(texts)}"
            )
        grid[axis] = kept[axis] = [texts[w] for w in dict.fromkeys(wanted)]
    return kept


def _axis_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def load_paper(
    name: str,
    quick: bool = False,
    dataset: str | None = None,
    only: dict[str, list[str]] | None = None,
) -> Paper:
    """Read ``experiments/papers/NAME/config.toml`` into a sweep config and a claim.

    Args:
        name: a reproduction's folder name (see :func:`available`).
        quick: apply the ``[quick]`` overrides (the version tests and golden.json use).
        dataset: one data set for the runner (``libsvm:PATH`` or a file path) instead of the
            config's ``[data].libsvm`` sets.
        only: grid axes cut to some of their values (``{"nodes": ["10"]}``): a slice of the
            grid, run and recorded on its own (the claim is judged per setting).

    Raises:
        ValueError: unknown NAME (naming the available ones) or a malformed config.
        DataMissing: a LIBSVM set of the config is not on this machine.
    """
    names = available()
    if name not in names:
        raise ValueError(f"unknown reproduction {name!r}; available: {', '.join(names) or 'none'}")
    folder = PAPERS / name
    with open(folder / "config.toml", "rb") as fh:
        raw = tomllib.load(fh)
    if quick:
        raw = _apply_quick(raw, raw.get("quick", {}), name)
    data = raw.get("data", {})
    unknown = sorted(set(data) - set(DATA_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [data] key(s) {unknown}; allowed: {DATA_KEYS}")
    sweep = copy.deepcopy({k: v for k, v in raw.items() if k not in OWN_TABLES})
    labels = [m.get("label", m.get("algorithm")) for m in sweep.get("methods", [])]
    claim = _claim(raw.get("claim"), name, labels, sweep.get("select", {}))
    base = sweep.setdefault("base", {})
    grid = sweep.setdefault("grid", {})
    if dataset is not None:
        if "libsvm" not in data:
            raise ValueError(f"{name}: takes no --dataset (its problem generates its own data)")
        base["dataset"] = dataset_spec(dataset)
    elif "libsvm" in data:
        grid["dataset"] = _libsvm_specs(data["libsvm"], name)
    kept = _restrict(grid, only, name) if only else None
    # The runner stops a run once the claim's tolerance is met: bits to tolerance are decided.
    base.setdefault("tol", claim.tol)
    if claim.metric in ("grad_norm_sq", "f_gap"):
        base.setdefault("tol_on", claim.metric)
    sweep["select"] = {"rule": "bits_to_tol", "metric": claim.metric, "tol": claim.tol}
    _resolve_steps(sweep)
    return Paper(name, folder, sweep, claim, quick, dataset, kept)


def default_out(paper: Paper) -> Path:
    """``runs/reproduce/NAME[-quick][-DATASET][-AXIS=V]``: one resumable folder per version."""
    return _default_out(paper.name, paper.quick, paper.dataset, paper.only)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


def slice_label(only: dict[str, list[Any]] | None) -> str:
    """``nodes=10`` for ``{"nodes": [10]}``; ``""`` for the whole grid."""
    return ";".join(
        f"{axis}={'|'.join(_axis_text(v) for v in vals)}" for axis, vals in (only or {}).items()
    )


def _default_out(
    name: str, quick: bool, dataset: str | None, only: dict[str, list[Any]] | None = None
) -> Path:
    tag = name + ("-quick" if quick else "")
    if dataset is not None:
        tag += "-" + _safe(Path(dataset.removeprefix("libsvm:")).stem)
    if only:
        tag += "-" + _safe(slice_label(only))
    return Path("runs") / "reproduce" / tag


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


def _label(v: Any) -> str:
    s = str(v)
    return Path(s.removeprefix("libsvm:")).stem if s.startswith("libsvm:") else s


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
    ``beats``: per setting, each winner's median bits strictly below the baseline's.
    ``heatmap``: per setting other than the two heatmap keys, the best cell outside the baseline
    row and column must need strictly fewer bits than every baseline cell.

    Returns:
        ``{"holds": bool, "settings": [{"setting", "holds", "methods" or "cells", ...}]}``.
    """
    claim = paper.claim
    hm = claim.kind == "heatmap"
    drop = {claim.rows, claim.cols} if hm else set()
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
        by_label = {c["label"]: c for c in entry["cells"]}
        methods = []
        for label in claim.order:
            c = by_label.get(label)
            methods.append(_public(c) if c else {"label": label, "bits_to_tol": None})
        bits = [_bits(m) for m in methods]
        if claim.kind == "beats":
            holds = all(b < bits[-1] for b in bits[:-1])
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
        lines.append(f"each of {', '.join(win)} < {base} ({what}; median over seeds)")
    else:
        lines.append(f"heatmap: a cell off the baselines beats them ({what}; median over seeds)")
    if verdict.get("dataset"):
        lines.append(f"data: {_label(verdict['dataset'])}")
    if verdict.get("slice"):
        lines.append(f"slice of the grid: {verdict['slice']}")
    for s in verdict["settings"]:
        setting = ", ".join(f"{k}={_label(v)}" for k, v in s["setting"].items())
        lines.append(f"[{setting or 'all runs'}]  {'holds' if s['holds'] else 'FAILS'}")
        if verdict["kind"] != "heatmap":
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


def reproduce(
    name: str,
    out: str | Path | None = None,
    jobs: int = 1,
    quick: bool = False,
    dataset: str | None = None,
    progress: bool = True,
    only: dict[str, list[str]] | None = None,
    prune: bool = False,
) -> dict[str, Any]:
    """Run a reproduction: the sweep, the figure and the claim's verdict.

    Args:
        name: a reproduction (see :func:`available`).
        out: the sweep folder (default :func:`default_out`); a finished run in it is reused.
        jobs: runs at once.
        quick: the ``[quick]`` version.
        dataset: one data set instead of the config's (see :func:`load_paper`).
        progress: show the sweep's progress bar.
        only: a slice of the grid (see :func:`load_paper`).
        prune: cut each run at its method's best median bits to tolerance so far
            (:mod:`experiments.sweep`, "Pruning"): the same winners and medians, losing runs
            shorter (their seeds then count as not reached).

    Returns:
        The verdict (also written to ``OUT/verdict.json``).

    Raises:
        ValueError: unknown ``name``, a malformed config or a data set the config refuses.
        DataMissing: the config's LIBSVM sets are not on this machine.
    """
    from experiments.config import Selection, load_config
    from experiments.sweep import run_sweep

    paper = load_paper(name, quick=quick, dataset=dataset, only=only)
    out = Path(out) if out is not None else default_out(paper)
    cfg = load_config(paper.sweep)
    t0 = time.perf_counter()
    run_sweep(cfg, out, jobs=jobs, progress=progress, prune="median" if prune else None)
    seconds = time.perf_counter() - t0
    rows, unfinished = [], 0
    for spec in cfg.runs():
        run_dir = out / "runs" / spec.run_id
        status = _status(run_dir)
        unfinished += status in UNFINISHED
        rows.append({**spec.params, "bits": run_bits(_read_csv(run_dir / "history.csv"),
                                                     status, paper.claim)})  # fmt: skip
    cells = aggregate(rows, paper, list(cfg.grid))
    claim = paper.claim
    verdict = {
        "name": paper.name,
        "quick": quick,
        "dataset": paper.sweep["base"].get("dataset"),
        "slice": slice_label(paper.only) or None,
        "kind": claim.kind,
        "statement": claim.statement,
        "order": list(claim.order),
        "rows": claim.rows,
        "cols": claim.cols,
        "base_row": claim.base_row,
        "base_col": claim.base_col,
        "metric": claim.metric,
        "tol": claim.tol,
        "bits": claim.bits,
        "seed_rule": "median over seeds of bits to tol (never/diverged = inf)",
        "pruned": bool(prune),
        "runs": len(rows),
        "unfinished": unfinished,
        "sweep_seconds": round(seconds, 2),
        **evaluate(cells, paper),
    }
    verdict = json.loads(json.dumps(verdict))  # plain JSON types (tuples of grid values: lists)
    from experiments.plot import plot

    selection = Selection(rule="bits_to_tol", metric=claim.metric, tol=claim.tol)
    title = f"{paper.name}{' (quick)' if quick else ''}"
    fig = plot([out], x="bits", y=claim.metric, out=out / "figure", select=selection, title=title)
    import matplotlib.pyplot as plt

    plt.close(fig)
    if claim.kind == "heatmap":
        heatmap_figure(verdict, out / "heatmap", title)
    (out / "verdict.json").write_text(json.dumps(verdict, indent=2) + "\n")
    return verdict


def heatmap_figure(verdict: dict[str, Any], path: Path, title: str) -> None:
    """The paper's kind of figure for a heat-map claim: median bits to the tolerance per
    (row, column) cell, one panel per setting, written to ``path`` ``.png`` and ``.pdf``; a cell
    that never reached it is shown blank and marked "never"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows_key, cols_key, settings = verdict["rows"], verdict["cols"], verdict["settings"]
    fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4.2), squeeze=False)
    for ax, s in zip(axes[0], settings, strict=True):
        rows = list(dict.fromkeys(str(c[rows_key]) for c in s["cells"]))
        cols = list(dict.fromkeys(c[cols_key] for c in s["cells"]))
        grid = np.full((len(rows), len(cols)), np.nan)
        for c in s["cells"]:
            b = c.get("bits_to_tol")
            if b is not None and math.isfinite(b):
                grid[rows.index(str(c[rows_key])), cols.index(c[cols_key])] = b
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                never = np.isnan(grid[i, j])
                # dark text on the light (few bits) end of the map, light text on the dark end
                dark = never or im.norm(grid[i, j]) < 0.5
                text = "never" if never else f"{grid[i, j]:.3g}"
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=8, color="k" if dark else "w"
                )
        ax.set_xticks(range(len(cols)), [_label(c) for c in cols])
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        setting = ", ".join(f"{k}={_label(v)}" for k, v in s["setting"].items())
        ax.set_title(f"{title} {setting}".strip() + f": {'holds' if s['holds'] else 'FAILS'}")
        fig.colorbar(im, ax=ax, label=f"median bits to {verdict['metric']} <= {verdict['tol']:g}")
    fig.tight_layout()
    for suffix in (".png", ".pdf"):
        fig.savefig(path.with_suffix(suffix))
    plt.close(fig)


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


# Reruns of the quick versions on one machine gave identical numbers (every method here is
# deterministic or draws from seed-pinned generators); the tolerance only absorbs float-summation
# order changes across BLAS builds and thread counts, which can move a crossing of the tolerance by
# a logged iteration or two.
GOLDEN_REL_TOL = 0.05


def golden_record(verdict: dict[str, Any]) -> dict[str, Any]:
    """The golden record of a quick verdict (see the module docstring)."""
    keep = ("name", "quick", "kind", "metric", "tol", "bits", "order", "holds", "settings")
    return {
        **{k: verdict[k] for k in keep},
        "tolerance": {
            "bits_to_tol_rel": GOLDEN_REL_TOL,
            "why": (
                "reruns on one machine are bit-identical (deterministic methods, seed-pinned "
                "randomness); 5% leaves room for a crossing of the tolerance to move by a logged "
                "iteration or two under another BLAS or thread count, and is far below the gaps "
                "between methods that the claim is about"
            ),
        },
    }


def results_record(
    verdict: dict[str, Any], argv: list[str], previous: dict[str, Any] | None
) -> dict[str, Any]:
    """What ``--record`` writes to ``experiments/papers/NAME/results.json``.

    One entry per data set run on its own (``--dataset``) and per slice of the grid (``--only``,
    key ``nodes=10``), or ``"all"`` for the whole config; an entry replaces the one of the same
    key and keeps the others.
    """
    dataset = verdict.get("dataset")
    parts = ([] if dataset is None else [_label(dataset)]) + (
        [verdict["slice"]] if verdict.get("slice") else []
    )
    key = " ".join(parts) or "all"
    runs = dict((previous or {}).get("runs", {}))
    runs[key] = {
        "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m experiments.reproduce " + shlex.join(argv),
        "verdict": verdict,
    }
    return {"runs": dict(sorted(runs.items()))}


def ranking(methods: list[dict]) -> list[str]:
    """Labels by bits to tolerance, fewest first (never reached: last, in claim order)."""
    keyed = [(_bits(m), i, m["label"]) for i, m in enumerate(methods)]
    return [label for _, _, label in sorted(keyed)]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.reproduce",
        description="Rerun a paper's experiment, draw its figure and check its claim.",
    )
    ap.add_argument("name", nargs="?", help="a reproduction (see --list)")
    ap.add_argument("--list", action="store_true", help="list the reproductions and verdicts")
    ap.add_argument("--out", default=None, help="output folder (default runs/reproduce/NAME)")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    ap.add_argument("--quick", action="store_true", help="the small version (tests, golden)")
    ap.add_argument(
        "--dataset", default=None, help="one LIBSVM file (PATH or libsvm:PATH) instead of the sets"
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="AXIS=V1,V2",
        help="run (and record) a slice of the grid: that axis cut to those values (repeatable; "
        "a value whose text has commas, a problem_opt list, is given whole)",
    )
    ap.add_argument(
        "--prune",
        action="store_true",
        help="cut each run at its method's best median bits to tolerance so far (same winners "
        "and medians; losing runs shorter, their seeds counted as not reached)",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    ap.add_argument("--write-golden", action="store_true", help="record golden.json (with --quick)")
    ap.add_argument("--record", action="store_true", help="record results.json (full version)")
    ap.add_argument("--force", action="store_true", help="let --write-golden overwrite")
    return ap


def recorded(name: str) -> dict[str, Any] | None:
    """The reproduction's ``results.json``, or None if there is none (or it is unreadable)."""
    try:
        data = json.loads((PAPERS / name / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("runs"), dict) else None


def _summary_line(verdict: dict[str, Any]) -> str:
    parts = []
    for s in verdict.get("settings", []):
        names = [_label(v) for v in s["setting"].values()]
        if verdict.get("dataset"):
            names.insert(0, _label(verdict["dataset"]))
        where = ", ".join(names)
        parts.append(f"{where or 'all'}: {'holds' if s['holds'] else 'FAILS'}")
    return "; ".join(parts)


def _listing() -> str:
    """The ``--list`` text: each reproduction's claim and its recorded verdicts, wrapped at the
    terminal's width between words (a statement is never cut), then the data sets with where
    each was found (the runner's ``data sets:`` section, indented)."""
    from problems import datasets

    names = available()
    pad = max([18, *(len(n) + 2 for n in names)])
    lines: list[tuple[str, str]] = []  # (first column, text)
    for name in names:
        try:
            lines.append((name, load_paper(name).claim.statement))
        except DataMissing:
            with open(PAPERS / name / "config.toml", "rb") as fh:
                raw = tomllib.load(fh)
            missing = [s for s in raw["data"]["libsvm"] if datasets.find(s) is None]
            statement = raw.get("claim", {}).get("statement", "")
            lines.append((name, f"{statement} (needs {', '.join(missing)}: missing here)"))
        except (ValueError, OSError, tomllib.TOMLDecodeError) as exc:
            lines.append((name, f"(broken config: {exc})"))
        rec = recorded(name)
        if rec is None or not rec["runs"]:
            try:
                gold = json.loads((PAPERS / name / "golden.json").read_text())
                quick = f"; quick version only: {'holds' if gold.get('holds') else 'FAILS'}"
            except (OSError, ValueError):
                quick = ""
            lines.append(("", f"verdict: no full run recorded (no results.json){quick}"))
            continue
        for entry in rec["runs"].values():
            v = entry.get("verdict", {})
            lines.append(
                ("", f"verdict: {'holds' if v.get('holds') else 'FAILS'} ({_summary_line(v)}); "
                     f"{v.get('runs')} runs, recorded {entry.get('recorded')}")
            )  # fmt: skip
    width = max(shutil.get_terminal_size(fallback=(100, 24)).columns, pad + 30)
    out = []
    for first, text in lines:
        out += textwrap.wrap(
            text, width, initial_indent=f"{first:<{pad}}", subsequent_indent=" " * pad,
            break_long_words=False, break_on_hyphens=False,
        ) or [first]  # fmt: skip
    for line in datasets.listing():  # indented: a line at the margin names a reproduction
        text = line.lstrip()
        lead = " " * (2 + len(line) - len(text))
        out += textwrap.wrap(
            text, width, initial_indent=lead, subsequent_indent=lead + "  ",
            break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
    return "\n".join(out) + "\n"


def _written(out: Path, verdict: dict[str, Any]) -> str:
    """Where a reproduction's outputs went, one line each."""
    heat = (
        f"heatmap: {out / 'heatmap.png'} (and .pdf)\n" if verdict.get("kind") == "heatmap" else ""
    )
    return (
        f"figure:  {out / 'figure.png'} (and .pdf)\n" + heat + f"verdict: {out / 'verdict.json'}\n"
        f"runs:    {out / 'runs'} ({verdict['runs']} runs; tables {out / 'summary.csv'}, "
        f"{out / 'best.csv'})\n"
    )


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 holds or skipped, 1 fails, 2 bad input,
    130/143 stopped by SIGINT/SIGTERM)."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.list:
        sys.stdout.write(_listing())
        return EXIT_HOLDS
    names = available()
    if args.name is None or args.name not in names:
        given = "no NAME given" if args.name is None else f"unknown reproduction {args.name!r}"
        sys.stderr.write(f"error: {given}; available: {', '.join(names)}\n")
        return EXIT_BAD_INPUT
    if args.jobs < 1:
        sys.stderr.write(f"error: --jobs must be >= 1, got {args.jobs}\n")
        return EXIT_BAD_INPUT
    golden = PAPERS / args.name / "golden.json"
    only: dict[str, list[str]] = {}
    try:
        for text in args.only:
            axis, values = parse_only(text)
            only[axis] = only.get(axis, []) + values
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    if args.write_golden:
        if not args.quick or args.dataset is not None or only:
            sys.stderr.write(
                "error: --write-golden records the quick version: give --quick and no --dataset "
                "or --only\n"
            )
            return EXIT_BAD_INPUT
        if golden.exists() and not args.force:
            sys.stderr.write(f"error: {golden} exists; add --force to overwrite it\n")
            return EXIT_BAD_INPUT
    if args.record and args.quick:
        sys.stderr.write("error: --record records a full run: not with --quick\n")
        return EXIT_BAD_INPUT
    out = (
        Path(args.out)
        if args.out is not None
        else _default_out(args.name, args.quick, args.dataset, only or None)
    )
    try:
        with interrupts.raising():
            verdict = reproduce(
                args.name,
                out=out,
                jobs=args.jobs,
                quick=args.quick,
                dataset=args.dataset,
                progress=not args.quiet,
                only=only or None,
                prune=args.prune,
            )
    except DataMissing as exc:
        sys.stdout.write(f"{exc}\n")
        return EXIT_HOLDS
    except interrupts.Stopped as exc:
        from experiments.sweep import INTERRUPTED_MESSAGE

        sys.stderr.write(f"{INTERRUPTED_MESSAGE} ({exc}); nothing recorded\n")
        return exc.code
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        sys.stderr.write(f"error: cannot write{where}: {exc.strerror or exc}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(verdict_table(verdict) + "\n")
    sys.stdout.write(_written(out, verdict))
    if args.write_golden:
        golden.write_text(json.dumps(golden_record(verdict), indent=2) + "\n")
        sys.stdout.write(f"golden record written to {golden}\n")
    if args.record and verdict.get("unfinished"):
        sys.stderr.write(
            f"error: --record: {verdict['unfinished']} of the {verdict['runs']} runs did not "
            f"finish (failed or interrupted; see {out / 'summary.csv'}): nothing recorded. "
            "Rerunning the same command resumes them\n"
        )
        return EXIT_BAD_INPUT
    if args.record:
        path = PAPERS / args.name / "results.json"
        record = results_record(verdict, argv, recorded(args.name))
        path.write_text(json.dumps(record, indent=2) + "\n")
        sys.stdout.write(f"results recorded in {path}\n")
    return EXIT_HOLDS if verdict["holds"] else EXIT_FAILS


if __name__ == "__main__":
    sys.exit(main())
