"""Sweep configs: a TOML file (or dict) naming methods, shared runner flags and a grid.

A config crosses every ``[[methods]]`` entry with the product of the ``[grid]`` lists; each
combination is one call of ``python -m algorithms.run``. Keys are the runner's flags without the
leading ``--`` (dashes or underscores), checked against the runner's own parser, so a typo fails
at load time rather than after hours of sweeping::

    name = "ef21-vs-ef"
    [base]
    problem = "quadratic"
    nodes = 20
    [[methods]]
    algorithm = "ef21"
    label = "EF21"
    [grid]
    compressor = ["topk:k=1", "topk:k=2"]
    step_mult = { base = 2, from = 0, to = 11 }   # 2**0 .. 2**11, both ends included
    seed = [0]
    [select]
    rule = "bits_to_tol"
    metric = "grad_norm_sq"
    tol = 1e-4

A ``{base, from, to}`` table stands for the list ``[base**e for e in from..to]`` (integer
exponents, both ends included), the papers' power-of-two multiplier grids.

The whole grid is checked before anything runs: a key holds at most ``MAX_VALUES`` values and a
sweep at most ``MAX_RUNS`` runs (refused before they are expanded), and every value goes
through the runner's own parser and checks (:mod:`experiments.validate`), so a bad value is one
error naming its key, not a sweep of failed runs.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

TOP_KEYS = ("name", "base", "methods", "grid", "select")
SELECT_KEYS = ("rule", "metric", "tol")
RULES = ("min_final", "bits_to_tol")
# Flags the sweep sets itself for every run, or that make no sense inside a sweep.
MANAGED = ("out", "overwrite", "quiet", "resume", "list", "help", "algorithm")
# Parameters every RunSpec carries, filled with the runner's defaults when the config omits them.
CORE_DEFAULTS = {"compressor": "identity", "step_mult": 1.0, "seed": 0}
_SAFE = re.compile(r"[^A-Za-z0-9._=+-]+")
# A sweep's name is one folder name under runs/sweeps/: no separators, no "." or "..", no
# hidden folder.
_NAME = re.compile(r"[A-Za-z0-9_=+-][A-Za-z0-9._=+-]{0,99}")
MAX_VALUES = 10_000  # values of one grid key
MAX_RUNS = 100_000  # runs of one sweep


@dataclass(frozen=True)
class Selection:
    """How the best step-size multiplier of a group is chosen.

    Attributes:
        rule: ``"min_final"`` (lowest mean over seeds of the final ``metric``) or
            ``"bits_to_tol"`` (fewest mean uplink bits per node until ``metric <= tol``).
        metric: a ``history.csv`` column.
        tol: the threshold of ``bits_to_tol`` (also tabulated under ``min_final`` when given).
    """

    rule: str = "min_final"
    metric: str = "grad_norm_sq"
    tol: float | None = None

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"select.rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"select.metric must be a history column name, got {self.metric!r}")
        if self.tol is not None:
            if isinstance(self.tol, bool) or not isinstance(self.tol, (int, float)):
                raise ValueError(f"select.tol must be a number > 0, got {self.tol!r}")
            if not (math.isfinite(self.tol) and self.tol > 0):
                raise ValueError(f"select.tol must be a number > 0, got {self.tol!r}")
        if self.rule == "bits_to_tol" and self.tol is None:
            raise ValueError("select.rule 'bits_to_tol' needs select.tol (a number > 0)")


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep.

    Attributes:
        run_id: folder name under ``OUT/runs/``: readable (the varied values) and unique (a
            short hash of every parameter), the same for the same config on every machine.
        argv: the runner's arguments (algorithm first), without ``--out``/``--quiet``.
        params: ``algorithm``, ``label``, ``compressor``, ``step_mult``, ``seed`` and every
            other base, method or grid key, by flag name (underscores).
    """

    run_id: str
    argv: list[str]
    params: dict


