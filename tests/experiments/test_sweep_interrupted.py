"""A sweep stopped by a signal: its interrupted runs are continued on resume, not taken as done.

The runner answers SIGTERM by writing its history, a checkpoint and a summary with reason
``interrupted``. A resumed sweep must not count such a run as finished (it would score as "not
reached" and could change a verdict); it continues it from the checkpoint along the trajectory
of an uninterrupted run. ``--record`` refuses a reproduction whose runs did not all finish.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from algorithms.run import run
from experiments import reproduce as rep
from experiments import sweep_pool
from experiments.config import load_config
from experiments.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[2]
TOML = """
name = "long-run"
[base]
problem = "quadratic"
nodes = 2
iters = 8000
log_every = 100
[[methods]]
algorithm = "ef21"
label = "EF21"
[grid]
compressor = ["topk:k=1"]
step_mult = [1]
[select]
rule = "min_final"
metric = "grad_norm_sq"
"""
KEYS = ("iter", "bits_up", "bits_down", "f", "grad_norm_sq")


def rows(run_dir: Path) -> list[tuple]:
    with (run_dir / "history.csv").open(newline="") as fh:
        return [tuple(r[k] for k in KEYS) for r in csv.DictReader(fh)]


def logged(run_dir: Path) -> int:
    try:
        return max(0, len((run_dir / "history.csv").read_text().splitlines()) - 1)
    except OSError:
        return 0


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The one-run sweep, SIGTERMed (sweep, fork servers and run) once the run has logged a
    few rows and before it ends."""
    tmp = tmp_path_factory.mktemp("interrupted")
    cfg_path, out = tmp / "long.toml", tmp / "out"
    cfg_path.write_text(TOML)
    run_dir = out / "runs" / load_config(cfg_path).runs()[0].run_id
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", str(cfg_path), "--out", str(out), "--quiet"],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while logged(run_dir) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    for _ in range(500):  # the run (a child of the fork server) writes its summary as it stops
        if (run_dir / "summary.json").is_file():
            break
        time.sleep(0.02)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"cfg": cfg_path, "out": out, "run_dir": run_dir, "summary": summary, "tmp": tmp}


def test_an_interrupted_run_is_continued_to_the_uninterrupted_trajectory(stopped):
    run_dir, first = stopped["run_dir"], stopped["summary"]
    assert first["reason"] == "interrupted", first["reason"]  # stopped mid-run, as intended
    assert first["iters"] < 8000 and (run_dir / "checkpoint").is_dir()
    cut = rows(run_dir)
    run_sweep(stopped["cfg"], stopped["out"], progress=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reason"] != "interrupted" and summary["iters"] == 8000
    resumed = rows(run_dir)
    assert resumed[: len(cut)] == cut  # what was computed before the signal is kept
    fresh = stopped["tmp"] / "fresh"  # the same run, uninterrupted (in this process)
    assert run([*load_config(stopped["cfg"]).runs()[0].argv, "--quiet", "--out", str(fresh)]) == 0
    assert resumed == rows(fresh)
    with (stopped["out"] / "summary.csv").open(newline="") as fh:
        assert [r["status"] for r in csv.DictReader(fh)] == [summary["reason"]]


def test_record_refuses_a_reproduction_with_unfinished_runs(tmp_path, monkeypatch, capsys):
    verdict = {"unfinished": 2, "runs": 9, "holds": False}
    monkeypatch.setattr(rep, "reproduce", lambda *a, **k: verdict)
    monkeypatch.setattr(rep, "verdict_table", lambda v: "table")
    monkeypatch.setattr(rep, "_written", lambda out, v: "")
    monkeypatch.setattr(rep, "results_record", lambda *a: pytest.fail("recorded"))
    code = rep.main(["3pc-quadratic", "--record", "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "2 of the 9 runs did not finish" in err and "nothing recorded" in err


def test_ctrl_c_stops_the_sweep_and_starts_no_new_run(tmp_path):
    cfg_path, out = tmp_path / "two.toml", tmp_path / "out"
    cfg_path.write_text(TOML.replace("step_mult = [1]", "step_mult = [1, 2]"))
    first, second = (out / "runs" / s.run_id for s in load_config(cfg_path).runs())
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", str(cfg_path), "--out", str(out),
         "--jobs", "1", "--quiet", "--batch", "off"],  # one by one: the second run waits
        cwd=ROOT, env=env, start_new_session=True, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while logged(first) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "rerun the same command to continue" in err and "Traceback" not in err
    summary = json.loads((first / "summary.json").read_text())
    assert summary["reason"] == "interrupted" and (first / "checkpoint" / "meta.json").is_file()
    assert not (first / "stderr.txt").exists()  # an interruption is not a failure
    assert not second.exists()  # queued behind the interrupted run: never started


@pytest.mark.heavy  # 15 s: a batch stopped, resumed (on 2 cores)
def test_ctrl_c_stops_a_batch_and_each_run_resumes_alone(tmp_path):
    cfg_path, out = tmp_path / "two.toml", tmp_path / "out"
    cfg_path.write_text(TOML.replace("step_mult = [1]", "step_mult = [1, 2]"))
    dirs = [out / "runs" / s.run_id for s in load_config(cfg_path).runs()]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", str(cfg_path), "--out", str(out),
         "--jobs", "1", "--quiet"],
        cwd=ROOT, env=env, start_new_session=True, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while logged(dirs[0]) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    for d in dirs:  # the two runs advanced together: both stop, each with its checkpoint
        summary = json.loads((d / "summary.json").read_text())
        assert summary["reason"] == "interrupted" and (d / "checkpoint" / "meta.json").is_file()
        assert json.loads((d / "config.json").read_text())["batch"]["runs"] == 2
    run_sweep(load_config(cfg_path), out, progress=False)
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["reason"] != "interrupted" and summary["iters"] == 8000


def test_a_run_interrupted_again_while_resuming_keeps_its_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "long.toml").write_text(TOML)
    spec = load_config(tmp_path / "long.toml").runs()[0]
    run_dir = tmp_path / "runs" / spec.run_id
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "meta.json").write_text("{}")
    (run_dir / "summary.json").write_text(json.dumps({"reason": "interrupted", "iters": 300}))
    calls = []

    def stopped_again(argv, env, servers, fresh=None, watch=None):  # resumed, exits 130 again
        calls.append(argv)
        return 130, "SIGINT"

    monkeypatch.setattr(sweep_pool, "_launch", stopped_again)
    assert sweep_pool._execute(spec, run_dir, {}) == "interrupted"
    assert calls == [["--resume", str(run_dir), "--quiet"]]  # resumed, not started afresh
    assert (run_dir / "checkpoint" / "meta.json").is_file()
    assert not (run_dir / "stderr.txt").exists()
