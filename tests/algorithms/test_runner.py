"""The runner's contract: output files, exit codes, determinism, bit accounting, bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from algorithms.registry import ALGORITHMS
from algorithms.run import HISTORY_COLUMNS, TIME_COLUMNS, run
from compressors import parse_spec

BASE = ["--problem", "quadratic", "--nodes", "4", "--quiet"]


def history(path) -> list[dict]:
    with open(path / "history.csv") as fh:
        return list(csv.DictReader(fh))


def test_outputs_config_history_summary(tmp_path):
    out = tmp_path / "r"
    rc = run(
        [
            "ef21",
            "--compressor",
            "topk:k=2",
            *BASE,
            "--iters",
            "30",
            "--log-every",
            "10",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = history(out)
    assert [int(r["iter"]) for r in rows] == [0, 10, 20, 30]
    assert list(rows[0])[: len(HISTORY_COLUMNS)] == HISTORY_COLUMNS
    assert "G" in rows[0]
    cfg = json.loads((out / "config.json").read_text())
    for key in ("argv", "method", "step", "compressor", "problem", "seed", "versions"):
        assert key in cfg
    assert cfg["compressor"]["delta"] == pytest.approx(2 / 20)
    assert "Bits" in cfg["compressor"]["bit_model"]
    assert cfg["step"]["theory"]["formula"].startswith("min(1 / (L + L_tilde")
    assert cfg["problem"]["consts"]["L"] == pytest.approx(1.0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reason"] == "completed" and summary["iters"] == 30
    assert float(rows[-1]["f_gap"]) < float(rows[0]["f_gap"])


def test_bits_up_are_the_formula_times_iterations(tmp_path):
    d, T = 20, 25
    c = parse_spec("topk:k=3")
    rc = run(
        ["ef21", "--compressor", "topk:k=3", *BASE, "--iters", str(T), "--out", str(tmp_path / "r")]
    )
    assert rc == 0
    last = history(tmp_path / "r")[-1]
    # g_i^0 = grad f_i(x^0) sent uncompressed (32 d), then one Top-K message per round.
    assert float(last["bits_up"]) == 32 * d + T * c.bits(d)
    assert float(last["bits_up_max"]) == float(last["bits_up"])
    assert float(last["bits_down"]) == T * 32 * d


def test_same_seed_same_history(tmp_path):
    args = ["dcgd", "--compressor", "randk:k=3", *BASE, "--iters", "40", "--seed", "7"]
    assert run([*args, "--out", str(tmp_path / "a")]) == 0
    assert run([*args, "--out", str(tmp_path / "b")]) == 0
    a, b = history(tmp_path / "a"), history(tmp_path / "b")
    strip = [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in a]
    assert strip == [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in b]
    assert run([*args[:-1], "8", "--out", str(tmp_path / "c")]) == 0
    assert history(tmp_path / "c")[-1]["f"] != a[-1]["f"]


def test_divergence_exits_3_and_keeps_history(tmp_path):
    rc = run(
        [
            "dcgd",
            "--compressor",
            "identity",
            *BASE,
            "--step",
            "50",
            "--iters",
            "2000",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 3
    rows = history(tmp_path / "r")
    assert 1 < len(rows) < 2001
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["reason"] == "diverged"


def test_stopping_rules(tmp_path):
    rc = run(
        [
            "ef21",
            "--compressor",
            "identity",
            *BASE,
            "--iters",
            "100000",
            "--tol",
            "1e-6",
            "--out",
            str(tmp_path / "tol"),
        ]
    )
    s = json.loads((tmp_path / "tol" / "summary.json").read_text())
    assert rc == 0 and s["reason"] == "tolerance" and s["final"]["grad_norm_sq"] <= 1e-6
    rc = run(
        [
            "ef21",
            "--compressor",
            "topk:k=1",
            *BASE,
            "--iters",
            "100000",
            "--max-bits",
            "5000",
            "--out",
            str(tmp_path / "bits"),
        ]
    )
    s = json.loads((tmp_path / "bits" / "summary.json").read_text())
    assert rc == 0 and s["reason"] == "max_bits"
    assert 5000 <= s["final"]["bits_up"] < 5000 + 37


@pytest.mark.parametrize(
    "argv,words",
    [
        (["nosuch"], ["unknown algorithm", "nosuch", "ef21"]),
        (["ef21", "--compressor", "nosuch"], ["unknown compressor", "nosuch", "topk"]),
        (["ef21", "--compressor", "topk", "--problem", "nosuch"], ["unknown problem", "nosuch"]),
        (["dcgd", "--step", "-1"], ["--step", "-1"]),
        (["ef21", "--compressor", "topk:k=1000"], ["k must be <= d", "k=1000", "d=20"]),
        (["ef21", "--compressor", "randk"], ["contractive", "randk", "--force-compressor"]),
        (["dcgd", "--init", "zero"], ["--init", "does not apply to dcgd"]),
        (["ef21", "--iters", "0"], ["--iters", "0"]),
    ],
)
def test_bad_input_exits_2_naming_the_value(argv, words, capsys, tmp_path):
    rc = run([*argv, "--quiet", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"


def test_existing_output_is_never_overwritten_silently(tmp_path, capsys):
    out = tmp_path / "r"
    assert run(["dcgd", *BASE, "--iters", "5", "--out", str(out)]) == 0
    before = (out / "history.csv").read_text()
    assert run(["dcgd", *BASE, "--iters", "7", "--out", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (out / "history.csv").read_text() == before
    assert run(["dcgd", *BASE, "--iters", "7", "--out", str(out), "--overwrite"]) == 0
    assert len(history(out)) == 8


def test_list_names_everything(capsys):
    assert run(["--list"]) == 0
    text = capsys.readouterr().out
    for name in ALGORITHMS:
        assert f"\n  {name} " in text
    for word in ("topk", "qsgd", "quadratic", "logreg-nonconvex"):
        assert word in text


def test_module_entry_point_runs_a_default_problem(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "algorithms.run",
            "ef21",
            "--compressor",
            "topk",
            "--iters",
            "50",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "results in" in proc.stdout and (tmp_path / "r" / "history.csv").exists()


def test_list_shows_whole_first_sentences(capsys):
    assert run(["--list"]) == 0
    text = capsys.readouterr().out
    section = text.split("problems:")[0]
    described = [ln for ln in section.splitlines() if ln.startswith("  ") and "alias of" not in ln]
    assert len(described) >= len(ALGORITHMS)
    for line in described:
        desc = line[19:].split("  [")[0].rstrip()
        assert desc.endswith((".", "!", "?")), f"cut mid-sentence: {line!r}"
        assert desc.count("(") == desc.count(")") and desc.count("``") % 2 == 0, line


def test_the_summary_says_where_the_step_came_from(tmp_path, capsys):
    argv = ["ef21", "--compressor", "topk:ratio=0.1", "--problem", "mlp", "--dataset", "digits",
            "--nodes", "2", "--iters", "1", "--quiet"]  # fmt: skip
    assert run([*argv, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "step 0.1 = 1 x problem default 0.1" in out and "(given" not in out
    assert run([*argv, "--step", "0.05", "--step-mult", "2", "--out", str(tmp_path / "b")]) == 0
    assert "step 0.1 (given: --step 0.05 x --step-mult 2)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["marina", "--compressor", "randk:k=3"],  # per-node streams and a shared coin
        ["ef21-sgd", "--compressor", "topk:k=2", "--batch-size", "2", "--problem", "logreg"],
        ["diana", "--compressor", "qsgd:levels=4"],
    ],
    ids=lambda a: a[0],
)
def test_the_untimed_warm_up_changes_no_logged_number(tmp_path, monkeypatch, argv):
    import runner.loop as loop

    args = [*argv, "--nodes", "4", "--iters", "12", "--log-every", "1", "--quiet", "--seed", "2"]
    assert run([*args, "--out", str(tmp_path / "warm")]) == 0
    calls = []
    monkeypatch.setattr(loop, "warm_up", lambda *a: calls.append(a))
    assert run([*args, "--out", str(tmp_path / "cold")]) == 0
    assert len(calls) == 1

    def strip(path):
        lines = (path / "history.csv").read_text().splitlines()
        cols = lines[0].split(",")
        keep = [i for i, c in enumerate(cols) if c not in TIME_COLUMNS]
        return [[ln.split(",")[i] for i in keep] for ln in lines]

    assert strip(tmp_path / "warm") == strip(tmp_path / "cold")  # byte for byte but the clocks


def test_a_flag_two_methods_share_takes_each_methods_own_values(tmp_path):
    """--mechanism (3pc, newton-3pc) and --init (fednl's hessian) list different values per
    method: each method runs with its own, and the values of another method are refused."""
    base = ["--problem", "logreg", "--nodes", "3", "--iters", "2", "--quiet"]
    argv = ["newton-3pc", "--compressor", "topk:k=3", "--mechanism", "cbag", *base]
    assert run([*argv, "--out", str(tmp_path / "a")]) == 0
    argv = ["fednl", "--compressor", "topk:k=3", "--init", "hessian", *base]
    assert run([*argv, "--out", str(tmp_path / "b")]) == 0
    argv = ["3pc", "--compressor", "topk:k=3", "--mechanism", "cbag", *base]
    assert run([*argv, "--out", str(tmp_path / "c")]) == 2
