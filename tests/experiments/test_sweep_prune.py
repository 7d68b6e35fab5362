"""The pruned sweep (``run_sweep(..., prune=...)``): the same winners, shorter losers.

The end-to-end test runs one small sweep twice, unpruned and pruned, and compares what the
selection sees; the unit tests fix the budget rule on hand-written run folders (mean over
``k`` seeds: ``k`` times the best; median over an even count: twice; a group whose
iteration-0 bits differ: no budget).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from experiments.config import load_config
from experiments.reproduce import _median
from experiments.sweep import _Budget, run_sweep

TOML = """
name = "prune"
[base]
problem = "quadratic"
nodes = 4
iters = 400
tol = 1e-3
tol_on = "grad_norm_sq"
[[methods]]
algorithm = "diana"
label = "DIANA"
[grid]
compressor = ["randk:k=2"]
step_mult = [0.25, 2, 4, 1e6]
seed = [0, 1, 2]
[select]
rule = "bits_to_tol"
metric = "grad_norm_sq"
tol = 1e-3
"""


def _rows(out: Path) -> list[dict]:
    with (out / "summary.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _medians(rows: list[dict]) -> dict[float, float]:
    by: dict[float, list[float]] = {}
    for r in rows:
        v = float(r["bits_to_tol"]) if r["bits_to_tol"] and r["status"] != "diverged" else math.inf
        by.setdefault(float(r["step_mult"]), []).append(v)
    return {m: _median(v) for m, v in by.items()}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prune")
    (tmp / "p.toml").write_text(TOML)
    cfg = load_config(tmp / "p.toml")
    run_sweep(cfg, tmp / "full", jobs=2, progress=False)
    run_sweep(cfg, tmp / "pruned", jobs=2, progress=False, prune="median")
    return _rows(tmp / "full"), _rows(tmp / "pruned")


def test_pruned_sweep_keeps_the_winner_and_every_median_up_to_it(pair):
    full, pruned = pair
    mf, mp = _medians(full), _medians(pruned)
    winner = min(mf, key=lambda m: (mf[m], m))
    assert math.isfinite(mf[winner])
    assert min(mp, key=lambda m: (mp[m], m)) == winner
    for m, v in mf.items():
        if v <= mf[winner]:
            assert mp[m] == v
        else:
            assert mp[m] >= mf[winner]  # a loser stays a loser
    # every run that reached tol unpruned within the winner's median reached it pruned, at the
    # same bits; the pruning did cut something, and only runs that never reached tol pruned
    same = {r["run_id"]: r for r in pruned}
    for r in full:
        if r["bits_to_tol"] and float(r["bits_to_tol"]) <= mf[winner]:
            assert same[r["run_id"]]["bits_to_tol"] == r["bits_to_tol"]
    cut = [r for r in pruned if r["status"] == "max_bits"]
    assert cut and all(not r["bits_to_tol"] for r in cut)
    iters = [sum(int(r["iters_run"]) for r in rows) for rows in (full, pruned)]
    assert iters[1] < iters[0]


def _fake_run(out: Path, run_id: str, reason: str, bits: list[float], gn: list[float]) -> None:
    d = out / "runs" / run_id
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"reason": reason}))
    with (d / "history.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["iter", "bits_up", "f", "grad_norm_sq"])
        w.writeheader()
        for i, (b, g) in enumerate(zip(bits, gn, strict=True)):
            w.writerow({"iter": i, "bits_up": b, "f": 1.0, "grad_norm_sq": g})


def _budget(tmp: Path, seeds: list[int], pool: str, finished: dict, start: float = 64.0):
    """A two-multiplier group; ``finished[(mult, seed)]`` = bits at which tol is reached (None:
    finished without reaching it); returns the budget and the multiplier-1 specs."""
    toml = TOML.replace("step_mult = [0.25, 2, 4, 1e6]", "step_mult = [1, 2]").replace(
        "seed = [0, 1, 2]", f"seed = {seeds}"
    )
    (tmp / "b.toml").write_text(toml)
    cfg = load_config(tmp / "b.toml")
    specs = cfg.runs()
    out = tmp / "out"
    for s in specs:
        key = (float(s.params["step_mult"]), int(s.params["seed"]))
        if key not in finished:
            continue
        reach = finished[key]
        if reach is None:
            _fake_run(out, s.run_id, "completed", [start, start + 500.0], [1.0, 0.5])
        else:
            _fake_run(out, s.run_id, "tolerance", [start, reach], [1.0, 1e-4])
    budget = _Budget(cfg, specs, out, pool)
    return budget, [s for s in specs if float(s.params["step_mult"]) == 1.0]


@pytest.mark.parametrize(
    ("seeds", "pool", "factor"),
    [([0], "median", 1), ([0, 1, 2], "median", 1), ([0, 1], "median", 2), ([0, 1, 2], "mean", 3)],
)
def test_budget_is_the_best_pooled_value_times_the_seed_factor(tmp_path, seeds, pool, factor):
    reach = {(2.0, s): 1000.0 + 100.0 * s for s in seeds}
    budget, todo = _budget(tmp_path, seeds, pool, reach)
    vals = list(reach.values())
    best = statistics.median(vals) if pool == "median" else sum(vals) / len(vals)
    assert budget.max_bits(todo[0]) == factor * best + 1.0


def test_no_budget_until_a_multiplier_has_all_its_runs_and_a_finite_score(tmp_path):
    budget, todo = _budget(tmp_path, [0, 1, 2], "median", {(2.0, 0): 900.0, (2.0, 1): 950.0})
    assert budget.max_bits(todo[0]) is None  # seed 2 of multiplier 2 still running
    never = {(2.0, s): None for s in (0, 1, 2)}
    (tmp_path / "b").mkdir()
    budget, todo = _budget(tmp_path / "b", [0, 1, 2], "median", never)
    assert budget.max_bits(todo[0]) is None  # finished, but none reached tol


def test_no_budget_when_the_first_iterations_bits_differ(tmp_path):
    reach = {(2.0, 0): 900.0, (1.0, 0): 5000.0}
    budget, todo = _budget(tmp_path, [0], "median", reach)
    assert budget.max_bits(todo[0]) == 901.0
    # a group whose runs started at different bits: the excl.-initial order may differ from
    # the raw one, so it is not pruned
    (tmp_path / "out" / "runs" / todo[0].run_id / "history.csv").write_text(
        "iter,bits_up,f,grad_norm_sq\n0,10,1,1\n1,5000,1,1e-4\n"
    )
    cfg = load_config(tmp_path / "b.toml")
    assert _Budget(cfg, cfg.runs(), tmp_path / "out", "median").max_bits(todo[0]) is None


def test_prune_is_refused_where_it_cannot_apply(tmp_path):
    (tmp_path / "p.toml").write_text(TOML)
    cfg = load_config(tmp_path / "p.toml")
    with pytest.raises(ValueError, match="prune must be one of"):
        run_sweep(cfg, tmp_path / "o", prune="max")
    with pytest.raises(ValueError, match="pool executor"):
        run_sweep(cfg, tmp_path / "o", prune="mean", executor="local")
    (tmp_path / "q.toml").write_text(TOML.replace('rule = "bits_to_tol"', 'rule = "min_final"'))
    other = load_config(tmp_path / "q.toml")
    with pytest.raises(ValueError, match="bits_to_tol"):
        run_sweep(other, tmp_path / "o", prune="mean")
