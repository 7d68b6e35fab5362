"""The run loop: the method's steps, the history, checkpoints, stopping rules and signals.

Time: ``wall_s`` is the cumulative time inside the method (initialisation and steps, not the
logging evaluations); before the clock starts, one untimed initialisation and step on a scratch
copy of the comm layer (its own ledger) compiles or loads the compiled kernels (numba), so that
compilation is not charged to the first step. Every random draw is keyed by ``(seed, t, node)``
and the scratch ledger is dropped, so this changes no number the run logs but the clocks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from algorithms.base import Algorithm, step_mode, uncharged_init
from compressors.timing import Stopwatch, recording
from runner.checkpoint import (
    check_history,
    check_state,
    load_checkpoint,
    save_checkpoint,
    truncate_history,
)
from runner.common import (
    EXIT_DIVERGED,
    EXIT_OK,
    EXIT_SIGNAL,
    HISTORY_COLUMNS,
    BadInput,
)
from runner.files import EXIT_WRITE_FAILED, WriteFailed, write_text_atomic
from runner.folder import clear_run, config_run_id, new_run_id
from runner.history import History
from runner.report import resume_command, summary_text
from runner.resolve import versions
from runner.signals import WRITE_FAILED, Interrupted, StopSignals
from runner.stability import objective_verdict, stall_verdict

log = logging.getLogger("compzoo.run")


def warm_up(algo: Algorithm, problem, comm) -> None:
    """One untimed ``init`` and ``step`` on a scratch copy of ``comm`` (see module docstring)."""
    scratch = comm.scratch()
    state = algo.init(problem.x0, problem, scratch)
    algo.step(state, problem, scratch)


def _agree(comm, error: str) -> str:
    """Under torchrun every rank learns whether some rank failed (before any collective)."""
    any_rank = getattr(comm, "any_rank", None)
    if any_rank is not None and any_rank(bool(error)):
        return error or "the checkpoint of another rank is unusable (see its message)"
    return error


def _resume(algo: Algorithm, out: Path, comm, problem, args, is_writer: bool) -> tuple[dict, dict]:
    """The checkpoint to continue from and the run's config, every piece checked to belong to
    the same run, and its state checked against the state the method builds on this problem."""
    config = json.loads((out / "config.json").read_text())
    ckpt = load_checkpoint(out, comm, problem.x0, config_run_id(config, out))
    check_state(ckpt["state"], algo.init(problem.x0, problem, comm.scratch()), ckpt["path"])
    if is_writer:
        check_history(out, ckpt["meta"])
    if args.iters < ckpt["t"]:
        raise BadInput(
            f"--iters {args.iters} is below iteration {ckpt['t']} of the checkpoint in "
            f"{str(out)!r}: give --iters >= {ckpt['t']} (the run's total, not the iterations left)"
        )
    return ckpt, config


def _other_versions(config: dict) -> str:
    """The libraries whose version differs from the one that started the run, as text."""
    then, now = config.get("versions") or {}, versions()
    diff = [f"{k} {then[k]} -> {now[k]}" for k in now if k in then and then[k] != now.get(k)]
    return ", ".join(diff)


class _Progress:
    """One line on stderr every ``COMPZOO_PROGRESS_S`` seconds (default 30) where no progress
    bar is drawn (stderr is not a terminal: a log file, a batch job): iteration, f, the
    gradient norm and the bits so far."""

    def __init__(self, name: str, total: int, on: bool) -> None:
        try:
            self.every = float(os.environ.get("COMPZOO_PROGRESS_S", "30"))
        except ValueError:
            self.every = 30.0
        self.on = on and self.every > 0
        self.name, self.total = name, total
        self.start = self.last = time.monotonic()

    def tick(self, t: int, row: dict[str, Any]) -> None:
        now = time.monotonic()
        if not self.on or now - self.last < self.every:
            return
        self.last = now
        t = row["iter"]  # the last logged row: its values belong to its iteration
        share = f" ({100 * t / self.total:.0f}%)" if self.total else ""
        sys.stderr.write(
            f"{self.name}: iteration {t}/{self.total}{share}, f {row['f']:.6g}, "
            f"||grad f||^2 {row['grad_norm_sq']:.3e}, bits up {row['bits_up']:.4g} per node, "
            f"{now - self.start:.0f} s\n"
        )
        sys.stderr.flush()


def log_row(
    t: int, f: float, gn: float, f_star, totals: dict, wall: float, times: dict, held_out=None
) -> dict[str, Any]:
    """A history row at iteration ``t`` (without the method's extras): ``f``, the squared
    gradient norm ``gn``, the bit totals, the clocks and the held-out metrics if any."""
    spent = sum(times.values())
    row = {
        "iter": t,
        "bits_up": totals["bits_up"],
        "bits_down": totals["bits_down"],
        "f": f,
        "f_gap": None if f_star is None else f - f_star,
        "grad_norm_sq": gn,
        "wall_s": wall,
        "bits_up_max": totals["bits_up_max"],
        "bits_down_max": totals["bits_down_max"],
        "wire_bytes_up": totals.get("wire_bytes_up"),
        "t_compute": max(0.0, wall - spent),
        **{f"t_{k}": v for k, v in times.items()},
    }
    if held_out is not None:
        row.update(test_loss=held_out["loss"], test_acc=held_out["acc"])
    return row


def execute(
    algo: Algorithm,
    problem,
    config: dict,
    args,
    out: Path,
    comm,
    is_writer: bool = True,
    stop: StopSignals | None = None,
    keep: dict | None = None,
    announce: bool = True,
) -> int:
    """Run ``algo`` with ``comm``; only the writer (rank 0) writes files and prints (the
    summary only with ``announce``). ``keep``, a dict, receives the history rows and their
    ``columns``, the ``summary`` and the ``config`` in memory (:func:`runner.api.run`).

    A signal before the first step stops at once (the files of a fresh run are removed again,
    :class:`runner.signals.Interrupted` propagates); a file that cannot be written
    (a full disk) stops the run with exit status
    :data:`runner.files.EXIT_WRITE_FAILED` and one line naming the file."""
    stop = stop or StopSignals()
    fresh = getattr(args, "resume", None) is None
    try:
        with step_mode(problem):
            return _execute(algo, problem, config, args, out, comm, is_writer, stop, keep, announce)
    except Interrupted:
        if fresh and is_writer and out.is_dir():
            with contextlib.suppress(BadInput):
                clear_run(out)  # nothing ran: leave no half-made run folder behind
        raise
    except WriteFailed as e:  # before the first step (config.json, the history's header)
        if is_writer:
            print(f"error: {e}; the run did not start (exit {EXIT_WRITE_FAILED})", file=sys.stderr)
        return EXIT_WRITE_FAILED


def _execute(algo, problem, config, args, out, comm, is_writer, stop, keep, announce) -> int:
    ckpt, error = None, ""
    if getattr(args, "resume", None) is not None:
        try:
            ckpt, config = _resume(algo, out, comm, problem, args, is_writer)
        except BadInput as e:
            error = str(e)
    error = _agree(comm, error)
    if error:
        raise BadInput(error)
    if ckpt is None:
        run_id = new_run_id()
        from_rank0 = getattr(comm, "from_rank0", None)
        run_id = from_rank0(run_id) if from_rank0 is not None else run_id
        config = {"run_id": run_id, **config}
    else:
        run_id = ckpt["run_id"]
        changed = _other_versions(config)
        if changed and is_writer:
            print(
                f"warning: this run was started with other library versions ({changed}); "
                "resuming with these: the rest of the trajectory may differ from an "
                "uninterrupted run's",
                file=sys.stderr,
            )
        config.setdefault("resumed", []).append(
            {
                "from_iter": ckpt["t"],
                "iters": args.iters,
                "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **({"versions": versions()} if changed else {}),
            }
        )
    if is_writer:
        out.mkdir(parents=True, exist_ok=True)
        if ckpt is None:
            for stale in ("history.csv", "summary.json"):
                (out / stale).unlink(missing_ok=True)
        else:
            truncate_history(out, ckpt["meta"])
        write_text_atomic(out / "config.json", json.dumps(config, indent=2, default=str) + "\n")
    f_star = problem.consts.f_star
    T = args.iters
    log_every = args.log_every or max(1, T // 1000)
    evaluate = getattr(problem, "evaluate", None)
    watch = Stopwatch(torch.cuda.synchronize if problem.x0.device.type == "cuda" else None)
    warm_up(algo, problem, comm)
    stop.deferred = True
    if ckpt is None:
        t0 = time.perf_counter()
        with recording(watch):
            state = algo.init(problem.x0, problem, comm)
        wall = time.perf_counter() - t0
        free = uncharged_init(state, problem.x0, float(comm.ledger.up.sum()))
        if free and is_writer:
            log.warning(
                "%s's init set the server's %s with no message charged: if the nodes' data "
                "reached the server, send it through the comm layer (comm.reduce_full)",
                type(algo).__name__, ", ".join(free),
            )  # fmt: skip
        if not getattr(args, "count_init_bits", True):
            comm.ledger.uncount()
    else:
        state, wall = ckpt["state"], ckpt["wall"]
        watch.totals.update(ckpt["times"])
    reason, last, signum = "completed", {}, 0
    extras_keys = list(type(algo).reports)
    columns = HISTORY_COLUMNS + extras_keys
    keeping = keep is not None
    with History(out / "history.csv", columns, ckpt is not None, is_writer, keeping) as history:

        def record(t: int, extras: dict[str, float]) -> dict[str, Any]:
            f = float(problem.loss(state.x))
            gn = float((problem.full_grad(state.x) ** 2).sum())
            held_out = evaluate(state.x, with_grad=False) if evaluate is not None else None
            row = log_row(t, f, gn, f_star, comm.bits_totals(), wall, watch.totals, held_out)
            row.update({k: extras.get(k) for k in extras_keys})
            history.add(row)
            return row

        t = 0 if ckpt is None else ckpt["t"]
        last = record(0, {}) if ckpt is None else ckpt["last"]
        bar = tqdm(
            total=T,
            initial=t,
            file=sys.stderr,
            disable=True if (args.quiet or not is_writer) else None,
            desc=args.algorithm,
            leave=False,
        )
        progress = _Progress(args.algorithm, T, bar.disable and is_writer and not args.quiet)
        every = getattr(args, "checkpoint_every", None)
        save = (out, comm)
        failed: WriteFailed | None = history.error
        while t < T:
            t0 = time.perf_counter()
            with recording(watch):
                state, info = algo.step(state, problem, comm)
            wall += time.perf_counter() - t0
            t += 1
            bar.update(1)
            finite = bool(torch.isfinite(state.x).all())
            if not finite or t % log_every == 0 or t == T:
                last = record(t, info.extras)
                if not finite or not math.isfinite(last["f"]):
                    reason = "diverged"
                    break
                target = last[args.tol_on]
                if args.tol is not None and target is not None and target <= args.tol:
                    reason = "tolerance"
                    break
            if args.max_bits is not None and comm.bits_totals()["bits_up"] >= args.max_bits:
                if last["iter"] != t:
                    last = record(t, info.extras)
                reason = "max_bits"
                break
            if every and t % every == 0 and t < T and failed is None:
                try:
                    save_checkpoint(*save, state, t, wall, watch, last, is_writer, run_id)
                except WriteFailed as e:
                    failed = e
            failed = failed or history.error
            progress.tick(t, last)
            signum = stop.agreed(comm, t, failed is not None) if t < T else 0
            if signum == WRITE_FAILED:
                signum, reason = 0, "write_failed"
                break
            if signum:
                reason = "interrupted"
                break
        bar.close()
        failed = failed or history.error
    eps = torch.finfo(problem.x0.dtype).eps if problem.x0.is_floating_point() else 0.0

    def checkpoint() -> None:
        save_checkpoint(*save, state, t, wall, watch, last, is_writer, run_id)

    return conclude(
        reason=reason, history=history, f_star=f_star, eps=eps, t=t, T=T, failed=failed,
        signum=signum, checkpoint=checkpoint if every or signum else None, wall=wall,
        times=watch.totals, last=last, config=config, out=out, comm=comm, run_id=run_id,
        keep=keep, columns=columns, is_writer=is_writer, announce=announce,
    )  # fmt: skip


def conclude(
    *, reason, history, f_star, eps, t, T, failed, signum, checkpoint, wall, times, last,
    config, out, comm, run_id, keep, columns, is_writer, announce,
) -> int:  # fmt: skip
    """The end of a run: the stability verdicts on its logged values, its last checkpoint
    (``checkpoint``, None when the run keeps none), ``summary.json``, the printed summary and
    the exit status. A batch of runs (:mod:`runner.batch`) ends each of its runs here too."""
    unstable = None
    if reason in ("completed", "tolerance", "max_bits"):
        unstable = objective_verdict(history.f_logged, f_star, eps)
        if unstable is not None:
            reason = "unstable"
            log.warning("run is unstable: f %s", unstable)
    stalled = None
    if reason == "completed":
        stalled = stall_verdict(history.f_logged, history.g_logged, f_star, eps, t)
        if stalled is not None:
            reason = "stalled"
    if failed is not None:
        # The history misses rows, so no newer checkpoint: the last complete one is kept.
        reason, signum = "write_failed", 0
    elif checkpoint is not None and reason != "diverged":
        try:
            checkpoint()
        except WriteFailed as e:
            failed, reason = e, "write_failed"
    iters_done = max(t, 1)
    summary = {
        "reason": reason,
        **({"unstable": f"f - f_inf {unstable}"} if unstable is not None else {}),
        **({"stalled": stalled} if stalled is not None else {}),
        **({"signal": signal.Signals(signum).name} if signum else {}),
        "iters": t,
        "final": {k: last.get(k) for k in HISTORY_COLUMNS},
        "gamma": config["step"]["gamma"],
        "gamma_theory": config["step"].get("gamma_theory"),
        "formula": (config["step"].get("theory") or {}).get("formula"),
        "seconds_per_iter": {
            "total": wall / iters_done,
            "compute": (last.get("t_compute") or 0.0) / iters_done,
            **{k: v / iters_done for k, v in times.items()},
        },
        "per_node": comm.bits_totals()["per_node"],
        "out": str(out),
        "run_id": run_id,
    }
    if signum:
        summary["resume"] = resume_command(out, config.get("world_size"))
    if failed is not None:
        summary["write_failed"] = str(failed)
        if (out / "checkpoint" / "meta.json").is_file():
            summary["resume"] = resume_command(out, config.get("world_size"))
    if keep is not None:
        keep.update(history=history.rows, columns=columns, summary=summary, config=config)
    if failed is not None:
        if is_writer:
            _report_failure(out, summary, failed, t, T)
        return EXIT_WRITE_FAILED
    if is_writer:
        write_text_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
        if announce:
            print(summary_text(config, summary))
        if signum:
            print(
                f"interrupted by {signal.Signals(signum).name} at iteration {t} of {T}; "
                f"resume with: {summary['resume']}",
                flush=True,
            )
    if signum:
        return EXIT_SIGNAL[signum]
    return EXIT_DIVERGED if reason in ("diverged", "unstable") else EXIT_OK


def _report_failure(out: Path, summary: dict, failed: WriteFailed, t: int, T: int) -> None:
    """A run stopped by a file it could not write: one line naming the file and the reason,
    where the history ends and what checkpoint is left; ``summary.json`` (reason
    ``write_failed``) if it can still be written."""
    meta = out / "checkpoint" / "meta.json"
    try:
        kept = f"its checkpoint at iteration {json.loads(meta.read_text())['iter']} is intact"
    except (OSError, ValueError, KeyError, TypeError):
        kept = "it has no checkpoint"
    with contextlib.suppress(WriteFailed):
        write_text_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    again = f"; resume with: {summary['resume']}" if summary.get("resume") else ""
    print(
        f"error: {failed}; the run stopped at iteration {t} of {T}, history.csv ends with its "
        f"last complete row and {kept}{again} (exit {EXIT_WRITE_FAILED})",
        file=sys.stderr,
        flush=True,
    )
