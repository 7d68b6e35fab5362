"""``python -m systems.hooks --list``: the hooks, their collective and their parameters."""

from __future__ import annotations

import argparse
import inspect
import sys

from systems.hooks.registry import HOOKS, _params, hook_names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systems.hooks", description=__doc__)
    ap.add_argument("--list", action="store_true", help="list the hooks")
    ap.parse_args(argv)
    for name in hook_names():
        cls = HOOKS[name]
        doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
        params = ", ".join(f"{k}={p.default}" for k, p in _params(cls).items()) or "-"
        coll = "all-reduce" if cls.allreducible else "all-gather"
        sys.stdout.write(f"{name:<14} {coll:<10} {params}\n{'':<14} {doc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
