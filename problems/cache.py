"""An on-disk memo of computed arrays: parsed LIBSVM files, GLM smoothness constants and f*.

A short run on a LIBSVM set would otherwise spend most of its start-up parsing the text file
(and importing the parser) and computing ``L_i`` and ``L`` (one top eigenvalue per node), work
that every run of a sweep repeats on the same bytes. Entries live in ``$COMPZOO_CACHE``
(default ``~/.cache/compzoo``; ``COMPZOO_CACHE=off`` disables the memo) as ``KIND-KEY.npz``,
``KEY`` the sha256 of everything the result depends on (the input's bytes, dtypes and shapes,
the parameters, a format version), so an entry is never used for other inputs: a changed file,
split, node count or regulariser gives another key.

Entries are plain ``.npz`` files read with ``allow_pickle=False``: a cache file can hold only
numeric arrays and cannot run code. An entry that cannot be read, lacks a field or has a field
of the wrong kind is ignored (and rewritten); a folder that cannot be written only costs the
memo. Writes go to a temporary file renamed into place, so concurrent runs (a sweep's jobs) never
read half an entry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["cache_dir", "enabled", "key", "load", "memo", "store"]

log = logging.getLogger(__name__)

_VERSION = b"compzoo-cache-v1"
OFF = ("off", "0", "none", "false")


def cache_dir() -> Path:
    """``$COMPZOO_CACHE`` or ``~/.cache/compzoo``."""
    env = os.environ.get("COMPZOO_CACHE")
    return Path(env) if env and env.lower() not in OFF else Path.home() / ".cache" / "compzoo"


def enabled() -> bool:
    """False when ``COMPZOO_CACHE`` is ``off`` (or ``0``, ``none``, ``false``)."""
    return os.environ.get("COMPZOO_CACHE", "").lower() not in OFF


def key(*parts: object, version: bytes = _VERSION) -> str:
    """sha256 over ``version`` and the given arrays (dtype, shape and bytes), byte strings and
    plain values."""
    h = hashlib.sha256(version)
    for p in parts:
        if isinstance(p, np.ndarray):
            a = np.ascontiguousarray(p)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.data if a.flags.c_contiguous else a.tobytes())
        elif isinstance(p, bytes):
            h.update(p)
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()


def _path(kind: str, k: str) -> Path:
    return cache_dir() / f"{kind}-{k}.npz"


def load(kind: str, k: str, fields: dict[str, str]) -> dict[str, np.ndarray] | None:
    """The entry's arrays, or None when there is none or it is unreadable. ``fields`` maps each
    required name to its numpy kind (``"f"`` float, ``"i"`` signed integer): an entry whose
    fields differ is ignored."""
    if not enabled():
        return None
    path = _path(kind, k)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {name: np.array(z[name]) for name in fields}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
        log.warning("ignoring unreadable cache file %s (%s)", path, e)
        return None
    for name, want in fields.items():
        if out[name].dtype.kind != want:
            log.warning("ignoring cache file %s: field %s is %s", path, name, out[name].dtype)
            return None
    return out


def store(kind: str, k: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an entry atomically; a failure to write is logged and otherwise ignored."""
    if not enabled():
        return
    path = _path(kind, k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        log.warning("cannot write the cache file %s: %s", path, e)


def memo(
    kind: str, k: str, fields: dict[str, str], compute: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """``compute()`` memoised as the entry ``kind``/``k`` (see :func:`load` for ``fields``)."""
    got = load(kind, k, fields)
    if got is not None:
        return got
    out = compute()
    store(kind, k, out)
    return out
