"""``python -m benchmarks [--quick] [--out DIR]``: speed benchmarks as ratios (not tests)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import per_iteration


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer iterations and repeats")
    ap.add_argument("--out", default=None, help="folder for the markdown report")
    args = ap.parse_args(argv)
    text = "## Seconds per iteration vs a per-node NumPy loop\n\n" + per_iteration.table(
        per_iteration.run(quick=args.quick)
    )
    sys.stdout.write(text + "\n")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "benchmarks.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
