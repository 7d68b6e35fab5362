"""Print a problem's constants: what the theory's step sizes and rates will use.

    python -m problems --problem logreg-nonconvex --dataset breast-cancer --nodes 20 --lambda 0.1

Exit status 0, or 2 on bad input with a message naming the bad value.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence

import torch

from problems.registry import PROBLEMS, SPLIT_HELP, X0_HELP, make_problem
from problems.torch_model import TorchModel


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def knob_types() -> dict[str, type]:
    """Every knob of every problem with its command-line type (that of its default)."""
    types: dict[str, type] = {}
    for cls in PROBLEMS.values():
        for key, (default, _) in cls.knobs.items():
            types[key] = _bool if isinstance(default, bool) else type(default)
    return types


# Beyond this dimension (ResNet-18) a pass over the training data is too slow for a summary.
_MAX_D_EVAL = 1_000_000

_MEANING = {
    "L": "smoothness of f",
    "L_tilde": "sqrt(mean_i L_i^2)",
    "L_max": "max_i L_i",
    "L_pm": "Hessian variance",
    "mu": "strong convexity / PL constant of f",
    "f_star": "min f",
    "zeta2": "mean_i ||grad f_i(x*)||^2",
}
# A variational inequality (``variational``): F is an operator and f the distance to z*.
_MEANING_VI = {
    "L": "Lipschitz constant of F",
    "L_tilde": "sqrt(mean_i L_i^2), L_i of F_i",
    "L_pm": "operator variance (the Hessian variance's analogue)",
    "mu": "strong monotonicity of F",
    "f_star": "0: f is ||z - z*||^2 (a VI has no objective)",
    "zeta2": "mean_i ||F_i(z*)||^2",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m problems", description=__doc__.splitlines()[0])
    p.add_argument("--problem", choices=list(PROBLEMS), help="problem name")
    p.add_argument(
        "--dataset",
        help="synthetic, breast-cancer, digits[-binary], wine[-binary], "
        "libsvm:PATH, cifar10:PATH (default: the problem's)",
    )
    p.add_argument("--split", default="contiguous", help=SPLIT_HELP)
    p.add_argument("--nodes", type=int, default=10, help="number of nodes n")
    p.add_argument("--lambda", dest="lam", type=float, help="regularisation (default: problem's)")
    p.add_argument("--dtype", default=None, choices=["float64", "float32"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--x0", default="default", help=X0_HELP)
    p.add_argument("--json", action="store_true", help="print the constants as JSON")
    p.add_argument("--list", action="store_true", help="list problems and their options")
    for knob, typ in knob_types().items():
        helps = {h for c in PROBLEMS.values() for k, (_, h) in c.knobs.items() if k == knob}
        p.add_argument(
            f"--{knob.replace('_', '-')}",
            dest=knob,
            type=typ,
            default=None,
            help="; ".join(sorted(helps)),
        )
    return p


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.10g}"


def _counts(problem) -> str:
    counts = getattr(problem, "counts", None)
    if counts is None:
        return "none (no samples)"
    c = counts.tolist()
    groups = ", ".join(f"{k} x {v}" for k, v in sorted(Counter(c).items()))
    return f"{groups}  (total {sum(c)})" + (f"\n{'':18}{c}" if len(c) <= 40 else "")


def _why_missing(problem, key: str) -> str:
    if isinstance(problem, TorchModel):
        return "unknown for deep nets"
    if key == "L_pm":
        return "not computed: the Hessian varies with x (L_tilde bounds it)"
    if key in ("mu", "f_star", "zeta2") and not problem.convex:
        return "f is nonconvex"
    return "not known"


def report(problem, args: argparse.Namespace, t_build: float, t_consts: float) -> str:
    c = problem.consts
    lines = [
        f"{'problem':<18}{problem.name}: {problem.description}",
        f"{'dataset':<18}{args.dataset or '(default)'}",
        f"{'split':<18}{args.split}, n = {problem.n} nodes",
        f"{'samples per node':<18}{_counts(problem)}",
        f"{'d':<18}{problem.d}",
        f"{'lambda':<18}{getattr(problem, 'lam', 'n/a')}",
        f"{'dtype':<18}{str(problem.dtype).removeprefix('torch.')}",
        "",
        f"{'constant':<10}{'value':<20}meaning",
    ]
    vi = getattr(problem, "variational", False)
    for key in ("L", "L_tilde", "L_max", "L_pm", "mu", "f_star", "zeta2"):
        v = getattr(c, key)
        meaning = (_MEANING_VI if vi else {}).get(key, _MEANING[key])
        note = meaning if v is not None else _why_missing(problem, key)
        lines.append(f"{key:<10}{_fmt(v):<20}{note}")
    if vi and getattr(problem, "similarity", None) is not None:
        lines.append(f"{'delta':<10}{_fmt(problem.similarity):<20}similarity max_i ||F_i' - F'||")
    f_low = getattr(problem, "f_lower_bound", None)
    if c.f_star is None and f_low is not None:
        lines.append(f"{'f_inf >=':<10}{_fmt(f_low):<20}a lower bound of inf f (f >= {f_low:g})")
    if c.L_i is not None:
        L_i = c.L_i
        lines.append(
            f"{'L_i':<10}{'min / mean / max':<20}{L_i.min():.10g} / {L_i.mean():.10g} / "
            f"{L_i.max():.10g}"
        )
    x0 = problem.x0
    start = f"{'x0':<18}{args.x0}: ||x0|| = {float(x0.norm()):.6g}"
    if problem.d <= _MAX_D_EVAL:
        g0 = problem.full_grad(x0)
        start += (
            f", f(x0) = {float(problem.loss(x0)):.10g}, ||grad f(x0)||^2 = {float(g0 @ g0):.6g}"
        )
    lines += ["", start, f"{'time':<18}build {t_build:.3f} s, constants {t_consts:.3f} s"]
    return "\n".join(lines)


def list_problems() -> str:
    out = []
    for name, cls in PROBLEMS.items():
        out.append(f"{name}: {cls.description}")
        for k, (default, h) in cls.knobs.items():
            out.append(f"    --{k.replace('_', '-')} (default {default}): {h}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list:
        print(list_problems())
        return 0
    if args.problem is None:
        print("error: --problem is required; allowed: " + ", ".join(PROBLEMS), file=sys.stderr)
        return 2
    knobs = {k: getattr(args, k) for k in knob_types() if getattr(args, k) is not None}
    try:
        try:
            device = torch.device(args.device)
        except RuntimeError as e:
            raise ValueError(f"bad --device {args.device!r}: {e}") from e
        t = time.perf_counter()
        problem = make_problem(
            args.problem,
            dataset=args.dataset,
            split=args.split,
            nodes=args.nodes,
            lam=args.lam,
            dtype=args.dtype,
            device=device,
            seed=args.seed,
            x0=args.x0,
            **knobs,
        )
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        consts = problem.consts
        t_consts = time.perf_counter() - t
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {
                    "problem": problem.name,
                    "n": problem.n,
                    "d": problem.d,
                    "consts": consts.to_dict(full=True),
                    "build_s": t_build,
                    "consts_s": t_consts,
                },
                indent=2,
            )
        )
    else:
        print(report(problem, args, t_build, t_consts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
