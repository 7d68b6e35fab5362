"""Catalogue cases of ``experiments.plot``'s histories cut off mid-row, axis labels, grid-edge
warnings and caption notes. Run and sweep folders are written by hand in the runner's format (no
run is started)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .harness import Case

PLOT = "experiments.plot"
HISTORY = ["iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s"]
O = ["-o", "{tmp}/fig.png"]


def _run(folder: Path, rate: float = 0.5, tail: str = "", **args) -> None:
    """A finished run (5 rows, ``grad_norm_sq = rate**t``) whose history ends with ``tail``."""
    folder.mkdir(parents=True)
    rows = [[t, 10 * t, 0, rate**t - 1, rate**t, rate**t, 0.1 * t] for t in range(5)]
    with (folder / "history.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HISTORY)
        w.writerows(rows)
        fh.write(tail)
    args = {"algorithm": "ef21", "compressor": "identity", "step_mult": 1.0, "seed": 0,
            "nodes": 2, **args}  # fmt: skip
    (folder / "config.json").write_text(json.dumps({"algorithm": args["algorithm"], "args": args}))
    final = dict(zip(HISTORY, rows[-1], strict=True))
    (folder / "summary.json").write_text(json.dumps({"reason": "completed", "final": final}))


def cut_run(tail: str):
    def setup(tmp: Path) -> None:
        _run(tmp / "r", tail=tail)

    return setup


def only_row_cut(tmp: Path) -> None:
    _run(tmp / "r")
    (tmp / "r" / "history.csv").write_text(",".join(HISTORY) + "\r\n0,0,0")


def edge_sweep(tmp: Path) -> None:
    """A sweep of EF21 over the multipliers 1 and 2 whose best (lowest final) is 2."""
    from experiments.config import load_config

    cfg = load_config(
        {"name": "edge", "base": {"nodes": 2}, "methods": [{"algorithm": "ef21", "label": "EF21"}],
         "grid": {"step_mult": [1, 2]}, "select": {"rule": "min_final"}}
    )  # fmt: skip
    (tmp / "s").mkdir()
    (tmp / "s" / "sweep.json").write_text(json.dumps(cfg.to_dict()))
    for spec in cfg.runs():
        mult = float(spec.params["step_mult"])
        _run(tmp / "s" / "runs" / spec.run_id, 0.8 / mult, step_mult=mult)


def two_methods_on_other_nodes(tmp: Path) -> None:
    _run(tmp / "a")
    _run(tmp / "b", 0.6, algorithm="ef-sgd", nodes=4)


def caption_names_nodes(tmp: Path) -> None:
    text = (tmp / "fig.caption.txt").read_text()
    assert "[1] ef21, identity, x1\n" in text and "  nodes=4\n" in text, text


def png(tmp: Path) -> None:
    assert (tmp / "fig.png").read_bytes().startswith(b"\x89PNG"), "fig.png is not a PNG"


def absent(tmp: Path) -> None:
    assert not (tmp / "fig.png").exists(), "fig.png was written"


R = ["{tmp}/r"]
CASES: list[Case] = [
    Case(
        "plot-history-cut-off-mid-row",
        PLOT,
        [*R, *O],
        code=0,
        setup=cut_run("5,50,0"),
        message=r"warning: .*/r/history.csv: line 7 is incomplete \(3 of 7 cells\), as if the "
        r"file was cut off there; plotted the 5 complete rows before it",
        check=png,
    ),
    Case(
        "plot-history-cut-off-mid-number",
        PLOT,
        [*R, "--y", "f_gap", *O],
        code=0,
        setup=cut_run("5,50,0,-0.97,0.03,3.1e-,0.5\r\n"),
        message=r"warning: .*/r/history.csv: line 7 is incomplete \(grad_norm_sq holds '3.1e-', "
        r"not a number\)",
        check=png,
    ),
    Case(
        "plot-history-only-row-cut-off",
        PLOT,
        [*R, *O],
        setup=only_row_cut,
        message=r"error: '.*/r/history.csv': line 2, its only row, is incomplete \(3 of 7 "
        r"cells\); the run logged no complete row",
        check=absent,
    ),
    Case(
        "plot-ylabel-bad-mathtext",
        PLOT,
        [*R, "--ylabel", r"$\foo$", *O],
        setup=cut_run(""),
        message=r"error: ylabel '\$\\\\foo\$' is not valid mathtext \(.*Unknown symbol: \\foo.*\); "
        r"allowed: plain text, TeX-like math between \$ signs, a literal \$ written as \\\$",
        check=absent,
    ),
    Case(
        "plot-xlabel-without-text",
        PLOT,
        [*R, *O, "--xlabel"],
        setup=cut_run(""),
        message=r"argument --xlabel: expected one argument",
    ),
    Case(
        "plot-chosen-multiplier-at-grid-edge",
        PLOT,
        ["{tmp}/s", *O],
        code=0,
        setup=edge_sweep,
        message=r"warning: EF21, identity: the chosen step_mult 2 is the largest tried \(1, 2\); "
        r"extend the grid above it",
        check=png,
    ),
    Case(
        "plot-caption-for-settings-left-out",
        PLOT,
        ["{tmp}/a", "{tmp}/b", *O],
        code=0,
        setup=two_methods_on_other_nodes,
        message=r"note: the lines also differ in nodes, which their labels leave out; each "
        r"line's settings are in .*/fig.caption.txt",
        check=caption_names_nodes,
    ),
]
