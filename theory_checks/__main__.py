"""``python -m theory_checks [--only PATTERN] [--fast] [--power] [--out DIR]``: the catalogue.

Prints a table (check, setting, what theory predicts, what was measured, verdict) and writes it
as JSON and CSV to ``--out``. Exit status 0 only when every check passes.

With ``--power`` each check also runs on the broken variants it names (no error feedback, no
variance reduction, a wrong shift, a step beyond theory's, AMSGrad removed, ...) and the table
shows, per check and variant, the verdict and the smallest margin. Exit status 0 only when
every check passes on the correct method and rejects every variant it names, and names at
least one.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import sys
import time
from pathlib import Path

from theory_checks.base import PowerRow, Row, run_check, run_power
from theory_checks.catalogue import all_checks


def select(pattern: str | None, fast: bool):
    checks = [c for c in all_checks() if c.fast or not fast]
    if pattern:
        checks = [c for c in checks if fnmatch.fnmatch(c.name, pattern) or pattern in c.name]
    return checks


def _fmt_margin(m: float | None) -> str:
    return "-" if m is None else f"{m:+.3g}"


def table(rows: list, cols: tuple[str, ...] = ("check", "setting", "predicted", "measured",
                                                "verdict")) -> str:  # fmt: skip
    width = {c: min(48, max(len(c), *(len(str(getattr(r, c))) for r in rows))) for c in cols}

    def cell(text: str, c: str) -> str:
        text = str(text)
        return (text if len(text) <= width[c] else text[: width[c] - 1] + "~").ljust(width[c])

    lines = ["  ".join(c.ljust(width[c]) for c in cols), "  ".join("-" * width[c] for c in cols)]
    lines += ["  ".join(cell(getattr(r, c), c) for c in cols) for r in rows]
    return "\n".join(lines)


class _Shown:
    """A power row as printed: the margin formatted, the outcome count as failed/total."""

    def __init__(self, r: PowerRow) -> None:
        self.check, self.variant, self.kind, self.verdict = r.check, r.variant, r.kind, r.verdict
        self.margin = _fmt_margin(r.margin)
        self.failed = f"{r.failed_outcomes}/{r.outcomes}"
        self.what = r.what


POWER_COLS = ("check", "variant", "kind", "verdict", "margin", "failed", "what")


def _write(out: str, data: dict, rows: list[dict]) -> None:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    with open(path / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def power(checks, fast: bool, out: str | None) -> int:
    """Run every check on its correct method and on each broken variant; print the table."""
    t0 = time.perf_counter()
    rows: list[PowerRow] = []
    for c in checks:
        rows += run_power(c, fast)
    total = time.perf_counter() - t0
    sys.stdout.write(table([_Shown(r) for r in rows], POWER_COLS) + "\n")
    by_check: dict[str, list[PowerRow]] = {}
    for r in rows:
        by_check.setdefault(r.check, []).append(r)
    weak = sorted(n for n, rs in by_check.items() if not all(r.ok for r in rs))
    variants = sum(r.variant != "correct" and r.variant != "(none)" for r in rows)
    rejected = sum(r.verdict == "rejected" for r in rows)
    sys.stdout.write(
        f"\n{len(by_check) - len(weak)} of {len(by_check)} checks pass and reject every named "
        f"variant ({rejected} of {variants} variants rejected, {total:.1f} s)\n"
    )
    if weak:
        sys.stdout.write("without power or failing: " + ", ".join(weak) + "\n")
    if out:
        _write(out, {"seconds": total, "fast": fast, "power": True,
                     "rows": [r.to_dict() for r in rows]}, [r.to_dict() for r in rows])  # fmt: skip
    return 0 if not weak else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m theory_checks", description=__doc__)
    ap.add_argument("--only", default=None, help="run the checks whose name matches (glob)")
    ap.add_argument("--fast", action="store_true", help="the fast subset, in reduced form")
    ap.add_argument("--out", default=None, help="folder for results.json and results.csv")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    ap.add_argument(
        "--power",
        action="store_true",
        help="also run each check on its named broken variants, which it must reject",
    )
    args = ap.parse_args(argv)
    checks = select(args.only, args.fast)
    if args.list:
        for c in checks:
            names = ",".join(v.name for v in c.variants) or "-"
            sys.stdout.write(
                f"{c.name:40s} {'fast' if c.fast else 'full'}  variants: {names}  {c.paper}\n"
            )
        return 0
    if not checks:
        sys.stderr.write(
            f"error: no check matches --only {args.only!r}; see --list for the names\n"
        )
        return 2
    if args.power:
        return power(checks, args.fast, args.out)
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
        data = {"seconds": total, "fast": args.fast, "rows": [r.to_dict() for r in rows]}
        _write(args.out, data, [r.to_dict() for r in rows])
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
