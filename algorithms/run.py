"""``python -m algorithms.run ALGORITHM [options]``: run one method on one problem.

Writes ``config.json`` (everything needed to rerun: argv, resolved parameters, the problem's
constants, the compressor's constant and bit model, the step size and its formula, versions),
``history.csv`` (``iter, bits_up, bits_down, f, f_gap, grad_norm_sq, wall_s`` and more, one row per
logged iteration, flushed as it goes) and ``summary.json`` into ``--out``. Exit status: 0 done,
2 bad input, 3 diverged (NaN/inf) or unstable (history up to that point is kept), 4 a collective
failed under torchrun (a rank died or hung past ``--timeout``). A run that ends with ``f - f_inf``
above its start, or more than 10 times above its best logged value, ends with reason
``unstable`` (see :mod:`algorithms.stability`; ``f_inf = f_star`` where known, else ``f``).

Time: ``wall_s`` is the cumulative time inside the method (initialisation and steps, not the
logging evaluations); ``t_encode``, ``t_communicate`` and ``t_decode`` are the parts of it spent
in compressors' encode/decode and in the comm layer's reductions, ``t_compute`` the rest
(gradients and state updates). ``wire_bytes_up`` is the mean over nodes of the payload bytes
handed to collectives (torch.distributed runs only).

Checkpoints: with ``--checkpoint-every K`` every process writes its whole state (iterate, every
held node's buffers, the bit ledger, the clocks) to ``OUT/checkpoint/`` every ``K`` iterations
and at the end; ``--resume OUT`` continues that run (same arguments, optionally more
``--iters``) along the trajectory an uninterrupted run takes, since every random draw is keyed by
``(seed, t, node)``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import inspect
import json
import logging
import math
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from algorithms.base import Algorithm
from algorithms.comm import SimulatedComm
from algorithms.registry import ALGORITHMS, ALIASES, get_algorithm
from algorithms.stability import objective_verdict
from compressors import COMPRESSORS, Blockwise, Compressor, parse_spec
from compressors.timing import Stopwatch, recording

log = logging.getLogger("compzoo.run")

EXIT_OK, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_COMM = 0, 2, 3, 4
TIME_COLUMNS = ["wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"]
HISTORY_COLUMNS = [
    "iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s",
    "bits_up_max", "bits_down_max", "wire_bytes_up", "test_loss", "test_acc",
    "t_compute", "t_encode", "t_communicate", "t_decode",
]  # fmt: skip
# What --resume lets a continued run change; everything else comes from the run's config.json.
RESUME_OVERRIDES = ("iters", "checkpoint_every", "quiet", "timeout", "backend", "max_bits", "tol")


class BadInput(ValueError):
    """A user error: reported on stderr with exit status 2."""


def _method_options() -> dict[str, tuple[str, Any]]:
    """Every method option by its flag: ``flag -> (field, Option)`` (union over methods)."""
    out: dict[str, tuple[str, Any]] = {}
    for cls in ALGORITHMS.values():
        for name, opt in cls.options.items():
            if name == "down_compressor":  # has its own --down-compressor SPEC flag
                continue
            flag = opt.flag or name
            out.setdefault(flag, (name, opt))
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m algorithms.run",
        description="Run one communication-compressed method on one problem.",
    )
    ap.add_argument("algorithm", nargs="?", help="registry name (see --list)")
    ap.add_argument("--list", action="store_true", help="list algorithms, compressors, problems")
    g = ap.add_argument_group("method")
    g.add_argument("--compressor", default="identity", help="compressor SPEC, e.g. topk:k=10")
    g.add_argument("--down-compressor", default=None, help="downlink SPEC (bidirectional)")
    g.add_argument("--step", default="theory", help="'theory' or a positive float")
    g.add_argument("--step-mult", type=float, default=1.0, help="multiplies the step")
    g.add_argument(
        "--force-compressor",
        action="store_true",
        help="accept a compressor outside the class the method's theory assumes",
    )
    for flag, (name, opt) in _method_options().items():
        users = sorted(k for k, c in ALGORITHMS.items() if name in c.options)
        kw: dict[str, Any] = {
            "default": None,
            "dest": f"opt_{name}",
            "help": f"{opt.help} [{', '.join(users)}]",
        }
        if opt.choices:
            kw["choices"] = opt.choices
        kw["type"] = _bool if opt.type is bool else opt.type
        g.add_argument(f"--{flag.replace('_', '-')}", **kw)
    p = ap.add_argument_group("problem")
    p.add_argument("--problem", default="quadratic", help="problem name (see --list)")
    p.add_argument("--dataset", default=None, help="synthetic, a bundled set, libsvm:PATH, ...")
    p.add_argument(
        "--split",
        default="contiguous",
        help="contiguous|contiguous:last|contiguous:drop|contiguous:array|iid|sorted|"
        "dirichlet:ALPHA (the papers' conventions: python -m problems --help)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="number of nodes n (default 10; under torchrun the world size)",
    )
    p.add_argument("--lambda", dest="lam", type=float, default=None, help="regularization")
    p.add_argument(
        "--x0",
        default="default",
        help="default|zeros|ones|randn[:SCALE] (randn: x0 ~ N(0, SCALE^2 I) from --seed)",
    )
    p.add_argument(
        "--problem-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a problem knob (repeatable), see --list",
    )
    r = ap.add_argument_group("run")
    r.add_argument("--iters", type=int, default=1000, help="iterations T")
    r.add_argument(
        "--max-bits", type=float, default=None, help="stop at this many uplink bits per node"
    )
    r.add_argument(
        "--tol",
        type=float,
        default=None,
        help="stop when the --tol-on value is below this (checked at logged iterations)",
    )
    r.add_argument("--tol-on", choices=("grad_norm_sq", "f_gap"), default="grad_norm_sq")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--device", default="cpu", help="cpu or cuda")
    r.add_argument("--dtype", choices=("float64", "float32"), default=None)
    r.add_argument("--float-bits", type=int, default=32, help="wire width of a float (bits)")
    r.add_argument(
        "--count-init-bits",
        type=_bool,
        default=True,
        metavar="yes|no",
        help="count the bits a method sends at initialisation (e.g. the full grad f_i(x^0) of "
        "EF21 --init full, MARINA, DASHA) in bits_up/bits_down (default yes; the EF21 code: no)",
    )
    r.add_argument("--log-every", type=int, default=None, help="log every K iterations")
    r.add_argument("--out", default=None, help="run folder (default: runs/NAME-TIME)")
    r.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="torch.distributed backend under torchrun (default: nccl on cuda, else gloo)",
    )
    r.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="K",
        help="save the whole run state every K iterations (and at the end) to OUT/checkpoint",
    )
    r.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run in DIR from its checkpoint (may change: "
        + ", ".join("--" + k.replace("_", "-") for k in RESUME_OVERRIDES)
        + ")",
    )
    r.add_argument(
        "--layerwise",
        action="store_true",
        help="compress each parameter tensor separately (deep-net problems)",
    )
    r.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds a collective may wait under torchrun before the run fails",
    )
    return ap


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def _first_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n")[0]


def list_everything() -> str:
    from problems.registry import PROBLEMS

    lines = ["algorithms:"]
    for name, cls in ALGORITHMS.items():
        opts = ", ".join(f"--{(o.flag or k).replace('_', '-')}" for k, o in cls.options.items())
        lines.append(f"  {name:16s} {_first_line(cls)}" + (f"  [{opts}]" if opts else ""))
    for alias, target in ALIASES.items():
        lines.append(f"  {alias:16s} alias of {target}")
    lines.append("compressors:")
    for name, cls in COMPRESSORS.items():
        fields = ", ".join(
            f.name for f in __import__("dataclasses").fields(cls) if not f.name.startswith("_")
        )
        lines.append(f"  {name:16s} {_first_line(cls)}" + (f"  [{fields}]" if fields else ""))
    lines.append("problems:")
    for name, cls in PROBLEMS.items():
        knobs = ", ".join(cls.knobs)
        lines.append(
            f"  {name:16s} {cls.description or _first_line(cls)}"
            + (f"  [--problem-opt {knobs}]" if knobs else "")
        )
    return "\n".join(lines)


def _parse_knobs(problem: str, items: list[str]) -> dict[str, Any]:
    from problems.registry import PROBLEMS

    cls = PROBLEMS.get(problem)
    knobs: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq:
            raise BadInput(f"--problem-opt expects KEY=VALUE, got {item!r}")
        if cls is None or key not in cls.knobs:
            allowed = ", ".join(cls.knobs) if cls else "none"
            raise BadInput(f"unknown --problem-opt {key!r} for {problem}; allowed: {allowed}")
        default = cls.knobs[key][0]
        try:
            if isinstance(default, bool):
                knobs[key] = _bool(raw)
            elif isinstance(default, int):
                knobs[key] = int(raw)
            elif isinstance(default, float):
                knobs[key] = float(raw)
            else:
                knobs[key] = raw
        except (ValueError, argparse.ArgumentTypeError) as e:
            raise BadInput(f"--problem-opt {key}={raw!r}: {e}") from None
    return knobs


def _given(ap: argparse.ArgumentParser, tokens: list[str]) -> set[str]:
    """The destinations of the options written out in ``tokens``."""
    out = set()
    for tok in tokens:
        action = ap._option_string_actions.get(tok.split("=", 1)[0]) if tok[:2] == "--" else None
        if action is not None:
            out.add(action.dest)
    return out


def resume_args(tokens: list[str], args: argparse.Namespace) -> argparse.Namespace:
    """The arguments of the run in ``args.resume``, with the overrides ``tokens`` give."""
    folder = Path(args.resume)
    cfg = folder / "config.json"
    if not cfg.is_file():
        raise BadInput(f"--resume {args.resume!r}: no config.json there; give a run's folder")
    config = json.loads(cfg.read_text())
    ap = build_parser()
    given = _given(ap, tokens) - {"resume"}
    others = sorted(given - set(RESUME_OVERRIDES))
    if others or args.algorithm is not None:
        bad = ", ".join("--" + k.replace("_", "-") for k in others) or args.algorithm
        allowed = ", ".join("--" + k.replace("_", "-") for k in RESUME_OVERRIDES)
        raise BadInput(
            f"--resume continues a run with its own arguments; it may change only {allowed}, "
            f"got {bad}"
        )
    new = ap.parse_args(config["argv"])
    new._argv = config["argv"]
    for key in given:
        setattr(new, key, getattr(args, key))
    new.nodes = config["args"]["nodes"]
    new.log_every = config["args"]["log_every"]
    new.resume = new.out = str(folder)
    return new


def _out_dir(args, algo_name: str) -> Path:
    if args.resume is not None:
        return Path(args.resume)
    if args.out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path("runs") / f"{algo_name}-{stamp}"
        out, k = base, 1
        while out.exists():
            out, k = Path(f"{base}-{k}"), k + 1
        return out
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise BadInput(
            f"--out {str(out)!r} exists and is not empty; pass --overwrite to "
            "replace it, or choose another folder"
        )
    return out


def _compressor_record(c: Compressor, d: int) -> dict[str, Any]:
    doc = inspect.getdoc(type(c)) or ""
    bit_model = " ".join(
        next((p for p in doc.split("\n\n") if p.lstrip().startswith("Bits")), "").split()
    )
    rec: dict[str, Any] = {
        "spec": c.spec(),
        "class": type(c).__name__,
        "bit_model": bit_model,
        "unbiased": c.unbiased,
        "contractive": c.contractive,
    }
    for key, fn in (("omega", c.omega), ("delta", c.delta)):
        try:
            rec[key] = fn(d)
        except ValueError:
            rec[key] = None
    rec["bits_per_message"] = c.bits(d) if c.fixed_size else None
    rec["expected_bits_per_message"] = c.expected_bits(d)
    return rec


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    try:
        out["compzoo"] = metadata.version("compzoo")
    except metadata.PackageNotFoundError:
        out["compzoo"] = "not installed"
    return out


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def configure(args) -> tuple[Algorithm, Any, dict[str, Any]]:
    """Resolve the command line into a method, a problem and the config record."""
    from problems.registry import make_problem

    if args.algorithm is None:
        raise BadInput("give an ALGORITHM (see --list)")
    cls = get_algorithm(args.algorithm)
    for key, val in (("--iters", args.iters), ("--nodes", args.nodes)):
        if val < 1:
            raise BadInput(f"{key} must be >= 1, got {val}")
    if args.log_every is not None and args.log_every < 1:
        raise BadInput(f"--log-every must be >= 1, got {args.log_every}")
    if args.log_every is None:
        args.log_every = max(1, args.iters // 1000)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise BadInput(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    if args.step_mult <= 0 or not math.isfinite(args.step_mult):
        raise BadInput(f"--step-mult must be a positive number, got {args.step_mult}")
    step: str | float = args.step
    if step != "theory":
        try:
            step = float(step)
        except ValueError:
            raise BadInput(
                f"--step must be 'theory' or a positive float, got {args.step!r}"
            ) from None
        if not step > 0 or not math.isfinite(step):
            raise BadInput(f"--step must be 'theory' or a positive float, got {args.step!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"--device {args.device!r}: CUDA is not available here; use cpu")
    knobs = _parse_knobs(args.problem, args.problem_opt)
    problem = make_problem(
        args.problem,
        dataset=args.dataset,
        split=args.split,
        nodes=args.nodes,
        lam=args.lam,
        dtype=args.dtype,
        device=args.device,
        seed=args.seed,
        x0=args.x0,
        **knobs,
    )
    compressor = parse_spec(args.compressor)
    if args.layerwise:
        sizes = getattr(problem, "param_sizes", None)
        if sizes is None:
            raise BadInput(
                f"--layerwise compresses each parameter tensor separately; problem "
                f"{args.problem!r} has none (use a deep-net problem: mlp, cnn, resnet18)"
            )
        compressor = Blockwise.for_sizes(compressor, sizes)
    opts: dict[str, Any] = {}
    for flag, (name, _opt) in _method_options().items():
        val = getattr(args, f"opt_{name}")
        if val is None:
            continue
        if name not in cls.options:
            raise BadInput(
                f"--{flag.replace('_', '-')} does not apply to {args.algorithm}; "
                f"its options: {', '.join(cls.options) or 'none'}"
            )
        opts[name] = val
    if args.down_compressor is not None:
        if "down_compressor" not in cls.options:
            raise BadInput(
                f"--down-compressor does not apply to {args.algorithm}: it compresses uplink only"
            )
        opts["down_compressor"] = parse_spec(args.down_compressor)
    if "horizon" in cls.options and opts.get("horizon") is None:
        opts["horizon"] = args.iters  # steps whose theorem depends on the horizon T (DCGD)
    algo, theory_record = cls.configure(
        problem,
        compressor,
        step=step,
        step_mult=args.step_mult,
        force=args.force_compressor,
        **opts,
    )
    consts = problem.consts
    config = {
        "argv": sys.argv[1:] if args._argv is None else args._argv,
        "algorithm": args.algorithm,
        "algorithm_class": cls.__name__,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "method": {
            k: (v.spec() if isinstance(v, Compressor) else v) for k, v in algo.params().items()
        },
        "step": theory_record,
        "compressor": _compressor_record(algo.compressor, problem.d),
        "problem": {
            "name": args.problem,
            "n": problem.n,
            "d": problem.d,
            "dataset": args.dataset,
            "split": args.split,
            "lambda": args.lam,
            "x0": args.x0,
            "knobs": knobs,
            "dtype": str(problem.dtype).split(".")[-1],
            "consts": consts.to_dict(),
        },
        "seed": args.seed,
        "device": args.device,
        "float_bits": args.float_bits,
        "count_init_bits": getattr(args, "count_init_bits", True),
        "versions": _versions(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return algo, problem, config


def run(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    args._argv = argv
    if args.list:
        print(list_everything())
        return EXIT_OK
    if args.resume is not None:
        try:
            args = resume_args(sys.argv[1:] if argv is None else argv, args)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        return run_distributed(args)
    if args.nodes is None:
        args.nodes = 10
    try:
        algo, problem, config = configure(args)
        out = _out_dir(args, args.algorithm)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return execute(
            algo,
            problem,
            config,
            args,
            out,
            SimulatedComm(problem.n, seed=args.seed, float_bits=args.float_bits),
        )
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def run_distributed(args) -> int:
    """Under torchrun: one node per rank over torch.distributed; rank 0 writes the run folder."""
    from algorithms.comm import torch_dist

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.nodes is not None and args.nodes != world:
        if rank == 0:
            print(
                f"error: --nodes {args.nodes} differs from the world size {world}: under "
                "torchrun every rank is one node",
                file=sys.stderr,
            )
        return EXIT_BAD_INPUT
    args.nodes = world
    if not args.timeout > 0:
        if rank == 0:
            print(f"error: --timeout must be a positive number of seconds, got {args.timeout}",
                  file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    cuda = args.device.startswith("cuda")
    backend = args.backend or ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        if rank == 0:
            print("error: --backend nccl needs --device cuda", file=sys.stderr)
        return EXIT_BAD_INPUT
    device = "cpu"
    if cuda:
        if not torch.cuda.is_available():
            if rank == 0:
                print(
                    f"error: --device {args.device!r}: CUDA is not available here", file=sys.stderr
                )
            return EXIT_BAD_INPUT
        torch.cuda.set_device(local_rank)
        device = args.device = f"cuda:{local_rank}"
    torch_dist.start_group(backend, args.timeout)
    try:
        comm = torch_dist.TorchDistComm(seed=args.seed, float_bits=args.float_bits, device=device)
        error, out = "", None
        try:
            algo, problem, config = configure(args)
            out = _out_dir(args, args.algorithm) if rank == 0 else None
        except ValueError as e:
            error = str(e)
        # Every rank must agree before any collective of the run: rank 0 alone checks --out.
        if comm.any_rank(bool(error)):
            if rank == 0:
                print(f"error: {error or 'bad input on another rank'}", file=sys.stderr)
            return EXIT_BAD_INPUT
        out = Path(comm.from_rank0(str(out)))  # a default --out is named by rank 0's clock
        config.update(world_size=world, backend=backend)
        try:
            return execute(algo, problem.local([rank]), config, args, out, comm, rank == 0)
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


def execute(
    algo: Algorithm, problem, config: dict, args, out: Path, comm, is_writer: bool = True
) -> int:
    """Run ``algo`` with ``comm``; only the writer (rank 0) writes files and prints."""
    resume = getattr(args, "resume", None) is not None
    ckpt = load_checkpoint(out, comm, problem.x0.device) if resume else None
    if is_writer:
        out.mkdir(parents=True, exist_ok=True)
        if ckpt is None:
            for stale in ("history.csv", "summary.json"):
                (out / stale).unlink(missing_ok=True)
        else:
            config = json.loads((out / "config.json").read_text())
            config.setdefault("resumed", []).append(
                {
                    "from_iter": ckpt["t"],
                    "iters": args.iters,
                    "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                }
            )
        (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    f_star = problem.consts.f_star
    T = args.iters
    log_every = args.log_every or max(1, T // 1000)
    evaluate = getattr(problem, "evaluate", None)
    device = problem.x0.device
    watch = Stopwatch(torch.cuda.synchronize if device.type == "cuda" else None)
    if ckpt is None:
        wall = 0.0
        t0 = time.perf_counter()
        with recording(watch):
            state = algo.init(problem.x0, problem, comm)
        wall += time.perf_counter() - t0
        if not getattr(args, "count_init_bits", True):
            comm.ledger.uncount()
    else:
        state, wall = ckpt["state"], ckpt["wall"]
        watch.totals.update(ckpt["times"])
    reason, last = "completed", {}
    extras_keys = list(type(algo).reports)
    if is_writer and ckpt is not None:
        _truncate_history(out / "history.csv", ckpt["t"])
    f_logged = _logged_f(out / "history.csv") if ckpt is not None else []
    mode = "a" if ckpt is not None else "w"
    sink = open(out / "history.csv", mode, newline="") if is_writer else contextlib.nullcontext()
    with sink as fh:
        writer = None
        if fh is not None and ckpt is not None:
            writer = csv.DictWriter(fh, fieldnames=HISTORY_COLUMNS + extras_keys)

        def record(t: int, extras: dict[str, float]) -> dict[str, Any]:
            nonlocal writer
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
            f_logged.append(f)
            if evaluate is not None:
                held_out = evaluate(state.x, with_grad=False)
                row.update(test_loss=held_out["loss"], test_acc=held_out["acc"])
            row.update({k: extras.get(k) for k in extras_keys})
            if fh is not None:
                if writer is None:
                    writer = csv.DictWriter(fh, fieldnames=HISTORY_COLUMNS + extras_keys)
                    writer.writeheader()
                writer.writerow({k: _fmt(row.get(k)) for k in writer.fieldnames})
                fh.flush()
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
                save_checkpoint(out, comm, state, t, wall, watch, last, is_writer)
        bar.close()
    unstable = None
    if reason in ("completed", "tolerance", "max_bits"):
        eps = torch.finfo(problem.x0.dtype).eps if problem.x0.is_floating_point() else 0.0
        unstable = objective_verdict(f_logged, f_star, eps)
        if unstable is not None:
            reason = "unstable"
            log.warning("run is unstable: f %s", unstable)
    if every and reason != "diverged":
        save_checkpoint(out, comm, state, t, wall, watch, last, is_writer)
    iters_done = max(t, 1)
    summary = {
        "reason": reason,
        **({"unstable": f"f - f_inf {unstable}"} if unstable is not None else {}),
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
    }
    if is_writer:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(_summary_text(config, summary))
    return EXIT_DIVERGED if reason in ("diverged", "unstable") else EXIT_OK


def _logged_f(path: Path) -> list[float]:
    """The ``f`` column already in a resumed run's history (its start and best count)."""
    try:
        with open(path, newline="") as fh:
            return [float(r["f"]) for r in csv.DictReader(fh) if r.get("f")]
    except (OSError, ValueError, KeyError):
        return []


