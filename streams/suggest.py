"""Did you mean ...?" for a mistyped name: a method, a compressor, a problem, a data set, a flag.

The closest registered names by :func:`difflib.get_close_matches`, compared with dashes,
underscores and case ignored (``ef-21`` is ``ef21``, ``top_k`` is ``topk``), so that the
error message of a typo names the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def close_matches(value: str, choices: Iterable[str], n: int = 2) -> list[str]:
    """Up to ``n`` of ``choices`` closest to ``value`` (none when nothing is close)."""
    choices = list(dict.fromkeys(choices))
    by_key: dict[str, str] = {}
    for c in choices:
        by_key.setdefault(_key(c), c)
    exact = by_key.get(_key(value))
    if exact is not None and exact != value:
        return [exact]
    keys = difflib.get_close_matches(_key(value), list(by_key), n=n, cutoff=0.6)
    return [by_key[k] for k in keys if by_key[k] != value]


def did_you_mean(value: str, choices: Iterable[str], prefix: str = "") -> str:
    """``" (did you mean 'x'?)"`` (or ``'x' or 'y'``) for the closest of ``choices``, or
    ``""``. ``prefix`` goes before each name (``"--"`` for flags)."""
    found = close_matches(value, choices)
    if not found:
        return ""
    names = " or ".join(f"'{prefix}{c}'" for c in found)
    return f" (did you mean {names}?)"
