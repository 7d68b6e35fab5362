"""The typed run configuration: what one run is, declared once.

:class:`RunConfig` holds every setting of a run (the method and its options, the compressor,
the problem, the stopping rules, the folder). Each field declares its default, its help, its
command-line flag and the values it allows (:func:`run_field`); the command line's parser is
generated from these declarations (:func:`add_run_flags`), and the Python API builds a
``RunConfig`` directly from keywords and checks them against the same declarations
(:meth:`RunConfig.create`): nothing re-parses a command line. The method's own options live in
``method_options`` (field name -> value), declared on the method's class
(:func:`algorithms.base.option`).

``argv`` is the command line the run is recorded with (``config.json``'s ``argv``, what
``--resume`` reads back): the one the user typed, or for the API :meth:`RunConfig.to_argv`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from runner.common import RESUME_OVERRIDES
from streams.suggest import did_you_mean

__all__ = ["RunConfig", "add_run_flags", "parse_bool", "run_field"]

_FLAG = "compzoo.run_flag"
GROUPS = ("method", "problem", "run")


def parse_bool(v: str) -> bool:
    """``yes|no|true|false|1|0`` (any case)."""
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected yes|no|true|false|1|0, got {v!r}")


def run_field(
    default: Any,
    help: str = "",  # noqa: A002 - the word argparse uses
    *,
    group: str = "run",
    kind: type = str,
    flag: str | None = None,
    choices: tuple | None = None,
    metavar: str | None = None,
    switch: bool = False,
    repeat: bool = False,
    cli: bool = True,
) -> Any:
    """A run setting, declared once: its default, its help, its type (``kind``: what a value
    from the command line is read as, and what the API accepts), its flag (``--NAME``, from the
    field's name unless given), its allowed values, and whether it is an on/off ``switch`` or a
    ``repeat``-able flag. ``cli=False``: not a flag (set by the program)."""
    meta = {_FLAG: dict(help=help, group=group, kind=kind, flag=flag, choices=choices,
                        metavar=metavar, switch=switch, repeat=repeat, cli=cli)}  # fmt: skip
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


# The words --step takes besides a positive float.
STEP_WORDS = ("default", "theory")
STEP_CHOICES = "'default', 'theory' or a positive float"


@dataclass
class RunConfig:
    """One run (see the module docstring). Attribute names are the flags' (``lam`` is
    ``--lambda``)."""

    algorithm: str | None = run_field(None, "registry name (see --list)", cli=False)
    list: bool = run_field(False, "list algorithms, compressors, problems", switch=True,
                           group="")  # fmt: skip
    compressor: str = run_field("identity", "compressor SPEC, e.g. topk:k=10", group="method")
    down_compressor: str | None = run_field(None, "downlink SPEC (bidirectional)", group="method")
    step: str = run_field(
        "default",
        "'default' (the method's default step: its theory step, or a labelled practical one "
        "where the theorem's is unusable; see METHOD --help), 'theory' or a positive float",
        group="method",
    )
    step_mult: float = run_field(1.0, "multiplies the step", group="method", kind=float)
    force_compressor: bool = run_field(
        False, "accept a compressor outside the class the method's theory assumes",
        group="method", switch=True,
    )  # fmt: skip
    problem: str = run_field("quadratic", "problem name (see --list)", group="problem")
    dataset: str | None = run_field(
        None, "synthetic, a bundled set, libsvm:PATH, ...", group="problem"
    )
    split: str = run_field(
        "contiguous",
        "contiguous|contiguous:last|contiguous:drop|contiguous:array|iid|sorted|"
        "dirichlet:ALPHA (the papers' conventions: python -m problems --help)",
        group="problem",
    )
    nodes: int | None = run_field(
        None, "number of nodes n (default 10; under torchrun the world size)", group="problem",
        kind=int,
    )  # fmt: skip
    lam: float | None = run_field(None, "regularization", group="problem", kind=float,
                                  flag="lambda")  # fmt: skip
    x0: str = run_field(
        "default",
        "default|zeros|ones|randn[:SCALE] (randn: x0 ~ N(0, SCALE^2 I) from --seed)",
        group="problem",
    )
    problem_opt: list = run_field(
        [], "a problem knob (repeatable), see --list", group="problem", metavar="KEY=VALUE",
        repeat=True,
    )  # fmt: skip
    iters: int = run_field(1000, "iterations T", kind=int)
    max_bits: float | None = run_field(None, "stop at this many uplink bits per node", kind=float)
    tol: float | None = run_field(
        None, "stop when the --tol-on value is below this (checked at logged iterations)",
        kind=float,
    )  # fmt: skip
    tol_on: str = run_field("grad_norm_sq", None, choices=("grad_norm_sq", "f_gap"))
    seed: int = run_field(0, None, kind=int)
    device: str = run_field("cpu", "cpu, cuda or cuda:INDEX")
    dtype: str | None = run_field(None, None, choices=("float64", "float32"))
    float_bits: int = run_field(32, "wire width of a float: 16, 32 or 64 bits", kind=int)
    count_init_bits: bool = run_field(
        True,
        "count the bits a method sends at initialisation (e.g. the full grad f_i(x^0) of EF21 "
        "--init full, MARINA, DASHA) in bits_up/bits_down (default yes; the EF21 code: no)",
        kind=bool, metavar="yes|no",
    )  # fmt: skip
    log_every: int | None = run_field(None, "log every K iterations", kind=int)
    out: str | None = run_field(None, "run folder (default: runs/NAME-TIME)")
    overwrite: bool = run_field(
        False,
        "replace the run in a non-empty --out (removes its config, history, summary and "
        "checkpoint; other files are left alone)",
        switch=True,
    )
    quiet: bool = run_field(False, "no progress bar", switch=True)
    backend: str | None = run_field(
        None, "torch.distributed backend under torchrun (default: nccl on cuda, else gloo)",
        choices=("gloo", "nccl"),
    )  # fmt: skip
    checkpoint_every: int | None = run_field(
        None, "save the whole run state every K iterations (and at the end) to OUT/checkpoint",
        kind=int, metavar="K",
    )  # fmt: skip
    resume: str | None = run_field(
        None,
        "continue the run in DIR from its checkpoint (may change: "
        + ", ".join("--" + k.replace("_", "-") for k in RESUME_OVERRIDES) + ")",
        metavar="DIR",
    )  # fmt: skip
    layerwise: bool = run_field(
        False, "compress each parameter tensor separately (deep-net problems)", switch=True
    )
    timeout: float = run_field(
        300.0, "seconds a collective may wait under torchrun before the run fails", kind=float
    )
    method_options: dict = field(default_factory=dict)
    argv: list | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ declarations
    @staticmethod
    def flags() -> dict[str, dict[str, Any]]:
        """Every settable field's declaration, in field order (``name -> metadata``)."""
        return {f.name: f.metadata[_FLAG] for f in dataclasses.fields(RunConfig)
                if _FLAG in f.metadata and f.metadata[_FLAG]["cli"]}  # fmt: skip

    @staticmethod
    def flag_of(name: str) -> str:
        meta = RunConfig.flags()[name]
        return "--" + (meta["flag"] or name).replace("_", "-")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_namespace(cls, ns: argparse.Namespace, argv: list[str] | None) -> RunConfig:
        """From the command line's parse (method options are its ``opt_*`` entries)."""
        values = vars(ns)
        known = {f.name for f in dataclasses.fields(cls)} - {"method_options", "argv"}
        cfg = cls(**{k: v for k, v in values.items() if k in known})
        cfg.method_options = {k[4:]: v for k, v in values.items() if k.startswith("opt_")}
        cfg.argv = list(argv) if argv is not None else None
        return cfg

    @classmethod
    def create(cls, algorithm: str, options: dict[str, Any], method_cls: type) -> RunConfig:
        """From Python keywords: each is a run setting (checked against its declaration) or an
        option of ``method_cls`` (checked against the method's); anything else is a
        ``ValueError`` naming it (with the closest names)."""
        flags = cls.flags()
        cfg = cls(algorithm=algorithm)
        own = method_cls.options
        for key, value in options.items():
            if key in flags:
                setattr(cfg, key, _checked(key, value, flags[key]))
            elif key in own and key != "down_compressor":
                opt = own[key]
                meta = {"kind": opt.type, "choices": opt.choices, "switch": False,
                        "repeat": False, "flag": opt.flag}  # fmt: skip
                cfg.method_options[key] = _checked(key, value, meta)
            else:
                names = [*flags, *(k for k in own if k != "down_compressor")]
                raise ValueError(
                    f"unknown option {key!r} for {algorithm}{did_you_mean(key, names)}; its "
                    f"options: {', '.join(k for k in own if k != 'down_compressor') or 'none'}"
                    "; the run's: see runner.config.RunConfig"
                )
        return cfg

    def to_argv(self) -> list[str]:
        """The command line of this configuration (what ``config.json`` records and
        ``--resume`` reads back): the method, then every setting that differs from its
        default, then the method's options given."""
        argv = [self.algorithm or ""]
        for name, meta in self.flags().items():
            value = getattr(self, name)
            default = RunConfig.__dataclass_fields__[name]
            default = default.default_factory() if default.default is dataclasses.MISSING \
                else default.default  # fmt: skip
            if value == default or value is None:
                continue
            flag = self.flag_of(name)
            if meta["switch"]:
                argv.append(flag)
            elif meta["repeat"]:
                for item in value:
                    argv += [flag, str(item)]
            elif meta["kind"] is bool:
                argv += [flag, "yes" if value else "no"]
            else:
                argv += [flag, str(value)]
        return argv

    def record(self, method_cls: type | None) -> dict[str, Any]:
        """``config.json``'s ``args``: every setting, and the method's options as ``opt_NAME``
        (None where not given)."""
        out = {name: getattr(self, name) for name in ("algorithm", *self.flags())}
        names = list(method_cls.options) if method_cls is not None else []
        names += [k for k in self.method_options if k not in names]
        out.update({f"opt_{k}": self.method_options.get(k) for k in names
                    if k != "down_compressor"})  # fmt: skip
        return out


