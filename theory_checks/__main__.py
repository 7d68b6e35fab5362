"""``python -m theory_checks [--only PATTERN] [--fast] [--out DIR]``: the catalogue of claims.

Prints a table (check, setting, what theory predicts, what was measured, verdict) and writes it
as JSON and CSV to ``--out``. Exit status 0 only when every check passes.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import sys
import time
from pathlib import Path

from theory_checks.base import Row, run_check
from theory_checks.catalogue import all_checks


def select(pattern: str | None, fast: bool):
    checks = [c for c in all_checks() if c.fast or not fast]
    if pattern:
        checks = [c for c in checks if fnmatch.fnmatch(c.name, pattern) or pattern in c.name]
    return checks


def table(rows: list[Row]) -> str:
    cols = ("check", "setting", "predicted", "measured", "verdict")
    width = {c: min(48, max(len(c), *(len(str(getattr(r, c))) for r in rows))) for c in cols}

    def cell(text: str, c: str) -> str:
        text = str(text)
        return (text if len(text) <= width[c] else text[: width[c] - 1] + "~").ljust(width[c])

    lines = ["  ".join(c.ljust(width[c]) for c in cols), "  ".join("-" * width[c] for c in cols)]
    lines += ["  ".join(cell(getattr(r, c), c) for c in cols) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m theory_checks", description=__doc__)
    ap.add_argument("--only", default=None, help="run the checks whose name matches (glob)")
    ap.add_argument("--fast", action="store_true", help="the fast subset, in reduced form")
    ap.add_argument("--out", default=None, help="folder for results.json and results.csv")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    args = ap.parse_args(argv)
    checks = select(args.only, args.fast)
    if args.list:
        for c in checks:
            sys.stdout.write(f"{c.name:40s} {'fast' if c.fast else 'full'}  {c.paper}\n")
        return 0
    if not checks:
        sys.stderr.write(f"error: no check matches --only {args.only!r}\n")
        return 2
    t0 = time.perf_counter()
    rows: list[Row] = []
    for c in checks:
        rows += run_check(c, args.fast)
    total = time.perf_counter() - t0
    failed = [r for r in rows if r.verdict != "pass"]
    sys.stdout.write(table(rows) + "\n")
    sys.stdout.write(
        f"\n{len(rows) - len(failed)} passed, {len(failed)} failed ({len(checks)} checks, "
        f"{total:.1f} s)\n"
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        data = {"seconds": total, "fast": args.fast, "rows": [r.to_dict() for r in rows]}
        (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
        with open(out / "results.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0].to_dict()))
            w.writeheader()
            w.writerows(r.to_dict() for r in rows)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
