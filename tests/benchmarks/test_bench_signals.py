"""``python -m benchmarks`` stopped by SIGINT or SIGTERM while it runs: exit 130 or 143, no
traceback, the partial results in ``--out``, and none of the processes it started left behind.
Each run is stopped at its first progress line (or its first child process), so each test takes
the command's start-up and a few seconds more.

The processes a part started are frozen (SIGSTOP) before the signal: one the benchmark fails to
kill then stays, stopped, instead of finishing its work and leaving unseen."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT = 120  # seconds: a safety net for a stuck run, not a timing assertion


class Bench:
    """``python -m benchmarks --quick ARGS --out DIR`` in a session of its own, its stderr read
    line by line."""

    def __init__(self, out: Path, *args: str) -> None:
        self.tmp = out.parent / "tmp"  # the run's TMPDIR
        self.tmp.mkdir()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(self.tmp)}
        cmd = [sys.executable, "-m", "benchmarks", "--quick", *args, "--out", str(out)]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)

    def wait_for(self, text: str) -> str:
        """The first stderr line containing ``text`` (fails if the run ends first)."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.err)
                continue
            if text in line:
                return line
        raise AssertionError(f"no {text!r} on stderr: {''.join(self.err)}")

    def finish(self) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)
        self.proc.stdout.close()
        return code, "".join(self.err)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> bytes | None:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None


def _before_exec(bench: Bench) -> bool:
    """Whether a child of the benchmark is still between its fork and its exec. Python starts
    a process with vfork: until the child execs, the parent waits in the call, so a child
    frozen there would hold the benchmark itself, signal handlers included. Such a child
    still shows its parent's command line (the same memory)."""
    own = _cmdline(bench.proc.pid)
    return any(_cmdline(c) == own for c in _children().get(bench.proc.pid, []))


def wait_for_descendants(bench: Bench) -> list[int]:
    """The processes the benchmark has started, once none of its children is mid-start."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        kids = descendants(bench.proc.pid)
        if kids and not _before_exec(bench):
            return kids
        assert bench.proc.poll() is None, "".join(bench.err)
        time.sleep(0.05)
    raise AssertionError("the benchmark started no process")


def freeze(pids: list[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGSTOP)


def assert_gone(pids: list[int]) -> None:
    """Every one of ``pids`` has ended (a killed process whose parent is gone is reaped by
    init; the bound is a safety net). Any left are killed."""
    deadline = time.monotonic() + 30
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if running(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, "processes left behind"


def _partial(out: Path, name: str) -> dict:
    doc = json.loads((out / "benchmarks.json").read_text())
    assert doc["status"].startswith(f"INTERRUPTED by {name}")
    assert f"INTERRUPTED by {name}" in (out / "benchmarks.md").read_text()
    return doc


def test_sigint_at_the_first_case(tmp_path):
    out = tmp_path / "out"
    bench = Bench(out, "--only", "iterations")
    bench.wait_for("[1/5] iterations")
    os.kill(bench.proc.pid, signal.SIGINT)
    code, err = bench.finish()
    assert code == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("benchmarks: interrupted by SIGINT during ")
    doc = _partial(out, "SIGINT")
    assert doc["parts_done"] == [] and doc["bandwidth"]["best"] > 0


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_sigterm_after_a_case_keeps_its_rows(tmp_path):
    out = tmp_path / "out"
    bench = Bench(out, "--only", "iterations")
    bench.wait_for("[2/5] iterations")  # the first case's rows are written by now
    os.kill(bench.proc.pid, signal.SIGTERM)
    code, err = bench.finish()
    assert code == 143, err
    assert "Traceback" not in err
    assert "interrupted by SIGTERM during iterations (1 of 5 cases done)" in err
    doc = _partial(out, "SIGTERM")
    assert doc["raw"]["iterations"] and "case" in doc["raw"]["iterations"][0]


def _stop_with_children(tmp_path, part: str, sig: int) -> None:
    """Start ``--only PART``, freeze the processes it has started, send ``sig``: the command
    exits with 128 + sig, no traceback, partial results, and none of them left behind."""
    out = tmp_path / "out"
    bench = Bench(out, "--only", part)
    kids: list[int] = []
    try:
        bench.wait_for("[1/")
        kids = wait_for_descendants(bench)
        freeze(kids)
        os.kill(bench.proc.pid, sig)
        code, err = bench.finish()
        assert code == 128 + sig, err
        assert "Traceback" not in err
        _partial(out, signal.Signals(sig).name)
        assert_gone(kids)
        assert not [p.name for p in bench.tmp.iterdir() if p.name.startswith("compzoo-")]
    finally:
        for p in kids:  # whatever happened above, nothing of this test stays
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def test_sigterm_stops_the_memory_processes(tmp_path):
    # the fork server and its first children, in a session of their own
    _stop_with_children(tmp_path, "memory", signal.SIGTERM)


def test_sigint_stops_the_scale_ranks(tmp_path):
    _stop_with_children(tmp_path, "scale", signal.SIGINT)