def _checked(key: str, value: Any, meta: dict[str, Any]) -> Any:
    """``value`` of the setting or option ``key`` as its declaration reads it, or a
    ``ValueError`` naming the key, the value and what is allowed."""
    kind, choices = meta["kind"], meta["choices"]
    flag = "--" + (meta.get("flag") or key).replace("_", "-")
    if value is None:
        return None
    if meta["switch"] or kind is bool:
        if isinstance(value, str) and not meta["switch"]:
            try:
                return parse_bool(value)
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"{key} ({flag}): {e}") from None
        if not isinstance(value, bool):
            raise ValueError(f"{key} ({flag}) is on/off: give True or False, got {value!r}")
        return value
    if meta["repeat"]:
        if isinstance(value, dict):
            return [f"{k}={v}" for k, v in value.items()]
        items = [value] if isinstance(value, str) else list(value)
        return [str(v) for v in items]
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{key} ({flag}) must be a number, got {value!r}")
        value = float(value)
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise ValueError(f"{key} ({flag}) must be an integer, got {value!r}")
    elif kind is str:
        if key == "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = repr(float(value))
        elif not isinstance(value, str):
            raise ValueError(f"{key} ({flag}) must be a string, got {value!r}")
    if choices and value not in choices:
        raise ValueError(
            f"{key} ({flag}) must be one of {', '.join(map(str, choices))}, got {value!r}"
        )
    return value


def add_run_flags(ap: argparse.ArgumentParser, groups: dict[str, Any]) -> None:
    """Add the run settings of ``group`` order to ``ap``: ``groups`` maps a group name
    (``""`` the parser itself, ``method``, ``problem``, ``run``) to the argument group."""
    for name, meta in RunConfig.flags().items():
        target = groups[meta["group"]]
        kw: dict[str, Any] = {"dest": name, "help": meta["help"]}
        default = RunConfig.__dataclass_fields__[name]
        kw["default"] = default.default_factory() if default.default is dataclasses.MISSING \
            else default.default  # fmt: skip
        if meta["switch"]:
            kw["action"] = "store_true"
            kw.pop("default")
        elif meta["repeat"]:
            kw["action"] = "append"
        elif meta["kind"] is bool:
            kw["type"] = parse_bool
        elif meta["kind"] is not str:
            kw["type"] = meta["kind"]
        if meta["choices"]:
            kw["choices"] = meta["choices"]
        if meta["metavar"]:
            kw["metavar"] = meta["metavar"]
        if kw.get("help") is None:
            kw.pop("help")
        target.add_argument(RunConfig.flag_of(name), **kw)
