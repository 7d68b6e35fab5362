"""Classes that installed packages add to compzoo's registries through entry points.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."compzoo.algorithms"]
    my-method = "mypkg.methods:MyMethod"        # an algorithms.base.Algorithm subclass
    [project.entry-points."compzoo.compressors"]
    my-comp = "mypkg.comp:MyCompressor"         # a compressors.base.Compressor subclass
    [project.entry-points."compzoo.problems"]
    my-problem = "mypkg.prob:MyProblem"         # a problems.base.Problem subclass

and once it is installed the names work wherever built-in ones do: the runner, ``--list``,
sweeps, ``--compressor my-comp:k=3`` and the registry-driven contract tests. Each registry
(``algorithms.registry``, ``compressors.registry``, ``problems.registry``) is a
:class:`Registry`, which adds its group's classes on first use. A built-in name wins over a
plugin's (the plugin is skipped with a warning); an entry point that fails to import or names
something else is skipped with a warning naming it. This module lives in ``streams``, the
package every other one imports, so that compressors and problems need nothing from the
methods' layer.
"""

from __future__ import annotations

import logging
from functools import cache

__all__ = ["GROUPS", "Registry", "extend"]

log = logging.getLogger("compzoo.plugins")

GROUPS = ("compzoo.algorithms", "compzoo.compressors", "compzoo.problems")


@cache
def _declared() -> dict[str, tuple]:
    """Every installed entry point of the three groups (the installed metadata read once)."""
    from importlib.metadata import entry_points

    return {group: tuple(entry_points(group=group)) for group in GROUPS}


class Registry(dict):
    """A name -> class dict that adds the classes installed packages declare under ``group``
    on its first use (a lookup, a membership test, an iteration), not when it is created: a
    plugin's module may then import any part of compzoo, which is fully imported by then.

    A value may be given as ``"module:Class"`` instead of the class: it is imported when it is
    first looked up (or the values are listed), so a registry names its classes in one line
    each and importing it imports none of them."""

    def __init__(self, group: str, base: type, items: dict) -> None:
        super().__init__(items)
        self._group, self._base, self._loaded = group, base, False

    def load(self) -> None:
        if not self._loaded:
            self._loaded = True
            extend(self._group, self, self._base)

    def _resolve(self, key):
        value = super().__getitem__(key)
        if isinstance(value, str):
            import importlib

            module, _, attr = value.partition(":")
            value = getattr(importlib.import_module(module), attr)
            if not (isinstance(value, type) and issubclass(value, self._base)):
                raise TypeError(f"registry entry {key} = {value!r} is not a {self._base.__name__}")
            super().__setitem__(key, value)
        return value

    def __getitem__(self, key):
        self.load()
        return self._resolve(key)

    def __contains__(self, key) -> bool:
        self.load()
        return super().__contains__(key)

    def __iter__(self):
        self.load()
        return super().__iter__()

    def __len__(self) -> int:
        self.load()
        return super().__len__()

    def get(self, key, default=None):
        self.load()
        return self._resolve(key) if super().__contains__(key) else default

    def keys(self):
        self.load()
        return super().keys()

    def values(self):
        self.load()
        return [self._resolve(k) for k in super().keys()]

    def items(self):
        self.load()
        return [(k, self._resolve(k)) for k in super().keys()]


def extend(group: str, registry: dict, base: type) -> list[str]:
    """Add the subclasses of ``base`` that installed packages declare under ``group`` to
    ``registry``; returns the names added."""
    added = []
    for ep in _declared().get(group, ()):
        if dict.__contains__(registry, ep.name):
            log.warning("plugin %s = %s: the name is taken; skipped", ep.name, ep.value)
            continue
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - any failure of third-party code is reported
            log.warning("plugin %s = %s could not be imported (%s); skipped", ep.name, ep.value, e)
            continue
        if not (isinstance(obj, type) and issubclass(obj, base)):
            log.warning(
                "plugin %s = %s is not a %s subclass; skipped", ep.name, ep.value, base.__name__
            )
            continue
        registry[ep.name] = obj
        added.append(ep.name)
    return added
