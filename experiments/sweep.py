"""``python -m experiments.sweep CONFIG.toml [--out DIR] [--jobs N] [--quiet]``: run a sweep.

The config's format is :mod:`experiments.config` (``--help`` prints it with an example;
``examples/sweep.toml`` is a small one).

Every run of the config is one ``python -m algorithms.run ... --quiet --out OUT/runs/<run_id>``
in a process of its own (isolated, killable), ``--jobs`` of them at once, each with
``OMP_NUM_THREADS=1`` so that parallel runs do not fight over cores. The processes are forked
from one fork server per job (:mod:`experiments.zygote`) that has imported the runner already,
so a run does not pay the 1.3 s of imports again; each child starts from the same freshly
imported state and gives the same history as a run in a new interpreter.
``COMPZOO_SWEEP_FORK=0`` (or a platform without ``fork``) starts every run as a plain
``python -m algorithms.run`` subprocess instead. The sweep folder holds:

- ``sweep.json``: the resolved config (``SweepConfig.to_dict()``; ``load_config`` reads it back);
- ``runs/<run_id>/``: the runner's own outputs, plus ``stderr.txt`` for a failed run;
- ``summary.csv``: one row per run: ``run_id``, ``status``, every parameter, ``iters_run``,
  ``gamma``, the final metrics and ``bits_to_tol`` (when ``[select]`` has a ``tol``);
- ``best.csv``: one row per group, the multiplier chosen by ``[select]`` and ``status``
  ``chosen``; a group where no multiplier scores (every run diverged, failed or missed the
  tolerance) has an empty ``step_mult`` and a status saying why (``all diverged``, ``none
  reached tol``, ...; see ``experiments.select.best``), which the command also prints.

Status: a run is finished when its folder has a readable ``summary.json`` whose stop reason is
not ``interrupted``; its status is that reason (``completed``, ``diverged``, ``unstable``,
``tolerance``, ``max_bits``). Exit status 3 (diverged) is a legitimate outcome of a too-large
multiplier. A run stopped by SIGINT/SIGTERM (exit 130/143, its checkpoint written) is
``interrupted``. Any other failure is ``failed``: the exit status and the stderr tail go to
``stderr.txt`` and the ``error`` column, and the sweep goes on. ``missing`` marks a run not
attempted yet. SIGINT (Ctrl-C) or SIGTERM, sent to the sweep alone or to its process group,
stops the sweep: no new run starts, the signal is passed on to the runs in flight, which stop
after their step with a checkpoint, the tables are written, and the sweep exits 130 (SIGINT) or
143 (SIGTERM); rerunning the same command continues the stopped runs. A signal while the sweep
starts (its imports, the config's checks) exits the same way with nothing run.

Progress: a bar on stderr counts the finished runs and names the runs in flight with their
last logged iteration (``EF21 m4 s0: 6000/20000``); where stderr is not a terminal (a log file,
a batch job), the same as one line every ``COMPZOO_PROGRESS_S`` seconds (default 30).

Pruning (``prune``, ``--prune``; the ``pool`` executor, rule ``bits_to_tol``): the papers'
protocol keeps, per group, the multiplier with the fewest bits to ``tol``, so a run need not go
on once it has spent more than the group's best so far. The runs then start largest multiplier
first (the fastest to reach ``tol`` or to diverge), and each run is given the runner's
``--max-bits`` budget: the least pooled bits to ``tol`` over the group's multipliers whose runs
have all finished (``mean`` or ``median`` over seeds, the pooling of whoever selects; the
budget is that value for one seed or an odd number of seeds under ``median``, twice it for an
even number, ``k`` times it for ``k`` seeds under ``mean``: a seed above it cannot be part of a
winning pool). A run cut there ends with status ``max_bits`` and never reached ``tol``: exactly
what the unpruned run would score against the winner, so the chosen multiplier, its pooled
value and every value at or below it are those of the unpruned sweep; only runs that lose
(and the losing seeds of the winner, which then count as not reached) are shorter. This
assumes iteration 0 costs the same bits in every run of a group (a fixed-size first message);
a group whose finished runs differ there is not pruned.

Resuming: running the same config into the same folder skips finished runs and never touches
their files. A run the runner stopped on SIGINT/SIGTERM (reason ``interrupted``, its checkpoint
written) is continued with ``--resume`` along the trajectory an uninterrupted run takes (with
the budget a pruned sweep gives it now); any other unfinished folder (killed, failed, or a
checkpoint that does not resume) is the sweep's own and is rerun from scratch. A folder
holding a different config, or files that are not a sweep, is refused.
The tables are rebuilt from all run folders at the end, so a resumed sweep gives complete ones.
``sweep.lock`` holds the process id of a live sweep; a second one on the same folder is refused
(a lock left by a killed sweep is ignored). A sweep killed with SIGKILL leaves its runs in
flight to finish on their own (their fork servers end after them).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm

from experiments.config import RunSpec, Selection, SweepConfig, load_config
from experiments.select import (
    HISTORY_COLUMNS,
    POOLS,
    best,
    bits_to_tol,
    group_key,
    pool_seeds,
    run_score,
)
from experiments.zygote import READY
from streams import interrupts

log = logging.getLogger("compzoo.sweep")

ROOT = Path(__file__).resolve().parents[1]
STDERR_TAIL = 4000
EXECUTORS = ("pool", "local", "slurm")
PRUNE_POOLS = POOLS  # how seeds are pooled by the selection a pruned sweep serves
FORK_ENV = "COMPZOO_SWEEP_FORK"  # "0": every run a plain subprocess (no fork server)
# Where no progress bar is drawn (stderr not a terminal), a progress line every this many seconds.
PROGRESS_ENV, PROGRESS_S = "COMPZOO_PROGRESS_S", 30.0


class SweepStopped(interrupts.Stopped):  # noqa: N818 (a signal, not an error)
    """The sweep stopped on SIGINT/SIGTERM: no queued run started, the runs in flight stopped
    with their checkpoints, and the tables were written; ``signum`` says which signal."""


def run_sweep(
    config: SweepConfig | str | Path | dict,
    out: str | Path,
    jobs: int = 1,
    progress: bool = True,
    executor: str = "pool",
    cluster: dict | None = None,
    prune: str | None = None,
) -> Path:
    """Run every unfinished run of ``config`` into ``out`` and write the tables.

    Args:
        config: a ``SweepConfig``, or anything ``load_config`` reads.
        out: the sweep folder (created; reused when it holds the same config).
        jobs: runs at once (each one subprocess).
        progress: show an overall progress bar on stderr.
        executor: ``pool`` (processes of this machine), ``local`` (submitit's local executor)
            or ``slurm`` (a SLURM job array, :mod:`experiments.cluster`).
        cluster: the job options of ``local``/``slurm``: ``partition``, ``time_min``,
            ``gpus_per_run``, ``tasks_per_run``, ``array_parallelism``, ``signal_delay_s``.
        prune: ``"mean"`` or ``"median"``: cut each run at its group's best bits to ``tol`` so
            far, seeds pooled that way (see the module doc); None (default): no pruning.

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ValueError: ``jobs`` < 1, a run the runner's own checks refuse (found before
            anything starts: :mod:`experiments.validate`), ``out`` holds a different sweep or
            non-sweep files, another live sweep holds ``out``, or ``prune`` is unknown or cannot
            apply (not the ``pool`` executor, or a rule other than ``bits_to_tol``).
    """
    cfg = config if isinstance(config, SweepConfig) else load_config(config)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if prune is not None:
        if prune not in PRUNE_POOLS:
            raise ValueError(f"prune must be one of {', '.join(PRUNE_POOLS)}, got {prune!r}")
        if executor != "pool":
            raise ValueError(f"pruning needs the pool executor, not {executor!r}")
        if cfg.select.rule != "bits_to_tol":
            raise ValueError(
                f"pruning needs select.rule 'bits_to_tol' (fewest bits), not {cfg.select.rule!r}"
            )
    from experiments.validate import check_grid, resolve_runs

    if isinstance(config, SweepConfig):
        check_grid(cfg)  # load_config checks the configs it reads
    resolve_runs(cfg, device_here=executor != "slurm")
    out = Path(out)
    try:
        _claim(out, cfg)
    except OSError as e:  # a folder that cannot be made or written at all: a bad --out
        where = e.filename or str(out)
        raise ValueError(
            f"cannot write the sweep folder {str(where)!r}: {e.strerror or e}; give a writable "
            "--out"
        ) from None
    with _lock(out):
        if executor == "pool":
            signum = _run_all(cfg, out, jobs, progress, prune)
        else:
            signum = 0
            _run_jobs(cfg, out, executor, cluster or {}, progress)
        write_tables(cfg, out)
    if signum:
        raise SweepStopped(signum)
    return out


def _run_all(
    cfg: SweepConfig, out: Path, jobs: int, progress: bool, prune: str | None = None
) -> int:
    """Every unfinished run, ``jobs`` at once; the signal that stopped the sweep, or 0.

    SIGINT or SIGTERM (to the sweep alone or to its process group) stops the sweep: no queued
    run starts, the signal is passed on to every run in flight (which stops after its step
    with a checkpoint; a run that received it from the group too counts it once), and this
    returns once they have all ended."""
    specs = cfg.runs()
    todo = [s for s in specs if not _finished(out / "runs" / s.run_id)]
    budget = _Budget(cfg, specs, out, prune) if prune is not None else None
    if budget is not None:
        todo.sort(key=lambda s: -float(s.params.get("step_mult", 1.0)))  # stable: config order
    env = _env()
    bar = tqdm(
        total=len(specs),
        initial=len(specs) - len(todo),
        desc=cfg.name,
        unit="run",
        file=sys.stderr,
        disable=not progress or None,
    )
    lines = _ProgressLines(cfg.name, len(specs), progress and bar.disable)
    failed = 0
    servers = _Servers(min(jobs, len(todo)), env)
    done = len(specs) - len(todo)
    with _Stopper(servers) as stopper:
        try:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = {
                    pool.submit(_execute, s, out / "runs" / s.run_id, env, servers, budget)
                    for s in todo
                }
                while futures:
                    finished, futures = wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        if fut.result() == "failed":
                            failed += 1
                            bar.set_postfix(failed=failed)
                        done += 1
                        bar.update(1)
                    flight = servers.in_flight()
                    if not bar.disable:
                        bar.set_postfix_str(_flight_text(flight, failed), refresh=True)
                    lines.tick(done, flight, failed)
        finally:
            servers.close()
            bar.close()
    return stopper.signum


def _flight_text(flight: list[tuple[str, int | None, int]], failed: int) -> str:
    """The runs in flight as ``m4 s0: 6000/20000`` items (and the failed count)."""
    parts = [f"failed {failed}"] if failed else []
    for name, t, total in flight[:4]:
        parts.append(f"{name}: {'-' if t is None else t}/{total}")
    if len(flight) > 4:
        parts.append(f"+{len(flight) - 4} more")
    return ", ".join(parts)


class _ProgressLines:
    """Where no bar is drawn: a line on stderr every ``COMPZOO_PROGRESS_S`` seconds (30)."""

    def __init__(self, name: str, total: int, on: bool) -> None:
        try:
            self.every = float(os.environ.get(PROGRESS_ENV, PROGRESS_S))
        except ValueError:
            self.every = PROGRESS_S
        self.on = on and self.every > 0
        self.name, self.total = name, total
        self.start = self.last = time.monotonic()

    def tick(self, done: int, flight: list, failed: int) -> None:
        now = time.monotonic()
        if not self.on or now - self.last < self.every:
            return
        self.last = now
        what = _flight_text(flight, failed)
        sys.stderr.write(
            f"{self.name}: {done}/{self.total} runs done, {now - self.start:.0f} s"
            + (f"; in flight: {what}" if what else "")
            + "\n"
        )
        sys.stderr.flush()


class _Stopper:
    """SIGINT/SIGTERM handlers for the time the runs go (main thread only): the first signal
    stops new runs and is passed on to the runs in flight, as is every later one (a run stops
    at once on a second signal, keeping its last checkpoint)."""

    def __init__(self, servers: _Servers) -> None:
        self.servers = servers
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Stopper:
        if threading.current_thread() is threading.main_thread():
            interrupts.release()
            self._old = {s: signal.signal(s, self._handle) for s in interrupts.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)

    def _handle(self, signum: int, frame) -> None:
        if not self.signum:
            self.signum = signum
            sys.stderr.write(
                f"\n{signal.Signals(signum).name}: the sweep stops; no new run starts, the runs "
                "in flight stop after their step with a checkpoint\n"
            )
            sys.stderr.flush()
        self.servers.stop(signum)


def _run_jobs(cfg: SweepConfig, out: Path, kind: str, opts: dict, progress: bool) -> None:
    """The unfinished runs as submitit jobs (:mod:`experiments.cluster`); a run that ends
    without a summary gets ``stderr.txt`` from its job's log."""
    from experiments import cluster

    specs = cfg.runs()
    todo = [s for s in specs if not _finished(out / "runs" / s.run_id)]
    bar = tqdm(total=len(specs), initial=len(specs) - len(todo), desc=cfg.name, unit="run",
               file=sys.stderr, disable=not progress)  # fmt: skip
    try:
        cluster.submit_all(todo, out, _env(), kind, opts, bar.update)
    finally:
        bar.close()
    book = json.loads((out / "jobs.json").read_text()) if (out / "jobs.json").is_file() else {}
    for s in todo:
        run_dir = out / "runs" / s.run_id
        if _finished(run_dir):
            continue
        job = book.get(s.run_id, "?")
        logs = sorted((out / "jobs").glob(f"{job}_*log.err")) if job != "?" else []
        tail = logs[-1].read_text(errors="replace")[-STDERR_TAIL:] if logs else "(no log)"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "stderr.txt").write_text(f"job {job} ended without a summary\n{tail}")
        log.warning("run %s failed (job %s); its log: %s", s.run_id, job, logs[-1] if logs else "-")


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


