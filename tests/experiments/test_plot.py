"""Plots from hand-made run and sweep folders (the runner's file format, known numbers)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from experiments.config import Selection, load_config
from experiments.plot import average, legend_labels, main, plot

COLUMNS = ["iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s",
           "t_compute", "t_encode", "t_communicate", "t_decode"]  # fmt: skip
T = 10


def write_run(folder: Path, params: dict, rate: float, bits_per_iter: float, scale: float = 1.0):
    """A finished run whose ``grad_norm_sq`` is ``scale * rate**t``, t = 0..T."""
    folder.mkdir(parents=True)
    t = np.arange(T + 1)
    g = scale * rate**t
    rows = []
    for i in t:
        rows.append({
            "iter": int(i), "bits_up": bits_per_iter * i, "bits_down": 64.0 * i,
            "f": -1.0 + g[i], "f_gap": g[i], "grad_norm_sq": g[i], "wall_s": 0.5 * i,
            "t_compute": 0.25 * i, "t_encode": 0.125 * i, "t_communicate": 0.1 * i,
            "t_decode": 0.0625 * i,
        })  # fmt: skip
    with (folder / "history.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    args = {"algorithm": params["algorithm"], "compressor": params["compressor"],
            "step_mult": float(params["step_mult"]), "seed": params["seed"],
            "problem": "quadratic", "nodes": 2, "lam": None, "opt_init_mode": None,
            "out": str(folder), "overwrite": False, "quiet": True, "problem_opt": []}  # fmt: skip
    config = {"algorithm": params["algorithm"], "args": args}
    (folder / "config.json").write_text(json.dumps(config))
    final = {k: rows[-1][k] for k in COLUMNS}
    summary = {"reason": "completed", "iters": T, "final": final, "gamma": 0.1}
    (folder / "summary.json").write_text(json.dumps(summary))
    return g


# rates by (method label, multiplier): EF21 is best at 2, EF14 at 1 (min final grad_norm_sq).
RATES = {("EF21", 1): 0.8, ("EF21", 2): 0.5, ("ef-sgd", 1): 0.6, ("ef-sgd", 2): 0.9}
BITS = {"EF21": 37.0, "ef-sgd": 20.0}
SCALE = {0: 1.0, 1: 3.0}  # seed 1 starts 3x higher: the band is a factor 3 wide


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "sweep"
    cfg = load_config(
        {
            "name": "fake",
            "base": {"problem": "quadratic", "nodes": 2},
            "methods": [{"algorithm": "ef21", "label": "EF21"}, {"algorithm": "ef-sgd"}],
            "grid": {"compressor": ["topk:k=1"], "step_mult": [1, 2], "seed": [0, 1]},
        }
    )
    out.mkdir(parents=True)
    (out / "sweep.json").write_text(json.dumps(cfg.to_dict()))
    curves = {}
    for spec in cfg.runs():
        p = spec.params
        curves[spec.run_id] = write_run(
            out / "runs" / spec.run_id, p, RATES[(p["label"], p["step_mult"])],
            BITS[p["label"]], SCALE[p["seed"]],
        )  # fmt: skip
    return out


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_sweep_folder_best_multiplier_mean_and_band(sweep_dir, tmp_path):
    fig = plot([sweep_dir], x="bits", y="grad_norm_sq", out=tmp_path / "fig", title="fake")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "uplink bits per node"
    assert ax.get_ylabel() == r"$\|\nabla f(x)\|^2$"
    assert ax.get_title() == "fake"
    # the chosen multiplier, out of the two tried (both winners sit at an end of the grid)
    assert texts(fig) == ["EF21, topk:k=1, x2, edge", "ef-sgd, topk:k=1, x1, edge"]
    t = np.arange(T + 1)
    ef21, ef14 = ax.get_lines()
    # mean over seeds of (1 + 3) * rate**t / 2 at the chosen multipliers 2 and 1
    np.testing.assert_allclose(ef21.get_ydata(), 2.0 * 0.5**t, rtol=1e-14)
    np.testing.assert_allclose(ef21.get_xdata(), 37.0 * t)
    np.testing.assert_allclose(ef14.get_ydata(), 2.0 * 0.6**t, rtol=1e-14)
    np.testing.assert_allclose(ef14.get_xdata(), 20.0 * t)
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(0.5**T)  # seed 0 at the end
    assert band[:, 1].max() == pytest.approx(3.0)  # seed 1 at the start
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF")):
        data = (tmp_path / f"fig{suffix}").read_bytes()
        assert len(data) > 1000 and data.startswith(magic)


def test_selection_override_and_axes(sweep_dir):
    # ranked by the final bits_up, which a method's multipliers share: ties go to the smaller
    fig = plot([sweep_dir], x="iters", y="f_gap", select=Selection(metric="bits_up"))
    ax = fig.axes[0]
    t = np.arange(T + 1)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), 2.0 * 0.8**t, rtol=1e-14)
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), 2.0 * 0.6**t, rtol=1e-14)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("iterations", "$f(x) - f^*$")
    fig = plot([sweep_dir], x="time", y="f")
    assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == ("seconds", "$f(x)$")
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_xdata(), 0.5 * t)


def test_modeled_time_needs_bandwidth(sweep_dir):
    with pytest.raises(ValueError, match=r"needs the systems model \(--bandwidth"):
        plot([sweep_dir], x="modeled-time")
    with pytest.raises(ValueError, match=r"needs the systems model \(--bandwidth GBPS.*--workers"):
        plot([sweep_dir], x="modeled-time", bandwidth=1.0)
    with pytest.raises(ValueError, match=r"workers must be an integer >= 1, got 0"):
        plot([sweep_dir], x="modeled-time", bandwidth=1.0, workers=0)
    t = np.arange(T + 1)
    # topk needs all-gather. The runs simulate 2 nodes, so one worker encodes 0.125 t / 2 and
    # decodes p messages of 0.0625 t / 2 each; the all-gather moves (p - 1) 37 t bits at
    # 1000 bit/s.
    fig = plot([sweep_dir], x="modeled-time", bandwidth=1e-6, workers=2)  # 1 kbit/s
    x = fig.axes[0].get_lines()[0].get_xdata()
    np.testing.assert_allclose(x, (0.25 + 0.0625 + 2 * 0.03125 + 0.037) * t, rtol=1e-12)
    assert fig.axes[0].get_xlabel() == "modeled seconds (2 workers at 1e-06 Gbit/s)"
    fig = plot([sweep_dir], x="modeled-time", bandwidth=1e-6, workers=8, latency=0.01)
    x = fig.axes[0].get_lines()[0].get_xdata()
    expect = (0.25 + 0.0625 + 8 * 0.03125 + 7 * 0.037 + 7 * 0.01) * t
    np.testing.assert_allclose(x, expect, rtol=1e-12)


def test_run_folders_keep_multipliers_apart(sweep_dir, tmp_path):
    runs = sorted((sweep_dir / "runs").glob("EF21_*_s0_*"))
    assert len(runs) == 2
    fig = plot(runs, x="iters")
    assert texts(fig) == ["ef21, topk:k=1, x1", "ef21, topk:k=1, x2"]
    t = np.arange(T + 1)
    np.testing.assert_allclose(fig.axes[0].get_lines()[1].get_ydata(), 0.5**t, rtol=1e-14)
    assert len(fig.axes[0].collections) == 0  # one seed each: no band


def test_average_interpolates_in_log_space_on_the_overlap():
    a = (np.array([0.0, 2.0, 4.0, 4.0]), np.array([1.0, 0.25, 0.1, 0.0625]))
    b = (np.array([1.0, 3.0, 5.0]), np.array([1.0, 0.25, 0.0625]))
    grid, mean, lo, hi = average([a, b])
    np.testing.assert_array_equal(grid, [1.0, 2.0, 3.0, 4.0])
    ya = np.array([0.5, 0.25, 0.125, 0.0625])  # 2**-x: log-linear, last value at x=4 counts
    yb = 2 * ya
    np.testing.assert_allclose(mean, (ya + yb) / 2, rtol=1e-14)
    np.testing.assert_allclose(lo, np.minimum(ya, yb), rtol=1e-14)
    np.testing.assert_allclose(hi, np.maximum(ya, yb), rtol=1e-14)
    # values <= 0 cannot be log-interpolated: linear then; non-finite points are dropped
    c = (np.array([0.0, 2.0, 3.0]), np.array([-1.0, 1.0, np.inf]))
    d = (np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.0, 0.0]))
    grid, mean, _, _ = average([c, d])
    np.testing.assert_array_equal(grid, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(mean, [-0.5, 0.0, 0.5])


def test_legend_shows_only_differing_params():
    params = [
        {"algorithm": "3pc", "label": "3pc", "compressor": "topk:k=1", "mechanism": "lag",
         "nodes": 2, "seed": 0},
        {"algorithm": "3pc", "label": "3pc", "compressor": "topk:k=1", "mechanism": "clag",
         "nodes": 2, "seed": 1},
        {"algorithm": "ef21", "label": "EF21", "compressor": "randk:k=2", "nodes": 2},
    ]  # fmt: skip
    assert legend_labels(params) == [
        "3pc, topk:k=1, mechanism=lag",
        "3pc, topk:k=1, mechanism=clag",
        "EF21, randk:k=2",
    ]


def test_bad_inputs(sweep_dir, tmp_path):
    with pytest.raises(ValueError, match="x must be one of bits, iters, time, modeled-time"):
        plot([sweep_dir], x="epochs")
    with pytest.raises(ValueError, match=r"column 'test_acc' is not in .*history.csv; have: iter,"):
        plot([sweep_dir], y="test_acc")
    with pytest.raises(ValueError, match="is neither a run folder"):
        plot([tmp_path])


def test_cli_writes_the_suffix_format_or_png_and_pdf(sweep_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "cli.png"
    assert main([str(sweep_dir), "--x", "iters", "--y", "f_gap", "-o", str(out)]) == 0
    assert (tmp_path / "sub" / "cli.png").stat().st_size > 1000
    assert not (tmp_path / "sub" / "cli.pdf").exists()
    assert capsys.readouterr().out == f"wrote {out}\n"
    stem = tmp_path / "both"
    assert main([str(sweep_dir), "-o", str(stem)]) == 0
    assert (tmp_path / "both.png").stat().st_size > 1000
    assert (tmp_path / "both.pdf").stat().st_size > 1000
    assert capsys.readouterr().out == f"wrote {stem}.png and {stem}.pdf\n"
    assert main([str(sweep_dir), "--x", "modeled-time", "-o", str(out)]) == 2
    assert "needs the systems model (--bandwidth" in capsys.readouterr().err
