"""The benchmark command's progress, skip summary, results written as they come, and its stop
on SIGINT/SIGTERM, in process with stand-in parts (no timings are measured or asserted)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from algorithms.registry import ALGORITHMS
from benchmarks import __main__ as bench_main
from benchmarks import bandwidth, interrupt, memory, per_iteration
from benchmarks.progress import NO_THEORY, NOT_HERE, Tracker, reason, why_skipped
from benchmarks.results import write_atomic
from compressors import parse_spec
from problems.logreg_nonconvex import LogRegNonconvex

FLAG = re.compile(r"--[a-z]")
TRIAD = {"numpy": 1e10, "torch": 2e10, "best": 2e10}


def _row(part: str, i: int) -> dict:
    """A row of ``part``'s shape (what its report section reads)."""
    if part == "iterations":
        return {
            "case": f"c{i}", "kind": "dense", "n": 20, "d": 1000, "m_i": 100,
            "dtype": "float64", "method": "ef21", "spec": "topk:k=10", "bytes": 2**25,
            "compzoo_s": 2.0**-4, "numpy_loop_s": 2.0**-3,
        }  # fmt: skip
    if part == "deep":
        return {"net": f"net{i}", "d": 5, "batch": 2, "batched_s": 0.5, "loop_s": 2.0}
    if part == "paper":
        return {"dataset": f"set{i}", "skipped": "absent"}
    if part == "scale":
        return {"n": 100, "d": 10, "world": 1, "error": "stand-in"}
    return {"compressor": f"c{i}", "method": f"m{i}", "n": 1, "d": 1, "elements": 1,
            "error": "stand-in"}  # fmt: skip


@pytest.fixture
def fake_parts(monkeypatch):
    """Stand-ins for the triad and the parts: each part runs ``cases`` cases of one row, and
    calls ``hook(i)`` after case ``i``."""
    monkeypatch.setattr(bandwidth, "triad", lambda *a, **k: dict(TRIAD))
    ctl = {"cases": 3, "hook": lambda i: None, "seen": []}

    def run_part(part, args, track):
        track.plan(ctl["cases"])
        rows = []
        for i in range(ctl["cases"]):
            track.case(f"case {i}")
            track.skip("some-method", NO_THEORY)
            rows.append(_row(part, i))
            track.rows(rows[-1:])
            if args.out:
                ctl["seen"].append(json.loads(Path(args.out, "benchmarks.json").read_text()))
            ctl["hook"](i)
        return rows

    monkeypatch.setattr(bench_main, "_run_part", run_part)
    return ctl


def test_progress_lines_one_skip_line_and_files_as_they_come(fake_parts, tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO, logger="benchmarks")
    out = tmp_path / "out"
    assert bench_main.main(["--only", "iterations,memory", "--out", str(out)]) == 0
    lines = [r.getMessage() for r in caplog.records]
    assert "[1/3] iterations (part 1/2): case 0" in lines
    assert "[3/3] memory (part 2/2): case 2" in lines
    skips = [m for m in lines if "skipped" in m]
    assert skips == [
        "iterations: skipped (no theory step here): some-method",
        "memory: skipped (no theory step here): some-method",
    ]
    # After every case the files held the rows so far, marked as in progress.
    seen = fake_parts["seen"]
    assert [len(s["raw"]["iterations"]) for s in seen[:3]] == [1, 2, 3]
    assert all(s["status"].startswith("IN PROGRESS") for s in seen)
    assert seen[3]["parts_done"] == ["iterations"] and len(seen[3]["raw"]["memory"]) == 1
    doc = json.loads((out / "benchmarks.json").read_text())
    assert doc["status"] == "complete" and doc["parts_done"] == ["iterations", "memory"]
    text = (out / "benchmarks.md").read_text()
    assert capsys.readouterr().out == text
    assert "s in all." in text and "IN PROGRESS" not in text
    assert sorted(p.name for p in out.iterdir()) == ["benchmarks.json", "benchmarks.md"]


def test_quiet_prints_no_progress(fake_parts, caplog, capsys):
    caplog.set_level(logging.INFO, logger="benchmarks")
    assert bench_main.main(["--only", "deep", "--quiet"]) == 0
    assert not [r for r in caplog.records if r.levelno < logging.WARNING]
    assert "# compzoo benchmarks" in capsys.readouterr().out


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_and_keeps_what_it_measured(fake_parts, tmp_path, capsys, sig, code):
    fake_parts["hook"] = lambda i: os.kill(os.getpid(), sig) if i == 1 else None
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "out"
    assert bench_main.main(["--only", "compressors,deep", "--out", str(out)]) == code
    assert signal.getsignal(signal.SIGINT) is before  # handlers given back
    cap = capsys.readouterr()
    assert cap.out == ""
    name = signal.Signals(sig).name
    lines = cap.err.strip().splitlines()
    assert lines == [
        f"benchmarks: interrupted by {name} during compressors (2 of 3 cases done); partial "
        f"results (no part finished) in {out / 'benchmarks.md'} and {out / 'benchmarks.json'}"
    ]
    doc = json.loads((out / "benchmarks.json").read_text())
    assert doc["status"] == (
        f"INTERRUPTED by {name} (parts done: none; compressors stopped after 2 of 3 cases)"
    )
    assert len(doc["raw"]["compressors"]) == 2 and doc["raw"]["deep"] == []
    assert f"INTERRUPTED by {name}" in (out / "benchmarks.md").read_text()


