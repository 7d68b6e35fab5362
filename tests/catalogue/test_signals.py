"""SIGINT and SIGTERM at any moment of the project's commands: at 0.5 s (torch is still being
imported), at 2 s (start-up or the first steps, depending on the machine) and mid-run (once a
run has logged rows). Every case must end with exit 130 (SIGINT) or 143 (SIGTERM) and no
traceback; a run stopped mid-way leaves its checkpoint and an ``interrupted`` summary, a sweep
leaves no run going on after it. Each command is started in a session of its own and signalled
alone (``kill PID``, not the group), the harder case: the command must pass the signal on to
what it started.

The default suite runs the start-up and mid-run cases of the runner and the sweep; the rest
(2 s, reproductions, every combination) are marked ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .harness import REPO

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
ENV = dict(os.environ, OMP_NUM_THREADS="1", COMPZOO_PROGRESS_S="0")
ENV["PYTHONPATH"] = os.pathsep.join([str(REPO), ENV.get("PYTHONPATH", "")])

SWEEP = """
name = "long"
[base]
problem = "quadratic"
nodes = 4
iters = 10000000
log_every = 50
[[methods]]
algorithm = "ef21"
[grid]
compressor = ["topk:k=2"]
step_mult = [1, 2, 4, 8]
[select]
rule = "min_final"
"""


def _run(tmp: Path) -> list[str]:
    out = str(tmp / "r")
    return ["algorithms.run", "ef21", "--compressor", "topk:k=2", "--nodes", "4",
            "--iters", "10000000", "--log-every", "50", "--quiet", "--out", out]  # fmt: skip


def _sweep(tmp: Path) -> list[str]:
    (tmp / "long.toml").write_text(SWEEP)
    return ["experiments.sweep", str(tmp / "long.toml"), "--out", str(tmp / "sw"), "--jobs", "2",
            "--quiet"]  # fmt: skip


def _reproduce(tmp: Path) -> list[str]:
    return ["experiments.reproduce", "3pc-quadratic", "--only", "nodes=10", "--jobs", "2",
            "--quiet", "--out", str(tmp / "rep")]  # fmt: skip


COMMANDS = {"run": _run, "sweep": _sweep, "reproduce": _reproduce}


def _histories(tmp: Path) -> list[Path]:
    return [p for p in tmp.rglob("history.csv") if "checkpoint" not in p.parts]


def _logged(tmp: Path) -> bool:
    """Some run of the command has logged a few rows."""
    return any(len(p.read_bytes().splitlines()) > 3 for p in _histories(tmp))


def _children_gone(tmp: Path, limit: float = 20.0) -> None:
    """No process still writes a history under ``tmp`` (the runs stopped with the command)."""
    sizes = None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        now = {p: p.stat().st_size for p in _histories(tmp)}
        if now == sizes:
            return
        sizes = now
        time.sleep(1.0)
    raise AssertionError("runs kept going after the command stopped")


def signal_at(kind: str, when: str, signum: int, tmp: Path) -> tuple[int, str]:
    """Start ``kind``, send ``signum`` at ``when`` ("0.5", "2" seconds, or "mid": once a run
    logged rows), and return its exit status and output."""
    argv = COMMANDS[kind](tmp)
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv], cwd=tmp, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        if when == "mid":
            deadline = time.monotonic() + 180
            while not _logged(tmp):
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "no run logged rows in 180 s"
                time.sleep(0.05)
        else:
            time.sleep(float(when))
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, output


CASES = [
    (kind, when, signum)
    for kind in COMMANDS
    for when in ("0.5", "2", "mid")
    for signum in (signal.SIGINT, signal.SIGTERM)
]
FAST = {("run", "0.5"), ("run", "mid"), ("sweep", "0.5")}
HEAVY = {("sweep", "mid")}  # CI runs these after the default suite (its 8-minute budget)


def _marks(kind: str, when: str):
    if (kind, when) in FAST:
        return ()
    return pytest.mark.heavy if (kind, when) in HEAVY else pytest.mark.slow


@pytest.mark.parametrize(
    ("kind", "when", "signum"),
    [pytest.param(k, w, s, marks=_marks(k, w)) for k, w, s in CASES],
    ids=[
        f"{k}-{w}s-{signal.Signals(s).name}" if w != "mid" else f"{k}-mid-{signal.Signals(s).name}"
        for k, w, s in CASES
    ],  # fmt: skip
)
def test_a_signal_at_any_moment_exits_cleanly(tmp_path, kind, when, signum):
    code, output = signal_at(kind, when, signum, tmp_path)
    assert "Traceback" not in output, output
    assert code == EXIT[signum], (code, output)
    name = signal.Signals(signum).name
    assert name in output, output  # one line says which signal stopped it
    if when == "0.5":
        assert "while starting; nothing was run" in output, output
    if when != "mid":
        return
    _children_gone(tmp_path)
    if kind == "run":
        summary = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert summary["reason"] == "interrupted" and summary["signal"] == name
        assert (tmp_path / "r" / "checkpoint" / "meta.json").is_file()
    else:
        folder = tmp_path / ("sw" if kind == "sweep" else "rep")
        reasons = [
            json.loads(p.read_text())["reason"] for p in (folder / "runs").glob("*/summary.json")
        ]
        assert reasons and set(reasons) <= {"interrupted", "completed", "tolerance", "diverged",
                                            "unstable", "max_bits"}, reasons  # fmt: skip
        assert "interrupted" in reasons
        assert (folder / "summary.csv").is_file()  # the tables are written on the way out
