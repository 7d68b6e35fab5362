"""A run folder holds one run: ``--overwrite`` leaves nothing of the old run to resume, and
``--resume`` continues only a folder whose config, checkpoint and history belong together."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

from algorithms.run import TIME_COLUMNS, run

QUIET = ["--problem", "quadratic", "--nodes", "4", "--quiet", "--log-every", "1"]


def rows(path) -> list[dict]:
    with open(path / "history.csv") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def run_id(path) -> str:
    return json.loads((path / "config.json").read_text())["run_id"]


def test_every_piece_of_a_run_carries_its_run_id(tmp_path):
    out = tmp_path / "r"
    assert run(["ef21", "--compressor", "topk:k=2", *QUIET, "--iters", "6",
                "--checkpoint-every", "3", "--out", str(out)]) == 0  # fmt: skip
    rid = run_id(out)
    assert len(rid) == 32 and int(rid, 16) >= 0
    meta = json.loads((out / "checkpoint" / "meta.json").read_text())
    blob = torch.load(next((out / "checkpoint").glob("rank0-iter*.pt")), weights_only=True)
    summary = json.loads((out / "summary.json").read_text())
    assert meta["run_id"] == blob["run_id"] == summary["run_id"] == rid
    assert meta["history"]["bytes"] == (out / "history.csv").stat().st_size
    other = tmp_path / "s"
    assert (
        run(["ef21", "--compressor", "topk:k=2", *QUIET, "--iters", "6", "--out", str(other)]) == 0
    )
    assert run_id(other) != rid  # a fresh id per run, same arguments or not


@pytest.mark.parametrize(
    "second",
    [
        ["ef21", "--compressor", "topk:k=5", "--step-mult", "4"],  # resumed 30 -> 101 before
        ["diana", "--compressor", "randk:k=3"],  # an AttributeError on resume before
    ],
    ids=["same-method", "other-method"],
)
def test_overwrite_then_resume_refuses_instead_of_splicing_two_runs(tmp_path, capsys, second):
    # run A checkpoints at 50 and 100; run B overwrites with 30 iterations and no checkpoint.
    d = tmp_path / "D"
    a = ["ef21", "--compressor", "topk:k=2", *QUIET, "--iters", "100", "--checkpoint-every", "50"]
    assert run([*a, "--out", str(d)]) == 0
    (d / "notes.txt").write_text("mine")
    b = [*second, *QUIET, "--iters", "30"]
    assert run([*b, "--out", str(d), "--overwrite"]) == 0
    assert not (d / "checkpoint").exists()  # nothing of run A is left to resume...
    assert (d / "notes.txt").read_text() == "mine"  # ...and what the runner did not write stays
    capsys.readouterr()
    assert run(["--resume", str(d), "--iters", "200"]) == 2
    assert "no checkpoint there" in capsys.readouterr().err
    assert [int(r["iter"]) for r in rows(d)] == list(range(31))  # run B's history, untouched
    assert json.loads((d / "config.json").read_text())["args"]["iters"] == 30


def test_a_resume_continues_only_the_run_that_wrote_the_folder(tmp_path, capsys):
    d = tmp_path / "D"
    a = ["ef21", "--compressor", "topk:k=2", *QUIET, "--iters", "40", "--checkpoint-every", "20"]
    assert run([*a, "--out", str(d)]) == 0
    saved = {n: (d / n).read_bytes() for n in ("config.json", "history.csv")}
    b = ["diana", "--compressor", "randk:k=3", *QUIET, "--iters", "12", "--checkpoint-every", "5"]
    assert run([*b, "--out", str(d), "--overwrite"]) == 0
    # With every piece from run B the resume continues B exactly as an uninterrupted run.
    assert run(["--resume", str(d), "--iters", "25"]) == 0
    assert run([*b[:-4], "--iters", "25", "--out", str(tmp_path / "whole")]) == 0
    assert rows(d) == rows(tmp_path / "whole")
    capsys.readouterr()
    # A config.json from run A next to run B's checkpoint: refused, naming both runs.
    (d / "config.json").write_bytes(saved["config.json"])
    before = (d / "history.csv").read_bytes()
    assert run(["--resume", str(d), "--iters", "60"]) == 2
    err = capsys.readouterr().err
    assert "meta.json' belongs to run" in err and "config.json to run" in err
    assert (d / "history.csv").read_bytes() == before  # a refused resume writes nothing


def test_a_history_from_another_run_is_refused(tmp_path, capsys):
    argv = ["marina", "--compressor", "randk:k=3", *QUIET, "--iters", "12"]
    assert run([*argv, "--checkpoint-every", "4", "--out", str(tmp_path / "a")]) == 0
    assert run([*argv, "--seed", "9", "--out", str(tmp_path / "b")]) == 0
    shutil.copy(tmp_path / "b" / "history.csv", tmp_path / "a" / "history.csv")
    capsys.readouterr()
    assert run(["--resume", str(tmp_path / "a"), "--iters", "20"]) == 2
    err = capsys.readouterr().err
    assert "history.csv' is not the history the checkpoint was taken with" in err
    (tmp_path / "a" / "history.csv").unlink()
    assert run(["--resume", str(tmp_path / "a"), "--iters", "20"]) == 2
    assert "history.csv' is missing" in capsys.readouterr().err


def test_resume_below_the_checkpoint_is_refused(tmp_path, capsys):
    argv = ["ef21", "--compressor", "topk:k=2", *QUIET, "--iters", "10", "--checkpoint-every", "5"]
    assert run([*argv, "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert run(["--resume", str(tmp_path / "r"), "--iters", "7"]) == 2
    assert "--iters 7 is below iteration 10 of the checkpoint" in capsys.readouterr().err
    assert run(["--resume", str(tmp_path / "r"), "--iters", "10"]) == 0  # nothing left: done
