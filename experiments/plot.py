"""``python -m experiments.plot DIRS... --x bits --y grad_norm_sq -o FIG.png``: convergence plots.

Sources are run folders (a runner ``--out``) or sweep folders (``experiments.sweep``). Runs are
grouped by ``experiments.select.group_key``; a sweep folder contributes only each group's best
multiplier (by the sweep's own ``[select]`` unless another is given), plain run folders with
different multipliers stay separate lines. Each line is the mean over the group's seeds, with a
band from the minimum to the maximum; y is log-scaled.

Averaging over seeds: the seeds' curves are put on one x grid, the union of their logged x
values within the range every seed covers (no extrapolation). Between logged points a curve is
interpolated linearly in log y when all its values are positive (geometric, the natural choice
for linearly converging methods), linearly in y otherwise; where a seed logs several values at
the same x (a round that sent nothing), its last one counts. Non-finite values (a diverged run)
are left out of the curve.

x axes: ``bits`` (``bits_up``, cumulative uplink bits per node), ``iters`` (``iter``), ``time``
(``wall_s``) and ``modeled-time``: the run's measured compute, encode and decode times plus its
uplink bits moved by the collective its compressor needs (all-reduce or all-gather) on
``--workers`` workers at ``--bandwidth`` Gbit/s, by the performance model of
:func:`systems.model.modeled_run_seconds` (Agarwal et al., MLSys 2022, arXiv 2103.00543); it
needs ``--bandwidth`` and ``--workers``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.config import Selection, load_config
from experiments.select import group_key

if TYPE_CHECKING:
    from matplotlib.figure import Figure

X_AXES = {
    "bits": ("bits_up", "bits per node (uplink)"),
    "iters": ("iter", "iteration"),
    "time": ("wall_s", "seconds (wall_s)"),
    "modeled-time": (None, "modeled seconds"),
}
# Run arguments that say where or how a run was executed, not what was run.
_NOT_PARAMS = ("list", "out", "overwrite", "quiet", "resume", "checkpoint_every", "timeout",
               "backend", "device")  # fmt: skip
_LEGEND_SKIP = ("algorithm", "label", "compressor", "seed")


def plot(
    sources: list[str | Path],
    x: str = "bits",
    y: str = "grad_norm_sq",
    out: str | Path | None = None,
    select: Selection | None = None,
    title: str | None = None,
    bandwidth: float | None = None,
    workers: int | None = None,
    latency: float = 0.0,
) -> Figure:
    """Plot ``y`` against ``x`` for every group of runs in ``sources``.

    Args:
        sources: run folders and/or sweep folders.
        x: ``bits``, ``iters``, ``time`` or ``modeled-time``.
        y: a ``history.csv`` column.
        out: where to save; ``FIG.png`` (or ``FIG.pdf``, or ``FIG``) writes both ``FIG.png``
            and ``FIG.pdf``.
        select: the best-multiplier rule for sweep folders (default: each sweep's own).
        title: the axes title.
        bandwidth: Gbit/s per node for ``x="modeled-time"``.
        workers: the number of workers ``p`` for ``x="modeled-time"``.
        latency: seconds per message for ``x="modeled-time"``.

    Returns:
        The figure, one line per group, legend ``label, compressor[, k=v ...]`` where the
        ``k=v`` are the parameters that differ between the plotted groups.

    Raises:
        ValueError: an unknown ``x``, a missing ``y`` column, ``modeled-time`` without
            ``bandwidth`` and ``workers``, a source that is neither a run nor a sweep folder,
            or nothing to plot.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    if x == "modeled-time":
        if bandwidth is None or workers is None:
            raise ValueError(
                "x='modeled-time' needs the systems model (--bandwidth GBPS, Gbit/s per node, "
                "and --workers P)"
            )
        if not bandwidth > 0:
            raise ValueError(f"bandwidth must be > 0 Gbit/s, got {bandwidth!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if not sources:
        raise ValueError("no sources to plot: give run folders or sweep folders")
    groups: dict[tuple, dict[str, Any]] = {}
    for src in sources:
        for params, run_dir, from_sweep in _runs(Path(src), select):
            key = group_key(params)
            if from_sweep:  # one multiplier per group: the chosen one, not a parameter
                params = {k: v for k, v in params.items() if k != "step_mult"}
            else:
                key = (*key, ("step_mult", params.get("step_mult")))
            g = groups.setdefault(key, {"params": params, "curves": []})
            g["curves"].append(_curve(run_dir, x, y, (bandwidth, workers, latency)))
    if not groups:
        raise ValueError(f"no finished runs in {', '.join(map(str, sources))}")

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    labels = legend_labels([g["params"] for g in groups.values()])
    for g, label in zip(groups.values(), labels, strict=True):
        grid, mean, lo, hi = average(g["curves"])
        (line,) = ax.plot(grid, mean, label=label)
        if len(g["curves"]) > 1:
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_yscale("log")
    xlabel = X_AXES[x][1]
    if x == "modeled-time":
        xlabel = f"modeled seconds ({workers} workers at {bandwidth:g} Gbit/s)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(y)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    if out is not None:
        stem = _stem(out)
        stem.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(stem.parent / (stem.name + ".png"), dpi=150)
        fig.savefig(stem.parent / (stem.name + ".pdf"))
    return fig


def legend_labels(params: list[dict]) -> list[str]:
    """``label or algorithm, compressor[, k=v ...]`` for each group; ``k=v`` only for the
    parameters whose values differ between the groups."""
    keys: dict[str, None] = {}
    for p in params:
        keys.update(dict.fromkeys(k for k in p if k not in _LEGEND_SKIP))
    varied = [k for k in keys if len({json.dumps(p.get(k), default=str) for p in params}) > 1]
    labels = []
    for p in params:
        parts = [str(p.get("label") or p.get("algorithm")), str(p.get("compressor", "identity"))]
        parts += [f"{k}={_fmt(p[k])}" for k in varied if p.get(k) is not None]
        labels.append(", ".join(parts))
    return labels


def average(curves: list[tuple[np.ndarray, np.ndarray]]):
    """Mean and min..max band of several ``(x, y)`` curves on one grid (see the module doc).

    Returns:
        ``(grid, mean, lo, hi)`` as arrays of the same length.
    """
    curves = [_dedupe(cx, cy) for cx, cy in curves]
    curves = [c for c in curves if len(c[0])]
    if not curves:
        empty = np.array([])
        return empty, empty, empty, empty
    if all(len(c[0]) == len(curves[0][0]) and np.array_equal(c[0], curves[0][0]) for c in curves):
        grid = curves[0][0]
        ys = np.stack([c[1] for c in curves])
    else:
        lo_x = max(c[0][0] for c in curves)
        hi_x = min(c[0][-1] for c in curves)
        grid = np.unique(np.concatenate([c[0] for c in curves]))
        grid = grid[(grid >= lo_x) & (grid <= hi_x)]
        ys = np.stack([_interp(grid, cx, cy) for cx, cy in curves])
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def _interp(grid: np.ndarray, cx: np.ndarray, cy: np.ndarray) -> np.ndarray:
    if np.all(cy > 0):
        return np.exp(np.interp(grid, cx, np.log(cy)))
    return np.interp(grid, cx, cy)


def _dedupe(cx: np.ndarray, cy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite points only, x increasing, the last y at a repeated x."""
    keep = np.isfinite(cx) & np.isfinite(cy)
    cx, cy = cx[keep], cy[keep]
    order = np.argsort(cx, kind="stable")
    cx, cy = cx[order], cy[order]
    last = np.append(cx[1:] != cx[:-1], True)
    return cx[last], cy[last]


def _runs(src: Path, select: Selection | None):
    """``(params, run_dir, from_sweep)`` for each run to plot from one source folder."""
    if (src / "sweep.json").is_file():
        from experiments.select import best
        from experiments.sweep import read_summary, table

        cfg = load_config(json.loads((src / "sweep.json").read_text()))
        sel = select or cfg.select
        by_id = {s.run_id: s for s in cfg.runs()}
        for row in best(table(cfg, src, sel), sel):
            for run_id in row["run_ids"].split(";"):
                run_dir = src / "runs" / run_id
                if read_summary(run_dir) is not None:
                    yield by_id[run_id].params, run_dir, True
        return
    if (src / "config.json").is_file() and (src / "history.csv").is_file():
        yield _run_params(src), src, False
        return
    raise ValueError(
        f"{str(src)!r} is neither a run folder (config.json, history.csv) nor a sweep folder "
        "(sweep.json)"
    )


def _run_params(run_dir: Path) -> dict:
    """A lone run's parameters by flag name, from its ``config.json``."""
    config = json.loads((run_dir / "config.json").read_text())
    args = config.get("args", {})
    params: dict[str, Any] = {"algorithm": config.get("algorithm", args.get("algorithm"))}
    params["label"] = params["algorithm"]
    for k, v in args.items():
        if k in _NOT_PARAMS or k == "algorithm" or v is None or v == []:
            continue
        name = "lambda" if k == "lam" else k.removeprefix("opt_")
        params[name] = tuple(v) if isinstance(v, list) else v
    return params


def _curve(run_dir: Path, x: str, y: str, net: tuple):
    with (run_dir / "history.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    have = list(rows[0]) if rows else []
    need = [y] + (["bits_up", "t_compute", "t_encode", "t_decode"] if x == "modeled-time"
                  else [X_AXES[x][0]])  # fmt: skip
    for col in need:
        if col not in have:
            raise ValueError(
                f"column {col!r} is not in {run_dir / 'history.csv'}; have: {', '.join(have)}"
            )
    ys = _column(rows, y)
    if x == "modeled-time":
        xs = _modeled_seconds(run_dir, rows, *net)
    else:
        xs = _column(rows, X_AXES[x][0])
    return xs, ys


def _modeled_seconds(run_dir: Path, rows: list[dict], bandwidth, workers, latency):
    from compressors.registry import parse_spec
    from systems.measure import collective_of
    from systems.model import modeled_run_seconds

    cfg = json.loads((run_dir / "config.json").read_text())
    args = cfg.get("args", {})
    spec = args.get("compressor") or cfg["compressor"]["spec"]
    held = 1 if cfg.get("world_size") else int(args.get("nodes") or 1)
    cols = {c: np.nan_to_num(_column(rows, c)) for c in ("t_compute", "t_encode", "t_decode")}
    return modeled_run_seconds(
        _column(rows, "iter"),
        _column(rows, "bits_up"),
        cols["t_compute"],
        cols["t_encode"],
        cols["t_decode"],
        bandwidth,
        workers,
        collective_of(parse_spec(spec)),
        alpha=latency,
        held=held,
    )


def _column(rows: list[dict], col: str) -> np.ndarray:
    return np.array([float(r[col]) if r.get(col) not in (None, "") else np.nan for r in rows])


def _stem(out: str | Path) -> Path:
    out = Path(out)
    return out.with_suffix("") if out.suffix.lower() in (".png", ".pdf") else out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return format(v, "g")
    if isinstance(v, (list, tuple)):
        return ";".join(map(str, v))
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.plot", description="Plot runs and sweeps (log y)."
    )
    ap.add_argument("dirs", nargs="+", help="run folders and/or sweep folders")
    ap.add_argument("--x", default="bits", choices=list(X_AXES), help="x axis")
    ap.add_argument("--y", default="grad_norm_sq", help="a history.csv column")
    ap.add_argument("-o", "--out", required=True, help="FIG.png (a .pdf is written next to it)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--bandwidth", type=float, default=None, metavar="GBPS",
                    help="Gbit/s per node, for --x modeled-time")  # fmt: skip
    ap.add_argument("--workers", type=int, default=None, metavar="P",
                    help="number of workers, for --x modeled-time")  # fmt: skip
    ap.add_argument("--select-rule", default=None, choices=["min_final", "bits_to_tol"],
                    help="override the sweeps' own [select] rule")  # fmt: skip
    ap.add_argument("--metric", default=None, help="selection metric (a history column)")
    ap.add_argument("--tol", type=float, default=None, help="selection tolerance")
    args = ap.parse_args(argv)
    try:
        select = None
        if args.select_rule or args.metric or args.tol is not None:
            rule = args.select_rule or ("bits_to_tol" if args.tol is not None else "min_final")
            select = Selection(rule=rule, metric=args.metric or "grad_norm_sq", tol=args.tol)
        plot(args.dirs, x=args.x, y=args.y, out=args.out, select=select, title=args.title,
             bandwidth=args.bandwidth, workers=args.workers)  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stem = _stem(args.out)
    print(f"wrote {stem}.png and {stem}.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
