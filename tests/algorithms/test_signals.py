"""SIGINT and SIGTERM: the run stops at a step, writes its history, a checkpoint and the summary,
says how to resume, exits 130/143, and the resumed run continues the uninterrupted trajectory."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from algorithms.run import TIME_COLUMNS, run

TORCHRUN = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def rows(path) -> list[dict]:
    with open(path / "history.csv") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def wait_for_rows(path, count: int, procs, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) > count:
            return
        assert all(p.poll() is None for p in procs), "the run ended before it was interrupted"
        time.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} rows")


def assert_interrupted(out, signum, stdout: str, launcher: str) -> int:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reason"] == "interrupted"
    assert summary["signal"] == signal.Signals(signum).name
    t = summary["iters"]
    assert json.loads((out / "checkpoint" / "meta.json").read_text())["iter"] == t
    line = f"resume with: {launcher} -m algorithms.run --resume {out}"
    assert line in stdout, stdout
    assert sum("resume with" in ln for ln in stdout.splitlines()) == 1
    return t


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_run_cleanly_and_it_resumes_exactly(tmp_path, signum):
    argv = ["marina", "--compressor", "randk:k=3", "--problem", "quadratic", "--nodes", "4",
            "--seed", "3", "--log-every", "1", "--quiet"]  # fmt: skip
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "algorithms.run", *argv, "--iters", "1000000", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(out / "history.csv", 6, [proc])
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT[signum], stderr
    assert "Traceback" not in stderr, stderr
    t = assert_interrupted(out, signum, stdout, "python")
    assert [int(r["iter"]) for r in rows(out)] == list(range(t + 1))  # log every 1: up to t
    T = t + 15
    assert run(["--resume", str(out), "--iters", str(T)]) == 0
    assert run([*argv, "--iters", str(T), "--out", str(tmp_path / "whole")]) == 0
    assert rows(out) == rows(tmp_path / "whole")
    assert json.loads((out / "summary.json").read_text())["reason"] == "completed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.heavy  # 14 s: a torchrun launch (on 2 cores)
def test_under_torchrun_every_rank_stops_at_the_same_step(tmp_path):
    """SIGTERM reaches rank 1 only: both ranks agree (an all-reduce of a stop flag each step),
    stop at the same iteration, exit 143; the resumed gloo run follows the simulation."""
    argv = ["ef21", "--compressor", "topk:k=2", "--problem", "quadratic", "--seed", "4",
            "--log-every", "1", "--quiet"]  # fmt: skip
    out, port = tmp_path / "dist", free_port()
    procs = []
    for rank in range(2):
        env = dict(ENV, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_PORT=str(port),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")  # fmt: skip
        cmd = [sys.executable, "-m", "algorithms.run", *argv, "--iters", "1000000",
               "--out", str(out)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    try:
        wait_for_rows(out / "history.csv", 6, procs)
        procs[1].send_signal(signal.SIGTERM)
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [143, 143], [o[1][-2000:] for o in outputs]
    t = assert_interrupted(out, signal.SIGTERM, outputs[0][0], "torchrun --nproc_per_node=2")
    ck = out / "checkpoint"
    assert sorted(p.name for p in ck.iterdir()) == [
        "meta.json",
        f"rank0-iter{t}.pt",
        f"rank1-iter{t}.pt",
    ]
    import torch

    iters = [torch.load(ck / f"rank{r}-iter{t}.pt", weights_only=True)["t"] for r in range(2)]
    assert iters == [t, t]
    T = t + 10
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "algorithms.run",
           "--resume", str(out), "--iters", str(T)]  # fmt: skip
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert run([*argv, "--nodes", "2", "--iters", str(T), "--out", str(tmp_path / "sim")]) == 0
    sim, dist = rows(tmp_path / "sim"), rows(out)
    assert [r["iter"] for r in sim] == [r["iter"] for r in dist]
    for a, b in zip(sim, dist, strict=True):
        assert a["bits_up"] == b["bits_up"] and a["bits_down"] == b["bits_down"]
        fa, fb = float(a["f"]), float(b["f"])
        assert abs(fa - fb) <= 1e-10 * max(1.0, abs(fa)), (a["iter"], fa, fb)
