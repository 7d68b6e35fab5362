"""The processes a sweep's runs go in: their environment (one thread each, the repository on
``PYTHONPATH``) and a pool of fork servers (:mod:`experiments.zygote`), each forking one run at a
time, with the runs in flight tracked so that a signal can be passed on to them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from experiments.zygote import READY

log = logging.getLogger("compzoo.sweep")

ROOT = Path(__file__).resolve().parents[1]
FORK_ENV = "COMPZOO_SWEEP_FORK"  # "0": every run a plain subprocess (no fork server)


#: The thread count of each run's process: ``--jobs`` runs share the cores.
RUN_THREADS = 1


def _env() -> dict[str, str]:
    """The environment of every run's process (and of the fork servers)."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(RUN_THREADS)
    env["MKL_NUM_THREADS"] = str(RUN_THREADS)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return env


class _Servers:
    """A pool of fork servers (:mod:`experiments.zygote`), one per job, started lazily; a run
    takes one, runs in a child forked from it and gives it back. Where a server cannot start
    or dies (or ``os.fork`` is missing), that run is a plain subprocess instead."""

    def __init__(self, size: int, env: dict[str, str]) -> None:
        self._env = env
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._all: list[subprocess.Popen] = []
        # Re-entrant: the signal handler (main thread) may take it while the main thread holds it.
        self._lock = threading.RLock()
        self._size = size if hasattr(os, "fork") and os.environ.get(FORK_ENV) != "0" else 0
        self._started = 0
        self.stopping = threading.Event()  # set on a signal: no run starts any more
        self._signum = 0
        self._flight: dict[int, tuple[str, Path, int]] = {}  # pid -> (name, run folder, iters)

    def started(self, pid: int, watch: tuple[str, Path, int] | None) -> None:
        """A run's process ``pid`` is running; it gets the sweep's signal if one came."""
        with self._lock:
            self._flight[pid] = watch or ("run", Path("."), 0)
            signum = self._signum
        if signum:
            _kill(pid, signum)  # it began as the sweep stopped

    def ended(self, pid: int) -> None:
        with self._lock:
            self._flight.pop(pid, None)

    def stop(self, signum: int) -> None:
        """Start no run any more and pass ``signum`` on to every run in flight."""
        with self._lock:
            self._signum = self._signum or signum
            self.stopping.set()
            pids = list(self._flight)
        for pid in pids:
            _kill(pid, signum)

    def in_flight(self) -> list[tuple[str, int | None, int]]:
        """``(name, last logged iteration or None, iterations)`` of each run in flight."""
        with self._lock:
            watched = list(self._flight.values())
        return [(name, _last_iter(path / "history.csv"), total) for name, path, total in watched]

    def take(self) -> subprocess.Popen | None:
        """A free server (started if none is and fewer than ``size`` are alive), or None: use
        a subprocess. There are as many servers as job threads, so a wait always ends."""
        with self._lock:
            if not self._free.empty() or self._started >= self._size:
                wait = True
            else:
                self._started += 1
                wait = False
        if wait:
            return self._free.get() if self._size else None
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.zygote"], env=self._env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1,
        )  # fmt: skip
        with self._lock:
            self._all.append(proc)
        if proc.stdout.readline().strip() != READY:
            log.warning("the sweep's fork server did not start; runs use subprocesses")
            with self._lock:
                self._started -= 1
                self._size = 0
            return None
        return proc

    def give(self, proc: subprocess.Popen, alive: bool) -> None:
        """Hand ``proc`` back; a server that died is replaced by the next :meth:`take`."""
        if alive:
            self._free.put(proc)
        else:
            with self._lock:
                self._started -= 1

    def close(self) -> None:
        for proc in self._all:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()
        for proc in self._all:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _last_iter(path: Path) -> int | None:
    """The iteration of the last complete row of a run's ``history.csv`` (None: none yet)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 4096))
            tail = fh.read()
    except OSError:
        return None
    rows = tail.split(b"\n")[:-1]  # the text after the last newline may be half a row
    try:
        return int(rows[-1].split(b",", 1)[0]) if rows else None
    except ValueError:
        return None


def _serve(
    proc: subprocess.Popen,
    argv: list[str],
    stderr: Path,
    servers: _Servers | None = None,
    watch: tuple[str, Path, int] | None = None,
) -> int | None:
    """One run forked from ``proc``; its exit status, or None when the server is gone. The
    server names the child's pid first, which ``servers`` tracks while the run goes."""
    pid = None
    try:
        proc.stdin.write(json.dumps({"argv": argv, "stderr": str(stderr)}) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline() or "{}")
        if "pid" in answer:
            pid = int(answer["pid"])
            if servers is not None:
                servers.started(pid, watch)
            answer = json.loads(proc.stdout.readline() or "{}")
        return int(answer["status"]) if "status" in answer else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        if pid is not None and servers is not None:
            servers.ended(pid)
