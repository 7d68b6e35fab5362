"""``python -m experiments.reproduce NAME``: rerun a paper's experiment and check its claim.

A reproduction is a folder ``experiments/papers/NAME/`` with

* ``config.toml``: a sweep config (see :mod:`experiments.config`) plus three tables of its own:
  ``[claim]`` (``order``: method labels whose best-multiplier bits-to-tolerance must be strictly
  increasing along the list; ``statement``: the paper's claim in one line; optional ``metric`` and
  ``tol``, by default those of ``[select]``), ``[quick]`` (overrides for a small version that
  tests and the golden record use: subtables ``base``, ``grid``, ``select`` and ``claim`` are
  merged key by key, ``methods`` and ``name`` replace) and ``[data]`` (``offline``: base flags
  for the data set used when no ``--dataset`` is given; ``file``: base flags added when one is,
  absent where the problem generates its own data and ``--dataset`` is refused);
* ``README.md``: the paper's claim with its citation, the setting used here and how it differs;
* ``golden.json``: what the quick version gave when it was recorded (per method: best multiplier,
  bits to tolerance, final metric), the tolerance a rerun is held to and the claimed order.

The command runs the sweep (:func:`experiments.sweep.run_sweep`) into ``OUT`` (default
``runs/reproduce/NAME``, with ``-quick`` and the data set's name appended when they apply, so
that different versions never share a resumable folder), draws ``OUT/figure.png`` (and ``.pdf``:
the claim's metric against uplink bits, best multiplier per method), writes ``OUT/verdict.json``
and prints the verdict table. A method that never reaches the tolerance counts as needing
infinitely many bits, so two such methods can never be strictly ordered.

Exit status: 0 the claim holds, 1 it fails (a legitimate finding, not an error), 2 bad input.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

log = logging.getLogger("compzoo.reproduce")

PAPERS = Path(__file__).resolve().with_name("papers")
EXIT_HOLDS, EXIT_FAILS, EXIT_BAD_INPUT = 0, 1, 2
OWN_TABLES = ("claim", "quick", "data")
QUICK_MERGED = ("base", "grid", "select", "claim")
QUICK_REPLACED = ("name", "methods")
CLAIM_KEYS = ("order", "statement", "metric", "tol")
DATA_KEYS = ("offline", "file")
# A method's step given as this string is resolved here to the problem's 1/L (gradient descent's
# step): DCGD has no theoretical step for a biased compressor, and 1/L keeps its multipliers
# meaningful across data sets.
STEP_ONE_OVER_L = "1/L"


@dataclass(frozen=True)
class Claim:
    """What a reproduction checks.

    Attributes:
        order: method labels, fewest bits to tolerance first.
        statement: the paper's claim in one line (for the verdict table).
        metric: the history column compared with ``tol``.
        tol: the tolerance on ``metric``.
    """

    order: tuple[str, ...]
    statement: str
    metric: str
    tol: float


@dataclass(frozen=True)
class Paper:
    """One reproduction, resolved: the sweep config (as a dict) and its claim."""

    name: str
    folder: Path
    sweep: dict[str, Any]
    claim: Claim
    quick: bool
    dataset: str | None


def available() -> list[str]:
    """Names of the reproductions: the folders of ``experiments/papers`` with a config.toml."""
    if not PAPERS.is_dir():
        return []
    return sorted(p.name for p in PAPERS.iterdir() if (p / "config.toml").is_file())


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
    """The runner's ``--dataset`` for the user's: an existing file path becomes ``libsvm:PATH``."""
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"--dataset must be a non-empty string, got {dataset!r}")
    if ":" not in dataset and Path(dataset).is_file():
        return f"libsvm:{Path(dataset).resolve()}"
    if dataset.startswith("libsvm:") and not Path(dataset[len("libsvm:") :]).is_file():
        raise ValueError(f"--dataset {dataset!r}: file not found")
    return dataset


def _resolve_steps(sweep: dict) -> None:
    """Replace a method's ``step = "1/L"`` by the number for this sweep's problem.

    The runner's own resolution is used: DCGD with the identity compressor has the theoretical
    step ``1 / (L + 0)``, so the problem is built exactly as the runs will build it.
    """
    wanted = [m for m in sweep.get("methods", []) if m.get("step") == STEP_ONE_OVER_L]
    if not wanted:
        return
    from algorithms.run import build_parser, configure

    argv = ["dcgd", "--compressor", "identity"]
    for key, val in sweep.get("base", {}).items():
        if key in ("compressor", "step", "step_mult", "iters"):
            continue
        flag = "--" + key.replace("_", "-")
        for v in val if isinstance(val, list) else [val]:
            argv += [flag, str(v)]
    args = build_parser().parse_args(argv)
    args._argv = argv
    args.nodes = 10 if args.nodes is None else args.nodes
    _algo, _problem, config = configure(args)
    gamma = float(config["step"]["gamma_theory"])
    for m in wanted:
        m["step"] = float(f"{gamma:.12g}")


def load_paper(name: str, quick: bool = False, dataset: str | None = None) -> Paper:
    """Read ``experiments/papers/NAME/config.toml`` into a sweep config and a claim.

    Args:
        name: a reproduction's folder name (see :func:`available`).
        quick: apply the ``[quick]`` overrides (the version tests and golden.json use).
        dataset: a data set for the runner (``libsvm:PATH``, a file path, or a runner name);
            None uses the config's ``[data].offline`` set, which needs nothing outside the repo.

    Raises:
        ValueError: unknown NAME (naming the available ones) or a malformed config.
    """
    names = available()
    if name not in names:
        raise ValueError(f"unknown reproduction {name!r}; available: {', '.join(names) or 'none'}")
    folder = PAPERS / name
    with open(folder / "config.toml", "rb") as fh:
        raw = tomllib.load(fh)
    quick_over = raw.get("quick", {})
    if quick:
        raw = _apply_quick(raw, quick_over, name)
    claim_raw = raw.get("claim")
    if not isinstance(claim_raw, dict) or "order" not in claim_raw:
        raise ValueError(f"{name}: config.toml needs a [claim] table with an 'order' list")
    unknown = sorted(set(claim_raw) - set(CLAIM_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [claim] key(s) {unknown}; allowed: {CLAIM_KEYS}")
    data = raw.get("data", {})
    unknown = sorted(set(data) - set(DATA_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [data] key(s) {unknown}; allowed: {DATA_KEYS}")
    sweep = copy.deepcopy({k: v for k, v in raw.items() if k not in OWN_TABLES})
    base = sweep.setdefault("base", {})
    if dataset is None:
        base.update(data.get("offline", {}))
    elif "file" not in data:
        raise ValueError(f"{name}: takes no --dataset (its config has no [data].file)")
    else:
        base.update(data["file"])
        base["dataset"] = dataset_spec(dataset)
    select = sweep.get("select", {})
    order = claim_raw["order"]
    if not isinstance(order, list) or len(order) < 2 or not all(isinstance(o, str) for o in order):
        raise ValueError(f"{name}: [claim].order must list two or more labels, got {order!r}")
    labels = [m.get("label", m.get("algorithm")) for m in sweep.get("methods", [])]
    missing = [o for o in order if o not in labels]
    if missing:
        raise ValueError(f"{name}: [claim].order names {missing}, not among the methods {labels}")
    metric = claim_raw.get("metric", select.get("metric", "grad_norm_sq"))
    tol = claim_raw.get("tol", select.get("tol"))
    if not isinstance(tol, (int, float)) or not tol > 0:
        raise ValueError(f"{name}: the claim needs a tolerance > 0 ([claim] or [select] tol)")
    # The claim is about bits to tolerance at the best multiplier, so the best multiplier is the
    # one that minimises exactly that.
    sweep["select"] = {"rule": "bits_to_tol", "metric": str(metric), "tol": float(tol)}
    _resolve_steps(sweep)
    claim = Claim(tuple(order), str(claim_raw.get("statement", "")), str(metric), float(tol))
    return Paper(name, folder, sweep, claim, quick, dataset)


def default_out(paper: Paper) -> Path:
    """``runs/reproduce/NAME[-quick][-DATASET]``: one resumable folder per version."""
    tag = paper.name + ("-quick" if paper.quick else "")
    if paper.dataset is not None:
        stem = Path(paper.dataset.removeprefix("libsvm:")).stem
        tag += "-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)
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


def evaluate(
    best_rows: list[dict], summary_rows: list[dict], paper: Paper, grid_keys: list[str]
) -> dict[str, Any]:
    """The claim against the best-multiplier rows of a sweep (``experiments.select.best``).

    Rows are grouped into settings by the swept parameters that are not the method's own (e.g.
    the compressor when several are swept); the claim must hold in every setting.

    Args:
        best_rows: one row per group, with the params, ``step_mult``, ``value`` (the mean
            bits to tolerance over seeds, ``inf`` if never) and ``run_ids``.
        summary_rows: the sweep's ``summary.csv`` rows (for the winners' final metric).
        paper: the reproduction.
        grid_keys: the sweep's grid keys.

    Returns:
        ``{"holds": bool, "settings": [{"setting": {...}, "holds": bool, "methods": [...]}]}``,
        each method ``{"label", "step_mult", "bits_to_tol" (None: never), "final"}`` where
        ``final`` is the winner's final metric, mean over its seeds.
    """
    method_keys = {"algorithm", "label"}
    for m in paper.sweep.get("methods", []):
        method_keys |= {k.replace("-", "_") for k in m}
    setting_keys = [k for k in grid_keys if k not in method_keys | {"step_mult", "seed"}]
    metric = paper.claim.metric
    by_id = {str(r.get("run_id")): r for r in summary_rows}
    settings: dict[tuple, dict[str, Any]] = {}
    for row in best_rows:
        label = row.get("label") or row.get("algorithm")
        if label not in paper.claim.order:
            continue
        setting = {k: row.get(k) for k in setting_keys}
        key = tuple(sorted((k, str(v)) for k, v in setting.items()))
        entry = settings.setdefault(key, {"setting": setting, "methods": {}})
        if label in entry["methods"]:
            raise ValueError(f"{paper.name}: two best rows for {label!r} in setting {setting}")
        finals = [
            _num(by_id.get(rid, {}).get(metric)) for rid in str(row.get("run_ids", "")).split(";")
        ]
        finals = [f for f in finals if f is not None]
        entry["methods"][label] = {
            "label": label,
            "step_mult": _num(row.get("step_mult")),
            "bits_to_tol": _num(row.get("value")),
            "final": sum(finals) / len(finals) if finals else None,
        }
    out = []
    for key in sorted(settings):
        entry = settings[key]
        methods = []
        for label in paper.claim.order:
            methods.append(
                entry["methods"].get(
                    label, {"label": label, "step_mult": None, "bits_to_tol": None, "final": None}
                )
            )
        bits = [math.inf if m["bits_to_tol"] is None else m["bits_to_tol"] for m in methods]
        holds = all(a < b for a, b in zip(bits, bits[1:], strict=False))
        out.append({"setting": entry["setting"], "holds": holds, "methods": methods})
    return {"holds": bool(out) and all(s["holds"] for s in out), "settings": out}


def verdict_table(verdict: dict[str, Any]) -> str:
    """The verdict as a plain-text table: method, best multiplier, bits to tol, holds/fails."""
    lines = []
    if verdict.get("statement"):
        lines.append(f"claim: {verdict['statement']}")
    lines.append(
        f"order: {' < '.join(verdict['order'])} (bits to {verdict['metric']} <= {verdict['tol']:g})"
    )
    for s in verdict["settings"]:
        setting = ", ".join(f"{k}={v}" for k, v in s["setting"].items())
        lines.append(f"[{setting or 'all runs'}]  {'holds' if s['holds'] else 'FAILS'}")
        lines.append(f"  {'method':<14}{'best mult':>11}{'bits to tol':>15}{'final':>13}")
        for m in s["methods"]:
            mult = "-" if m["step_mult"] is None else f"{m['step_mult']:g}"
            bits = "never" if m["bits_to_tol"] is None else f"{m['bits_to_tol']:.6g}"
            final = "-" if m["final"] is None else f"{m['final']:.3e}"
            lines.append(f"  {m['label']:<14}{mult:>11}{bits:>15}{final:>13}")
    lines.append(f"verdict: the claim {'holds' if verdict['holds'] else 'FAILS'}")
    return "\n".join(lines)


def reproduce(
    name: str,
    out: str | Path | None = None,
    jobs: int = 1,
    quick: bool = False,
    dataset: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run a reproduction: the sweep, the figure and the claim's verdict.

    Args:
        name: a reproduction (see :func:`available`).
        out: the sweep folder (default :func:`default_out`); a finished run in it is reused.
        jobs: runs at once.
        quick: the ``[quick]`` version.
        dataset: a data set instead of the offline default (see :func:`load_paper`).
        progress: show the sweep's progress bar.

    Returns:
        The verdict (also written to ``OUT/verdict.json``): the claim's order, metric and tol,
        the sweep's wall time and, per setting, each method's best multiplier, bits to
        tolerance (None: never reached) and final metric, and whether the claim holds.

    Raises:
        ValueError: unknown ``name``, a malformed config or a data set the config refuses.
    """
    from experiments.config import Selection, load_config
    from experiments.select import best
    from experiments.sweep import run_sweep

    paper = load_paper(name, quick=quick, dataset=dataset)
    out = Path(out) if out is not None else default_out(paper)
    cfg = load_config(paper.sweep)
    t0 = time.perf_counter()
    run_sweep(cfg, out, jobs=jobs, progress=progress)
    seconds = time.perf_counter() - t0
    rows = _read_csv(out / "summary.csv")
    selection = Selection(rule="bits_to_tol", metric=paper.claim.metric, tol=paper.claim.tol)
    best_rows = best(rows, selection)
    verdict = evaluate(best_rows, rows, paper, list(cfg.grid))
    verdict = {
        "name": paper.name,
        "quick": quick,
        "dataset": paper.sweep.get("base", {}).get("dataset"),
        "statement": paper.claim.statement,
        "order": list(paper.claim.order),
        "metric": paper.claim.metric,
        "tol": paper.claim.tol,
        "runs": len(rows),
        "sweep_seconds": round(seconds, 2),
        **verdict,
    }
    from experiments.plot import plot

    title = f"{paper.name}{' (quick)' if quick else ''}"
    fig = plot(
        [out], x="bits", y=paper.claim.metric, out=out / "figure.png", select=selection, title=title
    )
    import matplotlib.pyplot as plt

    plt.close(fig)
    (out / "verdict.json").write_text(json.dumps(verdict, indent=2) + "\n")
    return verdict


