"""Where no progress bar is drawn (stderr is not a terminal: a log file, a batch job), a run
and a sweep print a progress line every ``COMPZOO_PROGRESS_S`` seconds; ``--quiet`` silences
them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ENV = dict(os.environ, OMP_NUM_THREADS="1", COMPZOO_PROGRESS_S="0.05")
RUN = [sys.executable, "-m", "algorithms.run", "ef21", "--compressor", "topk:k=2", "--nodes",
       "4", "--iters", "3000"]  # fmt: skip
LINE = re.compile(
    r"^ef21: iteration (\d+)/3000 \(\d+%\), f -?[\d.e+-]+, \|\|grad f\|\|\^2 [\d.e+-]+, bits up "
    r"[\d.e+-]+ per node, \d+ s$"
)


def test_a_run_writing_to_a_file_prints_progress_lines(tmp_path):
    p = subprocess.run([*RUN, "--out", str(tmp_path / "r")], env=ENV, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("ef21: iteration")]
    assert len(lines) >= 2, p.stderr
    iters = [int(LINE.match(ln).group(1)) for ln in lines]  # every line has the full form
    assert iters == sorted(iters) and iters[-1] <= 3000
    assert "\r" not in p.stderr  # no bar redrawn into the file


def test_quiet_silences_the_progress_lines(tmp_path):
    p = subprocess.run([*RUN, "--quiet", "--out", str(tmp_path / "r")], env=ENV,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "iteration" not in p.stderr


@pytest.mark.heavy  # 16 s: a sweep's runs in flight (on 2 cores)
def test_a_sweep_writing_to_a_file_prints_its_runs_in_flight(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        'name = "s"\n[base]\nproblem = "quadratic"\nnodes = 4\niters = 20000\nlog_every = 50\n'
        '[[methods]]\nalgorithm = "ef21"\nlabel = "EF21"\n[grid]\ncompressor = ["topk:k=2"]\n'
        "step_mult = [1, 2]\n"
    )
    env = dict(ENV, COMPZOO_PROGRESS_S="0.3")
    p = subprocess.run([sys.executable, "-m", "experiments.sweep", str(cfg), "--out",
                        str(tmp_path / "sw"), "--jobs", "2"], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("s: ")]
    assert lines, p.stderr
    assert all(re.match(r"^s: [0-2]/2 runs done, \d+ s", ln) for ln in lines), lines
    # (the two runs advance as one batch, named by its first run and how many more it holds)
    flight = r"in flight: EF21 m[12] s0( \+1)?: (\d+|-)/20000"
    assert any(re.search(flight, ln) for ln in lines), lines
