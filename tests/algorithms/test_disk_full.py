"""A full disk under a run: one line naming the file, exit 5, history.csv ending with a whole
row, the last complete checkpoint intact, and, once there is room again, a resume that ends
where an uninterrupted run ends.

A real full disk: a 48 KiB tmpfs (needs root and a kernel that lets this process mount one;
skipped otherwise). The catalogue's ``run-*-write-fails`` cases give the same failure without
root through a file-size limit (``EFBIG`` instead of ``ENOSPC``)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from algorithms.run import TIME_COLUMNS

ENV = dict(os.environ, OMP_NUM_THREADS="1")
ARGS = ["ef21", "--compressor", "topk:k=2", "--iters", "3000", "--log-every", "1", "--quiet"]


@pytest.fixture
def tiny_disk(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / f"full-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "algorithms.run", *argv], env=ENV,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def test_a_full_disk_stops_the_run_with_one_line_and_keeps_whole_files(tiny_disk):
    out = tiny_disk / "run"
    p = _run(*ARGS, "--out", str(out))
    assert p.returncode == 5, p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1, p.stderr
    assert f"cannot write '{out}/history.csv': No space left on device (errno 28)" in line[0]
    data = (out / "history.csv").read_bytes()
    assert data.endswith(b"\r\n")
    width = len(data.splitlines()[0].split(b","))
    assert {len(r.split(b",")) for r in data.splitlines()} == {width}


@pytest.mark.heavy  # 13 s: two runs, a resume (on 2 cores)
def test_after_a_full_disk_the_checkpoint_resumes_to_the_uninterrupted_run(tiny_disk, tmp_path):
    out = tiny_disk / "run"
    p = _run(*ARGS, "--checkpoint-every", "40", "--out", str(out))
    assert p.returncode == 5, p.stderr
    assert "is intact; resume with: python -m algorithms.run --resume" in p.stderr, p.stderr
    names = sorted(q.name for q in (out / "checkpoint").iterdir())
    assert names[0] == "meta.json" and len(names) == 2, names  # one complete checkpoint
    grown = subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_disk)],
                           capture_output=True, text=True)  # fmt: skip
    assert grown.returncode == 0, grown.stderr
    again = _run("--resume", str(out))
    assert again.returncode == 0, again.stderr
    ref = tmp_path / "ref"
    assert _run(*ARGS, "--checkpoint-every", "40", "--out", str(ref)).returncode == 0
    assert _rows(out / "history.csv") == _rows(ref / "history.csv")
