"""``examples/sweep.toml`` run exactly as its header tells a user to, and the help text's
config example loads."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from experiments.config import load_config
from experiments.plot import main as plot_main
from experiments.sweep import HELP_FORMAT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sweep.toml"


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_example_sweep_through_the_cli(tmp_path, capsys):
    commands = [ln.strip("# ").split() for ln in EXAMPLE.read_text().splitlines()
                if ln.startswith("#   python -m")]  # fmt: skip
    assert [c[:3] for c in commands] == [
        ["python", "-m", "experiments.sweep"],
        ["python", "-m", "experiments.plot"],
    ]
    out = tmp_path / "example"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sweep = [sys.executable, "-m", "experiments.sweep", str(EXAMPLE), "--out", str(out),
             "--jobs", "2"]  # fmt: skip
    p = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"example: 4 runs (4 completed); tables in {out}\n"
    assert "warning" not in p.stderr
    summary = read_csv(out / "summary.csv")
    assert [r["status"] for r in summary] == ["completed"] * 4
    chosen = read_csv(out / "best.csv")
    assert [(r["label"], r["status"]) for r in chosen] == [("EF21", "chosen"), ("EF14", "chosen")]
    for row in chosen:  # the winner is the multiplier with the fewest bits to tol among its runs
        runs = [r for r in summary if r["label"] == row["label"] and r["bits_to_tol"]]
        fewest = min(runs, key=lambda r: float(r["bits_to_tol"]))
        assert float(row["step_mult"]) == float(fewest["step_mult"])
        assert float(row["value"]) == float(fewest["bits_to_tol"])
    fig = tmp_path / "example.png"  # the header's second command, in process
    assert plot_main([str(out), "-o", str(fig)]) == 0
    assert capsys.readouterr().out == f"wrote {fig}\n"
    assert fig.read_bytes().startswith(b"\x89PNG")


def test_help_describes_the_format_and_its_example_loads():
    p = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0
    texts = ["[base]", "[[methods]]", "[grid]", "[select]", "bits_to_tol", "min_final",
             "{ base = 2, from = -2, to = 4 }", "seed, compressor, step_mult",
             "best.csv"]  # fmt: skip
    for text in texts:
        assert text in p.stdout, text
    example = HELP_FORMAT.split("\n\n")[1]
    cfg = load_config(tomllib.loads("\n".join(ln.split("#")[0] for ln in example.splitlines())))
    runs = cfg.runs()
    assert len(runs) == 2 * 2 * 7 * 3  # methods x compressors x multipliers x seeds
    assert sorted({r.params["step_mult"] for r in runs}) == [2.0**e for e in range(-2, 5)]
    assert runs[-1].argv[:2] == ["ef-sgd", "--problem"] and "--batch-size" in runs[-1].argv


def test_the_benchmark_grid_config_is_the_ef21_papers_grid():
    """``benchmarks/ef21_grid.toml`` (the sweep timed for the LIBSVM performance work) loads and
    expands to 2 methods x 4 sets x 12 multipliers = 96 runs of 2000 iterations."""
    cfg = load_config(ROOT / "benchmarks" / "ef21_grid.toml")
    runs = cfg.runs()
    assert len(runs) == 96
    assert {r.params["dataset"] for r in runs} == {"mushrooms", "phishing", "a9a", "w8a"}
    assert {r.params["step_mult"] for r in runs} == {2.0**e for e in range(12)}
    assert {r.params["iters"] for r in runs} == {2000}