@dataclass(frozen=True)
class SweepConfig:
    """A resolved sweep: grids expanded to lists, keys normalised to underscores.

    Attributes:
        name: the sweep's name (default output folder ``runs/sweeps/<name>``).
        base: runner flags shared by every run.
        methods: one dict per method: ``algorithm``, optional ``label``, its own flags.
        grid: flag -> list of values; the runs are ``methods x product(grid)``.
        select: the best-multiplier rule.
    """

    name: str
    base: dict
    methods: list[dict]
    grid: dict
    select: Selection = field(default_factory=Selection)

    def runs(self) -> list[RunSpec]:
        """Every run, methods outermost, then the grid in key order (last key fastest)."""
        keys = list(self.grid)
        out: list[RunSpec] = []
        for method in self.methods:
            algorithm = method["algorithm"]
            opts = {k: v for k, v in method.items() if k not in ("algorithm", "label")}
            for combo in itertools.product(*(self.grid[k] for k in keys)):
                varied = dict(zip(keys, combo, strict=True))
                flags = {**self.base, **opts, **varied}
                params = {"algorithm": algorithm, "label": method.get("label", algorithm)}
                params.update({k: v for k, v in CORE_DEFAULTS.items() if k not in flags})
                params.update({k: _hashable(v) for k, v in flags.items()})
                argv = [algorithm, *_argv(flags)]
                out.append(RunSpec(_run_id(method, opts, varied, params), argv, params))
        ids = [r.run_id for r in out]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"the config gives identical runs twice: {', '.join(dup)}")
        return out

    def to_dict(self) -> dict:
        """The resolved config as plain JSON-able data (what a sweep folder records)."""
        return {
            "name": self.name,
            "base": self.base,
            "methods": self.methods,
            "grid": self.grid,
            "select": {"rule": self.select.rule, "metric": self.select.metric,
                       "tol": self.select.tol},
        }  # fmt: skip


def load_config(source: str | Path | dict, *, ignore: tuple[str, ...] = ()) -> SweepConfig:
    """Read and validate a sweep config.

    A method's own flags override the same flags of ``[base]`` for that method's runs (e.g. a
    batch size per method); a ``[grid]`` key may appear nowhere else. Every run's argv is parsed
    by the runner's own parser here, so bad values fail before anything runs. Without a
    ``name``, a file's stem names the sweep (its folder's name for ``config.toml``).

    Args:
        source: a TOML file path, or an already parsed dict (e.g. a saved ``sweep.json``).
        ignore: top-level keys to drop without complaint (tables other tools keep in the same
            file, such as a reproduction's ``[claim]``).

    Raises:
        ValueError: an unknown key, an unknown runner flag, a name that is not a plain folder
            name, an empty or non-list grid entry, a grid key also set in ``base`` or a method,
            a grid too large to expand, a value the runner's parser or its option checks refuse
            (:func:`experiments.validate.check_grid`), two values of a grid key or two methods
            that give the same runs, or a bad ``[select]``; the message names the key, the
            value and what is allowed.
    """
    if isinstance(source, dict):
        raw = dict(source)
        default_name = None
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"sweep config {str(path)!r} is not a file")
        try:
            with path.open("rb") as fh:
                raw = tomllib.load(fh)
        except OSError as e:
            raise ValueError(f"sweep config {str(path)!r} cannot be read: {e.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"sweep config {str(path)!r} is not valid TOML: {e}") from None
        default_name = path.stem if path.stem != "config" else path.parent.name
    for key in ignore:
        raw.pop(key, None)
    unknown = [k for k in raw if k not in TOP_KEYS]
    if unknown:
        raise ValueError(
            f"unknown top-level key {unknown[0]!r} in the sweep config; allowed: "
            + ", ".join(TOP_KEYS)
        )
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name must be a plain folder name: 1 to 100 letters, digits and ._=+-, not starting "
            f"with a dot (so neither '.' nor '..'), no path separators; got {name!r}"
        )
    base = _flags(raw.get("base", {}), "base")
    methods = _methods(raw.get("methods"))
    grid = _grid(raw.get("grid", {}), base, methods)
    select = _selection(raw.get("select", {}))
    _check_size(methods, grid)
    cfg = SweepConfig(name=name, base=base, methods=methods, grid=grid, select=select)
    from experiments.validate import check_grid

    check_grid(cfg)
    return cfg


def _check_size(methods: list[dict], grid: dict) -> None:
    """Refuse a sweep of more than ``MAX_RUNS`` runs before any run is expanded."""
    total = len(methods) * math.prod(len(v) for v in grid.values())
    if total > MAX_RUNS:
        sizes = "".join(f" x grid.{k} ({len(v)})" for k, v in grid.items())
        largest = max(grid, key=lambda k: len(grid[k]), default=None)
        shrink = f"grid.{largest} ({len(grid[largest])} values)" if largest else "[[methods]]"
        raise ValueError(
            f"the sweep has {total} runs ({len(methods)} method(s){sizes}); at most {MAX_RUNS} "
            f"runs per sweep: shrink {shrink} or split the sweep"
        )