@contextlib.contextmanager
def _lock(out: Path):
    """Refuse a second live sweep on the same folder (it would restart the first's runs)."""
    path = out / "sweep.lock"
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid != os.getpid() and _alive(pid):
        raise ValueError(f"another sweep (pid {pid}) is running in {str(out)!r}; wait for it")
    path.write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def table(cfg: SweepConfig, out: str | Path, selection: Selection | None = None) -> list[dict]:
    """The summary rows of a sweep folder, one per run of ``cfg`` in run order.

    Args:
        cfg: the sweep's config.
        out: the sweep folder.
        selection: sets the ``bits_to_tol`` column's metric and tol (default ``cfg.select``);
            the column is present only when the tol is set.
    """
    sel = selection or cfg.select
    out = Path(out)
    rows = []
    for spec in cfg.runs():
        rows.append(_row(spec, out / "runs" / spec.run_id, sel))
    return rows


def write_tables(cfg: SweepConfig, out: str | Path) -> tuple[Path, Path]:
    """Rewrite ``summary.csv`` and ``best.csv`` of a sweep folder from its run folders."""
    out = Path(out)
    rows = table(cfg, out)
    summary, best_csv = out / "summary.csv", out / "best.csv"
    _write_csv(summary, rows)
    _write_csv(best_csv, best(rows, cfg.select))
    return summary, best_csv


