"""A sweep's runs checked before the first one starts, with the runner's own code.

Two passes, cheapest first:

- :func:`check_grid` (``load_config`` calls it; no problem is built, well under a second for
  the largest grid allowed): every base, method and grid value goes through the runner's
  parser; two values of a grid key that the runner reads as the same value (``1``, ``1.0`` and
  ``1e0``; ``"topk:k=1"`` and ``"topk: k=1"``) are refused as a repeat, and so are two methods
  that give the same runs (an alias, a flag set to its default); every run's scalar options
  pass the runner's :func:`~runner.cli.check_run_options` and its ``--step`` parse.
- :func:`resolve_runs` (``run_sweep`` calls it before it touches the sweep folder): every
  compressor spec parses, and one run per group (runs that differ only in ``step_mult`` and
  ``seed``) is resolved by :func:`runner.resolve.configure`, quietly: the problem is
  built (its data file read, its constants computed) and the method configured with its
  step, so a missing data file or an option the method does not take is found here.

A refusal is a ``ValueError`` that names the config key and its value, then the runner's own
words: ``grid.iters = -1: --iters must be >= 1, got -1``. A resolved run's refusal starts with
the run (``run EF21_m1_s0_1a2b3c4d: base.byzantine = 1: --byzantine does not apply to ef21;
...``); the key is the one whose flag the message names or, failing that, whose quoted value or
name it contains; a message that names no key of the config is left with the run alone, whose
id spells the values that vary.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import math
import re
import warnings
from collections.abc import Iterator
from typing import Any

from experiments.config import SweepConfig, _argv, _parser
from runner.config import RunConfig

# A sweep key whose value is a compressor spec: repeats are found on the parsed spec.
SPEC_KEYS = ("compressor", "down_compressor")
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")

Source = tuple[str, str, Any]  # (where: "grid" | "methods[i]" | "base", key, value)


def check_grid(cfg: SweepConfig) -> None:
    """Parse every value with the runner's parser and check every run's scalar options.

    Raises:
        ValueError: a value the parser refuses, a repeated grid value, two methods giving the
            same runs, or a run whose options the runner's checks refuse; the message names
            the key and the value.
    """
    dests = _dests()
    keys = list(cfg.grid)
    parsed = {k: [_parse_one(k, v, dests) for v in cfg.grid[k]] for k in keys}
    for k in keys:
        _refuse_repeats(k, cfg.grid[k], parsed[k], dests[k])
    fixed = [_fixed(cfg, i) for i in range(len(cfg.methods))]
    _refuse_same_methods(cfg, fixed)
    per_method = math.prod(len(v) for v in cfg.grid.values())
    for i, ns0 in enumerate(fixed):
        start = vars(ns0)
        for n, combo in enumerate(itertools.product(*(range(len(cfg.grid[k])) for k in keys))):
            ns = argparse.Namespace(**start)
            for k, j in zip(keys, combo, strict=True):
                setattr(ns, dests[k], parsed[k][j])
            err = _scalar_error(ns)
            if err is not None:
                varied = {k: cfg.grid[k][j] for k, j in zip(keys, combo, strict=True)}
                blamed = _blame(err, _sources(cfg, i, varied), by_value=False)
                if blamed is None:
                    spec = cfg.runs()[i * per_method + n]
                    raise ValueError(f"run {spec.run_id}: {err}")
                raise ValueError(blamed)


def resolve_runs(
    cfg: SweepConfig, *, device_here: bool = True, threads: int | None = None,
    points: dict[tuple, set[int]] | None = None,
) -> None:  # fmt: skip
    """Resolve one run per group with the runner's ``configure`` (problem built, method set).

    Runs are resolved on the CPU: the sweep's own process holds no accelerator, and a problem
    is the same there. ``device_here`` also checks that each ``device`` exists on this machine
    (not for runs that start elsewhere, e.g. SLURM jobs). ``threads``: the runs' own thread
    count, where they run on this machine; each problem is then built on it, so that the
    gradients' engine it measures (:mod:`problems.glm_engine`), here, before any run loads
    the cores, is memoised under the key its runs look up. Otherwise every run would measure
    it again beside the others, and on a loaded machine memoise nothing (measured: 0.5-0.8 s
    a run on a9a, with one other core busy). ``points`` (with ``threads``): per group
    (:func:`experiments.select.group_key`), the run counts of the batches its runs will
    advance in (:func:`experiments.sweep_pool.planned_batches`); the problem then also chooses
    its engine for the gradients at that many points (:meth:`problems.base.Problem.
    prepare_points`), here, for the same reason: measured in each batch beside another, the
    EF21 grid's eight batches took 0.6-1.1 s each at it, memoised nothing, and measured again
    in every later sweep.

    Raises:
        ValueError: a compressor spec that does not parse, a device missing here, or a run
            that ``configure`` refuses (a data file that is missing, an option the method does
            not take, a compressor too large for the problem, ...), named as described in the
            module doc.
    """
    from compressors import parse_spec
    from experiments.select import group_key
    from problems.glm_engine import threads_used
    from runner.resolve import check_device, configure

    seen: set[tuple] = set()
    for where, key, value in _all_sources(cfg):
        if (key, str(value)) in seen:
            continue
        seen.add((key, str(value)))
        try:
            if key in SPEC_KEYS:
                parse_spec(value)
            elif key == "device" and device_here:
                check_device(str(value))
        except ValueError as e:
            raise ValueError(f"{where}.{key} = {_show(value)}: {e}") from None
    groups: set[tuple] = set()
    for spec, (i, varied) in zip(cfg.runs(), _combos(cfg), strict=True):
        group = group_key(spec.params)
        if group in groups:
            continue
        groups.add(group)
        args = RunConfig.from_namespace(_parser().parse_args(spec.argv), list(spec.argv))
        args.nodes = 10 if args.nodes is None else args.nodes  # the runner's default
        here = threads is not None and args.device == "cpu"  # the batches' engine: chosen here
        sizes = (points or {}).get(group, ()) if here else ()
        args.device = "cpu"
        try:
            with _quiet(), threads_used(threads):
                _, problem, _ = configure(args)
                for R in sorted(sizes):
                    problem.prepare_points(R)
        except (ValueError, OSError) as e:
            err = str(e)
            blamed = _blame(err, _sources(cfg, i, varied), by_value=True)
            raise ValueError(f"run {spec.run_id}: {blamed or err}") from None


def _dests() -> dict[str, str]:
    """Sweep key (the flag's name, underscores) -> the runner's namespace attribute."""
    out = {}
    for action in _parser()._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                out[opt[2:].replace("-", "_")] = action.dest
    return out


def _parse(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """The runner's parse of ``argv``, or None and the parser's message (without its prog)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return _parser().parse_args(argv), ""
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        msg = lines[-1] if lines else "the runner's parser refuses it"
        return None, msg.split(": error: ", 1)[-1]


def _parse_one(key: str, value: Any, dests: dict[str, str]) -> Any:
    """The runner's value of ``--key value`` alone (``grid.key = value`` refused if bad)."""
    ns, err = _parse(_argv({key: value}))
    if ns is None:
        raise ValueError(f"grid.{key} = {_show(value)}: the runner rejects its arguments: {err}")
    return getattr(ns, dests[key])


def _fixed(cfg: SweepConfig, i: int) -> argparse.Namespace:
    """Method ``i``'s base and own flags parsed (the grid keys at the runner's defaults)."""
    method = cfg.methods[i]
    opts = {k: v for k, v in method.items() if k not in ("algorithm", "label")}
    ns, err = _parse([method["algorithm"], *_argv({**cfg.base, **opts})])
    if ns is not None:
        return ns
    for where, key, value in _sources(cfg, i, {}):
        alone, why = _parse([method["algorithm"], *_argv({key: value})])
        if alone is None:
            raise ValueError(f"{where}.{key} = {_show(value)}: the runner rejects its arguments: "
                             f"{why}")  # fmt: skip
    raise ValueError(f"methods[{i}]: the runner rejects its arguments: {err}")


def _norm(value: Any, dest: str) -> Any:
    """What the runner makes of a parsed value, comparable: numbers in text as floats,
    compressor specs as their canonical spec, lists as tuples."""
    if isinstance(value, list):
        return tuple(_norm(v, dest) for v in value)
    if not isinstance(value, str):
        return value
    if dest in SPEC_KEYS:
        from compressors import parse_spec

        try:
            return parse_spec(value).spec()
        except ValueError:
            return value
    key, eq, rest = value.partition("=")
    if eq and dest == "problem_opt":
        return key, _norm(rest, "")
    try:
        return float(value)
    except ValueError:
        return value


def _refuse_repeats(key: str, raw: list, parsed: list, dest: str) -> None:
    first: dict[Any, int] = {}
    for j, v in enumerate(parsed):
        n = _norm(v, dest)
        if n in first:
            a = raw[first[n]]
            flag = "--" + key.replace("_", "-")
            shown = n if dest in SPEC_KEYS else " ".join(v) if isinstance(v, list) else v
            raise ValueError(
                f"grid.{key} repeats a value: {_show(a)} and {_show(raw[j])} are the same "
                f"{flag} {shown}; give each value once"
            )
        first[n] = j


def _refuse_same_methods(cfg: SweepConfig, fixed: list[argparse.Namespace]) -> None:
    from algorithms.registry import ALIASES

    first: dict[tuple, int] = {}
    for i, ns in enumerate(fixed):
        items = {k: _norm(v, k) for k, v in vars(ns).items()}
        items["algorithm"] = ALIASES.get(ns.algorithm, ns.algorithm)
        n = tuple(sorted(items.items(), key=lambda kv: kv[0]))
        if n in first:
            j = first[n]
            a, b = cfg.methods[j]["algorithm"], cfg.methods[i]["algorithm"]
            same = f"algorithm {a!r}" + (f" (= {b!r})" if a != b else "")
            raise ValueError(
                f"methods[{i}] gives the same runs as methods[{j}]: {same} with the same flags "
                "(once defaults and numbers are read as the runner reads them); keep one, or "
                "make them differ in a flag"
            )
        first[n] = i


def _scalar_error(ns: argparse.Namespace) -> str | None:
    """The runner's checks of a run's scalar options (no problem built), or None if it passes."""
    from runner.cli import check_run_options

    try:
        check_run_options(ns)
    except ValueError as e:
        return str(e)
    from runner.config import STEP_CHOICES, STEP_WORDS

    if ns.step not in STEP_WORDS:  # as configure reads --step
        try:
            step = float(ns.step)
        except ValueError:
            step = math.nan
        if not (step > 0 and math.isfinite(step)):
            return f"--step must be {STEP_CHOICES}, got {ns.step!r}"
    return None


def _sources(cfg: SweepConfig, i: int, varied: dict) -> list[Source]:
    """Where each flag of method ``i``'s run with grid values ``varied`` comes from."""
    method = cfg.methods[i]
    out: list[Source] = [("grid", k, v) for k, v in varied.items()]
    opts = [k for k in method if k not in ("algorithm", "label")]
    out += [(f"methods[{i}]", k, method[k]) for k in opts]
    out += [("base", k, v) for k, v in cfg.base.items() if k not in opts]
    return out


def _all_sources(cfg: SweepConfig) -> Iterator[Source]:
    yield from (("base", k, v) for k, v in cfg.base.items())
    for i, method in enumerate(cfg.methods):
        yield from ((f"methods[{i}]", k, v) for k, v in method.items() if k != "label")
    for k, values in cfg.grid.items():
        yield from (("grid", k, v) for v in values)


def _combos(cfg: SweepConfig) -> Iterator[tuple[int, dict]]:
    """(method index, grid values) of every run, in the order of ``SweepConfig.runs``."""
    keys = list(cfg.grid)
    for i in range(len(cfg.methods)):
        for combo in itertools.product(*(cfg.grid[k] for k in keys)):
            yield i, dict(zip(keys, combo, strict=True))


def _blame(err: str, sources: list[Source], by_value: bool) -> str | None:
    """``where.key = value: err`` for the config key the runner's message names: its flag or,
    with ``by_value`` (messages of problems, compressors and methods), its quoted value or its
    name as a word; None when it names none."""
    tests = [lambda key, value: key in {f.replace("-", "_") for f in _FLAG.findall(err)}]
    if by_value:
        tests.append(
            lambda key, value: (
                isinstance(value, str)
                and any(f"'{part}'" in err for part in {value, value.partition(":")[2]} if part)
            )
        )
        tests.append(lambda key, value: re.search(rf"\b{re.escape(key)}\b", err) is not None)
    for test in tests:
        for where, key, value in sources:
            if test(key, value):
                return f"{where}.{key} = {_show(value)}: {err}"
    return None


def _show(value: Any) -> str:
    """A config value as TOML writes it (strings quoted, booleans lower case)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value)


@contextlib.contextmanager
def _quiet():
    """No output while a run is resolved: ``configure`` may print, log and warn."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)
