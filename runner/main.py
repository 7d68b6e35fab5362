"""``python -m algorithms.run ALGORITHM [options]``: run one method on one problem.

Writes ``config.json`` (everything needed to rerun: argv, resolved parameters, the problem's
constants, the compressor's constant and bit model, the step size and its formula, versions, the
run id), ``history.csv`` (``iter, bits_up, bits_down, f, f_gap, grad_norm_sq, wall_s`` and more,
one row per logged iteration, flushed as it goes) and ``summary.json`` into ``--out``. Exit
status: 0 done, 2 bad input, 3 diverged (NaN/inf) or unstable (history up to that point is
kept), 4 a collective failed under torchrun (a rank died or hung past ``--timeout``), 130/143
interrupted by SIGINT/SIGTERM (after writing the history, a checkpoint and the summary). A run
that ends with ``f - f_inf`` above its start, or more than 10 times above its best logged value,
ends with reason ``unstable`` (see :mod:`runner.stability`; ``f_inf = f_star`` where known,
else ``f``).

Time: ``wall_s`` is the cumulative time inside the method (initialisation and steps, not the
logging evaluations, not the compilation of kernels, done before the clock starts);
``t_encode``, ``t_communicate`` and ``t_decode`` are the parts of it spent in compressors'
encode/decode and in the comm layer's reductions, ``t_compute`` the rest (gradients and state
updates). ``wire_bytes_up`` is the mean over nodes of the payload bytes handed to collectives
(torch.distributed runs only).

Checkpoints: with ``--checkpoint-every K`` every process writes its whole state (iterate, every
held node's buffers, the bit ledger, the clocks) to ``OUT/checkpoint/`` every ``K`` iterations
and at the end (and on SIGINT/SIGTERM, with or without ``--checkpoint-every``); ``--resume OUT``
continues that run (same arguments, optionally more ``--iters``) along the trajectory an
uninterrupted run takes, since every random draw is keyed by ``(seed, t, node)``. A folder
holds one run: ``--resume`` checks that ``config.json``, the checkpoint and ``history.csv`` were
written by the same run (:mod:`runner.folder`). The pieces live in
:mod:`runner`; this module is the entry point.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

from runner.cli import build_parser, list_everything, parse_run, resume_args
from runner.common import (
    EXIT_BAD_INPUT,
    EXIT_COMM,
    EXIT_DIVERGED,
    EXIT_OK,
    EXIT_SIGNAL,
    HISTORY_COLUMNS,
    RESUME_OVERRIDES,
    TIME_COLUMNS,
    BadInput,
)
from runner.signals import Interrupted, StopSignals

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_COMM",
    "EXIT_DIVERGED",
    "EXIT_OK",
    "EXIT_SIGNAL",
    "HISTORY_COLUMNS",
    "RESUME_OVERRIDES",
    "TIME_COLUMNS",
    "BadInput",
    "build_parser",
    "list_everything",
    "main",
    "resume_args",
    "run",
    "run_distributed",
]  # fmt: skip  (and, imported when first used: configure, execute, load_checkpoint, ...)

log = logging.getLogger("compzoo.run")

# Imported when first used: --help, --list and a bad flag answer without the run's machinery
# (the problems, SciPy, the loop).
_LAZY = {
    "configure": "runner.resolve",
    "execute": "runner.loop",
    "load_checkpoint": "runner.checkpoint",
    "save_checkpoint": "runner.checkpoint",
    "run_args": "runner.api",
    "out_dir": "runner.folder",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(argv: list[str] | None = None) -> int:
    """The command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    with StopSignals() as stop:
        try:
            return _run(argv, stop)
        except SystemExit as e:  # argparse's --help and its errors (a message printed, exit 2)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
        except Interrupted as e:
            print(f"interrupted by {e} before the run started; nothing was run", file=sys.stderr)
            return EXIT_SIGNAL[e.signum]


