"""Plot axes, dropped points, output formats and column errors, read back from the figure."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from experiments.plot import FORMATS, main, output_paths, plot

COLUMNS = ["iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s"]


def write_run(folder: Path, columns: dict[str, list], reason: str = "completed", **args) -> Path:
    """A run folder whose history has the given columns (``None`` writes an empty cell)."""
    folder.mkdir(parents=True)
    n = len(next(iter(columns.values())))
    cols = {"iter": list(range(n)), "bits_up": [10.0 * i for i in range(n)], **columns}
    with (folder / "history.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(cols))
        for i in range(n):
            w.writerow(["" if cols[c][i] is None else cols[c][i] for c in cols])
    config = {"algorithm": "ef21", "args": {"algorithm": "ef21", "compressor": "topk:k=1",
                                            "step_mult": 1.0, "seed": 0, **args}}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "summary.json").write_text(json.dumps({"reason": reason, "final": {}}))
    return folder


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "compzoo.plot"]


def test_negative_values_fall_back_to_linear_with_a_warning(tmp_path, caplog):
    f = [0.0, -0.5, -0.75, -0.875]  # within a decade: linear shows it best
    run = write_run(tmp_path / "r", {"f": f})
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([run], y="f")
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), f)
    (msg,) = warnings_of(caplog)
    assert "f has values <= 0 (smallest -0.875)" in msg and "using a linear y axis" in msg


def test_values_over_decades_with_a_sign_change_use_symlog(tmp_path, caplog):
    y = [1e3, 1.0, 1e-3, -1e-2]
    run = write_run(tmp_path / "r", {"f": y})
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([run], y="f", x="iters")
    ax = fig.axes[0]
    assert ax.get_yscale() == "symlog"
    assert ax.yaxis.get_transform().linthresh == pytest.approx(1e-3)  # the smallest |y|
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), y)
    assert "using a symlog y axis" in warnings_of(caplog)[0]


def test_explicit_yscale_is_kept(tmp_path, caplog):
    run = write_run(tmp_path / "r", {"f": [2.0, 1.0, -1.0], "grad_norm_sq": [4.0, 2.0, 1.0]})
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        assert plot([run], y="grad_norm_sq", yscale="linear").axes[0].get_yscale() == "linear"
        assert plot([run], y="grad_norm_sq", yscale="symlog").axes[0].get_yscale() == "symlog"
        assert plot([run], y="grad_norm_sq").axes[0].get_yscale() == "log"
        assert warnings_of(caplog) == []
        assert plot([run], y="f", yscale="log").axes[0].get_yscale() == "log"
    assert warnings_of(caplog) == ["1 plotted f value(s) <= 0 are not shown on the log y axis"]
    with pytest.raises(ValueError, match="yscale must be one of log, linear, symlog, got 'cube'"):
        plot([run], yscale="cube")


def test_non_finite_points_are_dropped_and_do_not_set_the_axes(tmp_path, caplog):
    good = write_run(tmp_path / "good", {"grad_norm_sq": [1.0, 0.1, 0.01, 0.001]})
    bad = write_run(
        tmp_path / "bad",
        {"grad_norm_sq": [1.0, 1e150, float("inf"), float("nan")]},
        reason="diverged",
        step_mult=64.0,
    )
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([good, bad], x="iters")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["ef21, topk:k=1, x1", "ef21, topk:k=1, x64"]
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), [1.0, 1e150])
    np.testing.assert_array_equal(ax.get_lines()[1].get_xdata(), [0, 1])
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), [1.0, 0.1, 0.01, 0.001])
    lo, hi = ax.get_ylim()
    # the top: 1000 times the largest start (1), so the diverging line leaves the frame; the
    # bottom: the decades below the top, -3 .. 3, with a 5% margin
    assert np.log10(lo) == pytest.approx(-3 - 0.3)
    assert hi == 1e3
    assert warnings_of(caplog) == [
        f"{bad}: dropped 2 non-finite grad_norm_sq value(s), from iteration 2 on "
        "(the run diverged)",
        "grad_norm_sq reaches 1e+150; the y axis stops at 1e+03 (1000 times the largest "
        "starting value): the lines above it leave the frame",
    ]
    # no line above the cap: no cap, no note
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        lo, hi = plot([good], x="iters").axes[0].get_ylim()
    assert warnings_of(caplog) == []
    np.testing.assert_allclose(np.log10([lo, hi]), [-3.15, 0.15])


def test_empty_and_absent_columns_name_the_columns_with_values(tmp_path):
    run = write_run(tmp_path / "r", {"f": [1.0, 0.5], "f_gap": [None, None]})
    empty = r"column 'f_gap' of .* is empty \(f\* is unknown for this run's problem\); "
    with pytest.raises(ValueError, match=empty + "columns with values: iter, bits_up, f$"):
        plot([run], y="f_gap")
    with pytest.raises(ValueError, match=r"column 'loss' is not in .*; have: iter, bits_up, f$"):
        plot([run], y="loss")
    bad = write_run(tmp_path / "s", {"f": [1.0, "oops", 0.5]})  # not the last row: not cut off
    with pytest.raises(ValueError, match=r"column 'f' of .* holds 'oops' at row 2; allowed: num"):
        plot([bad], y="f")


def test_output_format_from_the_suffix(tmp_path):
    run = write_run(tmp_path / "r", {"grad_norm_sq": [1.0, 0.5, 0.25]})
    magic = {".jpg": b"\xff\xd8", ".svg": b"<?xml", ".pdf": b"%PDF", ".png": b"\x89PNG"}
    for suffix, head in magic.items():
        out = tmp_path / f"fig{suffix}"
        plot([run], out=out)
        assert out.read_bytes().startswith(head)
    assert sorted(p.name for p in tmp_path.glob("fig*")) == sorted(f"fig{s}" for s in magic)
    assert output_paths("a/fig") == [Path("a/fig.png"), Path("a/fig.pdf")]
    assert output_paths("fig.PNG") == [Path("fig.PNG")]
    assert "gif" not in FORMATS
    with pytest.raises(ValueError, match=r"unsupported figure format '.gif' in 'x.gif'; allowed "
                       r"suffixes: .png, .pdf, .svg"):  # fmt: skip
        plot([run], out="x.gif")
    assert not (tmp_path / "x.gif").exists()


def test_cli_warns_on_stderr_and_fails_cleanly(tmp_path, capsys):
    run = write_run(tmp_path / "r", {"f": [0.0, -1.0, -1.5], "f_gap": [None, None, None]})
    assert main([str(run), "--y", "f", "-o", str(tmp_path / "f.png")]) == 0
    cap = capsys.readouterr()
    assert cap.out == f"wrote {tmp_path / 'f.png'}\n"
    assert cap.err.startswith("warning: f has values <= 0 (smallest -1.5)")
    assert main([str(run), "--y", "f_gap", "-o", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: column 'f_gap' of") and "columns with values: iter" in err
    assert main([str(run), "-o", str(tmp_path / "x.jpg2")]) == 2
    assert "unsupported figure format '.jpg2'" in capsys.readouterr().err
    assert not list(tmp_path.glob("g.*")) and not list(tmp_path.glob("x.*"))


def test_sweep_groups_without_a_winner(tmp_path, caplog, capsys):
    from experiments.config import load_config
    from experiments.sweep import main as sweep_main

    out = tmp_path / "sweep"
    toml = tmp_path / "fake.toml"
    toml.write_text(
        '[base]\nproblem = "quadratic"\nnodes = 2\n'
        + "".join(
            f'[[methods]]\nalgorithm = "{a}"\nlabel = "{x}"\n'
            for a, x in zip(("ef21", "ef-sgd", "dcgd"), "ABC", strict=True)
        )  # fmt: skip
        + '[grid]\nstep_mult = [1, 2]\n[select]\nrule = "bits_to_tol"\ntol = 1e-2\n'
    )
    cfg = load_config(toml)
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps(cfg.to_dict()))
    finals = {("A", 1): 1e-3, ("A", 2): 1e-4, ("B", 1): 0.5, ("B", 2): 0.2}
    for spec in cfg.runs():
        key = (spec.params["label"], spec.params["step_mult"])
        run = out / "runs" / spec.run_id
        if key in finals:  # B completes but never reaches the tolerance
            write_run(run, {"grad_norm_sq": [1.0, finals[key]]})
            summary = {"reason": "completed", "final": {"grad_norm_sq": finals[key]}}
        else:  # C diverges at both multipliers
            write_run(run, {"grad_norm_sq": [1.0, float("inf")]}, reason="diverged")
            summary = {"reason": "diverged", "final": {"grad_norm_sq": float("inf")}}
        (run / "summary.json").write_text(json.dumps(summary))
    # the sweep command on its finished folder: best.csv names no winner for B and C, and says so
    assert sweep_main([str(toml), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().err == (
        "warning: B, identity: no step_mult chosen (none reached tol)\n"
        "warning: C, identity: no step_mult chosen (all diverged)\n"
    )
    with (out / "best.csv").open(newline="") as fh:
        rows = [(r["label"], r["step_mult"], r["status"], r["value"]) for r in csv.DictReader(fh)]
    assert rows == [("A", "1.0", "chosen", "10.0"), ("B", "", "none reached tol", ""),
                    ("C", "", "all diverged", "")]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="compzoo.plot"):
        fig = plot([out], x="iters")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "A, identity, x1, edge",  # fewest bits to 1e-2: the first row
        "B, identity, x2 (none reached tol)",
    ]
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), [1.0, 0.2])
    assert warnings_of(caplog) == [
        "A, identity: the chosen step_mult 1 is the smallest tried (1, 2); extend the grid "
        "below it",
        "B, identity: no multiplier chosen (none reached tol); drawn at step_mult=2, its lowest "
        "final grad_norm_sq",
        "C, identity: no multiplier chosen (all diverged); not drawn",
    ]
