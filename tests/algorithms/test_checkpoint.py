"""Checkpoint and resume: a resumed run follows the uninterrupted trajectory exactly."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from algorithms.registry import ALGORITHMS, usual_argv, usual_compressor
from algorithms.run import TIME_COLUMNS, run

BASE = ["--problem", "quadratic", "--nodes", "4", "--seed", "5", "--log-every", "1", "--quiet",
        "--step", "0.02"]  # fmt: skip


def rows(path) -> list[dict]:
    with open(path / "history.csv") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def compressor_for(name: str) -> str:
    return usual_compressor(name, 3)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_resume_equals_the_uninterrupted_run(tmp_path, name):
    argv = [name, "--compressor", compressor_for(name), *BASE, *usual_argv(name)]
    assert run([*argv, "--iters", "24", "--out", str(tmp_path / "whole")]) == 0
    part = tmp_path / "part"
    assert run([*argv, "--iters", "11", "--checkpoint-every", "5", "--out", str(part)]) == 0
    assert (part / "checkpoint" / "meta.json").exists()
    assert run(["--resume", str(part), "--iters", "24"]) == 0
    whole, resumed = rows(tmp_path / "whole"), rows(part)
    assert len(whole) == 25
    assert resumed == whole  # every logged value, bit counts included, as strings


def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    argv = ["ef21", "--compressor", "topk:ratio=0.01", "--problem", "mlp", "--dataset", "digits",
            "--nodes", "4", "--iters", "60", "--log-every", "1", "--quiet"]  # fmt: skip
    out = tmp_path / "killed"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "algorithms.run", *argv, "--checkpoint-every", "7"]
    proc = subprocess.Popen([*cmd, "--out", str(out)], env=env, stderr=subprocess.PIPE)
    meta = out / "checkpoint" / "meta.json"
    deadline = time.monotonic() + 120
    while not meta.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be interrupted"
    kept = rows(out)
    assert 8 <= len(kept) < 61  # rows past the checkpoint are logged again on resume
    assert run(["--resume", str(out)]) == 0
    assert run([*argv, "--out", str(tmp_path / "whole")]) == 0
    assert rows(out) == rows(tmp_path / "whole")


def test_resume_refuses_what_it_cannot_honour(tmp_path, capsys):
    argv = ["ef21", "--compressor", "topk:k=3", *BASE, "--iters", "4"]
    assert run([*argv, "--out", str(tmp_path / "plain")]) == 0
    assert run(["--resume", str(tmp_path / "plain")]) == 2
    assert "no checkpoint there (run with --checkpoint-every)" in capsys.readouterr().err
    assert run(["--resume", str(tmp_path / "nothing")]) == 2
    assert "no config.json there" in capsys.readouterr().err
    assert run([*argv, "--checkpoint-every", "2", "--out", str(tmp_path / "ck")]) == 0
    assert run(["--resume", str(tmp_path / "ck"), "--compressor", "topk:k=1"]) == 2
    err = capsys.readouterr().err
    assert "it may change only --iters" in err and "got --compressor" in err
    assert run([*argv, "--checkpoint-every", "0", "--out", str(tmp_path / "z")]) == 2
    assert "--checkpoint-every must be >= 1, got 0" in capsys.readouterr().err


class _Payload:
    """Unpickling this calls ``exec``: a crafted checkpoint that runs code when loaded."""

    def __init__(self, marker) -> None:
        self.code = f"open({str(marker)!r}, 'w').write('ran')"

    def __reduce__(self):
        return (exec, (self.code,))


def _checkpointed(tmp_path, name="r"):
    out = tmp_path / name
    argv = ["ef21", "--compressor", "topk:k=3", *BASE, "--iters", "6", "--checkpoint-every", "3"]
    assert run([*argv, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("how", ["torch.save", "pickle2", "pickle4"])
def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, capsys, how):
    import pickle

    out = _checkpointed(tmp_path)
    marker = tmp_path / "marker"
    path = next((out / "checkpoint").glob("rank0-iter*.pt"))
    blob = torch.load(path, weights_only=True)
    blob["last"] = _Payload(marker)
    if how == "torch.save":
        torch.save(blob, path)
    else:
        path.write_bytes(pickle.dumps(blob, protocol=int(how[-1])))
    pickle.loads(pickle.dumps(_Payload(tmp_path / "control")))  # the payload is live
    assert (tmp_path / "control").exists()
    capsys.readouterr()
    assert run(["--resume", str(out), "--iters", "9"]) == 2
    err = capsys.readouterr().err
    assert "rank0-iter6.pt" in err and ("refused to load" in err or "is unreadable" in err), err
    assert how != "torch.save" or "Python object exec" in err  # names what it refused
    assert not marker.exists()


def test_an_old_format_checkpoint_is_refused_with_a_clear_message(tmp_path, capsys):
    out = _checkpointed(tmp_path)
    ck = out / "checkpoint"
    path = next(ck.glob("rank0-iter*.pt"))
    blob = torch.load(path, weights_only=True)
    from algorithms.ef.ef21 import EF21State

    # The previous format: the state object itself, read back with weights_only=False.
    state = EF21State(**blob["state"]["fields"])
    old = {"t": 6, "state": state, "ledger": blob["ledger"], "wall": 0.0, "times": {},
           "last": blob["last"], "n": 4, "nodes": blob["nodes"]}  # fmt: skip
    torch.save(old, path)
    capsys.readouterr()
    assert run(["--resume", str(out)]) == 2
    assert "older runner" in capsys.readouterr().err
    (ck / "meta.json").write_text(json.dumps({"iter": 6, "n": 4, "files": 1}))
    assert run(["--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "meta.json' was written by an older runner" in err, err
