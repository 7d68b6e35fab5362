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

Batches (``--batch auto``, the default with the ``pool`` executor and no pruning): the runs of
a batchable method that differ only in ``step_mult`` advance together in one process
(:mod:`runner.batch`): the data is read once and each step serves all of them, and each run
still writes its own folder, equal to the run alone up to rounding. ``--batch off`` runs every
run alone. A run stopped earlier resumes alone. Batches and single runs are queued longest
first (iterations times the entries of the data file), so that the jobs finish together
rather than one job running the longest batch alone at the end.

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

This module is the command and :func:`run_sweep` (the checks, the folder's claim and lock, the
executor); the jobs it hands on are in their own modules: running the runs here
(:mod:`experiments.sweep_pool`) in fork servers or subprocesses
(:mod:`experiments.sweep_servers`), the ``local``/``slurm`` jobs
(:mod:`experiments.sweep_submit`), the pruning budgets (:mod:`experiments.sweep_budget`) and
the run folders read back into the tables (:mod:`experiments.sweep_tables`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import sys
from pathlib import Path

from experiments.config import SweepConfig, load_config

# The names marked noqa: F401 are re-exported: callers and tests import them from here.
# To monkeypatch one (e.g. ``_launch``), patch the module that calls it (experiments.sweep_pool).
from experiments.sweep_budget import PRUNE_POOLS, _Budget  # noqa: F401
from experiments.sweep_pool import (  # noqa: F401
    INTERRUPTED_EXIT,
    PROGRESS_ENV,
    PROGRESS_S,
    STDERR_TAIL,
    _execute,
    _launch,
    _run_all,
)
from experiments.sweep_servers import FORK_ENV, ROOT, _env, _Servers  # noqa: F401
from experiments.sweep_submit import _run_jobs
from experiments.sweep_tables import (  # noqa: F401
    UNFINISHED_REASONS,
    read_summary,
    table,
    write_tables,
)
from streams import interrupts

EXECUTORS = ("pool", "local", "slurm")
BATCH_MODES = ("auto", "off")  # --batch: runs that differ only in --step-mult share a process
EXIT_WRITE_FAILED = 5  # the sweep folder (or a run's files) could not be written: a full disk
INTERRUPTED_MESSAGE = (
    "interrupted: finished runs are kept and runs stopped mid-way kept their checkpoints; "
    "rerun the same command to continue"
)


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
    batch: str = "auto",
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
        batch: ``auto`` (default): the runs of a batchable method that differ only in their
            step multiplier advance together in one process (:mod:`runner.batch`; not with
            ``prune``); ``off``: every run alone.

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
    if batch not in BATCH_MODES:
        raise ValueError(f"batch must be one of {', '.join(BATCH_MODES)}, got {batch!r}")
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
    from experiments.sweep_pool import planned_batches
    from experiments.sweep_servers import RUN_THREADS

    here = executor == "pool"  # the runs start on this machine, each on RUN_THREADS threads
    out = Path(out)
    # the batches' run counts, so that each batched problem's engine is chosen up front too
    points = planned_batches(cfg, out, jobs) if here and batch == "auto" and prune is None else {}
    resolve_runs(cfg, device_here=executor != "slurm", threads=RUN_THREADS if here else None,
                 points=points)  # fmt: skip
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
            signum = _run_all(cfg, out, jobs, progress, prune, batch)
        else:
            signum = 0
            _run_jobs(cfg, out, executor, cluster or {}, progress)
        write_tables(cfg, out)
    if signum:
        raise SweepStopped(signum)
    return out


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
    ap.add_argument(
        "--batch",
        default="auto",
        choices=BATCH_MODES,
        help="auto: runs that differ only in --step-mult advance together in one "
        "process (batchable methods, pool executor, no --prune); off: one by one",
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
                args.executor, cluster_opts, "mean" if args.prune else None, args.batch,
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
