"""The ``stalled`` run status: a run that used all its iterations while neither ``f - f*`` nor
``||grad f||^2`` fell to half its start (:func:`runner.stability.stall_verdict`) says so in
``summary.json`` and on screen, with its step and how to raise it; its exit status stays 0."""

from __future__ import annotations

import json

from algorithms.run import run
from runner.stability import STALL_MIN_ITERS, stall_verdict

EPS64 = 2.0**-52
N = STALL_MIN_ITERS


def test_neither_halved_is_stalled():
    why = stall_verdict([1.349, 1.30, 1.271], [2.0, 1.9, 1.5], 1.0, EPS64, N)
    assert why is not None and "f - f* 0.349 -> best 0.271" in why
    assert "||grad f||^2 2 -> best 1.5" in why and f"in {N} iterations" in why


def test_either_halved_is_movement():
    assert stall_verdict([1.349, 1.1], [2.0, 1.9], 1.0, EPS64, N) is None  # the gap halved
    assert stall_verdict([1.349, 1.3], [2.0, 0.9], 1.0, EPS64, N) is None  # the gradient did
    # the best value counts, not the last: a run that moved and came back is the unstable
    # rule's business, not this one's
    assert stall_verdict([1.349, 1.1, 1.3], [2.0, 1.9, 1.9], 1.0, EPS64, N) is None


def test_short_runs_and_runs_at_the_solution_do_not_stall():
    assert stall_verdict([1.349, 1.3], [2.0, 1.9], 1.0, EPS64, N - 1) is None
    assert stall_verdict([1.0 + 1e-15, 1.0 + 1e-15], [1e-30, 1e-30], 1.0, EPS64, N) is None
    assert stall_verdict([1.0, 1.0], [0.0, 0.0], None, EPS64, N) is None


def test_without_f_star():
    # a loss (f >= 0) that halved moved; one that did not, with a flat gradient, stalled
    assert stall_verdict([2.3, 1.0], [1.0, 0.9], None, EPS64, N) is None
    assert "f 2.3 -> best 2" in stall_verdict([2.3, 2.0], [1.0, 0.9], None, EPS64, N)
    # a negative f is no gap: only the gradient is judged
    assert stall_verdict([-1.0, -1.1], [1.0, 0.9], None, EPS64, N).startswith("||grad f||^2")
    assert stall_verdict([-1.0, -1.1], [1.0, 0.4], None, EPS64, N) is None


def test_a_too_small_step_is_reported_stalled_with_exit_0(tmp_path, capsys):
    out = tmp_path / "small"
    code = run(["ef21", "--iters", "200", "--step-mult", "1e-4", "--out", str(out), "--quiet"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["reason"] == "stalled"
    assert "neither halved" in summary["stalled"]
    text = capsys.readouterr().out
    assert "stalled after 200 iterations" in text and "raise it with --step-mult" in text
    # the same run at its theory step converges and completes
    out = tmp_path / "theory"
    assert run(["ef21", "--iters", "200", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reason"] == "completed" and "stalled" not in summary
