"""The run loop: the method's steps, the history, checkpoints, stopping rules and signals.

Time: ``wall_s`` is the cumulative time inside the method (initialisation and steps, not the
logging evaluations); before the clock starts, one untimed initialisation and step on a scratch
copy of the comm layer (its own ledger) compiles or loads the compiled kernels (numba), so that
compilation is not charged to the first step. Every random draw is keyed by ``(seed, t, node)``
and the scratch ledger is dropped, so this changes no number the run logs but the clocks.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from algorithms.base import Algorithm
from algorithms.runner.checkpoint import (
    check_history,
    load_checkpoint,
    save_checkpoint,
    truncate_history,
)
from algorithms.runner.common import (
    EXIT_DIVERGED,
    EXIT_OK,
    EXIT_SIGNAL,
    HISTORY_COLUMNS,
    BadInput,
)
from algorithms.runner.folder import config_run_id, new_run_id
from algorithms.runner.history import History
from algorithms.runner.report import resume_command, summary_text
from algorithms.runner.signals import StopSignals
from algorithms.stability import objective_verdict
from compressors.timing import Stopwatch, recording

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


def _resume(out: Path, comm, problem, args, is_writer: bool) -> tuple[dict, dict]:
    """The checkpoint to continue from and the run's config, every piece checked to belong to
    the same run."""
    config = json.loads((out / "config.json").read_text())
    ckpt = load_checkpoint(out, comm, problem.x0, config_run_id(config, out))
    if is_writer:
        check_history(out, ckpt["meta"])
    if args.iters < ckpt["t"]:
        raise BadInput(
            f"--iters {args.iters} is below iteration {ckpt['t']} of the checkpoint in "
            f"{str(out)!r}: give --iters >= {ckpt['t']} (the run's total, not the iterations left)"
        )
    return ckpt, config


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
    ``columns``, the ``summary`` and the ``config`` in memory (:func:`algorithms.api.run`)."""
    stop = stop or StopSignals()
    ckpt, error = None, ""
    if getattr(args, "resume", None) is not None:
        try:
            ckpt, config = _resume(out, comm, problem, args, is_writer)
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
        config.setdefault("resumed", []).append(
            {
                "from_iter": ckpt["t"],
                "iters": args.iters,
                "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
        )
    if is_writer:
        out.mkdir(parents=True, exist_ok=True)
        if ckpt is None:
            for stale in ("history.csv", "summary.json"):
                (out / stale).unlink(missing_ok=True)
        else:
            truncate_history(out, ckpt["meta"])
        (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
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
            totals = comm.bits_totals()
            spent = sum(watch.totals.values())
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
                **{f"t_{k}": v for k, v in watch.totals.items()},
            }
            if evaluate is not None:
                held_out = evaluate(state.x, with_grad=False)
                row.update(test_loss=held_out["loss"], test_acc=held_out["acc"])
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
        every = getattr(args, "checkpoint_every", None)
        save = (out, comm)
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
            if every and t % every == 0 and t < T:
                save_checkpoint(*save, state, t, wall, watch, last, is_writer, run_id)
            signum = stop.agreed(comm, t) if t < T else 0
            if signum:
                reason = "interrupted"
                break
        bar.close()
    unstable = None
    if reason in ("completed", "tolerance", "max_bits"):
        eps = torch.finfo(problem.x0.dtype).eps if problem.x0.is_floating_point() else 0.0
        unstable = objective_verdict(history.f_logged, f_star, eps)
        if unstable is not None:
            reason = "unstable"
            log.warning("run is unstable: f %s", unstable)
    if (every or signum) and reason != "diverged":
        save_checkpoint(*save, state, t, wall, watch, last, is_writer, run_id)
    iters_done = max(t, 1)
    summary = {
        "reason": reason,
        **({"unstable": f"f - f_inf {unstable}"} if unstable is not None else {}),
        **({"signal": signal.Signals(signum).name} if signum else {}),
        "iters": t,
        "final": {k: last.get(k) for k in HISTORY_COLUMNS},
        "gamma": config["step"]["gamma"],
        "gamma_theory": config["step"].get("gamma_theory"),
        "formula": (config["step"].get("theory") or {}).get("formula"),
        "seconds_per_iter": {
            "total": wall / iters_done,
            "compute": (last.get("t_compute") or 0.0) / iters_done,
            **{k: v / iters_done for k, v in watch.totals.items()},
        },
        "per_node": comm.bits_totals()["per_node"],
        "out": str(out),
        "run_id": run_id,
    }
    if signum:
        summary["resume"] = resume_command(out, config.get("world_size"))
    if keep is not None:
        keep.update(history=history.rows, columns=columns, summary=summary, config=config)
    if is_writer:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
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
