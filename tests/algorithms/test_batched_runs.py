"""Batched runs (:mod:`runner.batch`): runs that differ only in their step advance together and
each equals the same run alone.

- every method that declares ``batchable``: a batch of three steps, computed exactly, equals
  the three runs alone bit for bit (every state field, every node's bits), and a method that
  does not declare it (ADIANA, whose step enters its parameters) is caught by the same check;
- through the runner: the histories of a batch equal the runs alone (bit for bit with
  ``--exact``, to rounding with the one-pass gradients), a diverging run leaves the batch while
  the others go on, a batched run's checkpoint resumes as a single run, and runs that differ in
  a shared setting or a method that is not batchable are refused with a message;
- the sweep: ``--batch auto`` chooses what ``--batch off`` chooses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from algorithms.batching import for_runs
from algorithms.registry import ALGORITHMS, usual_compressor, usual_options
from comm import SimulatedComm
from comm.batched import BatchedSimulatedComm
from compressors import parse_spec
from problems import glm_engine
from problems.batched import Tiled
from problems.registry import make_problem
from runner.api import run, run_batch
from runner.batch import _run_state

BATCHABLE = sorted(n for n, c in ALGORITHMS.items() if c.batchable)
STEPS = 6
MULTS = (1.0, 0.5, 0.25)


def _instance(name: str):
    problem = make_problem("quadratic", nodes=5, lam=0.2, dim=8, seed=1)
    cls = ALGORITHMS[name]
    spec, opts = usual_compressor(name, 3), usual_options(name)
    try:
        algo, _ = cls.configure(problem, parse_spec(spec), **opts)
    except ValueError:  # no theory step on this problem: a fixed one
        algo, _ = cls.configure(problem, parse_spec(spec), step=0.02, **opts)
    return algo, problem


def _difference(name: str) -> str | None:
    """Where a batch of :data:`MULTS` steps differs from the runs alone (None: nowhere)."""
    algo, problem = _instance(name)
    gammas = [algo.gamma * m for m in MULTS]
    R, n = len(gammas), problem.n
    alone = []
    for g in gammas:
        one = dataclasses.replace(algo, gamma=g)
        comm = SimulatedComm(n, seed=3)
        state = one.init(problem.x0, problem, comm)
        for _ in range(STEPS):
            state, _ = one.step(state, problem, comm)
        alone.append((state, comm.ledger))
    reference = algo.init(problem.x0, problem, SimulatedComm(n, seed=3).scratch())
    tiled = Tiled(problem, R, exact=True)
    comm = BatchedSimulatedComm(n, R, 3, exact=True)
    batch = for_runs(algo, gammas, n, problem.dtype)
    state = batch.init(tiled.x0, tiled, comm)
    for _ in range(STEPS):
        state, _ = batch.step(state, tiled, comm)
    for r, (single, ledger) in enumerate(alone):
        mine = _run_state(state, reference, r, R, n)
        for f in dataclasses.fields(single):
            a, b = getattr(mine, f.name), getattr(single, f.name)
            if isinstance(b, torch.Tensor):
                if not (isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)):
                    return f"run {r}: {f.name}"
            elif a != b:
                return f"run {r}: {f.name}"
        own = comm.run_comm(r).ledger
        if not (torch.equal(own.up, ledger.up) and torch.equal(own.down, ledger.down)):
            return f"run {r}: bits"
    return None


@pytest.mark.parametrize("name", BATCHABLE)
def test_a_batch_equals_its_runs_alone_bit_for_bit(name):
    assert _difference(name) is None


def test_the_check_catches_a_method_whose_step_is_not_a_product():
    # ADIANA's step enters its other parameters: one object cannot carry three steps
    assert not ALGORITHMS["adiana"].batchable
    assert _difference("adiana") is not None


def test_many_methods_are_batchable():
    assert {"ef21", "ef-sgd", "diana", "marina", "dasha"} <= set(BATCHABLE)


# ---------------------------------------------------------------------- through the runner
GLM = dict(problem="logreg-nonconvex", dataset="synthetic", nodes=6, iters=60, log_every=5,
           problem_opt={"samples": 600, "features": 30, "density": 0.3})  # fmt: skip
COLS = ["iter", "bits_up", "bits_down", "f", "grad_norm_sq", "bits_up_max"]


def _alone(method, compressor, mult, **over):
    return run(method, compressor, **{**GLM, **over}, step_mult=mult).history


@pytest.mark.parametrize("method,compressor", [("ef21", "topk:k=2"), ("marina", "randk:k=3")])
def test_runner_batch_exact_is_bit_for_bit_and_fast_mode_to_rounding(method, compressor):
    mults = [1, 4, 32]
    exact = run_batch(method, [{"step_mult": m} for m in mults], compressor=compressor,
                      exact=True, **GLM)  # fmt: skip
    fast = run_batch(method, [{"step_mult": m} for m in mults], compressor=compressor, **GLM)
    for m, e, f in zip(mults, exact, fast, strict=True):
        h = _alone(method, compressor, m)
        extra = list(ALGORITHMS[method].reports)
        pd.testing.assert_frame_equal(e.history[COLS + extra], h[COLS + extra], check_exact=True)
        assert e.summary["reason"] == f.summary["reason"]
        np.testing.assert_array_equal(f.history[["iter", "bits_up"]], h[["iter", "bits_up"]])
        if e.summary["reason"] in ("completed", "stalled"):  # (rounding grows where f does)
            logged = ["f", "grad_norm_sq"]
            np.testing.assert_allclose(f.history[logged], h[logged], rtol=1e-10, atol=1e-14)
        assert e.config["batch"] == {"runs": 3, "position": mults.index(m), "exact": True}


def test_a_diverging_run_leaves_the_batch_and_the_others_go_on():
    ls = {**GLM, "problem": "least-squares"}  # unbounded: a step far too large overflows
    res = run_batch("ef21", [{"step_mult": 1}, {"step_mult": 1e6}, {"step_mult": 4}],
                    compressor="topk:k=2", exact=True, **ls)  # fmt: skip
    assert [r.summary["reason"] for r in res][1] == "diverged"
    assert res[1].summary["iters"] < GLM["iters"]
    assert res[1].status == 3
    for r, m in ((res[0], 1), (res[2], 4)):
        assert r.summary["iters"] == GLM["iters"]
        alone = _alone("ef21", "topk:k=2", m, problem="least-squares")
        pd.testing.assert_frame_equal(r.history[COLS], alone[COLS], check_exact=True)


def test_a_bits_budget_stops_each_run_at_its_own_cap():
    alone = run("ef21", "topk:k=2", **GLM, step_mult=2, max_bits=600)
    res = run_batch("ef21", [{"step_mult": 2, "max_bits": 600}, {"step_mult": 2}],
                    compressor="topk:k=2", exact=True, **GLM)  # fmt: skip
    assert res[0].summary["reason"] == alone.summary["reason"] == "max_bits"
    assert res[0].summary["iters"] == alone.summary["iters"] < GLM["iters"]
    assert res[0].final["bits_up"] == alone.final["bits_up"] >= 600
    assert res[1].summary["iters"] == GLM["iters"]


def test_each_run_keeps_its_own_stop_rule():
    runs = [
        {"step_mult": 4, "iters": 20},
        {"step_mult": 4, "tol": 1e-3},
        {"step_mult": 1, "iters": 60},
    ]
    shared = {k: v for k, v in GLM.items() if k != "iters"}
    res = run_batch("ef21", runs, compressor="topk:k=2", exact=True, **shared)
    assert res[0].summary["iters"] == 20 and res[0].summary["reason"] in ("completed", "stalled")
    assert res[1].summary["reason"] == "tolerance"
    assert res[2].summary["iters"] == 60


def test_refusals_name_the_reason():
    with pytest.raises(ValueError, match="seed"):
        run_batch("ef21", [{"seed": 0}, {"seed": 1}], compressor="topk:k=2", **GLM)
    with pytest.raises(ValueError, match="batchable"):
        run_batch("adiana", [{"step_mult": 1}, {"step_mult": 2}], compressor="randk:k=3", **GLM)


# heavy: CI runs it after the default suite (about 25 s; the default suite's 8-minute budget)
@pytest.mark.heavy
def test_the_command_line_batch_writes_folders_that_resume_alone(tmp_path):
    base = ["ef21", "--compressor", "topk:k=2", "--problem", "logreg-nonconvex", "--dataset",
            "synthetic", "--nodes", "6", "--problem-opt", "samples=600", "--iters", "40",
            "--checkpoint-every", "20", "--quiet"]  # fmt: skip
    runs = [[*base, "--step-mult", str(m), "--out", str(tmp_path / f"m{m}")] for m in (1, 8)]
    listing = tmp_path / "batch.json"
    listing.write_text(json.dumps({"runs": runs}))
    cmd = [sys.executable, "-m", "algorithms.run"]
    done = subprocess.run([*cmd, "--batch", str(listing), "--exact"], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    more = subprocess.run([*cmd, "--resume", str(tmp_path / "m8"), "--iters", "60", "--quiet"],
                          capture_output=True, text=True)  # fmt: skip
    assert more.returncode == 0, more.stderr
    alone = tmp_path / "alone"
    single = [t for t in base if t not in ("--checkpoint-every", "20", "--iters", "40")]
    one = subprocess.run([*cmd, *single, "--iters", "60", "--step-mult", "8", "--out",
                          str(alone)], capture_output=True, text=True)  # fmt: skip
    assert one.returncode == 0, one.stderr
    a = pd.read_csv(tmp_path / "m8" / "history.csv")[COLS]
    b = pd.read_csv(alone / "history.csv")[COLS]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    for text in ('{"runs": "ef21"}', '{"runs": []}', "[1, 2", '{"other": 1}'):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        refused = subprocess.run([*cmd, "--batch", str(bad)], capture_output=True, text=True)
        assert refused.returncode == 2 and "not a batch file" in refused.stderr, text
        assert "Traceback" not in refused.stderr
    under_torchrun = dict(os.environ, WORLD_SIZE="2", RANK="0")
    refused = subprocess.run([*cmd, "--batch", str(listing)], capture_output=True, text=True,
                             env=under_torchrun)  # fmt: skip
    assert refused.returncode == 2 and "under torchrun" in refused.stderr
    twice = tmp_path / "twice.json"  # two runs into one folder
    twice.write_text(json.dumps({"runs": [runs[0], runs[0]]}))
    refused = subprocess.run([*cmd, "--batch", str(twice)], capture_output=True, text=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr


@pytest.mark.parametrize(
    "storage, engines",
    [
        ("dense", ("lanes", "compiled", "library")),
        ("csr", ("lanes", "compiled", "library", "torch-sparse")),
    ],
)
def test_grad_points_equals_the_gradients_at_each_point(storage, engines, monkeypatch):
    """Every engine of many points on the layout it serves: the kernels compiled for the
    number of points (on CSR rows whatever the layout), the generic compiled kernel and BLAS's
    stacked products on dense rows; the kernels, SciPy's and torch's sparse products on CSR
    rows (torch-sparse is offered on sparse layouts only)."""
    p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=500, features=20,
                     density=0.4, storage=storage)  # fmt: skip
    assert p.dense == (storage == "dense")
    P = torch.randn(7, p.d, dtype=torch.float64) * 0.3
    for engine in engines:
        p.points_engine = engine
        G, L = p.grad_points(P, with_loss=True)
        if engine == "torch-sparse":  # its products are torch's CSR tensors, not SciPy's
            assert p._points_t["A"].layout == torch.sparse_csr
        elif engine == "lanes":  # the CSR rows, as the kernels read them, and their order
            csr, order = p._points_l
            assert len(csr) == 5 and csr[-1] == p.d and len(order) == 8
        elif engine == "library":
            assert (p._points["X3"] is not None) == p.dense
        torch.testing.assert_close(G, torch.stack([p.grad(x) for x in P]), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(L.mean(1), torch.stack([p.loss(x) for x in P]), rtol=1e-12,
                                   atol=1e-14)  # fmt: skip
        f, g = p.loss_grad_points(P)
        torch.testing.assert_close(f, torch.stack([p.loss(x) for x in P]), rtol=1e-12,
                                   atol=1e-14)  # fmt: skip
        torch.testing.assert_close(g, torch.stack([p.full_grad(x) for x in P]), rtol=1e-12,
                                   atol=1e-14)  # fmt: skip
    offered = []  # what the automatic choice measures: these engines and no other

    def measure(options, apply):
        offered.extend(options)
        return {o: 1.0 + i for i, o in enumerate(options)}

    monkeypatch.setenv("COMPZOO_CACHE", "off")  # measured, not read from a memo
    monkeypatch.setattr(glm_engine, "measure", measure)
    p.points_engine = "auto"
    p.grad_points(P)
    assert {e for e, _ in offered} == set(engines)


@pytest.mark.parametrize("samples", [500, 503])
def test_grad_points_on_dense_data_stack_the_nodes_padded_where_their_sizes_differ(samples):
    """The library path on dense data is one batched GEMM over the nodes' rows stacked
    ``(m, c, d)``; nodes with fewer rows get zero rows of weight 0, which change nothing."""
    p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=samples,
                     features=20, density=0.4, storage="dense")  # fmt: skip
    P = torch.randn(7, p.d, dtype=torch.float64) * 0.3
    p.points_engine = "library"
    G, L = p.grad_points(P, with_loss=True)
    X3 = p._points_data()["X3"]
    assert X3 is not None and X3.shape == (5, -(-samples // 5), p.d)
    assert int((X3.abs().sum(2) == 0).sum()) >= (-samples) % 5  # the padding rows
    torch.testing.assert_close(G, torch.stack([p.grad(x) for x in P]), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(L.mean(1), torch.stack([p.loss(x) for x in P]), rtol=1e-12,
                               atol=1e-14)  # fmt: skip
    f, g = p.loss_grad_points(P)
    torch.testing.assert_close(f, torch.stack([p.loss(x) for x in P]), rtol=1e-12, atol=1e-14)


def test_grad_points_on_a_skewed_dense_split_take_the_block_products():
    """Where padding the nodes to the largest would more than double the rows, no stack."""
    p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=500, features=20,
                     density=0.4, storage="dense", split="dirichlet:0.1")  # fmt: skip
    counts = np.diff(p._ptr.numpy())
    assert 5 * counts.max() > 2 * counts.sum()
    P = torch.randn(7, p.d, dtype=torch.float64) * 0.3
    p.points_engine = "library"
    G = p.grad_points(P)
    assert p._points_data()["X3"] is None
    torch.testing.assert_close(G, torch.stack([p.grad(x) for x in P]), rtol=1e-12, atol=1e-14)


def test_grad_points_choose_their_engine_and_thread_count():
    from problems import glm_engine

    P = torch.randn(12, 20, dtype=torch.float64) * 0.3
    for threads, allowed in (("auto", glm_engine.thread_candidates("auto")), (1, [1])):
        p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=500,
                         features=20, density=0.4, threads=threads)  # fmt: skip
        p.grad_points(P)
        assert p.points_engine in ("lanes", "compiled", "library", "torch-sparse")
        assert p.points_threads in allowed


def test_grad_points_through_torch_sparse_products_as_on_a_gpu():
    """On a GPU the library path multiplies by torch's sparse CSR (cuSPARSE) instead of SciPy's:
    the same products, here on the CPU, give the same gradients and losses."""
    from problems.glm import _on_device

    p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=500, features=20,
                     density=0.1, storage="csr")  # fmt: skip
    P = torch.randn(7, p.d, dtype=torch.float64) * 0.3
    p.points_engine = "library"
    G, L = p.grad_points(P, with_loss=True)
    f, g = p.loss_grad_points(P)
    scipy_data = p._points_data()
    p._points = _on_device(scipy_data, p.dtype, p.device)
    assert all(isinstance(p._points[k], torch.Tensor) for k in ("A", "Bt", "full", "fullT"))
    G2, L2 = p.grad_points(P, with_loss=True)
    f2, g2 = p.loss_grad_points(P)
    for a, b in ((G, G2), (L, L2), (f, f2), (g, g2)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    # the CPU's torch-sparse engine takes the same products: the same numbers, bit for bit
    p._points = scipy_data
    p.points_engine = "torch-sparse"
    G3, L3 = p.grad_points(P, with_loss=True)
    f3, g3 = p.loss_grad_points(P)
    assert p._points_t["Bt"].layout == torch.sparse_csr and sp.issparse(p._points["Bt"])
    for a, b in ((G2, G3), (L2, L3), (f2, f3), (g2, g3)):
        assert torch.equal(a, b)


def test_the_log_rows_pass_serves_the_next_steps_gradients_at_the_same_points(monkeypatch):
    """EF14 logs the iterate that its next step differentiates: the log rows' pass (with the
    losses) gives that step its gradients, the same numbers, and no second pass is made; at
    other points, or for some of the runs only, the step makes its own pass."""
    from problems.batched import Tiled

    p = make_problem("logreg-nonconvex", dataset="synthetic", nodes=5, samples=500, features=20,
                     density=0.4)  # fmt: skip
    p.points_engine = "library"  # chosen: no measurement among the counted passes
    tiled = Tiled(p, 3)
    X = torch.randn(3, p.d, dtype=p.dtype) * 0.3
    calls, original = [], p.grad_points

    def counted(P, with_loss=False):
        calls.append(with_loss)
        return original(P, with_loss)

    monkeypatch.setattr(p, "grad_points", counted)
    f, g = tiled.evaluate_points(X, [0, 1, 2])
    G = tiled.grad(X.clone())
    assert calls == [True]
    assert torch.equal(G, original(X).reshape(tiled.m, p.d))
    assert torch.equal(g, original(X).mean(dim=1))
    tiled.evaluate_points(X[:2], [0, 1])  # some of the runs: the step's own pass
    tiled.grad(X)
    tiled.evaluate_points(X, [0, 1, 2])  # other points: the step's own pass
    tiled.grad(X + 1.0)
    assert calls == [True, True, False, True, False]


def test_the_batchs_bit_totals_of_all_runs_at_once_are_each_runs_own():
    """The log rows read every run's bit totals in one pass over the ledger: the numbers each
    run's own comm layer gives, for all runs or some, in the order asked."""
    comm = BatchedSimulatedComm(5, 4, 0)
    gen = torch.Generator().manual_seed(0)
    comm.ledger.up += torch.randint(0, 2**40, (20,), generator=gen).to(comm.ledger.up.dtype)
    comm.ledger.down += torch.randint(0, 2**20, (20,), generator=gen).to(comm.ledger.down.dtype)
    for which in ([0, 1, 2, 3], [3, 1], [2]):
        got = comm.bits_totals_of(which)
        for k, r in enumerate(which):
            want = comm.run_comm(r).bits_totals()
            assert got[k] == {key: want[key] for key in got[k]}
            assert set(got[k]) == {"bits_up", "bits_up_max", "bits_down", "bits_down_max"}
