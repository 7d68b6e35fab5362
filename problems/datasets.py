"""Where named data sets are found: one lookup for the runner and the paper reproductions.

A named LIBSVM set (``a9a``, ``mushrooms``, ``phishing``, ``w8a``) is the file ``NAME.txt`` in
the first of these places that holds it:

1. ``$COMPZOO_DATA``: ``NAME.txt``, then ``libsvm/NAME.txt``;
2. ``$COMPZOO_LIBSVM_DIR`` (an alias, kept for the reproductions): ``NAME.txt``;
3. only when neither variable is set: ``../shared/data/libsvm/NAME.txt`` beside the repository
   (the folder above the source tree this package is imported from), then the same path
   relative to the working directory.

A variable that is set says where the data is: the shared folders are not searched behind it,
so a run never reads another copy than the one it was pointed at. A set that is not found is
reported with every place looked. The scikit-learn sets (``breast-cancer``, ``digits``, ...)
ship with scikit-learn and need no lookup.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = [
    "BUNDLED", "DATA_ENV", "HINT", "LIBSVM_ENV", "NAMED_LIBSVM", "find", "listing", "locate",
    "not_regular", "places",
]  # fmt: skip

NAMED_LIBSVM = ("a9a", "mushrooms", "phishing", "w8a")
BUNDLED = ("breast-cancer", "digits", "digits-binary", "wine", "wine-binary")
DATA_ENV = "COMPZOO_DATA"
LIBSVM_ENV = "COMPZOO_LIBSVM_DIR"
HINT = (
    f"set {DATA_ENV} to the folder holding NAME.txt (or NAME.txt under its libsvm/), or pass "
    "libsvm:PATH"
)
_SHARED = Path("..") / "shared" / "data" / "libsvm"


def _repo_root() -> Path:
    """The folder holding this package's source tree (the repository, for a checkout)."""
    return Path(__file__).resolve().parents[1]


def places() -> list[tuple[str, Path]]:
    """The folders searched, in order, each with where it comes from (see the module
    docstring); a folder reached twice is listed once."""
    out: list[tuple[str, Path]] = []
    data = os.environ.get(DATA_ENV)
    if data:
        out += [(f"${DATA_ENV}", Path(data)), (f"${DATA_ENV}/libsvm", Path(data) / "libsvm")]
    alias = os.environ.get(LIBSVM_ENV)
    if alias:
        out.append((f"${LIBSVM_ENV}", Path(alias)))
    if not out:
        out += [
            ("beside the repository", (_repo_root() / _SHARED).resolve()),
            ("beside the working directory", (Path.cwd() / _SHARED).resolve()),
        ]
    seen: set[Path] = set()
    unique = []
    for label, folder in out:
        if folder not in seen:
            seen.add(folder)
            unique.append((label, folder.expanduser()))
    return unique


def find(name: str) -> Path | None:
    """The file of the named LIBSVM set ``name`` (``NAME.txt`` in the first place of
    :func:`places` that holds it as a regular file), or None."""
    for _, folder in places():
        cand = folder / f"{name}.txt"
        if cand.is_file():
            return cand
    return None


def locate(name: str, problem: str) -> Path:
    """:func:`find`, or a ValueError naming every file looked for and how to point at the data."""
    found = find(name)
    if found is not None:
        return found
    looked = "; ".join(
        f"{folder / f'{name}.txt'} ({label}{'' if folder.is_dir() else ': no such folder'})"
        for label, folder in places()
    )
    raise ValueError(f"{problem}: dataset {name!r} not found; looked for {looked}; {HINT}")


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a folder (``"a
    FIFO/named pipe"``, ``"a socket"``, ...); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = (
        (stat.S_ISFIFO, "a FIFO/named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return None


def listing() -> list[str]:
    """The ``data sets:`` section of the ``--list`` outputs: each named set with ``found at
    PATH`` or ``missing``, the bundled sets, and once, where the named sets are looked for."""
    lines = ["data sets:"]
    for name in NAMED_LIBSVM:
        found = find(name)
        lines.append(f"  {name:16s} LIBSVM, " + (f"found at {found}" if found else "missing"))
    for name in BUNDLED:
        lines.append(f"  {name:16s} bundled with scikit-learn")
    lines.append(f"  {'synthetic':16s} generated (seeded)")
    lines.append(f"  {'libsvm:PATH':16s} any LIBSVM file; cifar10:PATH: CIFAR-10 (deep nets)")
    where = ", ".join(f"{folder} ({label})" for label, folder in places())
    lines.append(f"  named sets are looked for as NAME.txt in {where}")
    lines.append(f"  to point at them: {HINT}")
    return lines
