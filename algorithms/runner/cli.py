"""The runner's command line: the parser, ``--list``, option checks and ``--resume``'s arguments.

Every bad value ends as :class:`BadInput` (exit 2) with a message naming the value and what is
allowed; argparse's own errors (a non-integer ``--iters``, an unknown ``--dtype``) exit 2 too.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import re
from pathlib import Path
from typing import Any

from algorithms.registry import ALGORITHMS, ALIASES
from algorithms.runner.common import RESUME_OVERRIDES, BadInput
from compressors import COMPRESSORS
from streams.suggest import did_you_mean


def method_options() -> dict[str, tuple[str, Any]]:
    """Every method option by its flag: ``flag -> (field, Option)`` (union over methods).

    Methods may share a flag (``--init``, ``--mechanism``) with different allowed values: the
    flag accepts the union of their choices, and each method refuses the values it does not
    take when it is built (its ``__post_init__``: exit 2 naming what it allows). A flag shared
    with another field name or type is a registry error."""
    out: dict[str, tuple[str, Any]] = {}
    for key, cls in ALGORITHMS.items():
        for name, opt in cls.options.items():
            if name == "down_compressor":  # has its own --down-compressor SPEC flag
                continue
            flag = opt.flag or name
            if flag not in out:
                out[flag] = (name, opt)
                continue
            first_name, first = out[flag]
            if (first_name, first.type) != (name, opt.type):
                raise ValueError(
                    f"--{flag} of {key} is field {name!r} of type {opt.type.__name__}, but "
                    f"another method's --{flag} is {first_name!r} of {first.type.__name__}"
                )
            if first.choices and opt.choices:
                union = tuple(dict.fromkeys((*first.choices, *opt.choices)))
                out[flag] = (name, dataclasses.replace(first, choices=union))
            elif first.choices or opt.choices:  # one of them takes any value
                out[flag] = (name, dataclasses.replace(first, choices=None))
    return out


class _Parser(argparse.ArgumentParser):
    """argparse with a short error: one line naming the bad flag or value, a close flag name
    for a mistyped one, and where the help is (not the whole usage of every flag)."""

    def error(self, message: str):
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            flags = [o[2:] for o in self._option_string_actions if o.startswith("--")]
            for tok in unknown.group(1).split():
                if tok.startswith("--"):
                    message += did_you_mean(tok[2:].split("=", 1)[0], flags, prefix="--")
                    break
        self.exit(2, f"{self.prog}: error: {message}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
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
    for flag, (name, opt) in method_options().items():
        users = sorted(k for k, c in ALGORITHMS.items() if name in c.options)
        kw: dict[str, Any] = {
            "default": None,
            "dest": f"opt_{name}",
            "help": f"{opt.help} [{', '.join(users)}]",
            "type": parse_bool if opt.type is bool else opt.type,
        }
        if opt.choices:
            kw["choices"] = opt.choices
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
        "--nodes", type=int, default=None, help="number of nodes n (default 10; under torchrun "
        "the world size)"
    )  # fmt: skip
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
    r.add_argument("--device", default="cpu", help="cpu, cuda or cuda:INDEX")
    r.add_argument("--dtype", choices=("float64", "float32"), default=None)
    r.add_argument(
        "--float-bits", type=int, default=32, help="wire width of a float: 16, 32 or 64 bits"
    )
    r.add_argument(
        "--count-init-bits",
        type=parse_bool,
        default=True,
        metavar="yes|no",
        help="count the bits a method sends at initialisation (e.g. the full grad f_i(x^0) of "
        "EF21 --init full, MARINA, DASHA) in bits_up/bits_down (default yes; the EF21 code: no)",
    )
    r.add_argument("--log-every", type=int, default=None, help="log every K iterations")
    r.add_argument("--out", default=None, help="run folder (default: runs/NAME-TIME)")
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in a non-empty --out (removes its config, history, summary and "
        "checkpoint; other files are left alone)",
    )
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


def parse_bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected yes|no|true|false|1|0, got {v!r}")


# Words that end in a full stop without ending the sentence.
_ABBREVIATIONS = {"e.g", "i.e", "al", "alg", "def", "sec", "eq", "eqs", "cf", "vs", "thm", "fig",
                  "no", "resp", "etc", "approx", "prop", "lem", "cor", "ch"}  # fmt: skip


def first_sentence(obj) -> str:
    """The first sentence of ``obj``'s docstring (its first paragraph up to the first full
    stop outside parentheses and literals that ends neither an abbreviation nor an ellipsis),
    on one line."""
    doc = inspect.getdoc(obj) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    depth, code = 0, False
    for i, ch in enumerate(para):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        code = code != (ch == "`")  # inside ``literal`` text
        ends = i + 1 == len(para) or para[i + 1] == " "
        if ch in ".!?" and depth <= 0 and not code and ends and para[i - 1 : i] != ".":
            word = re.split(r"[\s(]", para[:i])[-1].lower()
            if word not in _ABBREVIATIONS and not re.fullmatch(r"[a-z]", word):
                return para[: i + 1]
    return para


def list_everything() -> str:
    from problems import datasets
    from problems.registry import PROBLEMS

    lines = ["algorithms:"]
    for name, cls in ALGORITHMS.items():
        opts = ", ".join(f"--{(o.flag or k).replace('_', '-')}" for k, o in cls.options.items())
        lines.append(f"  {name:16s} {first_sentence(cls)}" + (f"  [{opts}]" if opts else ""))
    for alias, target in ALIASES.items():
        lines.append(f"  {alias:16s} alias of {target}")
    lines.append("compressors:")
    for name, cls in COMPRESSORS.items():
        fields = ", ".join(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
        lines.append(f"  {name:16s} {first_sentence(cls)}" + (f"  [{fields}]" if fields else ""))
    lines.append("problems:")
    for name, cls in PROBLEMS.items():
        knobs = ", ".join(cls.knobs)
        lines.append(
            f"  {name:16s} {cls.description or first_sentence(cls)}"
            + (f"  [--problem-opt {knobs}]" if knobs else "")
        )
    lines += datasets.listing()
    return "\n".join(lines)


def parse_knobs(problem: str, items: list[str]) -> dict[str, Any]:
    """``--problem-opt KEY=VALUE`` items, each typed as its knob's default."""
    from problems.registry import PROBLEMS

    cls = PROBLEMS.get(problem)
    knobs: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq:
            raise BadInput(f"--problem-opt expects KEY=VALUE, got {item!r}")
        if key in knobs:
            raise BadInput(
                f"--problem-opt {key} is given twice ({knobs[key]!r}, then {raw!r}); give each "
                "key once"
            )
        if cls is None or key not in cls.knobs:
            allowed = ", ".join(cls.knobs) if cls else "none"
            hint = did_you_mean(key, cls.knobs) if cls else ""
            raise BadInput(f"unknown --problem-opt {key!r} for {problem}{hint}; allowed: {allowed}")
        default = cls.knobs[key][0]
        try:
            if isinstance(default, bool):
                knobs[key] = parse_bool(raw)
            elif isinstance(default, int):
                knobs[key] = int(raw)
            elif isinstance(default, float):
                knobs[key] = float(raw)
            else:
                knobs[key] = raw
        except (ValueError, argparse.ArgumentTypeError) as e:
            names = {bool: "a boolean", int: "an integer", float: "a number"}
            kind = names.get(type(default), type(default).__name__)
            raise BadInput(f"--problem-opt {key}={raw!r}: expected {kind} ({e})") from None
    return knobs


