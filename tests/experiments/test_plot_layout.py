"""Plot legends, captions, axis labels, grid-edge warnings, cut-off histories and the layout, from
hand-made run and sweep folders in the runner's format, read back from the figure."""

from __future__ import annotations

import csv
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

from experiments.config import load_config
from experiments.plot import AXES_SIZE, LABEL_WIDTH, caption_path, legend_labels, main, plot

COLUMNS = ["iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s"]
T = 10


def write_run(folder: Path, rate: float = 0.5, **args) -> Path:
    """A finished run with ``grad_norm_sq = rate**t``, t = 0..T, and the runner arguments
    ``args`` (over a default ef21 run on 2 nodes)."""
    folder.mkdir(parents=True)
    rows = [[t, 10.0 * t, 0.0, rate**t - 1.0, rate**t, rate**t, 0.1 * t] for t in range(T + 1)]
    with (folder / "history.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        w.writerows(rows)
    run_args = {"algorithm": "ef21", "compressor": "identity", "step_mult": 1.0, "seed": 0,
                "problem": "quadratic", "nodes": 2, "out": str(folder), **args}  # fmt: skip
    config = {"algorithm": run_args["algorithm"], "args": run_args}
    (folder / "config.json").write_text(json.dumps(config))
    final = dict(zip(COLUMNS, rows[-1], strict=True))
    summary = {"reason": "completed", "iters": T, "final": final}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


# The final grad_norm_sq falls with the rate: EF21 is best at the largest multiplier tried, EF14
# in the middle, DCGD at the smallest (the [select] rule: min_final grad_norm_sq).
RATES = {"EF21": {1: 0.9, 2: 0.8, 4: 0.5}, "EF14": {1: 0.9, 2: 0.5, 4: 0.8},
         "DCGD": {1: 0.5, 2: 0.8, 4: 0.9}}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A sweep of three methods over the multipliers 1, 2, 4 on 2 nodes, and two run folders:
    ef21 on 2 nodes and ef21 on 4 nodes."""
    root = tmp_path_factory.mktemp("layout")
    cfg = load_config(
        {
            "name": "edges",
            "base": {"problem": "quadratic", "nodes": 2},
            "methods": [
                {"algorithm": "ef21", "label": "EF21"},
                {"algorithm": "ef-sgd", "label": "EF14"},
                {"algorithm": "dcgd", "label": "DCGD"},
            ],
            "grid": {"step_mult": [1, 2, 4]},
            "select": {"rule": "min_final", "metric": "grad_norm_sq"},
        }
    )
    sweep = root / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps(cfg.to_dict()))
    for spec in cfg.runs():
        p = spec.params
        write_run(sweep / "runs" / spec.run_id, RATES[p["label"]][int(p["step_mult"])],
                  algorithm=p["algorithm"], step_mult=float(p["step_mult"]))  # fmt: skip
    return {
        "sweep": sweep,
        "run2": write_run(root / "run2", 0.7),
        "run4": write_run(root / "run4", 0.6, nodes=4),
    }


def legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "compzoo.plot"]


def test_labels_name_a_setting_only_where_lines_need_it():
    ef21 = {"algorithm": "ef21", "label": "EF21", "compressor": "topk:k=1", "seed": 0}
    params = [
        {**ef21, "nodes": 2, "batch_size": 8, "problem_opt": ("zeta2=4",)},
        {**ef21, "nodes": 2, "batch_size": 8},
        {**ef21, "nodes": 4, "batch_size": 8, "problem_opt": ("zeta2=4",), "seed": 1},
        {"algorithm": "diana", "label": "DIANA", "compressor": "randk:k=2", "nodes": 9},
        {**ef21, "nodes": 9, "step_mult": 8.0},
    ]
    marks = ["x1", "x1", "x1", "x1", "x8, edge"]
    # lines 0-2 share "EF21, topk:k=1, x1": nodes (the shorter of two settings that split them
    # as well) and then zeta2 (a --problem-opt, unset on line 1) tell them apart; the rest are
    # told apart by their method, compressor or multiplier, whatever else differs
    assert legend_labels(params, marks) == [
        "EF21, topk:k=1, x1, nodes=2, zeta2=4",
        "EF21, topk:k=1, x1, nodes=2,\nzeta2=default",
        "EF21, topk:k=1, x1, nodes=4, zeta2=4",
        "DIANA, randk:k=2, x1",
        "EF21, topk:k=1, x8, edge",
    ]
    # the same label for two methods: the registry name tells them apart
    same = [{"algorithm": "ef21", "label": "EF"}, {"algorithm": "ef-sgd", "label": "EF"}]
    assert legend_labels(same) == [
        "EF, identity, algorithm=ef21",
        "EF, identity, algorithm=ef-sgd",
    ]


def test_long_labels_wrap_abbreviate_and_stop_at_two_lines(tmp_path, caplog):
    # 8 lines of one method and compressor that only three settings together tell apart
    runs = [
        write_run(
            tmp_path / f"r{i}",
            0.5 + 0.05 * i,
            compressor="topk:ratio=0.01",
            dataset=f"libsvm:/data/shared/sets/{'ab'[i % 2]}9a.txt",
            nodes=10 + i // 2 % 2,
            batch_size=32 * (1 + i // 4),
        )
        for i in range(8)
    ]
    with caplog.at_level(logging.INFO, logger="compzoo.plot"):
        fig = plot(runs, x="iters", out=tmp_path / "long.png")
    labels = legend(fig)
    # nodes and batch_size fit on two lines; dataset, needed by every line, does not: each
    # label ends with its entry in the caption file
    assert labels[:2] == [
        "ef21, topk:ratio=0.01, x1, nodes=10,\nbatch_size=32, ... [1]",
        "ef21, topk:ratio=0.01, x1, nodes=10,\nbatch_size=32, ... [2]",
    ]
    for label in labels:
        lines = label.split("\n")
        assert len(lines) <= 2 and all(len(ln) <= LABEL_WIDTH + 5 for ln in lines), label
    # the abbreviated path is written out in the caption file, and a note says where it is
    caption = caption_path(tmp_path / "long.png").read_text()
    entry = caption.split("\n[2] ")[1].splitlines()
    assert entry[0] == "ef21, topk:ratio=0.01, x1, nodes=10, batch_size=32, ..."
    assert entry[2] == "  nodes=10, dataset=libsvm:/data/shared/sets/b9a.txt, batch_size=32"
    assert notes(caplog)[-1] == (
        "the lines also differ in dataset, which their labels leave out; each line's settings "
        f"are in {tmp_path / 'long.caption.txt'}"
    )


def test_a_sweep_and_a_run_folder_get_a_caption_file(folders, tmp_path, capsys):
    out = tmp_path / "mixed.png"
    assert main([str(folders["sweep"]), str(folders["run4"]), "--x", "iters", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out == f"wrote {out}\n"
    caption = tmp_path / "mixed.caption.txt"
    assert cap.err.endswith(
        "note: the lines also differ in nodes, which their labels leave out; each line's "
        f"settings are in {caption}\n"
    )
    text = caption.read_text().splitlines()
    assert text[0].startswith("mixed.png: grad_norm_sq against iter, one line per group")
    assert text[1].startswith("The lines differ in nodes; ")
    assert text[3:6] == [
        "[1] EF21, identity, x4, edge",
        f"  from: {folders['sweep']} (sweep, step_mult 4 of 1, 2, 4 (lowest final "
        "grad_norm_sq), 1 run)",
        "  nodes=2",
    ]
    assert text[-3:] == ["[4] ef21, identity, x1", f"  from: {folders['run4']} (run folder, 1 run)",
                         "  nodes=4"]  # fmt: skip
    # a sweep alone: its lines differ in their method only, which the labels show
    assert main([str(folders["sweep"]), "-o", str(tmp_path / "alone.png")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert not (tmp_path / "alone.caption.txt").exists()


def test_differing_setting_shown_when_it_tells_lines_apart(folders, caplog):
    with caplog.at_level(logging.INFO, logger="compzoo.plot"):
        fig = plot([folders["run2"], folders["run4"]])
    assert legend(fig) == ["ef21, identity, x1, nodes=2", "ef21, identity, x1, nodes=4"]
    assert notes(caplog) == []  # nothing left out: no caption needed
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), 0.6 ** np.arange(T + 1))


def test_chosen_multiplier_at_the_edge_of_the_grid_is_warned(folders, tmp_path, caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([folders["sweep"]], x="iters")
    assert legend(fig) == ["EF21, identity, x4, edge", "EF14, identity, x2",
                           "DCGD, identity, x1, edge"]  # fmt: skip
    assert notes(caplog) == [
        "EF21, identity: the chosen step_mult 4 is the largest tried (1, 2, 4); extend the "
        "grid above it",
        "DCGD, identity: the chosen step_mult 1 is the smallest tried (1, 2, 4); extend the "
        "grid below it",
    ]
    np.testing.assert_allclose(fig.axes[0].get_lines()[1].get_ydata(), 0.5 ** np.arange(T + 1))
    assert main([str(folders["sweep"]), "-o", str(tmp_path / "e.png")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: EF21, identity: the chosen step_mult 4 is the largest tried")


def test_axis_labels_readable_by_default_and_set_by_flags(folders, tmp_path, capsys):
    run = folders["run2"]
    defaults = {
        ("bits", "grad_norm_sq"): ("uplink bits per node", r"$\|\nabla f(x)\|^2$"),
        ("iters", "f_gap"): ("iterations", "$f(x) - f^*$"),
        ("time", "f"): ("seconds", "$f(x)$"),
        ("iters", "wall_s"): ("iterations", "wall_s"),
    }
    for (x, y), want in defaults.items():
        ax = plot([run], x=x, y=y, yscale="linear").axes[0]
        assert (ax.get_xlabel(), ax.get_ylabel()) == want
    ax = plot([run], xlabel="rounds", ylabel=r"$\|g^t\|^2$ (\$)").axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("rounds", r"$\|g^t\|^2$ (\$)")
    out = tmp_path / "l.png"
    argv = [str(run), "-o", str(out), "--xlabel", "bits sent", "--ylabel", r"$\|\nabla f\|$"]
    assert main(argv) == 0 and out.read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    assert main([str(run), "-o", str(tmp_path / "m.png"), "--ylabel", r"$\nabla \foo$"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(r"error: ylabel '$\\nabla \\foo$' is not valid mathtext (")
    assert r"Unknown symbol: \foo" in err and r"a literal $ written as \$" in err
    assert not (tmp_path / "m.png").exists()


def cut(run: Path, tail: str) -> Path:
    """``run``'s history with ``tail`` appended (a last row as a cut-off write leaves it)."""
    with (run / "history.csv").open("a", newline="") as fh:
        fh.write(tail)
    return run


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("11,110.0,0.0,-0.99", "4 of 7 cells"),
        ("11,110.0,0.0,-0.99,0.0004,0.0004,1.1,7\r\n", "8 cells for 7 columns"),
        ("11,110.0,0.0,-0.99,0.0004,4.8e-,1.1\r\n", "grad_norm_sq holds '4.8e-', not a number"),
        ("11,110.0,0.0,-0.99,0.0004,0.0004,1.1", "no line break at its end"),
    ],
)
def test_incomplete_last_history_row_is_dropped_with_a_warning(tmp_path, caplog, tail, why):
    run = cut(write_run(tmp_path / "r"), tail)
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([run], x="iters")
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), np.arange(T + 1))
    np.testing.assert_allclose(line.get_ydata(), 0.5 ** np.arange(T + 1))
    assert notes(caplog) == [
        f"{run / 'history.csv'}: line 13 is incomplete ({why}), as if the file was cut off "
        "there; plotted the 11 complete rows before it"
    ]


