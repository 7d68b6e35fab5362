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
from compressors import COMPRESSORS
from runner.common import RESUME_OVERRIDES, BadInput
from runner.config import RunConfig, add_run_flags, parse_bool
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


def own_flags(cls) -> list[str]:
    """A method's option flags as written on the command line (``--init``, ``--regime``)."""
    return [f"--{(o.flag or k).replace('_', '-')}" for k, o in cls.options.items()
            if k != "down_compressor"]  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse with a short error: one line naming the bad flag or value, a close flag name
    for a mistyped one, and where the help is (not the whole usage of every flag)."""

    method: str | None = None
    method_cls: type | None = None

    def describe(self, message: str) -> str:
        """The error ``message`` as the user reads it: a flag of another method says so and
        names this method's own; a mistyped flag gets the closest names."""
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if not unknown:
            return message
        tok = next((t for t in unknown.group(1).split() if t.startswith("--")), None)
        if tok is None:
            return message
        flag = tok[2:].split("=", 1)[0]
        if self.method_cls is not None and flag.replace("-", "_") in method_options():
            own = ", ".join(own_flags(self.method_cls)) or "none"
            return f"--{flag} does not apply to {self.method}; its options: {own}"
        flags = [o[2:] for o in self._option_string_actions if o.startswith("--")]
        return message + did_you_mean(flag, flags, prefix="--")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {self.describe(message)}; see --help\n")


def parse_run(argv: list[str]) -> RunConfig:
    """A command line as a :class:`RunConfig` (the parser of its method: argparse's errors
    exit 2 with the message)."""
    return RunConfig.from_namespace(build_parser(method_in(argv)).parse_args(argv), argv)


def method_in(argv: list[str]) -> str | None:
    """The ALGORITHM of a command line: its first word that is neither a flag nor a flag's
    value (every method option takes a value, as do the common flags but the on/off ones)."""
    switches = {a.option_strings[0] for a in build_parser()._actions
                if a.nargs == 0 and a.option_strings}  # fmt: skip
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok == "--":
            continue
        if tok.startswith("-"):
            skip = "=" not in tok and tok.split("=", 1)[0] not in switches
            continue
        return tok
    return None


def build_parser(
    method: str | type | None = None, *, every: bool = False
) -> argparse.ArgumentParser:
    """The runner's parser: the common flags, and the options of ``method`` (a registry name or
    an :class:`algorithms.base.Algorithm` class) or, with ``every``, of every registered method
    (what a sweep config may name). Without either it has the common flags only, and says how
    to see a method's."""
    cls = None
    if isinstance(method, str):
        key = ALIASES.get(method, method)
        cls = ALGORITHMS[key] if key in ALGORITHMS else None
    elif isinstance(method, type):
        cls = method
    name = method if isinstance(method, str) else getattr(cls, "__name__", None)
    ap = _Parser(
        prog="python -m algorithms.run",
        usage=f"python -m algorithms.run {name if cls is not None else 'ALGORITHM'} [options]",
        description="Run one communication-compressed method on one problem."
        + (f" {name}: {first_sentence(cls)} {provenance_text(cls)}" if cls is not None else ""),
        epilog=None if (cls is not None or every) else
        "A method's own options: python -m algorithms.run METHOD --help (e.g. ef21 --help); "
        "every method, compressor, problem and data set: python -m algorithms.run --list.",
    )  # fmt: skip
    ap.method, ap.method_cls = name, cls
    ap.add_argument("algorithm", nargs="?", help="registry name (see --list)")
    groups = {"": ap, "method": ap.add_argument_group("method")}
    if every:
        chosen = method_options()
    elif cls is not None:
        chosen = {(o.flag or k): (k, o) for k, o in cls.options.items() if k != "down_compressor"}
    else:
        chosen = {}
    own = ap.add_argument_group(f"{name}'s options") if cls is not None else groups["method"]
    groups["problem"], groups["run"] = (
        ap.add_argument_group("problem"),
        ap.add_argument_group("run"),
    )
    add_run_flags(ap, groups)
    for flag, (field_name, opt) in chosen.items():
        kw: dict[str, Any] = {
            "default": None,
            "dest": f"opt_{field_name}",
            "help": opt.help + (f" (default: {opt.default})" if opt.default is not None else ""),
            "type": parse_bool if opt.type is bool else opt.type,
        }
        if opt.choices:
            kw["choices"] = opt.choices
        else:
            kw["metavar"] = flag.upper().replace("-", "_")  # never the internal opt_ name
        if every:
            users = sorted(k for k, c in ALGORITHMS.items() if field_name in c.options)
            kw["help"] = f"{opt.help} [{', '.join(users)}]"
        own.add_argument(f"--{flag.replace('_', '-')}", **kw)
    return ap


def provenance_text(cls) -> str:
    """A method's default step and where it comes from, for its ``--help``."""
    pv = cls.provenance
    if pv is None:
        return "Default step: provenance not declared."
    if pv.kind == "none":
        return f"Default step: none, give --step ({pv.ref})."
    text = f"Default step ({pv.kind}): {pv.ref}"
    if pv.where:
        text += f"; derivation in {pv.where}"
    if pv.kind == "practical":
        text += "; --step theory gives the theorem's step"
    return text + "."


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

    lines = ["algorithms (the default step's provenance in brackets, see METHOD --help):"]
    for name, cls in ALGORITHMS.items():
        opts = ", ".join(f"--{(o.flag or k).replace('_', '-')}" for k, o in cls.options.items())
        kind = cls.provenance.kind if cls.provenance is not None else "undeclared"
        lines.append(
            f"  {name:16s} [{kind}] {first_sentence(cls)}" + (f"  [{opts}]" if opts else "")
        )
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


def resume_args(tokens: list[str], args: RunConfig) -> RunConfig:
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
    ap = build_parser(method_in(argv))
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
        new = RunConfig.from_namespace(ap.parse_args(argv), argv)
    except SystemExit:
        raise BadInput(f"--resume: the argv in {str(cfg)!r} does not parse") from None
    for key in given:
        setattr(new, key, getattr(args, key))
    new.nodes, new.log_every = nodes, log_every
    new.resume = new.out = str(folder)
    return new
