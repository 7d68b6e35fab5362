"""``python -m experiments.reproduce NAME``: rerun a paper's experiment and check its claim.

A reproduction is a folder ``experiments/papers/NAME/`` with

* ``config.toml``: a sweep config (see :mod:`experiments.config`) plus tables of its own:

  - ``[claim]``: ``statement`` (the paper's claim in one line), ``tol`` (on ``metric``, default
    ``grad_norm_sq``), ``bits`` (``"exclude-initial"``: uplink bits counted from iteration 1, the
    initial full gradients not charged, as the papers' plots do; ``"include-initial"``: charged),
    ``seeds`` (how seeds are combined, only ``"median"``) and ``kind``:
    ``"order"`` (``order``: method labels whose bits to tolerance must be strictly increasing
    along the list), ``"beats"`` (each of ``winners`` strictly below ``baseline``; with
    ``any = true`` the best of them) or
    ``"heatmap"`` (one method over a grid of ``rows`` x ``cols`` cells;
    ``base_col`` is the column of the first baseline, ``base_row`` the row of the second: the
    claim is that a cell outside both needs strictly fewer bits than every baseline cell) or
    ``"slowdown"`` (``axis``: a grid key along which the data grow more heterogeneous, ``base``
    and ``high`` its reference and most heterogeneous values; ``affected``: the method the
    paper says heterogeneity hurts, ``robust``: those it says it hurts much less; ``factor`` and
    ``suffer``: the numbers that "much less" and "suffers" are read as; a method's slowdown at a
    level is its bits to tolerance there over its bits at ``base``, each with its own best
    multiplier; the rule: :func:`experiments.reproduce_verdict.slowdown_holds`);
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

This module is the command and :func:`reproduce`; the config is read by
:mod:`experiments.reproduce_config`, the runs are judged by :mod:`experiments.reproduce_verdict`,
the heat map is drawn by :mod:`experiments.reproduce_figure`, and the golden and results records
and the ``--list`` text are :mod:`experiments.reproduce_records`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

# The names marked noqa: F401 are re-exported: callers and tests import them from here.
from experiments.reproduce_config import (  # noqa: F401
    BITS,
    CLAIM_KEYS,
    DATA_KEYS,
    KINDS,
    LIBSVM_ENV,
    OWN_TABLES,
    PAPERS,
    QUICK_MERGED,
    QUICK_REPLACED,
    STEP_ONE_OVER_L,
    Claim,
    DataMissing,
    Paper,
    _apply_quick,
    _default_out,
    _label,
    available,
    dataset_spec,
    default_out,
    libsvm_dir,
    load_paper,
    parse_only,
    slice_label,
    tomllib,
)
from experiments.reproduce_figure import heatmap_figure
from experiments.reproduce_records import (  # noqa: F401
    GOLDEN_REL_TOL,
    _listing,
    golden_record,
    recorded,
    registration_problem,
    results_record,
)
from experiments.reproduce_verdict import (  # noqa: F401
    FINISHED,
    UNFINISHED,
    _median,
    _read_csv,
    _status,
    aggregate,
    evaluate,
    ranking,
    run_bits,
    verdict_table,
)
from streams import interrupts

log = logging.getLogger("compzoo.reproduce")

ROOT = Path(__file__).resolve().parents[1]
EXIT_HOLDS, EXIT_FAILS, EXIT_BAD_INPUT = 0, 1, 2


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
    rows, unfinished, statuses = [], 0, {}
    for spec in cfg.runs():
        run_dir = out / "runs" / spec.run_id
        status = statuses[spec.run_id] = _status(run_dir)
        unfinished += status in UNFINISHED
        rows.append({**spec.params, "bits": run_bits(_read_csv(run_dir / "history.csv"),
                                                     status, paper.claim)})  # fmt: skip
    refused = refused_runs(cfg.runs(), statuses, out)
    unfinished -= len(refused)
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
        **({"any": True} if claim.any else {}),
        **(
            {
                "axis": claim.axis,
                "base": claim.base_level,
                "high": claim.high_level,
                "factor": claim.factor,
                "suffer": claim.suffer,
            }
            if claim.kind == "slowdown"
            else {}
        ),
        "metric": claim.metric,
        "tol": claim.tol,
        "bits": claim.bits,
        "seed_rule": "median over seeds of bits to tol (never/diverged = inf)",
        "pruned": bool(prune),
        "runs": len(rows),
        "unfinished": unfinished,
        **({"refused": refused} if refused else {}),
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


def refused_runs(specs, statuses: dict[str, str], out: Path) -> list[dict[str, str]]:
    """The runs the method refused at set-up (exit status 2: bad input, e.g. a step multiplier
    at which its theory cannot size a parameter), as ``{run_id, error}``: they count as never
    reaching the tolerance, like a diverged run, and do not block ``--record``. Only where
    another run of the same method and setting (other step multiplier or seed) finished, so that
    a problem of the machine (data missing, a bad path), which refuses every run, still does."""
    specs = list(specs)

    def cell(spec) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in spec.params.items()
                            if k not in ("step_mult", "seed")))  # fmt: skip

    finished = {cell(s) for s in specs if statuses[s.run_id] in FINISHED}
    out_rows = []
    for spec in specs:
        if statuses[spec.run_id] != "failed" or cell(spec) not in finished:
            continue
        err = out / "runs" / spec.run_id / "stderr.txt"
        lines = err.read_text(errors="replace").strip().splitlines() if err.is_file() else []
        if lines and lines[0].strip() == "exit status 2":
            out_rows.append({"run_id": spec.run_id, "error": lines[-1].strip()})
    return out_rows


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
    if args.record and (why := registration_problem(PAPERS / args.name, recorded(args.name))):
        sys.stderr.write(f"error: --record: {why}\n")
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
    if args.record and (why := registration_problem(PAPERS / args.name, recorded(args.name))):
        sys.stderr.write(f"error: --record: {why} (it changed during the run): nothing recorded\n")
        return EXIT_BAD_INPUT
    if args.record:
        path = PAPERS / args.name / "results.json"
        record = results_record(verdict, argv, recorded(args.name), PAPERS / args.name)
        path.write_text(json.dumps(record, indent=2) + "\n")
        sys.stdout.write(f"results recorded in {path}\n")
    return EXIT_HOLDS if verdict["holds"] else EXIT_FAILS


if __name__ == "__main__":
    sys.exit(main())
