"""The bad-input catalogue's harness: a case runs one command line and states its exit code and
the message it must print.

A case runs in process by default (``runpy`` on the module, ``sys.argv`` patched, stdout and
stderr captured): fast, and any exception that escapes fails the test with its traceback, which
is exactly what the catalogue forbids. ``subprocess=True`` runs a real interpreter instead, for
the cases that need one (signals, environment, a fresh import).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One catalogue entry.

    Attributes:
        id: short unique name (the pytest id).
        module: the module run as ``python -m module``.
        argv: its arguments; ``{tmp}`` is replaced by the case's own temporary folder.
        code: the exit code it must end with.
        message: a regular expression that must match the combined stdout + stderr (case
            sensitive); it should name the bad value and what is allowed.
        setup: prepares files in the temporary folder before the command runs (e.g. a first
            run, a crafted checkpoint); gets the folder.
        env: extra environment variables.
        subprocess: run in a real interpreter instead of in process.
        timeout: seconds a subprocess case may take.
        check: an extra assertion on the folder after the command (e.g. nothing overwritten).
        fsize_limit: run in a subprocess whose files may grow to this many bytes at most
            (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored: a write past it fails with ``EFBIG``,
            as a full disk fails with ``ENOSPC``).
    """

    id: str
    module: str
    argv: list[str]
    code: int = 2
    message: str = ""
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    subprocess: bool = False
    timeout: float = 120.0
    check: Callable[[Path], None] | None = None
    fsize_limit: int | None = None


@dataclass
class Result:
    code: int
    output: str


def _fill(argv: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in argv]


def _limit_files(nbytes: int) -> Callable[[], None]:
    def limit() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return limit


def run_case(case: Case, tmp: Path) -> Result:
    """Run ``case`` in ``tmp`` (its setup first) and return its exit code and output."""
    if case.setup is not None:
        case.setup(tmp)
    argv = _fill(case.argv, tmp)
    if case.subprocess or case.fsize_limit is not None:
        env = {**os.environ, **case.env}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        p = subprocess.run(
            [sys.executable, "-m", case.module, *argv],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=case.timeout,
            preexec_fn=None if case.fsize_limit is None else _limit_files(case.fsize_limit),
        )
        return Result(p.returncode, p.stdout + p.stderr)
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_env, old_cwd = sys.argv, dict(os.environ), os.getcwd()
    code = 0
    try:
        os.environ.update(case.env)
        os.chdir(tmp)
        sys.argv = [case.module, *argv]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                with warnings.catch_warnings():
                    # runpy warns when the module was imported before (by an earlier case).
                    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                    runpy.run_module(case.module, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)
        os.chdir(old_cwd)
    return Result(code, out.getvalue() + err.getvalue())


def assert_case(case: Case, tmp: Path) -> Result:
    """Run ``case`` and assert its exit code, its message and that no traceback was printed."""
    r = run_case(case, tmp)
    assert "Traceback (most recent call last)" not in r.output, r.output
    assert r.code == case.code, f"exit {r.code}, expected {case.code}:\n{r.output}"
    if case.message:
        assert re.search(case.message, r.output), (
            f"message /{case.message}/ not in output:\n{r.output}"
        )
    if case.check is not None:
        case.check(tmp)
    return r
