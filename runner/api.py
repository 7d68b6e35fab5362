"""The Python entry point: one call runs a method and returns its history, in memory.

::

    from runner.api import run

    res = run("ef21", compressor="topk:k=1", problem="logreg-nonconvex", dataset="mushrooms",
              nodes=20, iters=2000, step_mult=4, seed=0)
    res.history            # pandas DataFrame, one row per logged iteration (history.csv's columns)
    res.summary["reason"]  # "completed", "diverged", "tolerance", ...
    res.config["step"]     # the step size and the formula it came from

Every keyword is a flag of ``python -m algorithms.run`` (``--step-mult`` is ``step_mult``, a
method's own options too: ``eta=0.9``); ``problem_opt`` takes a dict (``{"dim": 100}``),
``lam`` is ``--lambda``, and a flag that takes no value is ``True``. The keywords fill a typed
run configuration (:class:`runner.config.RunConfig`) directly, each checked against
its declaration (the run settings' and the method's options, :func:`algorithms.base.option`);
no command line is built or parsed. The command line fills the same configuration from its
flags, and both go through :func:`run_args`: the same settings give the same history.
Nothing is written unless ``out=`` names a folder, which then receives
what the command line writes there (``config.json``, ``history.csv``, ``summary.json``); no
progress bar or summary is printed unless ``quiet=False``.

Objects as well as names: ``method`` may be an :class:`algorithms.base.Algorithm` subclass,
``compressor`` a :class:`compressors.base.Compressor` instance and ``problem`` a
:class:`problems.base.Problem` instance, so a class defined in a notebook runs without being
registered (its theory step comes from its own ``theory``; a ``step=`` float always works).
Installed packages can also register names for the command line (:mod:`streams.plugins`).

Bad arguments raise ``ValueError`` with the command line's message.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from algorithms.base import Algorithm
from algorithms.registry import get_algorithm
from comm import SimulatedComm
from compressors import Compressor
from problems.base import Problem
from runner.common import BadInput
from runner.config import RunConfig
from runner.folder import out_dir
from runner.loop import execute
from runner.resolve import configure

__all__ = ["Result", "run", "run_args", "run_batch"]

# Flags that describe the problem: with a Problem object they are its own, not the call's.
PROBLEM_FLAGS = ("dataset", "problem_opt", "split", "lam", "x0", "dtype", "device")


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run returns.

    Attributes:
        history: one row per logged iteration (a pandas DataFrame; the columns of
            ``history.csv``).
        config: the resolved config (``config.json``'s record).
        summary: the stop reason, final metrics, per-node bits, seconds per iteration
            (``summary.json``'s record).
        status: the command line's exit status (0 completed, 3 diverged or unstable).
        out: the folder written, or None.
    """

    history: Any
    config: dict
    summary: dict
    status: int
    out: Path | None = None

    @property
    def final(self) -> dict:
        return self.summary["final"]


def run(
    method: str | type[Algorithm],
    compressor: str | Compressor | None = None,
    problem: str | Problem | None = None,
    *,
    out: str | Path | None = None,
    quiet: bool = True,
    **flags: Any,
) -> Result:
    """Run ``method`` and return its :class:`Result` (see the module docstring)."""
    objects: dict[str, Any] = {}
    name = method
    if isinstance(method, type) and issubclass(method, Algorithm):
        objects["algorithm"] = method
        name = getattr(method, "registry_name", None) or method.__name__.lower()
    elif not isinstance(method, str):
        raise ValueError(f"method must be a registered name or an Algorithm class, got {method!r}")
    spec = compressor
    if isinstance(compressor, Compressor):
        objects["compressor"] = compressor
        spec = None
    elif compressor is not None and not isinstance(compressor, str):
        raise ValueError(f"compressor must be a spec string or a Compressor, got {compressor!r}")
    pname = problem
    if isinstance(problem, Problem):
        objects["problem"] = problem
        pname = None
        owned = sorted(k for k in PROBLEM_FLAGS if flags.get(k) is not None)
        if owned:
            raise ValueError(
                f"{', '.join(owned)}: set by the problem object itself; build the problem with "
                "them, or pass the problem by name"
            )
        if flags.get("nodes") not in (None, problem.n):
            raise ValueError(f"nodes={flags['nodes']} differs from the problem's n = {problem.n}")
        flags["nodes"] = problem.n
    elif problem is not None and not isinstance(problem, str):
        raise ValueError(f"problem must be a registered name or a Problem, got {problem!r}")
    if "resume" in flags or "list" in flags:
        raise ValueError("resume and list are command-line actions; run them with the CLI")
    if "checkpoint_every" in flags and out is None:
        raise ValueError("checkpoint_every needs out= (a folder for the checkpoints)")
    given = dict(flags, quiet=quiet)
    if spec is not None:
        given["compressor"] = spec
    if pname is not None:
        given["problem"] = pname
    if out is not None:
        given["out"] = str(out)
    cls = objects.get("algorithm") or get_algorithm(name)
    args = RunConfig.create(name, given, cls)  # checked against the declarations, no argv
    args.argv = args.to_argv()  # what config.json records (and --resume reads back)
    kept: dict[str, Any] = {}
    status = run_args(args, objects, keep=kept, write=out is not None, announce=not quiet)
    import pandas as pd

    history = pd.DataFrame(kept["history"], columns=kept["columns"])
    summary = dict(kept["summary"])
    folder = Path(summary["out"]) if out is not None else None
    if folder is None:
        summary["out"] = None
    return Result(history, kept["config"], summary, status, folder)