def test_incomplete_lone_row_or_bad_cell_elsewhere_is_an_error(tmp_path, caplog):
    run = write_run(tmp_path / "r")
    header = ",".join(COLUMNS) + "\r\n"
    (run / "history.csv").write_text(header + "0,0.0,0.0")
    with pytest.raises(ValueError, match=r"history.csv': line 2, its only row, is incomplete "
                       r"\(3 of 7 cells\); the run logged no complete row"):  # fmt: skip
        plot([run])
    # a complete lone row without its line break is kept
    (run / "history.csv").write_text(header + "0,0.0,0.0,1,1,1,0")
    np.testing.assert_array_equal(plot([run]).axes[0].get_lines()[0].get_ydata(), [1.0])
    # not the last row: not a cut-off write but a bad file
    rows = ["0,0,0,1,1,1,0", "1,10,0,1,1,oops,0", "2,20,0,1,1,0.5,0"]
    (run / "history.csv").write_text(header + "\r\n".join(rows) + "\r\n")
    with pytest.raises(ValueError, match="column 'grad_norm_sq' of .* holds 'oops' at row 2"):
        plot([run])


def boxes(fig) -> dict[str, tuple[float, float, float, float]]:
    """The extents (x0, y0, x1, y1) in inches of the axes, the legend, the figure and everything
    drawn."""
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    out = {"axes": ax.bbox, "legend": ax.get_legend().get_window_extent(r), "figure": fig.bbox}
    out = {k: tuple(np.array(b.extents) / fig.dpi) for k, b in out.items()}
    out["all"] = tuple(fig.get_tightbbox(r).extents)  # already in inches
    return out


