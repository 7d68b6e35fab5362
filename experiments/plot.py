"""``python -m experiments.plot DIRS... --x bits --y grad_norm_sq -o FIG.png``: convergence plots.

Sources are run folders (a runner ``--out``) or sweep folders (``experiments.sweep``). Runs are
grouped by ``experiments.select.group_key``; a sweep folder contributes only each group's best
multiplier (by the sweep's own ``[select]`` unless another is given), plain run folders with
different multipliers stay separate lines. Each line is the mean over the group's seeds, with a
band from the minimum to the maximum.

Averaging over seeds: the seeds' curves are put on one x grid, the union of their logged x
values within the range every seed covers (no extrapolation). Between logged points a curve is
interpolated linearly in log y when all its values are positive (geometric, the natural choice
for linearly converging methods), linearly in y otherwise; where a seed logs several values at
the same x (a round that sent nothing), its last one counts. Non-finite values (a diverged run)
are left out of the curve. A ``history.csv`` whose last row is incomplete (cut off mid-row, a
cell missing or not a number) is plotted without that row, with a warning naming the file and
the line (:func:`experiments.plot_sources.read_history`).

x axes: ``bits`` (``bits_up``, cumulative uplink bits per node), ``iters`` (``iter``), ``time``
(``wall_s``) and ``modeled-time``: the run's measured compute, encode and decode times plus its
uplink bits moved by the collective its compressor needs (all-reduce or all-gather) on
``--workers`` workers at ``--bandwidth`` Gbit/s, by the performance model of
:func:`systems.model.modeled_run_seconds` (Agarwal et al., MLSys 2022, arXiv 2103.00543); it
needs ``--bandwidth`` and ``--workers``. Axis labels name the quantity (``uplink bits per node``,
``iterations``, ``seconds``; ``‖∇f(x)‖²``, ``f(x) − f*``, ``f(x)`` for ``grad_norm_sq``,
``f_gap``, ``f``; the column name for any other ``--y``); ``--xlabel`` and ``--ylabel`` replace
them (mathtext between ``$`` signs; a literal ``$`` is written ``\\$``).

y axis (``--yscale``): log by default; when the plotted values include zeros or negatives (``--y
f`` of a problem whose minimum is below 0), which a log axis cannot show, it falls back, with a
warning on stderr, to symlog (values spanning several decades) or linear. Non-finite values
(a diverged run) are dropped with a note naming the run; the log axis's limits come from the
finite values, and the axis stops at 1000 times the largest starting value (with a note) when a
diverging line climbs past it, so that it cannot flatten the others.

Legend: ``label, compressor, xM`` with ``M`` the step-size multiplier (for a sweep folder's line
the one its ``[select]`` rule chose, followed by ``, edge`` when it is the smallest or largest of
several tried, which is also warned about on stderr: the best may lie outside the grid). A
parameter that differs between lines (``nodes=5``, a ``--problem-opt`` such as ``zeta2=4``) is
added only to the lines that the rest of the label cannot tell apart, as few as that takes; a
label longer than :data:`LABEL_WIDTH` characters is wrapped onto a second line, a long value is
abbreviated (``libsvm:/.../a9a.txt``), and what still does not fit is cut (``... [3]``: entry 3
of the caption). When lines differ in more than their labels show, the figure gets a caption
file ``FIG.caption.txt`` beside it listing each line's source and settings, and a note on
stderr says so. A group in which no multiplier was chosen is drawn at the multiplier
with the lowest final metric when one finished normally (``x64 (none reached tol)``: a method
that never reached the tolerance still shows its curve), and not drawn when every run diverged
or failed; a note says which.

Layout: the axes are :data:`AXES_SIZE` inches whatever the legend; the legend sits to their right,
or below them when it is too wide or too tall for that, and the figure grows to hold it.

Output (``-o``): the suffix names the format (:data:`FORMATS`); without a suffix both
``FIG.png`` and ``FIG.pdf`` are written.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.config import Selection
from experiments.plot_layout import AXES_SIZE, layout
from experiments.plot_legend import (
    LABEL_WIDTH,
    LEGEND_SKIP,
    caption_path,
    caption_text,
    hidden_settings,
    labels_and_shown,
    legend_labels,
    line_mark,
)
from experiments.plot_sources import X_AXES, run_params, runs_of, series
from experiments.select import group_key

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "AXES_SIZE",
    "FORMATS",
    "LABEL_WIDTH",
    "YSCALES",
    "Y_LABELS",
    "average",
    "caption_path",
    "legend_labels",
    "main",
    "output_paths",
    "plot",
]

log = logging.getLogger("compzoo.plot")

YSCALES = ("log", "linear", "symlog")
# Figure formats chosen by the suffix of the output path (matplotlib's backends for them).
FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps", "tif", "tiff")
# Default y labels (mathtext) of the history columns that have a name in the papers.
Y_LABELS = {
    "grad_norm_sq": r"$\|\nabla f(x)\|^2$",
    "f_gap": r"$f(x) - f^*$",
    "f": r"$f(x)$",
}
# Line styles, one per round of the colour cycle (more lines than colours).
_STYLES = ("-", "--", ":", "-.")
_DPI = 150  # dots per inch of raster formats
# Values spanning fewer decades than this are drawn on a linear axis when log cannot show them.
_LINEAR_SPAN = 100.0
# The y axis stops at this many times the largest starting value (see _set_yscale).
_CAP = 1e3


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
    yscale: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> Figure:
    """Plot ``y`` against ``x`` for every group of runs in ``sources``.

    Notes (dropped non-finite points, an incomplete last history row, a y-scale fallback, a
    chosen multiplier at the edge of its grid, groups without a chosen multiplier) go to the
    ``compzoo.plot`` logger as warnings; where the legend leaves out settings in which the lines
    differ, an info record names them and the caption file.

    Args:
        sources: run folders and/or sweep folders.
        x: ``bits``, ``iters``, ``time`` or ``modeled-time``.
        y: a ``history.csv`` column.
        out: where to save: ``FIG.EXT`` writes that format (:data:`FORMATS`); ``FIG`` with no
            suffix writes ``FIG.png`` and ``FIG.pdf`` (see :func:`output_paths`); and
            ``FIG.caption.txt`` when the lines differ in more than their labels show.
        select: the best-multiplier rule for sweep folders (default: each sweep's own).
        title: the axes title.
        bandwidth: Gbit/s per node for ``x="modeled-time"``.
        workers: the number of workers ``p`` for ``x="modeled-time"``.
        latency: seconds per message for ``x="modeled-time"``.
        yscale: ``log``, ``linear`` or ``symlog``; ``None`` is log, falling back to symlog or
            linear (with a warning) when the values include zeros or negatives.
        xlabel: the x axis label (default: the quantity, e.g. ``uplink bits per node``).
        ylabel: the y axis label (default: :data:`Y_LABELS`, else the column name).

    Returns:
        The figure, one line per group, legend ``label, compressor, xM`` (see the module doc),
        axes of :data:`AXES_SIZE` inches.

    Raises:
        ValueError: an unknown ``x`` or ``yscale``, an unsupported output suffix, a ``y`` column
            absent or empty, ``modeled-time`` without ``bandwidth`` and ``workers``, a source
            that is neither a run nor a sweep folder (or is unreadable), a label or title that is
            not valid mathtext, or nothing to plot.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    if yscale is not None and yscale not in YSCALES:
        raise ValueError(f"yscale must be one of {', '.join(YSCALES)}, got {yscale!r}")
    if x == "modeled-time":
        if bandwidth is None or workers is None:
            raise ValueError(
                "x='modeled-time' needs the systems model (--bandwidth GBPS, Gbit/s per node, "
                "and --workers P)"
            )
        if not (bandwidth > 0 and math.isfinite(bandwidth)):
            raise ValueError(f"bandwidth must be a finite number > 0 Gbit/s, got {bandwidth!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if xlabel is None:
        xlabel = X_AXES[x][1]
        if x == "modeled-time":
            xlabel = f"modeled seconds ({workers} workers at {bandwidth:g} Gbit/s)"
    if ylabel is None:
        ylabel = Y_LABELS.get(y, y)
    for what, text in (("xlabel", xlabel), ("ylabel", ylabel), ("title", title)):
        _check_mathtext(what, text)
    paths = output_paths(out) if out is not None else []
    if not sources:
        raise ValueError("no sources to plot: give run folders or sweep folders")
    groups = _groups(sources, x, y, select, (bandwidth, workers, latency))

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(dpi=_DPI)  # text is measured at the resolution it is saved at
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    marks = [line_mark(g) for g in groups]
    labels, shown = labels_and_shown([g["full"] for g in groups], marks)
    for label in labels:
        _check_mathtext("legend label", label)
    colors = len(matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", ())) or 1
    curves, starts = [], []
    for i, (g, label) in enumerate(zip(groups, labels, strict=True)):
        grid, mean, lo, hi = average(g["curves"])
        if not len(grid):
            log.warning("%s: no finite %s values to draw", label.replace("\n", " "), y)
        style = _STYLES[i // colors % len(_STYLES)]
        (line,) = ax.plot(grid, mean, style, label=label)
        curves += [mean]
        starts += [abs(mean[0])] if len(mean) else []
        if len(g["curves"]) > 1:
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            curves += [lo, hi]
    with np.errstate(over="ignore"):  # autoscaling to a huge diverged value, undone below
        _set_yscale(ax, y, np.concatenate(curves), yscale, max(starts, default=0.0))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    layout(fig, ax)
    hidden = hidden_settings(groups, shown)
    caption = caption_path(paths[0]) if paths else None
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=_DPI)
    if hidden and caption is not None:
        caption.write_text(caption_text(groups, labels, hidden, paths, x, y))
        log.info(
            "the lines also differ in %s, which their labels leave out; each line's settings "
            "are in %s",
            ", ".join(hidden), caption,
        )  # fmt: skip
    elif hidden:
        log.info("the lines also differ in %s, which their labels leave out", ", ".join(hidden))
    return fig


def _groups(sources, x: str, y: str, select: Selection | None, net: tuple) -> list[dict]:
    """One dict per line: ``params`` (the group's sweep or run parameters), ``full`` (every
    setting of its first run, for the legend and the caption), ``chosen`` (the sweep's best
    row, ``None`` for run folders), ``curves`` and ``sources`` (the folders it came from)."""
    groups: dict[tuple, dict[str, Any]] = {}
    for src in sources:
        for params, run_dir, chosen in runs_of(Path(src), select):
            key = group_key(params)
            if chosen is not None:  # one multiplier per group: the chosen one, not a parameter
                params = {k: v for k, v in params.items() if k != "step_mult"}
            else:
                key = (*key, ("step_mult", params.get("step_mult")))
            g = groups.get(key)
            if g is None:
                full = params if chosen is None else _settings(params, run_dir)
                g = groups[key] = {"params": params, "full": full, "chosen": chosen,
                                   "curves": [], "sources": []}  # fmt: skip
            g["curves"].append(series(run_dir, x, y, net))
            if str(src) not in g["sources"]:
                g["sources"].append(str(src))
    if not groups:
        raise ValueError(f"no finished runs in {', '.join(map(str, sources))}")
    return list(groups.values())


def _settings(params: dict, run_dir: Path) -> dict:
    """A sweep run's settings as its own ``config.json`` resolved them (so that they compare
    with a run folder's), with the sweep's label, method and compressor; the sweep's parameters
    alone if that is unreadable."""
    try:
        resolved = run_params(run_dir)
    except ValueError:
        return params
    return {**params, **resolved, **{k: params[k] for k in LEGEND_SKIP if k in params}}


def _check_mathtext(what: str, text: str | None) -> None:
    """A ``ValueError`` naming ``text`` when its ``$...$`` parts are not valid mathtext (the
    figure would fail only when drawn)."""
    if not text or (text.count("$") - text.count(r"\$")) < 2:
        return
    from matplotlib.mathtext import MathTextParser

    try:
        MathTextParser("path").parse(text)
    except ValueError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise ValueError(
            f"{what} {text!r} is not valid mathtext ({lines[-1] if lines else e}); allowed: "
            r"plain text, TeX-like math between $ signs, a literal $ written as \$"
        ) from None


def output_paths(out: str | Path) -> list[Path]:
    """The files ``out`` names: itself when its suffix is one of :data:`FORMATS`, ``out.png``
    and ``out.pdf`` when it has no suffix.

    Raises:
        ValueError: another suffix.
    """
    out = Path(out)
    if not out.name or out.name in (".", ".."):
        raise ValueError(f"output {str(out)!r} names a folder, not a figure file (e.g. fig.png)")
    suffix = out.suffix.lower().lstrip(".")
    if not suffix:
        return [out.with_name(out.name + ".png"), out.with_name(out.name + ".pdf")]
    if suffix not in FORMATS:
        raise ValueError(
            f"unsupported figure format {out.suffix!r} in {str(out)!r}; allowed suffixes: "
            + ", ".join("." + f for f in FORMATS)
            + " (no suffix: both .png and .pdf)"
        )
    return [out]


def _set_yscale(ax, y: str, values: np.ndarray, wanted: str | None, start: float) -> None:
    """The y scale and limits (see the module doc): on a log axis the limits span the finite
    positive values; on any axis the top stops at :data:`_CAP` times ``start`` (the largest
    starting value) when lines climb past it."""
    v = values[np.isfinite(values)]
    scale = wanted or "log"
    nonpos = int(np.sum(v <= 0))
    if nonpos and wanted is None:
        mag = np.abs(v[v != 0])
        if len(mag) == 0 or mag.max() / mag.min() < _LINEAR_SPAN:
            scale = "linear"
        else:
            scale = "symlog"
        log.warning(
            "%s has values <= 0 (smallest %.4g), which a log y axis cannot show; using a %s "
            "y axis instead (choose one with --yscale %s)",
            y, v.min(), scale, "|".join(YSCALES),
        )  # fmt: skip
    elif nonpos and scale == "log":
        log.warning("%d plotted %s value(s) <= 0 are not shown on the log y axis", nonpos, y)
    if scale == "symlog":
        mag = np.abs(v[v != 0])
        ax.set_yscale("symlog", linthresh=float(mag.min()) if len(mag) else 1.0)
    else:
        ax.set_yscale(scale)
    top = _CAP * start if start > 0 and len(v) and v.max() > _CAP * start else None
    if top is not None:
        log.warning(
            "%s reaches %.3g; the y axis stops at %.3g (%g times the largest starting value): "
            "the lines above it leave the frame",
            y, v.max(), top, _CAP,
        )  # fmt: skip
    pos = v[(v > 0) & (v <= (top or np.inf))]
    if scale == "log" and len(pos):
        lo, hi = np.log10(pos.min()), np.log10(top or pos.max())
        pad = max(0.05 * (hi - lo), 0.1)
        ax.set_ylim(10 ** max(lo - pad, -300.0), top or 10 ** min(hi + pad, 300.0))
    elif top is not None:
        inside = v[v <= top]
        lo = inside.min() if len(inside) else 0.0
        ax.set_ylim(lo - 0.05 * (top - lo), top)


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
    if not len(cx):
        return cx, cy
    order = np.argsort(cx, kind="stable")
    cx, cy = cx[order], cy[order]
    last = np.append(cx[1:] != cx[:-1], True)
    return cx[last], cy[last]


class _Console(logging.Formatter):
    """``warning: ...`` and ``note: ...`` lines on stderr."""

    def format(self, record: logging.LogRecord) -> str:
        level = "note" if record.levelno < logging.WARNING else record.levelname.lower()
        return f"{level}: {record.getMessage()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.plot", description="Plot runs and sweeps."
    )
    ap.add_argument("dirs", nargs="+", help="run folders and/or sweep folders")
    ap.add_argument("--x", default="bits", choices=list(X_AXES), help="x axis")
    ap.add_argument("--y", default="grad_norm_sq", help="a history.csv column")
    ap.add_argument("--xlabel", default=None,
                    help="x axis label (default: the quantity, e.g. 'uplink bits per node'; "
                    "mathtext between $ signs)")  # fmt: skip
    ap.add_argument("--ylabel", default=None,
                    help="y axis label (default: e.g. ||grad f(x)||^2 for grad_norm_sq, "
                    "f(x) - f* for f_gap, else the column name)")  # fmt: skip
    ap.add_argument("--yscale", default=None, choices=list(YSCALES),
                    help="y axis scale (default: log, or symlog/linear with a warning when the "
                    "values include zeros or negatives)")  # fmt: skip
    ap.add_argument("-o", "--out", required=True,
                    help=f"the figure: FIG.EXT with EXT one of {', '.join(FORMATS)}; "
                    "FIG without a suffix writes FIG.png and FIG.pdf; FIG.caption.txt when the "
                    "lines differ in more than their legend labels show")  # fmt: skip
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Console())
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        select = None
        if args.select_rule or args.metric or args.tol is not None:
            rule = args.select_rule or ("bits_to_tol" if args.tol is not None else "min_final")
            select = Selection(rule=rule, metric=args.metric or "grad_norm_sq", tol=args.tol)
        plot(args.dirs, x=args.x, y=args.y, out=args.out, select=select, title=args.title,
             bandwidth=args.bandwidth, workers=args.workers, yscale=args.yscale,
             xlabel=args.xlabel, ylabel=args.ylabel)  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write the figure {args.out!r}: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = True
    print("wrote " + " and ".join(map(str, output_paths(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