def run_batch(
    method: str | type[Algorithm],
    runs: list[dict[str, Any]],
    *,
    compressor: str | None = None,
    problem: str | None = None,
    quiet: bool = True,
    exact: bool = False,
    **shared: Any,
) -> list[Result]:
    """Runs that differ only in their step, advanced together in one process
    (:mod:`runner.batch`): ``runs`` lists each run's own keywords (``step_mult``, ``step``,
    ``iters``, ``tol``, ``out``, ...), ``shared`` the keywords of all of them. Returns one
    :class:`Result` per run, as :func:`run` returns it; each run's history equals the same
    :func:`run` to rounding, or bit for bit with ``exact=True``.

    ::

        res = run_batch("ef21", [{"step_mult": 2**k} for k in range(12)], compressor="topk:k=1",
                        problem="logreg-nonconvex", dataset="mushrooms", nodes=20, iters=2000)
        [r.summary["reason"] for r in res]

    ``ValueError`` when the runs differ in more than their step and stop rule, or the method
    does not declare ``batchable``."""
    from runner.batch import run_batch as _run_batch

    if not isinstance(method, str):
        raise ValueError("run_batch takes a registered method's name")
    if not runs:
        return []
    cls = get_algorithm(method)
    arg_list, keeps, writes = [], [], []
    for own in runs:
        given = {**shared, **own, "quiet": quiet}
        if compressor is not None:
            given["compressor"] = compressor
        if problem is not None:
            given["problem"] = problem
        if "out" in given:
            given["out"] = str(given["out"])
        args = RunConfig.create(method, given, cls)
        args.argv = args.to_argv()
        arg_list.append(args)
        keeps.append({})
        writes.append(given.get("out") is not None)
    if len(set(writes)) > 1:
        raise ValueError("give out= to every run of the batch or to none")
    statuses = _run_batch(arg_list, write=writes[0], keeps=keeps, announce=not quiet,
                          exact=exact)  # fmt: skip
    import pandas as pd

    out = []
    for keep, status, write in zip(keeps, statuses, writes, strict=True):
        history = pd.DataFrame(keep["history"], columns=keep["columns"])
        summary = dict(keep["summary"])
        folder = Path(summary["out"]) if write else None
        if folder is None:
            summary["out"] = None
        out.append(Result(history, keep["config"], summary, status, folder))
    return out


def run_args(
    args,
    objects: dict[str, Any] | None = None,
    *,
    keep: dict | None = None,
    write: bool = True,
    announce: bool = True,
    stop=None,
) -> int:
    """Run a configuration (:class:`runner.config.RunConfig`) with simulated nodes
    in this process: what both :func:`run` and ``python -m algorithms.run`` do once their
    arguments are read. ``objects`` replaces names by objects (see :func:`run`), ``keep``
    receives the history rows, summary and config, ``write`` says whether the run folder is
    written. Returns the exit status; bad input raises ``ValueError`` naming it."""
    if args.nodes is None:
        args.nodes = 10
    try:
        algo, problem, config = configure(args, objects)
        out = out_dir(args, args.algorithm) if write else Path("unwritten")
    except ValueError as e:  # BadInput, and the checks of problems, compressors and methods
        raise ValueError(str(e)) from None
    comm = SimulatedComm(problem.n, seed=args.seed, float_bits=args.float_bits)
    try:
        return execute(
            algo, problem, config, args, out, comm, is_writer=write, stop=stop, keep=keep,
            announce=announce,
        )  # fmt: skip
    except BadInput as e:
        raise ValueError(str(e)) from None
