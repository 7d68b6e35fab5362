"""A reproduction's ``config.toml`` read (its format: :mod:`experiments.reproduce`): the sweep
config with the ``[quick]`` overrides applied, the data sets found, the ``--only`` slice cut and
a method's ``step = "1/L"`` resolved, and the claim checked; plus where a version's runs go by
default.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

PAPERS = Path(__file__).resolve().with_name("papers")
LIBSVM_ENV = "COMPZOO_LIBSVM_DIR"
OWN_TABLES = ("claim", "quick", "data")
QUICK_MERGED = ("base", "grid", "select", "claim", "data")
QUICK_REPLACED = ("name", "methods")
CLAIM_KEYS = (
    "kind", "order", "statement", "metric", "tol", "bits", "seeds",
    "rows", "cols", "base_row", "base_col", "winners", "baseline",
    "axis", "base", "high", "affected", "robust", "factor", "suffer", "any",
)  # fmt: skip
KINDS = ("order", "beats", "heatmap", "slowdown")
BITS = ("exclude-initial", "include-initial")
DATA_KEYS = ("libsvm",)
# A method's step given as this string is resolved here to the problem's 1/L (gradient descent's
# step): DCGD has no theoretical step for a biased compressor.
STEP_ONE_OVER_L = "1/L"


class DataMissing(Exception):
    """The reproduction's data files are not on this machine (the run is skipped)."""


@dataclass(frozen=True)
class Claim:
    """What a reproduction checks.

    Attributes:
        kind: ``"order"``, ``"beats"``, ``"heatmap"`` or ``"slowdown"``.
        statement: the paper's claim in one line.
        metric: the history column compared with ``tol``.
        tol: the tolerance on ``metric``.
        bits: ``"exclude-initial"`` or ``"include-initial"`` (the initial full gradients).
        order: for ``order``: method labels, fewest bits to tolerance first; for ``beats``:
            the winners followed by the baseline.
        any: for ``beats``: the best of the winners must beat the baseline (one method tuned
            over settings written as several labels, e.g. a consensus step), not each of them.
        rows, cols: for ``heatmap``: the two grid keys spanning the cells.
        base_row, base_col: for ``heatmap``: the baselines' row and column values.
        axis: for ``slowdown``: the grid key along which the data grow more heterogeneous
            (e.g. ``split``); ``base_level`` is its reference value (e.g. ``iid``) and
            ``high_level`` its most heterogeneous one. ``order`` holds the method that the claim
            says is affected first, then the methods it says are less affected.
        factor: for ``slowdown``: "much less affected" means the affected method's slowdown is
            at least ``factor`` times each other method's.
        suffer: for ``slowdown``: a method "suffers" at a level when its bits to tolerance
            there are at least ``suffer`` times its bits at ``base_level``.
    """

    kind: str
    statement: str
    metric: str
    tol: float
    bits: str
    order: tuple[str, ...] = ()
    rows: str = ""
    cols: str = ""
    base_row: Any = None
    base_col: Any = None
    axis: str = ""
    base_level: Any = None
    high_level: Any = None
    factor: float = 0.0
    suffer: float = 0.0
    any: bool = False


@dataclass(frozen=True)
class Paper:
    """One reproduction, resolved: the sweep config (as a dict) and its claim."""

    name: str
    folder: Path
    sweep: dict[str, Any]
    claim: Claim
    quick: bool
    dataset: str | None
    only: dict[str, list[Any]] | None = None


def available() -> list[str]:
    """Names of the reproductions: the folders of ``experiments/papers`` with a config.toml."""
    if not PAPERS.is_dir():
        return []
    return sorted(p.name for p in PAPERS.iterdir() if (p / "config.toml").is_file())


def libsvm_dir() -> Path:
    """The first folder of :func:`problems.datasets.places` that exists (else the first one):
    where the LIBSVM sets are looked for first; each set is found by
    :func:`problems.datasets.find`."""
    from problems import datasets

    folders = [folder for _, folder in datasets.places()]
    return next((f for f in folders if f.is_dir()), folders[0])