def _run(argv: list[str] | None, stop: StopSignals) -> int:
    tokens = sys.argv[1:] if argv is None else argv
    if tokens and tokens[0] == "--batch":
        return _run_batch(tokens[1:], stop)
    args = parse_run(tokens)  # the common flags and this method's options, typed
    if args.list:
        print(list_everything())
        return EXIT_OK
    if args.resume is not None:
        try:
            args = resume_args(tokens, args)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        return run_distributed(args, stop)
    if args.backend is not None:
        print(
            f"error: --backend {args.backend} applies under torchrun only (one process per "
            "node); this run simulates its nodes in one process",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    from runner.api import run_args

    try:  # the Python API's own entry, with the folder written and the summary printed
        return run_args(args, stop=stop)
    except ValueError as e:  # bad input, named
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _run_batch(tokens: list[str], stop: StopSignals) -> int:
    """``--batch FILE [--exact]``: the runs a JSON file lists (``{"runs": [ARGV, ...]}``, each
    ``ARGV`` a list of this command's arguments with its own ``--out``) advance together in
    this process (:mod:`runner.batch`). The file holds data only: each ``ARGV`` goes through
    the same parser as a command line. Exit status: as one run's, the worst of the runs'."""
    import json

    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        print("error: --batch runs its runs as one simulation in this process; under torchrun "
              "run each run on its own (python -m algorithms.run ALGORITHM ...)",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    exact = "--exact" in tokens
    rest = [t for t in tokens if t != "--exact"]
    if len(rest) != 1:
        print("error: --batch takes one FILE (a JSON list of runs) and optionally --exact",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    path = Path(rest[0])
    try:
        spec = json.loads(path.read_text())
        runs = spec["runs"]
        if (
            not isinstance(runs, list)
            or not runs
            or not all(isinstance(a, list) and all(isinstance(t, str) for t in a) for a in runs)
        ):
            raise ValueError("runs must be a non-empty list of argument lists (strings)")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --batch {str(path)!r}: not a batch file ({e}); it must hold "
              '{"runs": [["ef21", "--step-mult", "2", "--out", "DIR", ...], ...]}',
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    from runner.batch import exit_status, run_batch

    arg_list = []
    for argv in runs:
        args = parse_run(argv)
        args.argv = list(argv)
        arg_list.append(args)
    try:
        statuses = run_batch(arg_list, stop=stop, announce=False, exact=exact)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return exit_status(statuses)


def _refuse(message: str) -> int:
    """Print ``error: message`` to stderr (flushed) and return the bad-input exit status."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


def run_distributed(args, stop: StopSignals | None = None) -> int:
    """Under torchrun: ``--nodes N`` (default: the world size W, one node per rank; N >= W) over
    torch.distributed, rank ``r`` holding a contiguous block of the nodes; rank 0 writes the run
    folder."""
    import torch

    from comm import torch_dist
    from runner.folder import out_dir
    from runner.loop import execute
    from runner.resolve import configure

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # Refusals before the group starts are made by every rank, each with the same message:
    # torchrun stops the other ranks as soon as one exits, so a message left to rank 0 alone
    # was lost whenever another rank exited first (seen under load in CI).
    if args.nodes is not None and args.nodes < world:
        return _refuse(
            f"--nodes {args.nodes} is less than the world size {world}: under torchrun every "
            f"rank holds at least one node; allowed: --nodes >= {world}"
        )
    args.nodes = world if args.nodes is None else args.nodes
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        return _refuse(f"--timeout must be a positive number of seconds, got {args.timeout}")
    cuda = args.device.startswith("cuda")
    backend = args.backend or ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        return _refuse("--backend nccl needs --device cuda")
    device = "cpu"
    if cuda:
        if not torch.cuda.is_available():
            return _refuse(f"--device {args.device!r}: CUDA is not available here")
        torch.cuda.set_device(local_rank)
        device = args.device = f"cuda:{local_rank}"
    torch_dist.start_group(backend, args.timeout)
    try:
        comm = torch_dist.TorchDistComm(
            seed=args.seed, float_bits=args.float_bits, device=device, n=args.nodes
        )
        error, out = "", None
        try:
            algo, problem, config = configure(args)
            out = out_dir(args, args.algorithm) if rank == 0 else None
        except ValueError as e:
            error = str(e)
        # Every rank must agree before any collective of the run: rank 0 alone checks --out.
        if comm.any_rank(bool(error)):
            if rank == 0:
                print(f"error: {error or 'bad input on another rank'}", file=sys.stderr)
            return EXIT_BAD_INPUT
        out = Path(comm.from_rank0(str(out)))  # a default --out is named by rank 0's clock
        config.update(world_size=world, backend=backend)
        engine = getattr(problem, "engine", None)
        if engine is not None:  # every rank computes as rank 0 measured: the same numbers
            engine = comm.from_rank0(engine)
            problem.use_engine(engine)
            config["problem"]["engine"] = engine
        try:
            mine = problem.local(comm.nodes.tolist())
            return execute(algo, mine, config, args, out, comm, rank == 0, stop)
        except BadInput as e:
            if rank == 0:
                print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    except torch_dist.GROUP_ERRORS as e:
        # A dead peer closes its connections; a hung one lets the collective time out.
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(
            f"error: rank {rank}: a collective failed ({msg}); another rank died, or hung "
            f"past --timeout {args.timeout:g} s. Results so far are in the run folder.",
            file=sys.stderr,
        )
        # A broken group cannot be torn down cleanly (gloo may abort the interpreter at exit):
        # leave now, with the history already flushed and closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_COMM)
    finally:
        torch_dist.stop_group()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    sys.exit(run())


if __name__ == "__main__":
    main()
