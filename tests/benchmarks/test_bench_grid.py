"""``python -m benchmarks --only grid``: the ratios and verdicts on injected numbers, and (slow,
with the LIBSVM sets) the grid itself on one set: batched and one run per process choose the
same multipliers."""

from __future__ import annotations

import time

import pytest

from benchmarks import grid
from benchmarks.paper import find_data


def test_ratios_and_targets_on_injected_numbers():
    rows = [
        {"kind": "grid", "runs": 96, "sets": ["a9a"], "jobs": 2, "iters": 2000, "off_s": 150.0,
         "auto_s": 25.0, "same_choice": True},
        {"kind": "grid", "runs": 96, "sets": ["a9a"], "jobs": 2, "iters": 2000, "off_s": 150.0,
         "auto_s": 60.0, "same_choice": False},
        {"kind": "step", "set": "w8a", "single_s": 1e-3, "batch_s": 2.4e-3, "points_engine":
         "compiled", "engine": "csr/2"},
        {"kind": "step", "set": "a9a", "single_s": 1e-3, "batch_s": 6e-3, "points_engine":
         "library", "engine": "csr/2"},
    ]  # fmt: skip
    out = grid.derive(rows)
    assert out[0]["speedup"] == pytest.approx(6.0) and out[0]["target"] == "met"
    assert out[1]["speedup"] == pytest.approx(2.5) and out[1]["target"].startswith("MISSED")
    assert out[2]["share"] == pytest.approx(0.2) and out[2]["target"] == "met"
    assert out[3]["share"] == pytest.approx(0.5) and out[3]["target"].startswith("MISSED")
    text = grid.markdown(out)
    assert "| 150.0 | 25.0 | 6.00x | yes | met |" in text
    assert "| 150.0 | 60.0 | 2.50x | NO |" in text
    assert "| w8a | csr/2 | compiled | 1.000 | 2.400 | 0.200 | 0.20 | - | met |" in text
    assert "engines" not in text  # no time given: no sentence
    rows[0]["engines_s"] = 11.04
    assert "were chosen (or looked up) as a sweep does up front, in 11.0 s" in grid.markdown(
        grid.derive(rows)
    )


def test_the_split_of_the_steps_on_injected_numbers():
    """Each step's floor (a free gradient) and its gradient alone, the batch's per run against
    one run's, in a table of their own; rows without the split (measured before it) print
    none."""
    row = {"kind": "step", "set": "mushrooms", "single_s": 2e-4, "batch_s": 6e-4,
           "points_engine": "lanes", "engine": "dense-bits/2", "single_floor_s": 1e-4,
           "batch_floor_s": 2.4e-4, "single_grad_s": 1.25e-4, "batch_grad_s": 4.5e-4}  # fmt: skip
    (r,) = grid.derive([row])
    assert r["floor_share"] == pytest.approx(0.2) and r["grad_share"] == pytest.approx(0.3)
    assert r["share"] == pytest.approx(0.25) and r["target"] == "met"
    text = grid.markdown([r])
    assert "| mushrooms | 0.100 | 0.125 | 0.240 | 0.450 | 0.20 | 0.30 |" in text
    # the share round by round, each from its two adjacent windows, and its range
    rounds = {
        **row,
        "single_rounds_s": [2e-4, 1e-4, 2.5e-4],
        "batch_rounds_s": [6e-4, 3.6e-4, 9e-4],
    }
    (rr,) = grid.derive([rounds])
    assert rr["share_rounds"] == pytest.approx([0.25, 0.3, 0.3])
    assert "| 0.600 | 0.050 | 0.25 | 0.25-0.30 | met |" in grid.markdown([rr])
    old = {k: v for k, v in row.items() if "floor" not in k and "grad" not in k}
    (o,) = grid.derive([old])
    assert "floor_share" not in o and "Where the steps go" not in grid.markdown([o])


