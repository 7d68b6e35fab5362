"""``python -m streams.stamps``: each kernel module names the sources of the kernels it compiles in.

numba caches a compiled function on disk next to its source and loads it again while that one
file keeps its stamp (modification time and size). But a kernel compiles in everything it calls
and every global it reads, from whatever module they come from: ``_mix`` of
:mod:`streams.compiled` is in most compressor kernels, THC's ``_unpack`` holds the transform's
``_block`` of :mod:`compressors.compiled_fwht`, the quantizers read ``CHUNK`` and ``_FORMAT``
of :mod:`compressors.compiled_quant`. After a change there, the cached kernel would go on
running the old code until its own file changed.

So every kernel module (one that defines numba functions) carries, below its docstring, one line
per kernel module it imports, directly or through another one::

    # built against streams/compiled.py 3f0c9a1e5b2d7c48

with the first 16 hex digits of the SHA-256 of that file's text without its own such lines (so
modules that import each other do not chase each other's stamps). A change to a kernel module
makes the lines of every module built against it stale; this command writes them again, which
changes those files, so numba compiles their kernels again. A test fails while any line is
stale. ``--check`` lists the stale modules and exits 1 instead of writing.

A kernel module takes the code and constants its kernels use from kernel modules only (those are
the imports followed); :mod:`problems.glm_lanes_kernels` is written whole by
:mod:`problems.glm_lanes_gen`, which stamps it with :func:`stamped` too.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "PREFIX",
    "ROOT",
    "kernel_modules",
    "stale",
    "stamp_as",
    "stamped",
    "stamps",
    "unstamped",
    "write",
]

ROOT = Path(__file__).resolve().parent.parent
#: The project's packages (pyproject.toml's list; a test holds them equal).
PACKAGES = (
    "algorithms",
    "benchmarks",
    "comm",
    "compressors",
    "experiments",
    "problems",
    "runner",
    "streams",
    "systems",
    "theory_checks",
)
PREFIX = "# built against "
# names whose use makes a module define compiled code
_COMPILERS = {"njit", "jit", "intrinsic", "vectorize", "guvectorize", "overload", "cfunc"}


def _defines_kernels(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if name in _COMPILERS:
            return True
    return False


def _path_of(module: str) -> str | None:
    """The file of a project module, relative to :data:`ROOT` (``None`` outside the project)."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
        if (ROOT / rel).is_file():
            return rel
    return None


def _imports(tree: ast.Module, path: str) -> set[str]:
    """The project files the module at ``path`` imports, at module level or inside a block or
    function, absolutely or relatively."""
    out = set()
    package = path.split("/")[:-1]  # the module's package, as parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from .x import f`: from the module's package, `..` one up
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            # `from compressors import compiled_dense` names a module; `from x import f`, a name
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        out.update(p for p in map(_path_of, names) if p is not None)
    return out


def _sources() -> dict[str, str]:
    """Every project module's text, by path relative to :data:`ROOT`."""
    return {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def unstamped(text: str) -> str:
    """``text`` without its stamp lines (and the blank line :func:`stamped` puts above them)."""
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith(PREFIX)]
    if not at:
        return text
    first, last = at[0], at[-1]
    if at != list(range(first, last + 1)) or first == 0 or lines[first - 1] != "":
        raise ValueError(f"stamp lines must form one block below a blank line (lines {at})")
    return "\n".join(lines[: first - 1] + lines[last + 1 :])


def _digest(text: str) -> str:
    return hashlib.sha256(unstamped(text).encode()).hexdigest()[:16]


def kernel_modules(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Each kernel module and the kernel modules it is built against (imports, closed)."""
    # only a text naming a compiler can define kernels (parsing every module takes seconds)
    trees = {
        path: ast.parse(text)
        for path, text in sources.items()
        if any(name in text for name in _COMPILERS)
    }
    kernels = {path for path, tree in trees.items() if _defines_kernels(tree)}
    direct = {path: _imports(trees[path], path) & kernels for path in kernels}
    closed = {}
    for path in kernels:
        seen, todo = set(), list(direct[path])
        while todo:
            dep = todo.pop()
            if dep not in seen:
                seen.add(dep)
                todo.extend(direct[dep])
        closed[path] = seen - {path}
    return closed


def stamps(deps: set[str], sources: Mapping[str, str]) -> list[str]:
    """The stamp lines for a module built against ``deps``."""
    return [f"{PREFIX}{dep} {_digest(sources[dep])}" for dep in sorted(deps)]


def stamped(text: str, lines: list[str]) -> str:
    """``text`` with ``lines`` as its stamp block, below the module docstring."""
    text = unstamped(text)
    if not lines:
        return text
    body = ast.parse(text).body
    if not (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        raise ValueError("a kernel module needs a docstring, below which its stamps go")
    end = body[0].end_lineno
    rows = text.split("\n")
    return "\n".join(rows[:end] + [""] + lines + rows[end:])


def _expected(sources: Mapping[str, str]) -> dict[str, str]:
    """Each kernel module's text with current stamps."""
    modules = kernel_modules(sources)
    out = {}
    for path in sorted(modules):  # each module's own stamps first, so an error names its file
        try:
            unstamped(sources[path])
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    for path, deps in modules.items():
        try:
            out[path] = stamped(sources[path], stamps(deps, sources))
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return out


def stamp_as(path: str, text: str) -> str:
    """``text``, to be the module at ``path`` (relative to :data:`ROOT`), with current stamps."""
    sources = {**_sources(), path: text}
    deps = kernel_modules(sources).get(path, set())
    return stamped(text, stamps(deps, sources))


def stale(sources: Mapping[str, str] | None = None) -> list[str]:
    """The kernel modules whose stamps are not current (paths relative to :data:`ROOT`)."""
    sources = _sources() if sources is None else sources
    return sorted(path for path, text in _expected(sources).items() if text != sources[path])


def write() -> list[str]:
    """Rewrites the stale kernel modules' stamps; returns their paths."""
    sources = _sources()
    expected = _expected(sources)
    changed = sorted(path for path, text in expected.items() if text != sources[path])
    for path in changed:
        (ROOT / path).write_text(expected[path])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streams.stamps", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="list the stale modules and exit 1; write nothing"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            late = stale()
            for path in late:
                print(f"stale: {path} (run python -m streams.stamps)", file=sys.stderr)
            return 1 if late else 0
        for path in write():
            print(f"stamped {path}", file=sys.stderr)
    except ValueError as e:  # a module's stamp lines edited out of shape, or no docstring
        print(f"python -m streams.stamps: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