def read_summary(path: str | Path) -> dict | None:
    """A run folder's ``summary.json``, or ``None`` if it is absent or unreadable."""
    return _summary(Path(path))


def _claim(out: Path, cfg: SweepConfig) -> None:
    """Make ``out`` this config's sweep folder, or refuse if it is something else."""
    record = out / "sweep.json"
    want = json.loads(json.dumps(cfg.to_dict()))
    if record.is_file():
        try:
            have = json.loads(record.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(
                f"{str(record)!r} is unreadable ({e}): {str(out)!r} is not a sweep folder this "
                "command can resume; choose another --out"
            ) from None
        if not isinstance(have, dict):
            have = {}
        if have != want:
            diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            raise ValueError(
                f"{str(out)!r} holds a sweep of a different config (differs in: "
                f"{', '.join(diff)}); choose another --out or delete that folder"
            )
        return
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(
            f"{str(out)!r} exists and is not a sweep folder (no sweep.json); choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(want, indent=2) + "\n")
    tmp.replace(record)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return env


def _execute(
    spec: RunSpec,
    run_dir: Path,
    env: dict[str, str],
    servers: _Servers | None = None,
    budget: _Budget | None = None,
) -> str:
    """One run, forked from a fork server or in a subprocess; its status (``failed`` leaves
    ``stderr.txt``). With ``budget``, the run gets its group's bits budget as it starts. A run
    interrupted earlier is continued from its checkpoint, or run afresh if that fails;
    ``missing`` when the sweep is stopping and the run did not start."""
    if servers is not None and servers.stopping.is_set():
        return "missing"
    try:
        return _execute_one(spec, run_dir, env, servers, budget)
    except OSError as e:  # the sweep's own files (stderr.txt, a run folder): a full disk
        where = f" {e.filename!r}" if e.filename else ""
        log.warning("run %s: cannot write%s: %s", spec.run_id, where, e.strerror or e)
        return "failed"


def _execute_one(
    spec: RunSpec, run_dir: Path, env: dict[str, str], servers: _Servers | None,
    budget: _Budget | None,
) -> str:  # fmt: skip
    cap = budget.max_bits(spec) if budget is not None else None
    extra = ["--max-bits", repr(cap)] if cap is not None else []
    watch = (_short_name(spec), run_dir, int(spec.params.get("iters", 1000)))
    if _interrupted(run_dir):
        code, stderr = _launch(
            ["--resume", str(run_dir), "--quiet", *extra], env, servers, watch=watch
        )
        if code is None:
            return "missing"
        summary = _summary(run_dir)
        if code in (0, 3) and summary is not None and _finished(run_dir):
            return str(summary.get("reason", "completed"))
        if code in INTERRUPTED_EXIT and _interrupted(run_dir):
            return "interrupted"  # stopped again: its newer checkpoint is kept for the next sweep
        if _stopped_before_start(code, servers):
            return "interrupted"  # its checkpoint is as it was
        log.warning("run %s did not resume (exit status %s); running it afresh", spec.run_id, code)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # the sweep's own unfinished run: start it afresh
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [*spec.argv, "--quiet", "--out", str(run_dir), "--overwrite", *extra]
    code, stderr = _launch(argv, env, servers, run_dir, watch=watch)
    if code is None:
        return "missing"
    summary = _summary(run_dir)
    if code in (0, 3) and summary is not None:
        return str(summary.get("reason", "completed"))
    if code in INTERRUPTED_EXIT and _interrupted(run_dir):
        return "interrupted"  # its checkpoint is there: the next sweep continues it
    if _stopped_before_start(code, servers):
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: as if never started
        return "missing"
    run_dir.mkdir(parents=True, exist_ok=True)
    tail = stderr[-STDERR_TAIL:]
    (run_dir / "stderr.txt").write_text(f"exit status {code}\n{tail}")
    last = tail.strip().splitlines()[-1] if tail.strip() else "(no stderr)"
    log.warning("run %s failed (exit status %d): %s", spec.run_id, code, last)
    return "failed"


def _short_name(spec: RunSpec) -> str:
    """A run's name in progress lines: its label and what varies (``EF21 m4 s0``)."""
    parts = [str(spec.params.get("label", spec.params.get("algorithm", "run")))]
    mult, seed = spec.params.get("step_mult"), spec.params.get("seed")
    if mult is not None:
        parts.append(f"m{float(mult):g}")
    if seed is not None:
        parts.append(f"s{seed}")
    return " ".join(parts)


def _stopped_before_start(code: int | None, servers: _Servers | None) -> bool:
    """A run that exited on the sweep's signal before its first step (nothing written)."""
    return code in INTERRUPTED_EXIT and servers is not None and servers.stopping.is_set()


def _launch(
    argv: list[str],
    env: dict[str, str],
    servers: _Servers | None,
    fresh: Path | None = None,
    watch: tuple[str, Path, int] | None = None,
) -> tuple[int | None, str]:
    """``algorithms.run`` with ``argv``, forked from a fork server or in a subprocess: (exit
    status, stderr). If the server dies under it, ``fresh`` (the folder of a run started from
    scratch) is removed and the run goes again as a subprocess, unless the sweep is stopping:
    then the status is None."""
    proc = servers.take() if servers is not None else None
    if servers is not None and servers.stopping.is_set():
        if proc is not None:
            servers.give(proc, alive=True)
        return None, ""  # the sweep began to stop while this run waited for its server
    if proc is not None:
        fd, tmp = tempfile.mkstemp(prefix="compzoo-run-", suffix=".stderr")
        os.close(fd)
        try:
            code = _serve(proc, argv, Path(tmp), servers, watch)
            stderr = Path(tmp).read_text(errors="replace")
        finally:
            Path(tmp).unlink(missing_ok=True)
        servers.give(proc, alive=code is not None)
        if code is not None:
            return code, stderr
        if fresh is not None and fresh.exists():
            shutil.rmtree(fresh)  # the server died under the run: run it afresh below
    if servers is not None and servers.stopping.is_set():
        return None, ""
    child = subprocess.Popen(
        [sys.executable, "-m", "algorithms.run", *argv], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, errors="replace",
    )  # fmt: skip
    if servers is not None:
        servers.started(child.pid, watch)
    try:
        _, stderr = child.communicate()
    finally:
        if servers is not None:
            servers.ended(child.pid)
    return child.returncode, stderr


class _Budget:
    """The bits budget of a pruned sweep's next run (module doc, "Pruning").

    A group's finished runs are read once each (a finished run never changes) under a lock:
    the pool's threads ask as their runs start.
    """

    def __init__(self, cfg: SweepConfig, specs: list[RunSpec], out: Path, pool: str) -> None:
        self._sel = cfg.select
        self._out = out
        self._pool = pool
        self._groups: dict[tuple, dict[float, list[str]]] = {}
        for s in specs:
            by_mult = self._groups.setdefault(group_key(s.params), {})
            by_mult.setdefault(float(s.params.get("step_mult", 1.0)), []).append(s.run_id)
        self._read: dict[str, tuple[float, float] | None] = {}  # run_id -> (bits, bits at 0)
        self._lock = threading.Lock()

    def max_bits(self, spec: RunSpec) -> float | None:
        """The runner's ``--max-bits`` for ``spec`` (the smaller of the budget and its own),
        or None: no multiplier of its group has all its runs finished with a finite score, or
        the group's runs differ in their iteration-0 bits."""
        by_mult = self._groups[group_key(spec.params)]
        with self._lock:
            pooled, starts = [], set()
            for ids in by_mult.values():
                seen = [self._score(i) for i in ids]
                if any(v is None for v in seen):
                    continue  # a run of this multiplier has not finished yet
                starts |= {v[1] for v in seen}
                pooled.append(pool_seeds([v[0] for v in seen], self._pool))
        best_so_far = min(pooled, default=math.inf)
        if not math.isfinite(best_so_far) or len(starts) > 1:
            return None
        k = len(by_mult[float(spec.params.get("step_mult", 1.0))])
        factor = k if self._pool == "mean" else (1 if k % 2 else 2)
        cap = factor * best_so_far + 1.0  # the runner stops at >= cap: a tie still reaches tol
        own = spec.params.get("max_bits")
        return min(cap, float(own)) if own not in (None, "") else cap

    def _score(self, run_id: str) -> tuple[float, float] | None:
        """(bits to tol, bits at iteration 0) of a finished run (``inf``: did not score), or
        None while it has not finished."""
        if run_id in self._read:
            return self._read[run_id]
        run_dir = self._out / "runs" / run_id
        summary = _summary(run_dir)
        if summary is None or summary.get("reason") in UNFINISHED_REASONS:
            return None
        rows = _history(run_dir)
        start = float(rows[0]["bits_up"]) if rows and rows[0].get("bits_up") else 0.0
        status = {"status": str(summary.get("reason", "completed"))}
        bits = bits_to_tol(rows, self._sel.metric, self._sel.tol) if rows else None
        value = run_score({**status, "bits_to_tol": bits}, self._sel)
        self._read[run_id] = (value, start)
        return self._read[run_id]


def _summary(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


INTERRUPTED_EXIT = (130, 143)  # the runner's exit status after SIGINT / SIGTERM
EXIT_WRITE_FAILED = 5  # the sweep folder (or a run's files) could not be written: a full disk
INTERRUPTED_MESSAGE = (
    "interrupted: finished runs are kept and runs stopped mid-way kept their checkpoints; "
    "rerun the same command to continue"
)


# Stop reasons of runs that did not end by themselves: stopped by a signal, or by a file they
# could not write (a full disk). The next sweep continues them from their checkpoint.
UNFINISHED_REASONS = ("interrupted", "write_failed")


def _finished(run_dir: Path) -> bool:
    """Whether a run folder holds a run that ended (a summary, not an interruption)."""
    summary = _summary(run_dir)
    return summary is not None and summary.get("reason") not in UNFINISHED_REASONS


def _interrupted(run_dir: Path) -> bool:
    """Whether a run folder holds a run stopped by a signal or a failed write, with a
    checkpoint to go on from."""
    summary = _summary(run_dir)
    return (
        summary is not None
        and summary.get("reason") in UNFINISHED_REASONS
        and (run_dir / "checkpoint" / "meta.json").is_file()
    )


def _row(spec: RunSpec, run_dir: Path, sel: Selection) -> dict[str, Any]:
    row: dict[str, Any] = {"run_id": spec.run_id, "status": "missing"}
    row.update(spec.params)
    summary = _summary(run_dir)
    if summary is None:
        err = run_dir / "stderr.txt"
        if err.is_file():
            lines = err.read_text(errors="replace").strip().splitlines()
            row["status"] = "failed"
            row["error"] = " | ".join([lines[0], lines[-1]] if len(lines) > 1 else lines)
        return row
    row["status"] = str(summary.get("reason", "completed"))
    row["iters_run"] = summary.get("iters")
    row["gamma"] = summary.get("gamma")
    final = summary.get("final", {})
    for col in HISTORY_COLUMNS:
        if col in final:
            row[col] = final[col]
    if sel.tol is not None:
        row["bits_to_tol"] = bits_to_tol(_history(run_dir), sel.metric, sel.tol)
    return row


def _history(run_dir: Path) -> list[dict]:
    path = run_dir / "history.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ";".join(map(str, v))
    return v


def _write_csv(path: Path, rows: list[dict]) -> None:
    cols: dict[str, None] = {}
    for row in rows:
        cols.update(dict.fromkeys(row))
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cols), restval="")
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(v) for k, v in row.items()})
    tmp.replace(path)


