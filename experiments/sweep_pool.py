"""Running a sweep's runs on this machine (the ``pool`` executor): ``--jobs`` at once, each
forked from a fork server or in a subprocess (:mod:`experiments.sweep_servers`), a run stopped
earlier continued from its checkpoint, SIGINT/SIGTERM passed on to the runs in flight, and the
progress shown as a bar or as periodic lines (:mod:`experiments.sweep` describes all three)."""

from __future__ import annotations

import json
import logging
import os
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

from experiments.config import RunSpec, SweepConfig
from experiments.sweep_budget import _Budget
from experiments.sweep_servers import _env, _serve, _Servers
from experiments.sweep_tables import _finished, _interrupted, _summary
from streams import interrupts

log = logging.getLogger("compzoo.sweep")

STDERR_TAIL = 4000  # characters of a failed run's stderr kept in its stderr.txt
# Where no progress bar is drawn (stderr not a terminal), a progress line every this many seconds.
PROGRESS_ENV, PROGRESS_S = "COMPZOO_PROGRESS_S", 30.0
INTERRUPTED_EXIT = (130, 143)  # the runner's exit status after SIGINT / SIGTERM
BAD_INPUT = 2  # the runner's exit status for input it refuses


def _run_all(
    cfg: SweepConfig, out: Path, jobs: int, progress: bool, prune: str | None = None,
    batch: str = "auto",
) -> int:  # fmt: skip
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
                units = _batches(todo, out, jobs) if batch == "auto" and budget is None else []
                batched = {s.run_id for unit in units for s in unit}
                units += [[s] for s in todo if s.run_id not in batched]
                if budget is None:  # a pruned sweep keeps its order: largest multiplier first
                    units = _longest_first(units)
                futures = {
                    pool.submit(_execute_batch, unit, out, env, servers)
                    if unit[0].run_id in batched
                    else pool.submit(
                        _execute, unit[0], out / "runs" / unit[0].run_id, env, servers, budget
                    )
                    for unit in units
                }
                while futures:
                    finished, futures = wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        result = fut.result()
                        for status in result if isinstance(result, list) else [result]:
                            if status == "failed":
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


def _batch_group(spec: RunSpec) -> str | None:
    """The runs a run may share a batch with (:mod:`runner.batch`): those whose arguments are
    its own but for ``--step-mult``; None when its method is not batchable."""
    from algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(spec.params.get("algorithm"))
    if cls is None or not getattr(cls, "batchable", False):
        return None
    argv, key, skip = spec.argv, [], False
    for i, tok in enumerate(argv):
        if skip:
            skip = False
            continue
        if tok == "--step-mult" and i + 1 < len(argv):
            skip = True
            continue
        if tok.startswith("--step-mult="):
            continue
        key.append(tok)
    return "\0".join(key)


