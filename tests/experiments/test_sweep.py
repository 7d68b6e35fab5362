"""Sweeps end to end on tiny quadratics: folders, tables, selection, divergence, resuming.

One sweep (2 methods x 3 multipliers x 2 seeds) serves most tests: it is started as a
subprocess, killed with SIGKILL once some runs have finished, then resumed in-process, so the
same 12 runs check both the resumption and the tables.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.config import Selection, load_config
from experiments.select import best, bits_to_tol, group_key
from experiments.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[2]
TOML = """
name = "tiny-sweep"
[base]
problem = "quadratic"
nodes = 2
iters = 20
[[methods]]
algorithm = "ef21"
label = "EF21"
[[methods]]
algorithm = "ef-sgd"
[grid]
compressor = ["topk:k=1"]
step_mult = [1, 2, 1e12]
seed = [0, 1]
[select]
rule = "min_final"
metric = "grad_norm_sq"
tol = 4.0
"""
DIVERGING = 1e12


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def finished(out: Path) -> list[Path]:
    done = []
    for p in sorted((out / "runs").glob("*/summary.json")):
        try:
            json.loads(p.read_text())
        except ValueError:
            continue
        done.append(p.parent)
    return done


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The tiny sweep, killed after >= 2 finished runs and resumed; plus what was seen."""
    tmp = tmp_path_factory.mktemp("sweep")
    cfg_path, out = tmp / "tiny.toml", tmp / "out"
    cfg_path.write_text(TOML)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", str(cfg_path), "--out", str(out),
         "--jobs", "2", "--quiet"],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(finished(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the runs it started
    proc.wait()
    before = {d.name: mtimes(d) for d in finished(out)}
    started = sorted(p.name for p in (out / "runs").iterdir())
    cfg = load_config(cfg_path)
    run_sweep(cfg_path, out, jobs=2, progress=False)
    return {"cfg": cfg, "cfg_path": cfg_path, "out": out, "before": before, "started": started}


def test_kill_then_resume_completes_and_keeps_finished_runs(sweep):
    out, before = sweep["out"], sweep["before"]
    assert 2 <= len(before) < 12
    assert sorted(d.name for d in finished(out)) == sorted(r.run_id for r in sweep["cfg"].runs())
    for run_id, files in before.items():
        assert mtimes(out / "runs" / run_id) == files  # same files, never rewritten


def test_rerun_of_a_finished_sweep_runs_nothing(sweep):
    out = sweep["out"]
    runs_before = {d.name: mtimes(d) for d in finished(out)}
    summary = (out / "summary.csv").read_text()
    t0 = time.monotonic()
    run_sweep(sweep["cfg"], out, jobs=2, progress=False)
    assert time.monotonic() - t0 < 2.0  # no subprocess was started (each takes seconds)
    assert {d.name: mtimes(d) for d in finished(out)} == runs_before
    assert (out / "summary.csv").read_text() == summary


def test_folders_and_summary_rows_match_run_summaries(sweep):
    out, specs = sweep["out"], sweep["cfg"].runs()
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(r.run_id for r in specs)
    assert json.loads((out / "sweep.json").read_text()) == sweep["cfg"].to_dict()
    rows = read_csv(out / "summary.csv")
    assert [r["run_id"] for r in rows] == [s.run_id for s in specs]
    for row, spec in zip(rows, specs, strict=True):
        summary = json.loads((out / "runs" / spec.run_id / "summary.json").read_text())
        assert row["status"] == summary["reason"]
        assert int(row["iters_run"]) == summary["iters"]
        assert float(row["gamma"]) == summary["gamma"]
        for col in ("bits_up", "bits_down", "f", "f_gap", "grad_norm_sq"):
            assert float(row[col]) == summary["final"][col]
        for key in ("algorithm", "label", "compressor", "problem"):
            assert row[key] == spec.params[key]
        assert float(row["step_mult"]) == spec.params["step_mult"]
        assert int(row["seed"]) == spec.params["seed"]
        hist = read_csv(out / "runs" / spec.run_id / "history.csv")
        assert row["bits_to_tol"] == str(bits_to_tol(hist, "grad_norm_sq", 4.0) or "")
    # measured: 20 iterations of Top-1 on d=20 cost EF21 1380 bits, EF14 740 bits per node
    ok = [r for r in rows if r["status"] == "completed"]
    assert {(r["algorithm"], float(r["bits_up"])) for r in ok} == {
        ("ef21", 1380.0),
        ("ef-sgd", 740.0),
    }


def test_diverging_multiplier_is_recorded_and_never_chosen(sweep):
    rows = read_csv(sweep["out"] / "summary.csv")
    diverged = [r for r in rows if r["status"] == "diverged"]
    assert sorted(r["run_id"] for r in diverged) == sorted(
        r["run_id"] for r in rows if float(r["step_mult"]) == DIVERGING
    )
    assert len(diverged) == 4
    assert all(math.isinf(float(r["grad_norm_sq"])) for r in diverged)
    assert all(int(r["iters_run"]) < 20 for r in diverged)
    # Diverged runs stop early and so send fewer bits: ranked by raw bits_up they would win.
    assert all(float(r["bits_up"]) < 740 for r in diverged if r["algorithm"] == "ef-sgd")
    by_bits = best(rows, Selection(rule="min_final", metric="bits_up"))
    assert [(b["label"], b["step_mult"], b["value"], b["at_edge"]) for b in by_bits] == [
        ("EF21", 1.0, 1380.0, True),  # ties (1 and 2 both send 1380) go to the smaller
        ("ef-sgd", 1.0, 740.0, True),
    ]
    for sel in (Selection(), Selection(rule="bits_to_tol", tol=4.0)):
        assert all(b["step_mult"] != DIVERGING for b in best(rows, sel))


def hand_best(rows: list[dict], score) -> dict[str, tuple[float, float]]:
    """label -> (multiplier, mean score), by a direct reading of the rule."""
    means: dict[str, dict[float, list[float]]] = {}
    for r in rows:
        s = math.inf if r["status"] == "diverged" else score(r)
        means.setdefault(r["label"], {}).setdefault(float(r["step_mult"]), []).append(s)
    out = {}
    for label, by_mult in means.items():
        cands = sorted((np.mean(v), m) for m, v in by_mult.items())
        out[label] = (cands[0][1], float(cands[0][0]))
    return out


def test_best_csv_follows_the_rule(sweep):
    out = sweep["out"]
    rows = read_csv(out / "summary.csv")
    chosen = read_csv(out / "best.csv")
    hand = hand_best(rows, lambda r: float(r["grad_norm_sq"]))
    assert [(c["label"], float(c["step_mult"])) for c in chosen] == [
        (label, m) for label, (m, _) in hand.items()
    ]
    for c in chosen:
        m, value = hand[c["label"]]
        assert float(c["value"]) == pytest.approx(value, rel=1e-15)
        assert (c["rule"], c["metric"], c["n_mults"], c["n_seeds"]) == (
            "min_final", "grad_norm_sq", "3", "2",
        )  # fmt: skip
        assert c["at_edge"] == "False"
        ids = c["run_ids"].split(";")
        assert len(ids) == 2 and all(f"_m{m:g}_" in i for i in ids)
    # measured: the doubled theory step wins for both methods on this quadratic
    assert [float(c["step_mult"]) for c in chosen] == [2.0, 2.0]


def test_bits_to_tol_rule_against_histories(sweep):
    out = sweep["out"]
    rows = read_csv(out / "summary.csv")

    def first_bits(r):
        hist = read_csv(out / "runs" / r["run_id"] / "history.csv")
        g = np.array([float(h["grad_norm_sq"]) for h in hist])
        hit = np.flatnonzero(g <= 4.0)
        return float(hist[hit[0]]["bits_up"]) if len(hit) else math.inf

    hand = hand_best(rows, first_bits)
    chosen = best(rows, Selection(rule="bits_to_tol", tol=4.0))
    assert [(c["label"], c["step_mult"], c["value"]) for c in chosen] == [
        (label, m, v) for label, (m, v) in hand.items()
    ]
    assert all(math.isfinite(c["value"]) for c in chosen)
    # grouping ignores only the multiplier and the seed
    assert len({group_key(r) for r in rows}) == 2


def test_real_sweep_plots_best_runs_mean(sweep):
    from experiments.plot import plot

    out = sweep["out"]
    fig = plot([out], x="iters", y="grad_norm_sq")
    ax = fig.axes[0]
    chosen = read_csv(out / "best.csv")
    # each line names the multiplier best.csv chose among the 3 tried (1 and 1e12 are the ends)
    edge = {"True": ", edge", "False": ""}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        f"{c['label']}, topk:k=1, x{float(c['step_mult']):g}{edge[c['at_edge']]}" for c in chosen
    ]
    assert ax.get_legend().get_texts()[0].get_text() == "EF21, topk:k=1, x2"
    for line, c in zip(ax.get_lines(), chosen, strict=True):
        curves = [read_csv(out / "runs" / i / "history.csv") for i in c["run_ids"].split(";")]
        mean = np.mean([[float(h["grad_norm_sq"]) for h in cv] for cv in curves], axis=0)
        np.testing.assert_allclose(line.get_ydata(), mean, rtol=1e-14)
        np.testing.assert_array_equal(line.get_xdata(), np.arange(21))


def test_other_config_or_foreign_folder_is_refused(sweep, tmp_path):
    cfg = sweep["cfg"]
    changed = load_config({**cfg.to_dict(), "base": {**cfg.base, "iters": 21}})
    msg = "holds a sweep of a different config (differs in: base); choose another --out"
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        run_sweep(changed, sweep["out"], progress=False)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="exists and is not a sweep folder"):
        run_sweep(sweep["cfg"], foreign, progress=False)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    with pytest.raises(ValueError, match="jobs must be an integer >= 1, got 0"):
        run_sweep(sweep["cfg"], tmp_path / "new", jobs=0, progress=False)