def _selection(raw: Any) -> Selection:
    if isinstance(raw, Selection):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"[select] must be a table with keys {', '.join(SELECT_KEYS)}")
    unknown = [k for k in raw if k not in SELECT_KEYS]
    if unknown:
        allowed = ", ".join(SELECT_KEYS)
        raise ValueError(f"unknown key {unknown[0]!r} in [select]; allowed: {allowed}")
    return Selection(**raw)


def _methods(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise ValueError("methods must be a non-empty list of tables ([[methods]] with algorithm)")
    from algorithms.registry import ALGORITHMS, ALIASES

    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or "algorithm" not in entry:
            raise ValueError(f"methods[{i}] must be a table with an 'algorithm' key, got {entry!r}")
        algorithm = entry["algorithm"]
        if algorithm not in ALGORITHMS and algorithm not in ALIASES:
            allowed = ", ".join([*ALGORITHMS, *ALIASES])
            raise ValueError(f"methods[{i}].algorithm {algorithm!r} is unknown; allowed: {allowed}")
        method = {"algorithm": algorithm}
        if "label" in entry:
            if not isinstance(entry["label"], str) or not entry["label"]:
                raise ValueError(f"methods[{i}].label must be a non-empty string")
            method["label"] = entry["label"]
        rest = {k: v for k, v in entry.items() if k not in ("algorithm", "label")}
        method.update(_flags(rest, f"methods[{i}]"))
        out.append(method)
    return out


def _grid(raw: Any, base: dict, methods: list[dict]) -> dict:
    if not isinstance(raw, dict):
        raise ValueError("[grid] must be a table of flag = [values]")
    grid: dict[str, list] = {}
    for key, values in raw.items():
        name = _flag_name(key, "grid")
        if isinstance(values, dict):
            values = _power_range(values, name)
        if not isinstance(values, list):
            raise ValueError(
                f"grid.{name} must be a list of values (or {{base, from, to}}), got {values!r}"
            )
        if not values:
            raise ValueError(f"grid.{name} is empty; give at least one value")
        if len(values) > MAX_VALUES:
            raise ValueError(f"grid.{name} has {len(values)} values; at most {MAX_VALUES} per key")
        if name in base:
            raise ValueError(f"grid.{name} is also set in [base]; set it in one place only")
        for i, method in enumerate(methods):
            if name in method:
                raise ValueError(f"grid.{name} is also set in methods[{i}]; set it in one place")
        grid[name] = [_value(v, f"grid.{name}", name) for v in values]
    return grid


def _power_range(spec: dict, name: str) -> list:
    if set(spec) != {"base", "from", "to"}:
        raise ValueError(
            f"grid.{name} as a table needs exactly the keys base, from, to; got {sorted(spec)}"
        )
    b, lo, hi = spec["base"], spec["from"], spec["to"]
    if isinstance(b, bool) or not isinstance(b, (int, float)) or b <= 0:
        raise ValueError(f"grid.{name}.base must be a number > 0, got {b!r}")
    for k, e in (("from", lo), ("to", hi)):
        if isinstance(e, bool) or not isinstance(e, int):
            raise ValueError(f"grid.{name}.{k} must be an integer exponent, got {e!r}")
    if hi < lo:
        raise ValueError(f"grid.{name}: 'to' ({hi}) must be >= 'from' ({lo})")
    table = f"grid.{name} = {{base = {b!r}, from = {lo}, to = {hi}}}"
    if hi - lo + 1 > MAX_VALUES:
        raise ValueError(f"{table} has {hi - lo + 1} values; at most {MAX_VALUES} per key")
    for e in (lo, hi):  # base**e is monotone in e: the ends are the extremes
        if _power(b, e) is None:
            lim = math.floor(_LOG_MAX / abs(math.log(b)))
            while _power(b, lim) is None or _power(b, -lim) is None:
                lim -= 1
            raise ValueError(
                f"{table}: {b!r}**{e} is beyond a float's range (about 1e-308 to 1.8e308); "
                f"with base {b!r} the exponents must lie in -{lim}..{lim}"
            )
    return [_power(b, e) for e in range(lo, hi + 1)]


_LOG_MAX = math.log(sys.float_info.max)


def _power(b: float, e: int) -> float | None:
    """``b**e`` (an int for an int base and e >= 0), or None beyond a float's range."""
    if abs(e * math.log(b)) > _LOG_MAX + 1:
        return None  # refused unseen: the exact power may have thousands of digits
    try:
        v = b**e if e >= 0 else 1.0 / b ** (-e)
        return v if v != 0 and math.isfinite(float(v)) else None
    except OverflowError:
        return None


def _flags(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"[{where}] must be a table of runner flags")
    out = {}
    for key, value in raw.items():
        name = _flag_name(key, where)
        if isinstance(value, list) and not _runner_flags()[name][1]:
            raise ValueError(
                f"{where}.{name} is a list; only [grid] takes lists of values "
                f"(or a repeatable flag such as problem_opt)"
            )
        out[name] = _value(value, f"{where}.{name}", name)
    return out


def _flag_name(key: str, where: str) -> str:
    name = str(key).replace("-", "_")
    if name in MANAGED:
        raise ValueError(
            f"{where}.{key} is set by the sweep itself; not allowed among: "
            + ", ".join(k for k in MANAGED if k != "help")
        )
    flags = _runner_flags()
    if name not in flags:
        raise ValueError(
            f"unknown runner flag {key!r} in {where}; allowed: {', '.join(sorted(flags))}"
        )
    return name


def _value(v: Any, where: str, name: str) -> Any:
    if isinstance(v, dict) and name == "problem_opt":
        return [f"{k}={_scalar(x, where)}" for k, x in v.items()]
    if isinstance(v, list):
        if not v:
            raise ValueError(f"{where} is an empty list; give at least one value")
        if name == "problem_opt" and all(isinstance(x, str) for x in v):
            return list(v)
        if _runner_flags()[name][1]:
            return [_value(x, where, name) for x in v]
        raise ValueError(f"{where} must be a single value, got the list {v!r}")
    if isinstance(v, (str, bool, int, float)):
        return v
    raise ValueError(f"{where} must be a string, number or boolean, got {v!r}")


def _scalar(x: Any, where: str) -> str:
    if not isinstance(x, (str, int, float, bool)):
        raise ValueError(f"{where} values must be strings or numbers, got {x!r}")
    return str(x).lower() if isinstance(x, bool) else str(x)


@lru_cache(maxsize=1)
def _runner_flags() -> dict[str, tuple[str, bool, bool]]:
    """Runner flag name (underscores) -> (``--flag``, repeatable, store_true)."""
    flags = {}
    for action in _parser()._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                flags[opt[2:].replace("-", "_")] = (
                    opt,
                    isinstance(action, argparse._AppendAction),
                    isinstance(action, argparse._StoreTrueAction),
                )
    return flags


@lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    from algorithms.run import build_parser

    return build_parser(every=True)  # the flags of every method: what a config may name


def _argv(flags: dict) -> list[str]:
    argv: list[str] = []
    table = _runner_flags()
    for name, value in flags.items():
        opt, repeatable, store_true = table[name]
        if store_true:
            if value not in (True, False):
                raise ValueError(f"{name} is an on/off flag: give true or false, got {value!r}")
            if value:
                argv.append(opt)
        elif repeatable and isinstance(value, (list, tuple)):
            for v in value:
                argv += [opt, _scalar(v, name)]
        else:
            argv += [opt, _scalar(value, name)]
    return argv


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return format(v, "g")
    if isinstance(v, (list, tuple)):
        return "+".join(map(_fmt, v))
    return str(v).lower() if isinstance(v, bool) else str(v)


def _run_id(method: dict, opts: dict, varied: dict, params: dict) -> str:
    parts = [method.get("label", method["algorithm"])]
    parts += [f"{k}={_fmt(v)}" for k, v in opts.items()]
    short = {"compressor": "", "step_mult": "m", "seed": "s"}
    for k, v in varied.items():
        parts.append(f"{short[k]}{_fmt(v)}" if k in short else f"{k}={_fmt(v)}")
    slug = _SAFE.sub("-", "_".join(parts)).strip("-")[:120]
    digest = hashlib.sha1(_key({k: list(v) if isinstance(v, tuple) else v
                                for k, v in params.items()}).encode()).hexdigest()[:8]  # fmt: skip
    return f"{slug}_{digest}"