def _read_csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# Reruns of the quick versions on one machine gave identical numbers (every method here is
# deterministic or draws from seed-pinned generators); the tolerance only absorbs float-summation
# order changes across BLAS builds and thread counts, which can move a crossing of the tolerance by
# a logged iteration or two.
GOLDEN_REL_TOL = 0.05


def golden_record(verdict: dict[str, Any]) -> dict[str, Any]:
    """The golden record of a quick verdict (see the module docstring)."""
    return {
        "name": verdict["name"],
        "quick": verdict["quick"],
        "dataset": verdict["dataset"],
        "metric": verdict["metric"],
        "tol": verdict["tol"],
        "order": verdict["order"],
        "holds": verdict["holds"],
        "tolerance": {
            "bits_to_tol_rel": GOLDEN_REL_TOL,
            "why": (
                "reruns on one machine are bit-identical (deterministic methods, seed-pinned "
                "randomness); 5% leaves room for a crossing of the tolerance to move by a logged "
                "iteration or two under another BLAS or thread count, and is far below the gaps "
                "between methods that the claim is about"
            ),
        },
        "settings": [
            {
                "setting": s["setting"],
                "holds": s["holds"],
                "methods": s["methods"],
                "ranking": ranking(s["methods"]),
            }
            for s in verdict["settings"]
        ],
    }


