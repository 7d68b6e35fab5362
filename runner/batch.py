"""Runs that differ only in their step, advancing together in one process.

A paper's figure is a grid: one method and data set at 8-12 step multipliers. Such runs share
everything but the step, so they can share the work too: the batch holds their node rows as
``R n`` rows and their iterates as ``(R, d)`` (:mod:`comm.batched`, :mod:`problems.batched`,
:mod:`algorithms.batching`), so one call of the method's ``step`` advances all of them, the
compressor encodes all ``R n`` rows at once and the problem evaluates the ``R`` gradients in one
pass over its data. The data is read and the constants computed once.

Each run keeps what it has alone: its folder (``config.json``, ``history.csv``,
``summary.json``, its checkpoint, which ``--resume`` continues as a single run), its bits (its
rows of the ledger), its stop rule (``--iters``, ``--tol``, ``--max-bits``) and its verdicts. A
run that diverges or finishes leaves the batch at once and the others go on. ``wall_s`` is the
run's share of the batch's time: each step's time divided among the runs in it.

A run's history equals the same run alone to rounding: the gradients of the ``R`` points are
one product whose sums run in another order, and so are the logged ``f`` and gradient norms.
With ``exact`` every gradient and log value is computed as the single run computes it, and the
history equals the single run's bit for bit (the clocks aside).

Runs can share a batch when they name the same method, options, compressor, problem, seed and
run settings, and differ in ``--step``, ``--step-mult``, the stop rule, ``--log-every``,
``--checkpoint-every`` or ``--out`` (:func:`batch_key`); the method must declare
``batchable``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from algorithms.base import step_mode
from algorithms.batching import for_runs
from algorithms.registry import get_algorithm
from comm import SimulatedComm
from comm.batched import BatchedSimulatedComm
from compressors.timing import Stopwatch, recording
from problems.batched import Tiled
from runner.checkpoint import save_checkpoint
from runner.common import EXIT_DIVERGED, EXIT_OK, HISTORY_COLUMNS, BadInput
from runner.files import EXIT_WRITE_FAILED, WriteFailed, write_text_atomic
from runner.folder import clear_run, new_run_id, out_dir
from runner.history import History
from runner.loop import conclude, log_row, warm_up
from runner.resolve import configure
from runner.signals import WRITE_FAILED, StopSignals

__all__ = ["batch_key", "run_batch"]

# The settings in which the runs of one batch may differ.
PER_RUN = (
    "step", "step_mult", "iters", "tol", "tol_on", "max_bits", "log_every", "checkpoint_every",
    "out", "overwrite", "quiet", "argv",
)  # fmt: skip


def batch_key(args) -> str:
    """What runs must share to advance in one batch: every setting outside :data:`PER_RUN`
    (the method and its options, the compressor, the problem, the seed, the dtype, ...)."""
    fields = {k: v for k, v in vars(args).items() if k not in PER_RUN and not k.startswith("_")}
    return json.dumps(fields, sort_keys=True, default=str)


@dataclasses.dataclass
class _Run:
    """One run of a batch: its settings, folder, history and clocks."""

    args: Any
    config: dict
    out: Path
    history: History | None = None
    wall: float = 0.0
    times: dict = dataclasses.field(default_factory=dict)
    last: dict = dataclasses.field(default_factory=dict)
    status: int | None = None
    keep: dict | None = None


def run_batch(
    arg_list: list,
    *,
    stop: StopSignals | None = None,
    write: bool = True,
    keeps: list[dict] | None = None,
    announce: bool = False,
    exact: bool = False,
) -> list[int]:
    """Run the configurations ``arg_list`` (:class:`runner.config.RunConfig`) as one batch
    (see the module docstring); returns each run's exit status. ``keeps[r]`` receives run
    ``r``'s history rows, summary and config (:func:`runner.api.run_batch`). Runs that cannot
    share a batch raise ``ValueError`` naming the setting in which they differ."""
    if not arg_list:
        return []
    stop = stop or StopSignals()
    for args in arg_list:
        if getattr(args, "resume", None) is not None:
            raise ValueError("--resume continues one run: resume a batched run on its own")
        if args.nodes is None:
            args.nodes = 10
    _check_shared(arg_list)
    if not get_algorithm(arg_list[0].algorithm).batchable:
        raise ValueError(
            f"{arg_list[0].algorithm} does not declare batchable (its step uses the step size "
            "in a way a batch cannot share): run its runs one by one (--batch off)"
        )
    algo, problem, config = configure(arg_list[0])
    cls = type(algo)
    algos, configs = [algo], [config]
    for args in arg_list[1:]:
        a, _, c = configure(args, {"problem": problem})
        c["problem"] = config["problem"]
        algos.append(a)
        configs.append(c)
    plain = [dataclasses.replace(a, gamma=1.0) for a in algos]
    for a, args in zip(plain[1:], arg_list[1:], strict=True):
        if a != plain[0]:
            raise ValueError(
                f"{args.algorithm}: the runs' method parameters differ beyond the step "
                f"({a.params()} vs {plain[0].params()}): they cannot share a batch"
            )
    R, n = len(arg_list), problem.n
    runs = []
    for r, (args, cfg) in enumerate(zip(arg_list, configs, strict=True)):
        out = out_dir(args, args.algorithm) if write else Path("unwritten")
        cfg = {"run_id": new_run_id(), **cfg, "batch": {"runs": R, "position": r, "exact": exact}}
        runs.append(_Run(args, cfg, out, keep=(keeps[r] if keeps is not None else None)))
    if write and len({str(run.out.resolve()) for run in runs}) < R:
        raise ValueError("two runs of the batch name the same --out folder")
    gammas = [c["step"]["gamma"] for c in configs]
    with step_mode(problem):
        return _loop(algo, cls, gammas, problem, runs, n, stop, write, announce, exact)


def _check_shared(arg_list: list) -> None:
    key = batch_key(arg_list[0])
    first = json.loads(key)
    for args in arg_list[1:]:
        other = json.loads(batch_key(args))
        diff = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        if diff:
            raise ValueError(
                f"runs of one batch must differ only in {', '.join(PER_RUN)}; these differ in "
                f"{', '.join(diff)}"
            )


def _loop(algo, cls, gammas, problem, runs, n, stop, write, announce, exact) -> list[int]:
    R = len(runs)
    seed, float_bits = runs[0].config["seed"], runs[0].config["float_bits"]
    dtype, device = problem.dtype, problem.device
    single = SimulatedComm(n, seed=seed, float_bits=float_bits)
    reference = algo.init(problem.x0, problem, single.scratch())  # the single run's shapes
    tiled = Tiled(problem, R, exact)
    comm = BatchedSimulatedComm(n, R, seed, float_bits, exact)
    balgo = for_runs(algo, gammas, n, dtype, device)
    f_star = problem.consts.f_star
    eps = torch.finfo(dtype).eps if problem.x0.is_floating_point() else 0.0
    extras_keys = list(cls.reports)
    columns = HISTORY_COLUMNS + extras_keys
    evaluate = getattr(problem, "evaluate", None)
    with contextlib.ExitStack() as stack:
        for run in runs:
            if write:
                run.out.mkdir(parents=True, exist_ok=True)
                write_text_atomic(
                    run.out / "config.json", json.dumps(run.config, indent=2, default=str) + "\n"
                )
            run.history = stack.enter_context(
                History(run.out / "history.csv", columns, False, write, run.keep is not None)
            )
        watch = Stopwatch(torch.cuda.synchronize if device.type == "cuda" else None)
        try:
            warm_up(balgo, tiled, comm)
        except (NotImplementedError, TypeError) as e:
            # a path of the method that a batch cannot take (a downlink compressor, ...)
            for run in runs:
                if write:
                    clear_run(run.out)
            raise ValueError(
                f"{runs[0].args.algorithm} cannot run these options as a batch ({e}); run "
                "its runs one by one"
            ) from None
        stop.deferred = True
        t0 = time.perf_counter()
        with recording(watch):
            state = balgo.init(tiled.x0, tiled, comm)
        share = (time.perf_counter() - t0) / R
        for run in runs:
            run.wall = share
            run.times = {k: v / R for k, v in watch.totals.items()}
        if not getattr(runs[0].args, "count_init_bits", True):
            comm.ledger.uncount()
        active = list(range(R))  # positions in the batch -> runs[active[p]]

        def record(t: int, which: list[int], extras: dict) -> None:
            X = state.x[which]
            f, g = tiled.evaluate_points(X, which)
            gn = (g.double() ** 2).sum(dim=1)
            every = comm.bits_totals_of(which)  # every run's at once
            fs, gns = f.tolist(), gn.tolist()
            for k, p in enumerate(which):
                run = runs[active[p]]
                held = evaluate(state.x[p], with_grad=False) if evaluate is not None else None
                row = log_row(t, fs[k], gns[k], f_star, every[k], run.wall, run.times, held)
                row.update({key: _of_run(extras.get(key), p) for key in extras_keys})
                run.history.add(row)
                run.last = row

        record(0, list(range(R)), {})
        T_max = max(run.args.iters for run in runs)
        bar = tqdm(
            total=T_max, file=sys.stderr, desc=f"{runs[0].args.algorithm} x{R}", leave=False,
            disable=True if (runs[0].args.quiet or not write) else None,
        )  # fmt: skip
        t, signum = 0, 0
        while active:
            before = dict(watch.totals)
            tiled.log_next = any(
                (t + 1) % runs[r].args.log_every == 0 or t + 1 == runs[r].args.iters for r in active
            )
            t0 = time.perf_counter()
            with recording(watch):
                state, info = balgo.step(state, tiled, comm)
            dt = time.perf_counter() - t0
            t += 1
            bar.update(1)
            k = len(active)
            for r in active:
                run = runs[r]
                run.wall += dt / k
                for key, v in watch.totals.items():
                    run.times[key] = run.times.get(key, 0.0) + (v - before.get(key, 0.0)) / k
            finite = torch.isfinite(state.x).all(dim=1).tolist()
            due = [
                p for p, r in enumerate(active)
                if not finite[p] or t % runs[r].args.log_every == 0 or t == runs[r].args.iters
            ]  # fmt: skip
            if due:
                record(t, due, info.extras)
            ended: dict[int, str] = {}
            capped = any(runs[r].args.max_bits is not None for r in active)
            spent = comm.bits_up_per_run().tolist() if capped else None
            for p, r in enumerate(active):
                run, args = runs[r], runs[r].args
                if p in due:
                    if not finite[p] or not _finite(run.last["f"]):
                        ended[p] = "diverged"
                        continue
                    target = run.last[args.tol_on]
                    if args.tol is not None and target is not None and target <= args.tol:
                        ended[p] = "tolerance"
                        continue
                if args.max_bits is not None:
                    if spent[p] >= args.max_bits:
                        if run.last["iter"] != t:
                            record(t, [p], info.extras)
                        ended[p] = "max_bits"
                        continue
                if t >= args.iters:
                    ended[p] = "completed"
                    continue
                if run.history.error is not None:
                    ended[p] = "write_failed"
                    continue
                every = args.checkpoint_every
                if every and t % every == 0:
                    try:
                        _save(run, comm, state, reference, p, t, write)
                    except WriteFailed as e:
                        run.history.error = run.history.error or e
            signum = stop.agreed(comm, t, False) if len(ended) < len(active) else 0
            if signum and signum != WRITE_FAILED:
                ended.update({p: "interrupted" for p in range(len(active)) if p not in ended})
            for p, reason in ended.items():
                run = runs[active[p]]
                run.status = _end(run, reason, comm, state, reference, p, t, f_star, eps,
                                  columns, write, announce, signum if reason == "interrupted"
                                  else 0)  # fmt: skip
            if ended:
                keep = [p for p in range(len(active)) if p not in ended]
                active = [active[p] for p in keep]
                if active:
                    state = _take_state(state, reference, keep, len(keep) + len(ended), n)
                    comm = comm.take(keep)
                    tiled = tiled.take(keep)
                    balgo = for_runs(algo, [gammas[r] for r in active], n, dtype, device)
        bar.close()
    return [EXIT_OK if run.status is None else run.status for run in runs]


def _finite(v) -> bool:
    return v is not None and v == v and abs(v) != float("inf")


def _of_run(v, p: int):
    """Run ``p``'s value of a step's extra: one value per run (a batch's monitor), or shared."""
    if isinstance(v, torch.Tensor) and v.dim() == 1:
        return float(v[p])
    return v


def _end(run, reason, comm, state, reference, p, t, f_star, eps, columns, write, announce,
         signum) -> int:  # fmt: skip
    failed = run.history.error
    every = run.args.checkpoint_every

    def checkpoint() -> None:
        _save(run, comm, state, reference, p, t, write)

    return conclude(
        reason=reason, history=run.history, f_star=f_star, eps=eps, t=t, T=run.args.iters,
        failed=failed, signum=signum, checkpoint=checkpoint if every or signum else None,
        wall=run.wall, times=run.times, last=run.last, config=run.config, out=run.out,
        comm=comm.run_comm(p), run_id=run.config["run_id"], keep=run.keep, columns=columns,
        is_writer=write, announce=announce,
    )  # fmt: skip


def _save(run, comm, state, reference, p, t, write) -> None:
    if not write:
        return
    one = _run_state(state, reference, p, comm.runs, comm.n)

    class _Clock:  # the run's own clocks, as save_checkpoint reads them
        totals = run.times

    save_checkpoint(run.out, comm.run_comm(p), one, t, run.wall, _Clock, run.last, True,
                    run.config["run_id"])  # fmt: skip


def _field_kind(v: torch.Tensor, ref, R: int, n: int) -> str:
    """How a state field of the batch holds its runs: ``run`` (``(R, *shape)``, a server
    vector), ``rows`` (``(R n, ...)``, node rows) or ``shared`` (the single run's shape)."""
    if not isinstance(ref, torch.Tensor):
        raise BadInput(f"a batched state field has no single-run counterpart: {type(ref)}")
    rs = tuple(ref.shape)
    if tuple(v.shape) == (R, *rs):
        return "run"
    if rs and rs[0] == n and tuple(v.shape) == (R * n, *rs[1:]):
        return "rows"
    if tuple(v.shape) == rs:
        return "shared"
    raise BadInput(f"a batched state field has shape {tuple(v.shape)}; one run's is {rs}")


def _run_state(state, reference, p: int, R: int, n: int):
    """Run ``p``'s state as a single run holds it."""
    out = {}
    for f in dataclasses.fields(state):
        v, ref = getattr(state, f.name), getattr(reference, f.name)
        if isinstance(v, torch.Tensor):
            kind = _field_kind(v, ref, R, n)
            if kind == "run":
                v = v[p].clone()
            elif kind == "rows":
                v = v[p * n : (p + 1) * n].clone()
        out[f.name] = v
    return type(state)(**out)


def _take_state(state, reference, keep: list[int], R: int, n: int):
    """The batch's state for the runs at positions ``keep``."""
    out = {}
    idx = torch.tensor(keep)
    for f in dataclasses.fields(state):
        v, ref = getattr(state, f.name), getattr(reference, f.name)
        if isinstance(v, torch.Tensor):
            kind = _field_kind(v, ref, R, n)
            if kind == "run":
                v = v[idx]
            elif kind == "rows":
                v = v.view(R, n, *v.shape[1:])[idx].reshape(len(keep) * n, *v.shape[1:])
        out[f.name] = v
    return type(state)(**out)


def exit_status(statuses: list[int]) -> int:
    """One status for a batch: a signal's or a failed write's if any run ended so, else 3 if
    a run diverged, else 0."""
    for s in statuses:
        if s not in (EXIT_OK, EXIT_DIVERGED, EXIT_WRITE_FAILED):
            return s
    if EXIT_WRITE_FAILED in statuses:
        return EXIT_WRITE_FAILED
    return EXIT_DIVERGED if EXIT_DIVERGED in statuses else EXIT_OK
