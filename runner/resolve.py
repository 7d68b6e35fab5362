"""What a command line resolves to: the method, the problem and the record for ``config.json``
(every resolved parameter, the problem's constants, the compressor's constant and bit model, the
step size and the formula it came from, library versions)."""

from __future__ import annotations

import inspect
import math
import platform
import sys
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from algorithms.base import Algorithm
from algorithms.registry import get_algorithm
from compressors import Blockwise, Compressor, parse_spec
from runner.cli import check_run_options, own_flags, parse_knobs
from runner.common import BadInput
from runner.config import STEP_CHOICES, STEP_WORDS, RunConfig


def check_device(device: str) -> None:
    """``--device``: ``cpu``, ``cuda`` or ``cuda:INDEX`` of a GPU present here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise BadInput(f"--device {device!r}: allowed are cpu, cuda and cuda:INDEX")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BadInput(f"--device {device!r}: CUDA is not available here; use cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise BadInput(
                f"--device {device!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}"
            )


def compressor_record(c: Compressor, d: int) -> dict[str, Any]:
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


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    try:
        out["compzoo"] = metadata.version("compzoo")
    except metadata.PackageNotFoundError:
        out["compzoo"] = "not installed"
    return out


def configure(
    args: RunConfig, objects: dict[str, Any] | None = None
) -> tuple[Algorithm, Any, dict[str, Any]]:
    """Resolve a run's configuration into a method, a problem and the config record. ``objects``
    (from :func:`runner.api.run`) may give the method's class (``"algorithm"``), a
    compressor and a problem as objects instead of names."""
    from problems import capabilities
    from problems.registry import make_problem

    objects = objects or {}
    if args.algorithm is None:
        raise BadInput("give an ALGORITHM (see --list)")
    cls = objects.get("algorithm") or get_algorithm(args.algorithm)
    check_run_options(args)
    if args.log_every is None:
        args.log_every = max(1, args.iters // 1000)
    step: str | float = args.step
    if step not in STEP_WORDS:
        try:
            step = float(step)
        except ValueError:
            raise BadInput(f"--step must be {STEP_CHOICES}, got {args.step!r}") from None
        if not step > 0 or not math.isfinite(step):
            raise BadInput(f"--step must be {STEP_CHOICES}, got {args.step!r}")
    check_device(args.device)
    knobs = parse_knobs(args.problem, args.problem_opt) if "problem" not in objects else {}
    problem = objects.get("problem") or make_problem(
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
    if args.tol is not None and args.tol_on == "f_gap" and problem.consts.f_star is None:
        raise BadInput(
            f"--tol-on f_gap: f_star of {args.problem} is unknown (no f - f_star to test); "
            "use --tol-on grad_norm_sq"
        )
    compressor = objects.get("compressor") or parse_spec(args.compressor)
    if args.layerwise:
        sizes = getattr(problem, "param_sizes", None)
        if sizes is None:
            raise BadInput(
                f"--layerwise compresses each parameter tensor separately; problem "
                f"{args.problem!r} has none (use a deep-net problem: mlp, cnn, resnet18)"
            )
        compressor = Blockwise.for_sizes(compressor, sizes)
    opts: dict[str, Any] = {}
    for name, val in args.method_options.items():
        if val is None:
            continue
        if name not in cls.options:
            raise BadInput(
                f"--{name.replace('_', '-')} does not apply to {args.algorithm}; "
                f"its options: {', '.join(own_flags(cls)) or 'none'}"
            )
        opts[name] = val
    if args.down_compressor is not None:
        if "down_compressor" not in cls.options:
            raise BadInput(
                f"--down-compressor does not apply to {args.algorithm}: it compresses uplink only"
            )
        opts["down_compressor"] = parse_spec(args.down_compressor)
    for name, opt in cls.options.items():  # defaults that are a run option (DCGD's horizon T)
        if opt.from_run and opts.get(name) is None:
            opts[name] = getattr(args, opt.from_run)
    # A variational inequality (quadratic-game) only for methods that solve VIs (exit 2).
    capabilities.check_kind(cls.__name__, cls, problem)
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
        "argv": sys.argv[1:] if args.argv is None else args.argv,
        "algorithm": args.algorithm,
        "algorithm_class": cls.__name__,
        "args": args.record(cls),
        "method": {
            k: (v.spec() if isinstance(v, Compressor) else v) for k, v in algo.params().items()
        },
        "step": theory_record,
        "compressor": compressor_record(algo.compressor, cls.message_dim(problem.d)),
        "problem": {
            "name": type(problem).__name__ if "problem" in objects else args.problem,
            "n": problem.n,
            "d": problem.d,
            "dataset": args.dataset,
            "split": args.split,
            "lambda": args.lam,
            "x0": args.x0,
            "knobs": knobs,
            "dtype": str(problem.dtype).split(".")[-1],
            "engine": getattr(problem, "engine", None),
            "consts": consts.to_dict(),
        },
        "seed": args.seed,
        "device": args.device,
        "float_bits": args.float_bits,
        "count_init_bits": getattr(args, "count_init_bits", True),
        "versions": versions(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return algo, problem, config