HELP_FORMAT = """\
The config (TOML). Top-level keys: name, [base], [[methods]], [grid], [select]; any other key
is refused with the allowed ones named.

  name = "ef21-vs-ef"          # the sweep's name (default: the file's stem): a folder name
  [base]                       # runner flags shared by every run: the flags of
  problem = "quadratic"        #   python -m algorithms.run, without "--" (dashes or underscores)
  nodes = 10
  iters = 200
  problem_opt = { L = 10 }     # a repeatable flag: a table (key = value) or a list of "key=value"
  [[methods]]                  # one table per method (at least one)
  algorithm = "ef21"           #   a registry name (python -m algorithms.run --list)
  label = "EF21"               #   optional: the name in tables and legends
  [[methods]]
  algorithm = "ef-sgd"
  batch_size = 8               #   a method's own flags override [base] for its runs
  [grid]                       # flag = list of values; the runs are methods x product(grid)
  compressor = ["topk:k=1", "randk:k=2"]
  step_mult = { base = 2, from = -2, to = 4 }   # base**e for e = from..to: 0.25, 0.5, ..., 16
  seed = [0, 1, 2]
  [select]                     # how best.csv picks each group's multiplier
  rule = "bits_to_tol"         #   bits_to_tol (fewest uplink bits until metric <= tol) or
  metric = "grad_norm_sq"      #   min_final (lowest final metric); metric: a history.csv column
  tol = 1e-4                   #   needed by bits_to_tol (with min_final: a bits_to_tol column)

The keys are the runner's flag names, singular as the flags are: seed, compressor, step_mult. A
grid key may not also be set in [base] or a method. out, overwrite, quiet, resume and list are
set by the sweep itself. The whole grid is checked before anything runs: the name is one folder
name (letters, digits and ._=+-, not starting with a dot); a key takes at most 10000 values and
a sweep at most 100000 runs; no key may repeat a value as the runner reads it (1, 1.0 and 1e0
are one value) and no two methods may give the same runs; every run's values pass the runner's
own parser and checks, and one run per group is resolved as the runner resolves it (problem
built, data read). A bad key or value exits with status 2 and a message naming the key and the
value, and nothing is written.

The folder (--out, default runs/sweeps/NAME) gets sweep.json (the resolved config), runs/RUN_ID/
(each run's own files), summary.csv (one row per run: status, parameters, final metrics) and
best.csv (one row per group of runs differing only in step_mult and seed: the chosen
multiplier, or an empty one and a status saying why none was chosen, e.g. "all diverged").
Rerunning the same config into the same folder resumes it. Exit status: 0 done, 1 some run
failed (see its stderr.txt) or was interrupted, 2 bad input, 5 the sweep folder could not be
written (a full disk), 130/143 stopped by SIGINT (Ctrl-C) / SIGTERM: no new run started, the
runs in flight stopped with their checkpoints; the same command continues them.
Example: examples/sweep.toml.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.sweep",
        description="Run a sweep of the runner (methods x a grid of flags) and pick each\n"
        "group's best step-size multiplier.",
        epilog=HELP_FORMAT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("config", help="sweep config (TOML)")
    ap.add_argument("--out", default=None, help="sweep folder (default: runs/sweeps/<name>)")
    ap.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs at once (default: CPUs)"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument(
        "--prune",
        action="store_true",
        help="cut each run at its group's best bits to tol so far (select.rule bits_to_tol; "
        "the chosen multipliers and values are unchanged, losing runs are shorter)",
    )
    ap.add_argument("--executor", default="pool", choices=EXECUTORS,
                    help="pool: processes here (default); local: submitit's local executor; "
                    "slurm: a SLURM job array through submitit")  # fmt: skip
    ap.add_argument("--partition", default=None, help="slurm: the partition")
    ap.add_argument("--time-min", type=float, default=None, help="local/slurm: minutes per job")
    ap.add_argument("--gpus-per-run", type=int, default=None, help="local/slurm: GPUs per run")
    ap.add_argument(
        "--tasks-per-run",
        type=int,
        default=None,
        help="local/slurm: processes per run (a torch.distributed group)",
    )
    ap.add_argument(
        "--array-parallelism",
        type=int,
        default=None,
        help="slurm: jobs of the array running at once",
    )
    ap.add_argument(
        "--signal-delay-s",
        type=int,
        default=None,
        help="local/slurm: seconds before the time limit when a job is warned",
    )
    args = ap.parse_args(argv)
    cluster_opts = {k: getattr(args, k) for k in ("partition", "time_min", "gpus_per_run",
                    "tasks_per_run", "array_parallelism", "signal_delay_s")}  # fmt: skip
    bad = [f"--{k.replace('_', '-')} {v}" for k, v in cluster_opts.items()
           if k != "partition" and v is not None and not v > 0]  # fmt: skip
    if bad:
        print(f"error: {bad[0]}: must be > 0", file=sys.stderr)
        return 2
    if args.executor == "pool" and any(v is not None for v in cluster_opts.values()):
        given = next(k for k, v in cluster_opts.items() if v is not None)
        print(f"error: --{given.replace('_', '-')} needs --executor local or slurm",
              file=sys.stderr)  # fmt: skip
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        with interrupts.raising():
            cfg = load_config(args.config)
            out = run_sweep(
                cfg, args.out or Path("runs") / "sweeps" / cfg.name, args.jobs, not args.quiet,
                args.executor, cluster_opts, "mean" if args.prune else None,
            )  # fmt: skip
    except interrupts.Stopped as e:
        print(f"{INTERRUPTED_MESSAGE} ({e})", file=sys.stderr)
        return e.code
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f" {e.filename!r}" if e.filename else ""
        print(f"error: cannot write the sweep folder{where}: {e.strerror or e}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    with (out / "summary.csv").open(newline="") as fh:
        statuses = [r["status"] for r in csv.DictReader(fh)]
    counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
    with (out / "best.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            if not row.get("step_mult"):
                what = ", ".join(row[k] for k in ("label", "compressor") if row.get(k))
                print(f"warning: {what}: no step_mult chosen ({row['status']})", file=sys.stderr)
    if not args.quiet:
        done = ", ".join(f"{n} {s}" for s, n in counts.items())
        print(f"{cfg.name}: {len(statuses)} runs ({done}); tables in {out}")
    return 1 if any(counts.get(s) for s in ("failed", *UNFINISHED_REASONS)) else 0


if __name__ == "__main__":
    sys.exit(main())