def _apply_quick(raw: dict, quick: dict, name: str) -> dict:
    unknown = sorted(set(quick) - set(QUICK_MERGED) - set(QUICK_REPLACED))
    if unknown:
        raise ValueError(
            f"{name}: unknown [quick] key(s) {unknown}; allowed: "
            f"{', '.join(QUICK_MERGED + QUICK_REPLACED)}"
        )
    out = dict(raw)
    for key, val in quick.items():
        if key in QUICK_MERGED:
            if not isinstance(val, dict):
                raise ValueError(f"{name}: [quick].{key} must be a table, got {val!r}")
            out[key] = {**out.get(key, {}), **val}
        else:
            out[key] = val
    return out


def dataset_spec(dataset: str) -> str:
    """The runner's ``--dataset`` for the user's: a file path (or the name of a set that
    :func:`problems.datasets.find` finds, e.g. ``mushrooms``) becomes ``libsvm:PATH``."""
    from problems import datasets

    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"--dataset must be a non-empty string, got {dataset!r}")
    if ":" not in dataset and Path(dataset).is_file():
        return f"libsvm:{Path(dataset).resolve()}"
    named = datasets.find(dataset) if ":" not in dataset and "/" not in dataset else None
    if named is not None:
        return f"libsvm:{named.resolve()}"
    if dataset.startswith("libsvm:") and not Path(dataset[len("libsvm:") :]).is_file():
        raise ValueError(f"--dataset {dataset!r}: file not found")
    return dataset


def _libsvm_specs(names: Any, name: str) -> list[str]:
    if not isinstance(names, list) or not names or not all(isinstance(s, str) for s in names):
        raise ValueError(f"{name}: [data].libsvm must list LIBSVM set names, got {names!r}")
    from problems import datasets

    found = {s: datasets.find(s) for s in names}
    missing = [s for s, path in found.items() if path is None]
    if missing:
        looked = ", ".join(str(folder) for _, folder in datasets.places())
        raise DataMissing(
            f"{name}: skipped: the LIBSVM set(s) {', '.join(missing)} are not in {looked} "
            f"(set {LIBSVM_ENV} or {datasets.DATA_ENV} to the folder holding NAME.txt)"
        )
    return [f"libsvm:{found[s].resolve()}" for s in names]


def _resolve_steps(sweep: dict) -> None:
    """Replace a method's ``step = "1/L"`` by the number for this sweep's problem."""
    wanted = [m for m in sweep.get("methods", []) if m.get("step") == STEP_ONE_OVER_L]
    if not wanted:
        return
    if "dataset" in sweep.get("grid", {}):
        raise ValueError('step = "1/L" needs one data set, not a grid over datasets')
    from algorithms.run import configure
    from runner.cli import parse_run

    argv = ["dcgd", "--compressor", "identity"]
    for key, val in sweep.get("base", {}).items():
        if key in ("compressor", "step", "step_mult", "iters", "tol", "log_every"):
            continue
        flag = "--" + key.replace("_", "-")
        for v in val if isinstance(val, list) else [val]:
            argv += [flag, str(v)]
    args = parse_run(argv)
    args.nodes = 10 if args.nodes is None else args.nodes
    _algo, _problem, config = configure(args)
    gamma = float(config["step"]["gamma_theory"])
    for m in wanted:
        m["step"] = float(f"{gamma:.12g}")