def test_a_grid_whose_unbatched_sweep_did_not_finish_is_reported_as_not_measured():
    """The batched sweep runs first and is saved; a benchmark stopped during the one-run-per-
    process sweep (hours on a GPU: one CUDA context per run) reports no ratio, not a wrong one."""
    rows = [{"kind": "grid", "runs": 96, "sets": ["a9a"], "jobs": 16, "iters": 2000,
             "device": "cuda", "off_s": None, "auto_s": 30.0}]  # fmt: skip
    (r,) = grid.derive(rows)
    assert r["speedup"] is None and r["target"].startswith("not measured")
    assert "--jobs 16, device cuda" in grid.markdown([r])
    assert "| - | 30.0 | -x | - | not measured" in grid.markdown([r])


def test_steps_are_timed_after_untimed_ones(monkeypatch):
    """A window of steps is timed only after ``WARM_S`` seconds of untimed ones: a method whose
    first steps are slow (as after a pause, or beside another pool's spinning threads) is timed
    at its steady pace."""
    calls = []

    class Slow:
        def step(self, state, problem, comm):
            calls.append(None)
            time.sleep(0.03 if len(calls) <= 3 else 0.001)
            return state, {}

    monkeypatch.setattr(grid, "WARM_S", 0.1)
    per = grid._per_step(Slow(), None, None, None, 10, "cpu")
    assert len(calls) >= 13  # three slow steps (0.09 s) went untimed
    assert 0.001 <= per < 0.006, per  # timed with them: at least 0.0097


@pytest.mark.slow
@pytest.mark.skipif(find_data("mushrooms") is None, reason="the LIBSVM set mushrooms is absent")
def test_grid_quick_on_one_set(monkeypatch):
    monkeypatch.setattr(grid, "QUICK_SETS", ("mushrooms",))
    monkeypatch.setattr(grid, "QUICK_ITERS", 100)
    rows = grid.derive(grid.run(quick=True))
    (g,) = [r for r in rows if r["kind"] == "grid"]
    assert g["runs"] == 24 and g["same_choice"], g
    assert g["off_s"] > 0 and g["auto_s"] > 0
    (s,) = [r for r in rows if r["kind"] == "step"]
    assert s["set"] == "mushrooms" and s["single_s"] > 0 and s["batch_s"] > 0
    split = [f"{who}_{part}_s" for who in ("single", "batch") for part in ("floor", "grad")]
    assert all(s[key] > 0 for key in split), s
    assert len(s["single_rounds_s"]) == len(s["batch_rounds_s"]) == 3, s
    assert s["single_s"] == sorted(s["single_rounds_s"])[1]  # the median of the rounds
    assert s["share_rounds"] == pytest.approx(
        [b / grid.BATCH / a for a, b in zip(s["single_rounds_s"], s["batch_rounds_s"], strict=True)]
    )


@pytest.mark.heavy
@pytest.mark.skipif(find_data("mushrooms") is None, reason="the LIBSVM set mushrooms is absent")
def test_engines_chosen_before_the_sweeps_are_found_by_them(monkeypatch, tmp_path):
    """The up-front choice memoises every engine the sweeps' own up-front check looks up (each
    run's and each batch's): timed after it, neither sweep measures one."""
    from problems import glm_engine

    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "memo"))
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda clock: 0.0)  # a quiet machine
    measured = []
    real = glm_engine.measure
    monkeypatch.setattr(glm_engine, "measure", lambda *a: measured.append(a) or real(*a))
    cfg = grid._config(True, ["mushrooms"])
    assert grid._choose_engines(cfg, tmp_path / "auto", 2) > 0
    assert len(measured) >= 2  # the runs' engine and the batches' (a fresh memo)
    measured.clear()
    from experiments.sweep_pool import planned_batches
    from experiments.sweep_servers import RUN_THREADS
    from experiments.validate import resolve_runs

    for batch in ("auto", "off"):  # what run_sweep checks up front in each mode
        points = planned_batches(cfg, tmp_path / batch, 2) if batch == "auto" else {}
        resolve_runs(cfg, threads=RUN_THREADS, points=points)
    assert measured == []