def ranking(methods: list[dict]) -> list[str]:
    """Labels by bits to tolerance, fewest first (never reached: last, in claim order)."""
    keyed = [
        (math.inf if m["bits_to_tol"] is None else m["bits_to_tol"], i, m["label"])
        for i, m in enumerate(methods)
    ]
    return [label for _, _, label in sorted(keyed)]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.reproduce",
        description="Rerun a paper's experiment, draw its figure and check its claim.",
    )
    ap.add_argument("name", nargs="?", help="a reproduction (see --list)")
    ap.add_argument("--list", action="store_true", help="list the reproductions")
    ap.add_argument("--out", default=None, help="output folder (default runs/reproduce/NAME)")
    ap.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel (default: CPUs)"
    )
    ap.add_argument("--quick", action="store_true", help="the small version (tests, golden)")
    ap.add_argument(
        "--dataset",
        default=None,
        help="a LIBSVM file (PATH or libsvm:PATH) or a runner data set; default: offline set",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    ap.add_argument("--write-golden", action="store_true", help="record golden.json (with --quick)")
    ap.add_argument("--force", action="store_true", help="let --write-golden overwrite")
    return ap


def _listing() -> str:
    lines = []
    for name in available():
        try:
            claim = load_paper(name).claim
            lines.append(f"{name:<18}{claim.statement}")
        except (ValueError, OSError, tomllib.TOMLDecodeError) as exc:
            lines.append(f"{name:<18}(broken config: {exc})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 holds, 1 fails, 2 bad input)."""
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
    if args.write_golden:
        if not args.quick or args.dataset is not None:
            sys.stderr.write(
                "error: --write-golden records the quick offline version: give --quick and "
                "no --dataset\n"
            )
            return EXIT_BAD_INPUT
        if golden.exists() and not args.force:
            sys.stderr.write(f"error: {golden} exists; add --force to overwrite it\n")
            return EXIT_BAD_INPUT
    try:
        verdict = reproduce(
            args.name,
            out=args.out,
            jobs=args.jobs,
            quick=args.quick,
            dataset=args.dataset,
            progress=not args.quiet,
        )
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(verdict_table(verdict) + "\n")
    if args.write_golden:
        golden.write_text(json.dumps(golden_record(verdict), indent=2) + "\n")
        sys.stdout.write(f"golden record written to {golden}\n")
    return EXIT_HOLDS if verdict["holds"] else EXIT_FAILS


if __name__ == "__main__":
    sys.exit(main())