def _claim(raw: Any, name: str, labels: list[str], select: dict) -> Claim:
    if not isinstance(raw, dict):
        raise ValueError(f"{name}: config.toml needs a [claim] table")
    unknown = sorted(set(raw) - set(CLAIM_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [claim] key(s) {unknown}; allowed: {CLAIM_KEYS}")
    kind = raw.get("kind", "order")
    if kind not in KINDS:
        raise ValueError(f"{name}: [claim].kind must be one of {KINDS}, got {kind!r}")
    bits = raw.get("bits")
    if bits not in BITS:
        raise ValueError(f"{name}: [claim].bits must be one of {BITS} (stated before running)")
    if raw.get("seeds", "median") != "median":
        raise ValueError(f"{name}: [claim].seeds must be 'median', got {raw.get('seeds')!r}")
    metric = str(raw.get("metric", select.get("metric", "grad_norm_sq")))
    tol = raw.get("tol", select.get("tol"))
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise ValueError(f"{name}: the claim needs a tolerance > 0 ([claim] tol), got {tol!r}")
    common = {"statement": str(raw.get("statement", "")), "metric": metric, "tol": float(tol)}
    if kind == "beats":
        winners, baseline = raw.get("winners"), raw.get("baseline")
        if not isinstance(winners, list) or not winners or baseline is None:
            raise ValueError(f"{name}: a 'beats' claim needs [claim].winners and .baseline")
        raw = {**raw, "order": [*winners, baseline]}
        if not isinstance(raw.get("any", False), bool):
            raise ValueError(f"{name}: [claim].any must be true or false, got {raw['any']!r}")
    if kind in ("order", "beats"):
        order = raw.get("order")
        if (
            not isinstance(order, list)
            or len(order) < 2
            or not all(isinstance(o, str) for o in order)
        ):
            raise ValueError(f"{name}: [claim].order must list two or more labels, got {order!r}")
        missing = [o for o in order if o not in labels]
        if missing:
            raise ValueError(f"{name}: [claim].order names {missing}, not among methods {labels}")
        return Claim(kind, bits=bits, order=tuple(order), any=bool(raw.get("any", False)),
                     **common)  # fmt: skip
    if kind == "slowdown":
        return _slowdown_claim(raw, name, labels, bits, common)
    for key in ("rows", "cols", "base_row", "base_col"):
        if key not in raw:
            raise ValueError(f"{name}: a heatmap claim needs [claim].{key}")
    if len(labels) != 1:
        raise ValueError(f"{name}: a heatmap claim sweeps one method, got {labels}")
    return Claim(
        "heatmap", bits=bits, rows=str(raw["rows"]), cols=str(raw["cols"]),
        base_row=raw["base_row"], base_col=raw["base_col"], **common,
    )  # fmt: skip


def _slowdown_claim(raw: dict, name: str, labels: list[str], bits: str, common: dict) -> Claim:
    for key in ("axis", "base", "high", "affected", "robust", "factor", "suffer"):
        if key not in raw:
            raise ValueError(f"{name}: a slowdown claim needs [claim].{key}")
    robust = raw["robust"]
    if not isinstance(robust, list) or not robust or not all(isinstance(r, str) for r in robust):
        raise ValueError(f"{name}: [claim].robust must list method labels, got {robust!r}")
    order = [str(raw["affected"]), *robust]
    missing = [o for o in order if o not in labels]
    if missing:
        raise ValueError(f"{name}: [claim] names {missing}, not among methods {labels}")
    numbers = {}
    for key in ("factor", "suffer"):
        v = raw[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 1:
            raise ValueError(f"{name}: [claim].{key} must be a number > 1, got {v!r}")
        numbers[key] = float(v)
    if str(raw["base"]) == str(raw["high"]):
        raise ValueError(f"{name}: [claim].base and .high must differ, both {raw['base']!r}")
    return Claim(
        "slowdown", bits=bits, order=tuple(order), axis=str(raw["axis"]),
        base_level=raw["base"], high_level=raw["high"], **numbers, **common,
    )  # fmt: skip


def parse_only(text: str) -> tuple[str, list[str]]:
    """``AXIS=V1,V2`` (``--only``) as the axis and its values, as strings.

    Raises:
        ValueError: not of the form ``AXIS=V[,V...]``.
    """
    axis, sep, vals = text.partition("=")
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not sep or not axis.strip() or not values:
        raise ValueError(f"--only must be AXIS=V1[,V2...] (e.g. nodes=10), got {text!r}")
    return axis.strip(), values


def _restrict(grid: dict[str, Any], only: dict[str, list[str]], name: str) -> dict[str, list]:
    """The grid with each axis of ``only`` cut to the listed values (matched on their text)."""
    kept: dict[str, list] = {}
    for axis, wanted in only.items():
        if axis not in grid or not isinstance(grid[axis], list):
            listed = sorted(k for k, v in grid.items() if isinstance(v, list))
            raise ValueError(
                f"{name}: --only {axis}=...: no grid axis {axis!r}; axes: {', '.join(listed)}"
            )
        texts = {_axis_text(v): v for v in grid[axis]}
        if ",".join(wanted) in texts and not all(w in texts for w in wanted):
            wanted = [",".join(wanted)]  # one value whose text has commas (a problem_opt list)
        missing = [w for w in wanted if w not in texts]
        if missing:
            raise ValueError(
                f"{name}: --only {axis}: value(s) {missing} not in the grid; allowed: "
                f"{', '.join(texts)}"
            )
        grid[axis] = kept[axis] = [texts[w] for w in dict.fromkeys(wanted)]
    return kept


def _check_axis(grid: dict[str, Any], claim: Claim, name: str) -> None:
    values = grid.get(claim.axis)
    if not isinstance(values, list):
        listed = sorted(k for k, v in grid.items() if isinstance(v, list))
        raise ValueError(f"{name}: [claim].axis {claim.axis!r} is no grid axis; axes: {listed}")
    texts = [_axis_text(v) for v in values]
    for key, level in (("base", claim.base_level), ("high", claim.high_level)):
        if _axis_text(level) not in texts:
            raise ValueError(
                f"{name}: [claim].{key} {level!r} is not among the {claim.axis} values {texts}"
            )


def _axis_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def load_paper(
    name: str,
    quick: bool = False,
    dataset: str | None = None,
    only: dict[str, list[str]] | None = None,
) -> Paper:
    """Read ``experiments/papers/NAME/config.toml`` into a sweep config and a claim.

    Args:
        name: a reproduction's folder name (see :func:`available`).
        quick: apply the ``[quick]`` overrides (the version tests and golden.json use).
        dataset: one data set for the runner (``libsvm:PATH`` or a file path) instead of the
            config's ``[data].libsvm`` sets.
        only: grid axes cut to some of their values (``{"nodes": ["10"]}``): a slice of the
            grid, run and recorded on its own (the claim is judged per setting).

    Raises:
        ValueError: unknown NAME (naming the available ones) or a malformed config.
        DataMissing: a LIBSVM set of the config is not on this machine.
    """
    names = available()
    if name not in names:
        raise ValueError(f"unknown reproduction {name!r}; available: {', '.join(names) or 'none'}")
    folder = PAPERS / name
    with open(folder / "config.toml", "rb") as fh:
        raw = tomllib.load(fh)
    if quick:
        raw = _apply_quick(raw, raw.get("quick", {}), name)
    data = raw.get("data", {})
    unknown = sorted(set(data) - set(DATA_KEYS))
    if unknown:
        raise ValueError(f"{name}: unknown [data] key(s) {unknown}; allowed: {DATA_KEYS}")
    sweep = copy.deepcopy({k: v for k, v in raw.items() if k not in OWN_TABLES})
    labels = [m.get("label", m.get("algorithm")) for m in sweep.get("methods", [])]
    claim = _claim(raw.get("claim"), name, labels, sweep.get("select", {}))
    base = sweep.setdefault("base", {})
    grid = sweep.setdefault("grid", {})
    if dataset is not None:
        if "libsvm" not in data:
            raise ValueError(f"{name}: takes no --dataset (its problem generates its own data)")
        base["dataset"] = dataset_spec(dataset)
    elif "libsvm" in data:
        grid["dataset"] = _libsvm_specs(data["libsvm"], name)
    kept = _restrict(grid, only, name) if only else None
    if claim.kind == "slowdown":
        _check_axis(grid, claim, name)
    # The runner stops a run once the claim's tolerance is met: bits to tolerance are decided.
    base.setdefault("tol", claim.tol)
    if claim.metric in ("grad_norm_sq", "f_gap"):
        base.setdefault("tol_on", claim.metric)
    sweep["select"] = {"rule": "bits_to_tol", "metric": claim.metric, "tol": claim.tol}
    _resolve_steps(sweep)
    return Paper(name, folder, sweep, claim, quick, dataset, kept)


def default_out(paper: Paper) -> Path:
    """``runs/reproduce/NAME[-quick][-DATASET][-AXIS=V]``: one resumable folder per version."""
    return _default_out(paper.name, paper.quick, paper.dataset, paper.only)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


def slice_label(only: dict[str, list[Any]] | None) -> str:
    """``nodes=10`` for ``{"nodes": [10]}``; ``""`` for the whole grid."""
    return ";".join(
        f"{axis}={'|'.join(_axis_text(v) for v in vals)}" for axis, vals in (only or {}).items()
    )


def _default_out(
    name: str, quick: bool, dataset: str | None, only: dict[str, list[Any]] | None = None
) -> Path:
    tag = name + ("-quick" if quick else "")
    if dataset is not None:
        tag += "-" + _safe(Path(dataset.removeprefix("libsvm:")).stem)
    if only:
        tag += "-" + _safe(slice_label(only))
    return Path("runs") / "reproduce" / tag


def _label(v: Any) -> str:
    s = str(v)
    return Path(s.removeprefix("libsvm:")).stem if s.startswith("libsvm:") else s