def test_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    # A run that fails only once it runs: the up-front resolution (which would refuse the bad
    # compressor before anything starts) is skipped here.
    monkeypatch.setattr("experiments.validate.resolve_runs", lambda cfg, **kw: None)
    cfg = load_config(
        {
            "name": "with-a-bad-run",
            "base": {"problem": "quadratic", "nodes": 2, "iters": 5, "compressor": "nope"},
            "methods": [{"algorithm": "ef21"}],
        }
    )
    out = run_sweep(cfg, tmp_path / "s", progress=False)  # returns: the failure is recorded
    (row,) = read_csv(out / "summary.csv")
    assert (row["run_id"], row["status"]) == (cfg.runs()[0].run_id, "failed")
    err = (out / "runs" / row["run_id"] / "stderr.txt").read_text()
    assert err.startswith("exit status 2\n")
    assert "unknown compressor 'nope'" in err
    assert row["error"].startswith("exit status 2 | error: unknown compressor 'nope'; allowed: ")
    (chosen,) = read_csv(out / "best.csv")  # no multiplier named, and why
    assert (chosen["compressor"], chosen["step_mult"], chosen["status"], chosen["value"]) == (
        "nope", "", "all failed", ""
    )  # fmt: skip


def test_cli_on_a_finished_sweep(sweep, capsys):
    from experiments.sweep import main

    args = [str(sweep["cfg_path"]), "--out", str(sweep["out"]), "--jobs", "2"]
    assert main(args) == 0  # diverged runs are results, not failures
    assert capsys.readouterr().out == (
        f"tiny-sweep: 12 runs (8 completed, 4 diverged); tables in {sweep['out']}\n"
    )
    assert main([*args, "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "error: jobs must be an integer >= 1, got 0\n"


def test_a_live_sweep_locks_its_folder(sweep):
    out, lock = sweep["out"], sweep["out"] / "sweep.lock"
    assert not lock.exists()  # released by every finished sweep
    lock.write_text(f"{os.getppid()}\n")  # a live process that is not this one
    with pytest.raises(ValueError, match=rf"^another sweep \(pid {os.getppid()}\) is running"):
        run_sweep(sweep["cfg"], out, progress=False)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(f"{dead.pid}\n")  # left behind by a killed sweep: ignored
    run_sweep(sweep["cfg"], out, progress=False)
    assert not lock.exists()


TIME_COLUMNS = {"wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"}


def _histories(out: Path) -> dict[str, list[dict]]:
    return {
        d.name: [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in read_csv(h)]
        for d in sorted((out / "runs").iterdir())
        for h in [d / "history.csv"]
    }


@pytest.mark.heavy  # 12 s: one sweep, twice (on 2 cores)
def test_runs_forked_from_the_server_equal_runs_in_their_own_process(tmp_path, monkeypatch):
    """The fork server (experiments.zygote) against ``COMPZOO_SWEEP_FORK=0`` (every run a
    fresh ``python -m algorithms.run``): the same runs, statuses and histories, bit for bit."""
    cfg_path = tmp_path / "tiny.toml"
    # both methods at a converging and a diverging multiplier, one seed: 4 runs each way
    cfg_path.write_text(
        TOML.replace("step_mult = [1, 2, 1e12]", "step_mult = [1, 1e12]").replace(
            "seed = [0, 1]", "seed = [0]"
        )
    )
    forked = run_sweep(cfg_path, tmp_path / "forked", jobs=2, progress=False)
    monkeypatch.setenv("COMPZOO_SWEEP_FORK", "0")
    plain = run_sweep(cfg_path, tmp_path / "plain", jobs=2, progress=False)
    rows = [[{k: v for k, v in r.items() if k not in TIME_COLUMNS}
             for r in read_csv(o / "summary.csv")]
            for o in (forked, plain)]  # fmt: skip
    assert rows[0] == rows[1] and len(rows[0]) == 4
    assert {r["status"] for r in rows[0]} == {"completed", "diverged"}
    assert _histories(forked) == _histories(plain)


@pytest.mark.heavy  # 9 s: a sweep, its server killed (on 2 cores)
def test_a_dead_fork_server_costs_only_a_subprocess(tmp_path):
    """A server that died between runs: the run goes to a plain subprocess and completes."""
    from experiments import sweep as sw

    cfg = load_config(
        {"name": "one", "base": {"problem": "quadratic", "nodes": 2, "iters": 5},
         "methods": [{"algorithm": "ef21"}]}
    )  # fmt: skip
    (spec,) = cfg.runs()
    servers = sw._Servers(1, sw._env())
    proc = servers.take()
    assert proc is not None
    proc.kill()
    proc.wait()
    servers.give(proc, alive=True)  # its death not yet noticed
    try:
        status = sw._execute(spec, tmp_path / "run", sw._env(), servers)
        assert status == "completed"
        assert json.loads((tmp_path / "run" / "summary.json").read_text())["iters"] == 5
        again = servers.take()  # a new server replaces the dead one
        assert again is not None and again is not proc and again.poll() is None
        servers.give(again, alive=True)
    finally:
        servers.close()


SLOW_CHILD = """
import sys, time
from experiments import zygote

child = zygote._child


def slow(runner, req):
    time.sleep(1.0)  # a child not yet scheduled when the server names its pid
    child(runner, req)


zygote._child = slow
sys.exit(zygote.serve())
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_as_the_server_names_the_child_stops_it(tmp_path, signum):
    """The sweep passes its signal on as soon as the fork server names a child's pid, which
    may be before the child has replaced the handlers it inherits from the server (which
    ignores both signals). Such a signal must still stop the run, as the start-up guard of a
    command stops it (exit 130 or 143, one line, nothing run), not be lost while the run goes
    on. The child here waits 1 s before its first instruction, so the signal always comes in
    that window."""
    from experiments.sweep_servers import _env

    pid = None
    server = subprocess.Popen(
        [sys.executable, "-c", SLOW_CHILD], env=_env(), cwd=tmp_path, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip
    try:
        assert server.stdout.readline().strip() == "ready"
        argv = ["ef21", "--compressor", "topk:k=2", "--nodes", "4", "--iters", "10000000",
                "--quiet", "--out", str(tmp_path / "r")]  # fmt: skip
        err = tmp_path / "stderr.txt"
        server.stdin.write(json.dumps({"argv": argv, "stderr": str(err)}) + "\n")
        server.stdin.flush()
        pid = json.loads(server.stdout.readline())["pid"]
        os.kill(pid, signum)
        answer, _ = server.communicate(timeout=60)  # a lost signal: the run goes on, a timeout
        assert json.loads(answer) == {"status": 128 + signum}
        assert "while starting; nothing was run" in err.read_text()
        assert not (tmp_path / "r").exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_costliest_runs_and_batches_start_first(tmp_path, monkeypatch):
    """With ``--jobs`` workers taking the queue in turn, a sweep's longest units (a step costs
    about its data file's entries, times the iterations) are queued first, batches and single
    runs alike, ties in config order."""
    from experiments import sweep_pool

    for name, rows in (("small", 4), ("big", 400)):
        lines = "".join(f"{(-1) ** j} 1:0.5 2:1\n" for j in range(rows))
        (tmp_path / f"{name}.txt").write_text(lines)
    monkeypatch.setenv("COMPZOO_DATA", str(tmp_path))
    cfg = load_config({
        "name": "order",
        "base": {"problem": "logreg", "nodes": 2, "iters": 10},
        "methods": [{"algorithm": "ef21"}, {"algorithm": "ef21", "label": "long", "iters": 50}],
        "grid": {"dataset": ["small", "big"], "compressor": ["topk:k=1"], "step_mult": [1, 2]},
    })  # fmt: skip
    units = sweep_pool._batches(cfg.runs(), tmp_path / "out", jobs=1)
    assert [len(u) for u in units] == [2, 2, 2, 2]
    ranked = sweep_pool._longest_first(units)
    order = [(u[0].params["label"], u[0].params["dataset"]) for u in ranked]
    assert order == [("long", "big"), ("ef21", "big"), ("long", "small"), ("ef21", "small")]

    class NoServers:  # the runs are not started: only the order they are queued in is seen
        def __init__(self, *args):
            pass

        def close(self):
            pass

        def in_flight(self):
            return []

        def stop(self, signum):
            pass

    started = []

    def batch(unit, *args):
        started.append(("batch", unit[0].params["label"], unit[0].params["dataset"]))
        return ["completed"] * len(unit)

    def single(spec, *args):
        started.append(("run", spec.params["label"], spec.params["dataset"]))
        return "completed"

    monkeypatch.setattr(sweep_pool, "_Servers", NoServers)
    monkeypatch.setattr(sweep_pool, "_execute_batch", batch)
    monkeypatch.setattr(sweep_pool, "_execute", single)
    assert sweep_pool._run_all(cfg, tmp_path / "out", 1, False, batch="auto") == 0
    assert started == [("batch", *o) for o in order]
    started.clear()
    sweep_pool._run_all(cfg, tmp_path / "out", 1, False, batch="off")
    assert started == [("run", *o) for o in order for _ in range(2)]


def test_the_batches_engine_is_chosen_before_they_start(tmp_path, monkeypatch):
    """A ``--batch auto`` sweep chooses each batched problem's engine for its gradients at
    ``R`` points up front, on a quiet machine, under the key the batch looks up (its run count,
    its thread count), so that no batch measures it beside another and memoises nothing."""
    from experiments import sweep_pool
    from experiments.validate import _parser, resolve_runs
    from problems import glm_engine
    from problems.glm_engine import threads_used
    from runner.config import RunConfig
    from runner.resolve import configure

    lines = "".join(f"{(-1) ** j} 1:0.5 2:{j % 3} 3:1\n" for j in range(400))
    (tmp_path / "set.txt").write_text(lines)
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.1)  # a quiet machine
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.0)
    cfg = load_config({
        "name": "points",
        "base": {"problem": "logreg", "nodes": 2, "iters": 10,
                 "dataset": f"libsvm:{tmp_path / 'set.txt'}"},
        "methods": [{"algorithm": "ef21"}, {"algorithm": "ef21-bc"}],
        "grid": {"compressor": ["topk:k=1"], "step_mult": [1, 2, 4]},
    })  # fmt: skip
    sizes = sweep_pool.planned_batches(cfg, tmp_path / "out", jobs=1)
    ef21 = [s for s in cfg.runs() if s.params["algorithm"] == "ef21"]
    assert sizes == {group_key(ef21[0].params): {3}}  # EF21-BC is not batchable: no batch

    def batch_lookup() -> list:
        """The batch's first gradients at its 3 points, as it takes them: what it measured."""
        measured = []
        real = glm_engine.measure
        monkeypatch.setattr(glm_engine, "measure", lambda o, a: measured.append(o) or real(o, a))
        args = RunConfig.from_namespace(_parser().parse_args(ef21[0].argv), list(ef21[0].argv))
        with threads_used(1):
            _, problem, _ = configure(args)
            problem.grad_points(problem.x0.repeat(3, 1))
        monkeypatch.setattr(glm_engine, "measure", real)
        return measured

    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache-1"))
    resolve_runs(cfg, threads=1)  # without the batches' sizes: the batch measures for itself
    assert len(batch_lookup()) == 1
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache-2"))
    resolve_runs(cfg, threads=1, points=sizes)
    assert batch_lookup() == []  # read from the memo
    # the memo is keyed by the run count: a batch of 2 measures
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache-3"))
    resolve_runs(cfg, threads=1, points={k: {2} for k in sizes})
    assert len(batch_lookup()) == 1
