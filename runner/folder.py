"""The run folder: one run per folder.

A fresh run draws a run id (a UUID) and writes it into ``config.json``; its checkpoint files and
``meta.json`` carry the same id, and ``meta.json`` the length and SHA-256 of ``history.csv`` at the
checkpoint (:mod:`runner.checkpoint`). ``--overwrite`` removes every file the runner
owns (``config.json``, ``history.csv``, ``summary.json``, ``checkpoint/``) before the new run
writes, so no piece of the old run survives to be resumed; files the runner does not own are
left alone.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime
from pathlib import Path

from runner.common import BadInput

OWNED_FILES = ("config.json", "history.csv", "summary.json", "history.tmp", "config.json.tmp",
               ".config.json.tmp", ".summary.json.tmp")  # fmt: skip
CHECKPOINT_DIR = "checkpoint"
_PROBE = ".compzoo-write-probe"


def new_run_id() -> str:
    return uuid.uuid4().hex


def _writable(out: Path, flag: str) -> None:
    """Create ``out`` (and its parents) and check that a file can be written in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / _PROBE
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise BadInput(
            f"{flag} {str(out)!r}: cannot write a run folder there ({why}); give a writable "
            "folder path"
        ) from None


def out_dir(args, algo_name: str) -> Path:
    """The folder this run writes to, checked writable; with ``--overwrite`` the previous run's
    files are removed from it first."""
    if args.resume is not None:
        out = Path(args.resume)
        _writable(out, "--resume")
        return out
    if args.out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path("runs") / f"{algo_name}-{stamp}"
        out, k = base, 1
        while out.exists():
            out, k = Path(f"{base}-{k}"), k + 1
        _writable(out, "--out")
        return out
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} exists and is not a folder; give a folder path")
    _writable(out, "--out")
    if any(p.name != _PROBE for p in out.iterdir()):
        if not args.overwrite:
            raise BadInput(
                f"--out {str(out)!r} exists and is not empty; pass --overwrite to "
                "replace it, or choose another folder"
            )
        clear_run(out)
    return out


def clear_run(out: Path) -> None:
    """Remove every file of the run in ``out`` that the runner wrote (checkpoint included)."""
    try:
        for name in OWNED_FILES:
            (out / name).unlink(missing_ok=True)
        ckpt = out / CHECKPOINT_DIR
        if ckpt.is_dir() and not ckpt.is_symlink():
            shutil.rmtree(ckpt)
        elif ckpt.exists() or ckpt.is_symlink():
            ckpt.unlink()
    except OSError as e:
        raise BadInput(
            f"--overwrite: cannot remove the previous run's files in {str(out)!r} "
            f"({e.strerror or type(e).__name__}: {e.filename}); remove them or choose another "
            "folder"
        ) from None


def config_run_id(config: dict, out: Path) -> str:
    """The run id ``config.json`` of a folder to resume names."""
    run_id = config.get("run_id")
    if not isinstance(run_id, str):
        raise BadInput(
            f"--resume: {str(out / 'config.json')!r} has no run id (written by an older runner); "
            "its checkpoint cannot be matched to it, rerun instead"
        )
    return run_id
