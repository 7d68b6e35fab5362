"""Print the catalogue as a table: id, command, exit code, first line of the message."""

from __future__ import annotations

import contextlib
import io
import shlex
import tempfile
from pathlib import Path

from .harness import run_case
from .test_catalogue import CASES


def main() -> None:
    print("| case | command | exit | message |")
    print("|---|---|---|---|")
    for case in CASES:
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
            r = run_case(case, Path(d))  # (a case's setup may print: kept out of the table)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        msg = next((ln for ln in lines if ln.startswith("error")), lines[-1] if lines else "")
        cmd = shlex.join([case.module, *case.argv]).replace("|", "\\|")
        print(f"| {case.id} | `python -m {cmd}` | {r.code} | {msg.replace('|', '/')[:160]} |")


if __name__ == "__main__":
    main()