def test_a_signal_without_out_says_nothing_was_saved(fake_parts, capsys):
    fake_parts["hook"] = lambda i: os.kill(os.getpid(), signal.SIGINT)
    assert bench_main.main(["--only", "paper"]) == 130
    err = capsys.readouterr().err
    assert "interrupted by SIGINT during paper (1 of 3 cases done); nothing saved" in err
    assert "Traceback" not in err


def test_atomic_write_replaces_whole_files(tmp_path):
    path = tmp_path / "r.json"
    write_atomic(path, "first")
    write_atomic(path, "second")
    assert path.read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_reason_drops_advice_on_flags():
    assert reason("X's theory needs a convex problem: give --step FLOAT and --mu") == (
        "X's theory needs a convex problem"
    )
    assert reason("p: the server holds no data: give it rows with --problem-opt rows=K") == (
        "p: the server holds no data"
    )
    assert reason("for a strongly convex f (known mu): p has none; give --step FLOAT") == (
        "for a strongly convex f (known mu): p has none"
    )
    assert reason("give --step FLOAT") == NO_THEORY
    assert reason("no flag here") == "no flag here"
    assert why_skipped("needs mu: give --mu or use --option 2") == NOT_HERE


def test_every_configure_failure_is_summarised_without_flags():
    # The methods' own messages on the benchmark's problem: none of the runner's flags remain.
    rng = np.random.default_rng(0)
    n, d, m = 4, 20, 5
    A = rng.standard_normal((n * m, d))
    b = np.where(rng.random(n * m) < 0.5, -1.0, 1.0)
    p = LogRegNonconvex(A, b, np.full(n, m), lam=0.1, x0="zeros")
    track = Tracker("iterations", quiet=False)
    failures = 0
    for name, cls in ALGORITHMS.items():
        try:
            cls.configure(p, parse_spec(per_iteration.compressor_for(name, d)))
        except ValueError as e:
            failures += 1
            assert reason(str(e)) and not FLAG.search(reason(str(e))), (name, str(e))
            track.skip(name, why_skipped(str(e)))
    assert failures > 0
    summary = track.summary()
    assert "\n" not in summary and not FLAG.search(summary)
    assert sum(len(v) for v in track.skipped.values()) == failures


def test_bench_case_reports_skips_to_the_tracker():
    case = per_iteration.Case("dense", 4, 20, 5, "float64")
    track = Tracker("iterations")
    chosen = list(ALGORITHMS)
    rows = per_iteration.bench_case(case, 1, 1, "cpu", chosen, track)
    errors = [r for r in rows if "error" in r]
    assert {r["method"] for r in errors} == {m for v in track.skipped.values() for m in v}
    assert all(not FLAG.search(r["error"]) for r in errors)
    assert len(rows) == len(chosen)


def test_memory_forks_a_process_per_method_and_reports_each():
    names = [*list(ALGORITHMS)[:2], "no-such-method"]
    track = Tracker("memory")
    rows = memory.run(size=(4, 2000), parallel=2, methods=names, track=track)
    assert [r["method"] for r in rows] == names
    assert track.started == track.finished == track.total == 3
    assert sorted(r["method"] for r in track.measured) == sorted(names)
    for r in rows[:2]:
        assert r["extra_bytes"] > 0 and r["state_bytes"] > 0, r
    assert "no-such-method" in rows[2]["error"]  # its process failed: an error row


def _let_handlers_run() -> None:
    for _ in range(1000):  # Python runs signal handlers between bytecodes
        pass


def test_a_signal_before_ready_or_in_a_shield_is_held_then_raised():
    before = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    with interrupt.catching():
        os.kill(os.getpid(), signal.SIGTERM)  # before ready(): held
        _let_handlers_run()
        with pytest.raises(interrupt.Interrupted) as e:
            interrupt.ready()
        assert e.value.code == 143 and e.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # stopping already: dropped
        _let_handlers_run()
    with interrupt.catching():
        interrupt.ready()
        with pytest.raises(interrupt.Interrupted) as e:
            with interrupt.shielded():
                os.kill(os.getpid(), signal.SIGINT)
                _let_handlers_run()
                started = True  # the shielded block runs to its end
        assert started and e.value.code == 130
    assert {s: signal.getsignal(s) for s in interrupt.SIGNALS} == before


def test_second_order_methods_are_named_and_first_order_ones_kept():
    from algorithms.registry import ALGORITHMS
    from benchmarks.progress import second_order

    left_out = {name for name in ALGORITHMS if second_order(ALGORITHMS[name].requires, "bench")}
    assert left_out == {"fednl", "newton-3pc"}
    assert second_order(ALGORITHMS["fednl"].requires, "bench").endswith("outside this bench")
