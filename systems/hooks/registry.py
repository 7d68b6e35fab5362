"""Hooks by name: ``make_hook("powersgd:rank=4")``.

A SPEC is ``name`` or ``name:key=value,key=value``; the keys are the hook class's keyword
arguments (their defaults are the papers' or the authors' code's, stated in each docstring), and
each value is converted to the type of the argument's default. ``python -m systems.hooks --list``
prints every hook with its collective and parameters.
"""

from __future__ import annotations

import inspect

import torch.distributed as dist

from comm.hooks import CommHook
from systems.hooks.baselines import BF16, FP16, AllReduce

__all__ = ["HOOKS", "hook_names", "make_hook", "parse_hook_spec", "register"]

HOOKS: dict[str, type[CommHook]] = {}


def register(cls: type[CommHook]) -> type[CommHook]:
    """Add a hook class to :data:`HOOKS` under ``cls.name``."""
    if cls.name in HOOKS and HOOKS[cls.name] is not cls:
        raise ValueError(f"hook name {cls.name!r} is taken by {HOOKS[cls.name].__name__}")
    HOOKS[cls.name] = cls
    return cls


for _cls in (AllReduce, FP16, BF16):
    register(_cls)


def hook_names() -> list[str]:
    _load_all()
    return sorted(HOOKS)


def _load_all() -> None:
    """Import the hook modules (each registers its classes); missing ones are skipped."""
    import importlib

    for mod in _MODULES:
        try:
            importlib.import_module(f"systems.hooks.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"systems.hooks.{mod}":
                raise


# Modules whose import registers hooks (each ends with ``register(...)`` calls).
_MODULES = (
    "powersgd",
    "acpsgd",
    "scalecom",
    "compressor_hook",
    "dgc",
    "adacomp",
    "threelc",
    "vgc",
    "fosgd",
    "greedylore",
    "powersgd_plus",
    "torch_hooks",
)


def _params(cls: type[CommHook]) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(cls.__init__)
    return {
        k: p
        for k, p in sig.parameters.items()
        if k not in ("self", "process_group") and p.kind is p.KEYWORD_ONLY
    }


def _convert(name: str, key: str, raw: str, default: object) -> object:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"hook {name}: {key}={raw!r} is not a {type(default).__name__}") from None
    return raw


def parse_hook_spec(spec: str) -> tuple[type[CommHook], dict[str, object]]:
    """The class and keyword arguments a SPEC names; ``ValueError`` names what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a hook spec must be a non-empty string, got {spec!r}")
    _load_all()
    name, sep, rest = spec.strip().partition(":")
    if name not in HOOKS:
        raise ValueError(f"unknown hook {name!r}; allowed: {', '.join(sorted(HOOKS))}")
    cls = HOOKS[name]
    if getattr(cls, "takes_spec", False):  # the generic compressor hook: the rest is a spec
        return cls, ({"spec": rest} if sep else {})
    params = _params(cls)
    allowed = ", ".join(params) or "none"
    kwargs: dict[str, object] = {}
    for item in rest.split(",") if sep else []:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"expected key=value in hook spec {spec!r}, got {item!r}")
        if key not in params:
            raise ValueError(f"unknown parameter {key!r} for hook {name}; allowed: {allowed}")
        if key in kwargs:
            raise ValueError(f"parameter {key!r} is given twice in hook spec {spec!r}")
        kwargs[key] = _convert(name, key, raw.strip(), params[key].default)
    return cls, kwargs


def make_hook(spec: str, process_group: dist.ProcessGroup | None = None) -> CommHook:
    """A hook instance from its SPEC (see the module docstring)."""
    cls, kwargs = parse_hook_spec(spec)
    return cls(process_group, **kwargs)