@pytest.mark.parametrize("n", [1, 6, 30])
def test_the_legend_never_shrinks_the_axes(tmp_path, n):
    # each label needs a long setting: "ef21, topk:ratio=0.001, x1,\nsplit=dirichlet:0.1-..."
    runs = [
        write_run(
            tmp_path / f"r{i}",
            0.3 + 0.02 * i,
            split=f"dirichlet:0.{i}-and-a-long-tail",
            compressor=f"topk:ratio=0.00{i % 7 + 1}",
        )
        for i in range(n)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" or any other
        fig = plot(runs, x="iters", title="a title as wide as the axes are, or a bit wider")
        fig.savefig(tmp_path / "f.png", dpi=50)
    b = boxes(fig)
    ax_w, ax_h = b["axes"][2] - b["axes"][0], b["axes"][3] - b["axes"][1]
    assert (ax_w, ax_h) == pytest.approx(AXES_SIZE)
    assert fig.axes[0].get_position().width > 0.5
    fx0, fy0, fx1, fy1 = b["figure"]
    for name in ("legend", "all"):  # everything drawn lies inside the figure
        x0, y0, x1, y1 = b[name]
        assert fx0 <= x0 and fy0 <= y0 and x1 <= fx1 and y1 <= fy1, (name, b)
    lx0, ly0, lx1, ly1 = b["legend"]
    ax0, ay0, ax1, ay1 = b["axes"]
    beside, below = lx0 >= ax1, ly1 <= ay0
    assert beside or below
    assert beside == (n < 30)  # many long labels: below the axes, in columns
    assert len(legend(fig)) == n