def _batches(todo: list[RunSpec], out: Path, jobs: int) -> list[list[RunSpec]]:
    """The fresh runs of ``todo`` that go in batches (``--batch auto``): the runs of a
    batchable method that differ only in their step multiplier, two or more to a batch. A
    batch is split while there are fewer batches than ``jobs``, so every job has work. A run
    stopped earlier resumes on its own."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in todo:
        if _interrupted(out / "runs" / spec.run_id):
            continue
        key = _batch_group(spec)
        if key is not None:
            groups.setdefault(key, []).append(spec)
    units = [g for g in groups.values() if len(g) > 1]
    while units and len(units) < jobs:
        units.sort(key=len)
        big = units.pop()
        if len(big) < 4:
            units.append(big)
            break
        half = len(big) // 2
        units += [big[:half], big[half:]]
    return units


def planned_batches(cfg: SweepConfig, out: Path, jobs: int) -> dict[tuple, set[int]]:
    """Per group (:func:`experiments.select.group_key`), the run counts of the batches that
    ``--batch auto`` would start now for ``cfg`` in ``out`` with ``jobs`` workers
    (:func:`_batches` of its unfinished runs)."""
    from experiments.select import group_key

    todo = [s for s in cfg.runs() if not _finished(out / "runs" / s.run_id)]
    sizes: dict[tuple, set[int]] = {}
    for unit in _batches(todo, out, jobs):
        sizes.setdefault(group_key(unit[0].params), set()).add(len(unit))
    return sizes


def _entries(path: Path) -> int:
    """The stored entries and rows of a LIBSVM text file (``:`` and newlines counted, in
    blocks): what one pass over its data costs; 0 when it cannot be read."""
    count = 0
    try:
        with path.open("rb") as fh:
            while block := fh.read(1 << 20):
                count += block.count(b":") + block.count(b"\n")
    except OSError:
        return 0
    return count


def _cost(unit: list[RunSpec], sizes: dict[str, int]) -> float:
    """A guess at a unit's time, to order the queue: its runs' iterations times the entries of
    their data file (a LIBSVM set's step costs about a pass over them), 1 for generated data.
    ``sizes`` keeps each file's count."""
    from problems import datasets

    name = unit[0].params.get("dataset")
    if isinstance(name, str) and name not in sizes:
        path = Path(name[7:]) if name.startswith("libsvm:") else datasets.find(name)
        sizes[name] = _entries(path) if path is not None else 0
    iters = sum(float(s.params.get("iters", 1000)) for s in unit)
    return iters * (1 + sizes.get(name, 0))


def _longest_first(units: list[list[RunSpec]]) -> list[list[RunSpec]]:
    """``units`` (batches and single runs), the costliest first (:func:`_cost`; ties in config
    order): with ``--jobs`` workers taking them in turn, the longest ones no longer start
    last while the other workers have nothing left to do."""
    sizes: dict[str, int] = {}
    return sorted(units, key=lambda u: -_cost(u, sizes))


def _execute_batch(
    specs: list[RunSpec], out: Path, env: dict[str, str], servers: _Servers | None
) -> list[str]:
    """A batch of runs in one process (``algorithms.run --batch FILE``): each run's status,
    read from its folder as :func:`_execute` reads a single run's."""
    if servers is not None and servers.stopping.is_set():
        return ["missing"] * len(specs)
    dirs = [out / "runs" / s.run_id for s in specs]
    try:
        for d in dirs:
            if d.exists():
                shutil.rmtree(d)  # the sweep's own unfinished run: start it afresh
            d.parent.mkdir(parents=True, exist_ok=True)
        (out / "batches").mkdir(exist_ok=True)
        listing = out / "batches" / f"{specs[0].run_id}.json"
        runs = [[*s.argv, "--quiet", "--out", str(d), "--overwrite"]
                for s, d in zip(specs, dirs, strict=True)]  # fmt: skip
        listing.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    except OSError as e:
        log.warning("batch %s: cannot write: %s", specs[0].run_id, e.strerror or e)
        return ["failed"] * len(specs)
    watch = (f"{_short_name(specs[0])} +{len(specs) - 1}", dirs[0],
             int(specs[0].params.get("iters", 1000)))  # fmt: skip
    code, stderr = _launch(["--batch", str(listing)], env, servers, watch=watch)
    if code is None:
        return ["missing"] * len(specs)
    if code == BAD_INPUT and not any(_summary(d) is not None for d in dirs):
        # refused as a batch (an option the batch cannot share): each run alone instead
        log.info("batch %s refused (%s); its runs go one by one", specs[0].run_id,
                 stderr.strip().splitlines()[-1] if stderr.strip() else "exit 2")  # fmt: skip
        return [_execute(s, d, env, servers) for s, d in zip(specs, dirs, strict=True)]
    statuses = []
    for spec, d in zip(specs, dirs, strict=True):
        summary = _summary(d)
        if summary is not None and summary.get("reason") != "interrupted":
            statuses.append(str(summary.get("reason", "completed")))
        elif code in INTERRUPTED_EXIT and _interrupted(d):
            statuses.append("interrupted")
        elif _stopped_before_start(code, servers):
            shutil.rmtree(d, ignore_errors=True)
            statuses.append("missing")
        else:
            d.mkdir(parents=True, exist_ok=True)
            tail = stderr[-STDERR_TAIL:]
            (d / "stderr.txt").write_text(f"exit status {code} (batch of {len(specs)})\n{tail}")
            last = tail.strip().splitlines()[-1] if tail.strip() else "(no stderr)"
            log.warning("run %s failed (exit status %s): %s", spec.run_id, code, last)
            statuses.append("failed")
    return statuses


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