# ---------------------------------------------------------------- checkpoints
def _checkpoint_file(out: Path, comm) -> Path:
    rank = int(comm.nodes[0]) if comm.m == 1 and comm.n > 1 else 0
    return out / "checkpoint" / f"rank{rank}.pt"


def save_checkpoint(out: Path, comm, state, t: int, wall: float, watch, last, is_writer) -> None:
    """Write this process's whole state at iteration ``t`` (atomically: a crash mid-write leaves
    the previous checkpoint intact). Rank 0 writes ``meta.json`` once every rank has written."""
    path = _checkpoint_file(out, comm)
    path.parent.mkdir(parents=True, exist_ok=True)
    led = comm.ledger
    blob = {
        "t": t,
        "state": state,
        "ledger": {
            "up": led.up,
            "down": led.down,
            "rounds": led.rounds,
            "full_vectors_up": led.full_vectors_up,
            "extra": dict(led.extra),
        },
        "wall": wall,
        "times": dict(watch.totals),
        "last": last,
        "n": comm.n,
        "nodes": comm.nodes,
    }
    tmp = path.with_suffix(".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    comm.barrier()
    if is_writer:
        meta = {"iter": t, "n": comm.n, "files": comm.n if comm.m == 1 and comm.n > 1 else 1}
        tmp = path.parent / "meta.json.tmp"
        tmp.write_text(json.dumps(meta) + "\n")
        os.replace(tmp, path.parent / "meta.json")


def load_checkpoint(out: Path, comm, device: torch.device) -> dict[str, Any]:
    """This process's checkpoint of the run in ``out``, restored into ``comm``'s ledger."""
    meta_path = out / "checkpoint" / "meta.json"
    if not meta_path.exists():
        raise BadInput(f"--resume {str(out)!r}: no checkpoint there (run with --checkpoint-every)")
    meta = json.loads(meta_path.read_text())
    if meta["n"] != comm.n:
        raise BadInput(f"--resume: the run had n = {meta['n']} nodes, this one has {comm.n}")
    blob = torch.load(_checkpoint_file(out, comm), weights_only=False, map_location=device)
    if blob["t"] != meta["iter"] or not torch.equal(blob["nodes"], comm.nodes):
        raise BadInput(f"--resume: checkpoint files in {str(out)!r} disagree; rerun instead")
    led = comm.ledger
    led.up.copy_(blob["ledger"]["up"])
    led.down.copy_(blob["ledger"]["down"])
    led.rounds = blob["ledger"]["rounds"]
    led.full_vectors_up = blob["ledger"]["full_vectors_up"]
    led.extra.clear()
    led.extra.update(blob["ledger"]["extra"])
    return blob


def _truncate_history(path: Path, t: int) -> None:
    """Keep the rows logged up to iteration ``t``: the resumed run logs the ones after it."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    keep = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) <= t]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as fh:
        csv.writer(fh).writerows(keep)
    os.replace(tmp, path)


def _summary_text(config: dict, s: dict) -> str:
    fin = s["final"]
    th = config["step"].get("theory") or {}
    lines = [
        f"{config['algorithm']} with {config['compressor']['spec']} on {config['problem']['name']}"
        f" (n={config['problem']['n']}, d={config['problem']['d']}): {s['reason']} after "
        f"{s['iters']} iterations" + (f" ({s['unstable']})" if s.get("unstable") else ""),
        f"  f = {fin['f']:.6g}"
        + (f", f - f* = {fin['f_gap']:.3e}" if fin.get("f_gap") is not None else "")
        + f", ||grad f||^2 = {fin['grad_norm_sq']:.3e}",
        f"  bits per node: up {fin['bits_up']:.6g} (max {fin['bits_up_max']:.6g}), "
        f"down {fin['bits_down']:.6g}",
        f"  step {s['gamma']:.6g}"
        + (
            f" = {config['step']['step_mult']:g} x theory {th['formula']} [{th.get('source', '')}]"
            if th and config["args"]["step"] == "theory"
            else " (given)"
        ),
        f"  results in {s['out']}",
    ]
    return "\n".join(lines)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    sys.exit(run())


if __name__ == "__main__":
    main()