def check_run_options(args) -> None:
    """The run options' ranges (those the problem, method and comm layer do not check)."""
    for key in ("out", "resume"):
        val = getattr(args, key, None)
        if val is not None and not str(val).strip():
            raise BadInput(f"--{key} is empty; give a folder path (e.g. --{key} runs/mine)")
    for key, val in (("--iters", args.iters), ("--nodes", args.nodes)):
        if val is not None and val < 1:
            raise BadInput(f"{key} must be >= 1, got {val}")
    for key in ("log_every", "checkpoint_every"):
        val = getattr(args, key, None)
        if val is not None and val < 1:
            raise BadInput(f"--{key.replace('_', '-')} must be >= 1, got {val}")
    if args.float_bits not in (16, 32, 64):
        raise BadInput(f"--float-bits must be 16, 32 or 64 (bits per float), got {args.float_bits}")
    if not (args.step_mult > 0 and math.isfinite(args.step_mult)):
        raise BadInput(f"--step-mult must be a positive number, got {args.step_mult}")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise BadInput(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.tol is not None and not (args.tol >= 0 and math.isfinite(args.tol)):
        raise BadInput(f"--tol must be a finite number >= 0, got {args.tol}")
    if args.max_bits is not None and not (args.max_bits > 0 and math.isfinite(args.max_bits)):
        raise BadInput(f"--max-bits must be a positive number of bits, got {args.max_bits}")
    if not 0 <= args.seed < 2**63:
        raise BadInput(f"--seed must be an integer in [0, 2**63), got {args.seed}")
    if args.iters is not None and args.iters >= 2**62:
        raise BadInput(f"--iters must be below 2**62, got {args.iters}")


def given_options(ap: argparse.ArgumentParser, tokens: list[str]) -> set[str]:
    """The destinations of the options written out in ``tokens``."""
    out = set()
    for tok in tokens:
        action = ap._option_string_actions.get(tok.split("=", 1)[0]) if tok[:2] == "--" else None
        if action is not None:
            out.add(action.dest)
    return out


def resume_args(tokens: list[str], args: argparse.Namespace) -> argparse.Namespace:
    """The arguments of the run in ``args.resume``, with the overrides ``tokens`` give."""
    if not args.resume.strip():
        raise BadInput("--resume is empty; give the folder of a run (the --out of a run)")
    folder = Path(args.resume)
    cfg = folder / "config.json"
    if not cfg.is_file():
        what = "a folder" if folder.is_dir() else "a file" if folder.exists() else "no folder"
        raise BadInput(
            f"--resume {args.resume!r}: no config.json there ({what}); give a run's folder "
            "(the --out of a run)"
        )
    try:
        config = json.loads(cfg.read_text())
        argv, nodes, log_every = (config["argv"], config["args"]["nodes"],
                                  config["args"]["log_every"])  # fmt: skip
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise TypeError("argv is not a list of strings")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise BadInput(
            f"--resume: {str(cfg)!r} is not a run's config ({type(e).__name__}: {e}); "
            "it cannot be resumed"
        ) from None
    ap = build_parser()
    given = given_options(ap, tokens) - {"resume"}
    others = sorted(given - set(RESUME_OVERRIDES))
    if others or args.algorithm is not None:
        bad = ", ".join("--" + k.replace("_", "-") for k in others) or args.algorithm
        allowed = ", ".join("--" + k.replace("_", "-") for k in RESUME_OVERRIDES)
        raise BadInput(
            f"--resume continues a run with its own arguments; it may change only {allowed}, "
            f"got {bad}"
        )
    try:
        new = ap.parse_args(argv)
    except SystemExit:
        raise BadInput(f"--resume: the argv in {str(cfg)!r} does not parse") from None
    new._argv = argv
    for key in given:
        setattr(new, key, getattr(args, key))
    new.nodes, new.log_every = nodes, log_every
    new.resume = new.out = str(folder)
    return new
