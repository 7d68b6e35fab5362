"""EF21-PAGE: p = 1 is EF21, per-node coins, the PAGE recursion, convergence at the default
(EF21's) step, exact bits, bad input, and parity with gloo processes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms.ef.ef21 import EF21
from algorithms.ef.ef21_page import EF21PAGE, ef21_page_p
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags

TOPK = "topk:k=2"


@pytest.fixture(scope="module")
def sigsq():
    """The sigmoid-squared loss (MARINA/DASHA) on unequal nodes, from a random start."""
    return make_problem(
        "sigmoid-squared", nodes=5, samples=203, features=10, seed=4, x0="randn", lam=0.01
    )


@pytest.fixture(scope="module")
def nonconvex():
    return make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )


def grad_sq(problem, x) -> float:
    return float((problem.full_grad(x) ** 2).sum())


@pytest.mark.parametrize("spec", [TOPK, "scaled:randk:k=3"])
@pytest.mark.parametrize("init", ["full", "compressed"])
def test_p_one_is_ef21_exactly(spec, init, sigsq):
    c = parse_spec(spec)
    algo, _ = EF21PAGE.configure(sigsq, c, p=1.0, batch_size=3, init_mode=init)
    ref, _ = EF21.configure(sigsq, c, init_mode=init)
    assert algo.gamma == ref.gamma
    a, ia, _ = trajectory(algo, sigsq, 50, seed=7)
    b, ib, _ = trajectory(ref, sigsq, 50, seed=7)
    for s, r in zip(a, b, strict=True):
        assert torch.equal(s.x, r.x) and torch.equal(s.g_i, r.g_i) and torch.equal(s.g, r.g)
    assert [i.bits_up for i in ia] == [i.bits_up for i in ib]
    assert all(i.extras["sync"] == 1.0 for i in ia)


def test_default_p_is_the_authors_mean_and_the_step_is_ef21s(sigsq):
    c = parse_spec(TOPK)
    algo, rec = EF21PAGE.configure(sigsq, c, batch_size=4)
    m = sigsq.counts.double()
    assert algo.p == pytest.approx(float((4 / (4 + m)).mean()), rel=1e-15)
    assert algo.p == ef21_page_p(c, sigsq, 4) and rec["params"]["p"] == algo.p
    assert len(set(sigsq.counts.tolist())) > 1  # unequal m_i: the mean, not one node's value
    assert algo.gamma == EF21.configure(sigsq, c, regime="auto")[0].gamma
    assert "EF21's step" in rec["theory"]["formula"]


def test_per_node_coins_and_the_page_recursion(sigsq):
    """Each node flips its own coin: a synced node holds its full gradient, the others
    ``v_i + minibatch difference`` on the samples drawn from their own streams."""
    algo, _ = EF21PAGE.configure(sigsq, parse_spec(TOPK), p=0.4, batch_size=3)
    comm = SimulatedComm(sigsq.n, seed=2)
    state = algo.init(sigsq.x0, sigsq, comm)
    torch.testing.assert_close(state.v_i, sigsq.grad(sigsq.x0), rtol=0, atol=0)
    mixed, fracs = 0, []
    for _ in range(60):
        t = state.t
        new, info = algo.step(state, sigsq, comm)
        sync = comm.rng(t, tag=tags.COIN).uniform(1)[:, 0] < 0.4
        full = sigsq.grad(new.x)
        batch = sigsq.sample(comm.rng(t, tag=tags.BATCH), 3)
        page = state.v_i + sigsq.grad(new.x, batch) - sigsq.grad(state.x, batch)
        want = torch.where(sync[:, None], full, page)
        torch.testing.assert_close(new.v_i, want, rtol=1e-12, atol=1e-14)
        assert info.extras["sync"] == pytest.approx(float(sync.double().mean()))
        torch.testing.assert_close(new.g, new.g_i.mean(0), rtol=1e-12, atol=1e-14)
        mixed += bool(0 < int(sync.sum()) < sigsq.n)
        fracs.append(float(sync.double().mean()))
        state = new
    assert mixed >= 10  # nodes disagree: the coins are per node
    assert abs(sum(fracs) / len(fracs) - 0.4) < 4 * math.sqrt(0.24 / (60 * sigsq.n))


def test_shared_coin_syncs_all_nodes_together(sigsq):
    algo, _ = EF21PAGE.configure(sigsq, parse_spec(TOPK), p=0.5, coin="shared")
    _, infos, _ = trajectory(algo, sigsq, 40)
    syncs = [i.extras["sync"] for i in infos]
    assert set(syncs) == {0.0, 1.0}


def test_input_state_is_not_mutated(sigsq):
    algo, _ = EF21PAGE.configure(sigsq, parse_spec(TOPK), p=0.3, batch_size=2)
    comm = SimulatedComm(sigsq.n, seed=0)
    state = algo.init(sigsq.x0, sigsq, comm)
    for _ in range(3):
        copy = {k: v.clone() for k, v in vars(state).items() if torch.is_tensor(v)}
        new, _ = algo.step(state, sigsq, comm)
        for k, v in copy.items():
            assert torch.equal(getattr(state, k), v), k
        state = new


@pytest.mark.parametrize("problem", ["sigsq", "nonconvex"])
def test_converges_at_the_default_step(problem, request):
    """||grad f||^2 falls a hundredfold at the default step and p with minibatches of ~10%
    of the local data; with tau = 1 it falls too."""
    p = request.getfixturevalue(problem)
    for tau, T, drop in ((4, 1500, 100), (1, 1500, 10)):
        algo, rec = EF21PAGE.configure(p, parse_spec(TOPK), batch_size=tau)
        assert rec["gamma"] == rec["gamma_theory"]
        states, _, _ = trajectory(algo, p, T)
        assert grad_sq(p, states[-1].x) <= grad_sq(p, p.x0) / drop, (tau, problem)


def test_bits_per_round_are_the_formula(sigsq):
    c, d, T = parse_spec("topk:k=3"), sigsq.d, 15
    algo, _ = EF21PAGE.configure(sigsq, c, p=0.3, batch_size=2)
    _, infos, comm = trajectory(algo, sigsq, T)
    assert all(i.bits_up == c.bits(d) and i.bits_down == 32 * d for i in infos)
    assert comm.bits_totals()["bits_up"] == 32 * d + T * c.bits(d)  # g_i^0 = grad f_i(x^0)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"p": 0.0}, "p must be in (0, 1]"),
        ({"p": 1.5}, "p must be in (0, 1]"),
        ({"batch_size": 0}, "--batch-size must be a positive integer"),
        ({"coin": "global"}, "coin must be one of node, shared"),
    ],
)
def test_bad_hyperparameters(kw, words, sigsq):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("]", r"\]")):
        EF21PAGE.configure(sigsq, parse_spec(TOPK), **kw)


def test_runner_records_the_choice_and_refuses_bad_input(tmp_path, capsys):
    assert "ef21-page" in ALGORITHMS
    out = tmp_path / "r"
    argv = ["ef21-page", "--compressor", TOPK, "--problem", "sigmoid-squared", "--nodes", "4",
            "--iters", "30", "--batch-size", "5", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["method"]["batch_size"] == 5 and 0 < cfg["method"]["p"] < 1
    # argparse knows the choices
    assert run([*argv[:-1], str(tmp_path / "bad"), "--coin", "global"]) == 2
    assert "'global'" in capsys.readouterr().err
    rc = run(["ef21-page", "--compressor", TOPK, "--p", "2", "--quiet",
              "--out", str(tmp_path / "bad2")])  # fmt: skip
    assert rc == 2 and "p must be in (0, 1], got 2.0" in capsys.readouterr().err


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation(tmp_path, nproc):
    helpers = torch_dist_helpers()
    # (the helper runs its own problem, a quadratic, at the theory step)
    argv = ["ef21-page", "--compressor", "scaled:randk:k=3", "--p", "0.3", "--batch-size", "4"]
    helpers.parity(tmp_path, nproc, argv)


@pytest.mark.dist
def test_gloo_matches_the_simulation_on_sigmoid_squared(tmp_path):
    """Per-node coins and minibatches on a GLM with unequal nodes: the same trajectory."""
    helpers = torch_dist_helpers()
    argv = ["ef21-page", "--compressor", "topk:k=3", "--problem", "sigmoid-squared",
            "--problem-opt", "samples=301", "--p", "0.3", "--batch-size", "4", "--iters", "40",
            "--quiet", "--seed", "5", "--x0", "randn"]  # fmt: skip
    proc, out = helpers.dist_run(tmp_path, 3, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, "--nodes", "3", "--out", str(tmp_path / "sim")]) == 0
    helpers.assert_same_run(tmp_path / "sim", out)


def test_derived_step_limits_and_convergence(sigsq):
    """``--page-step derived``: EF21's step at p = 1, PAGE's without compression, never above
    EF21's, and the gradient falls at it with tau = 1 and the default small p."""
    c = parse_spec(TOPK)
    ef21_nc = EF21.configure(sigsq, c, regime="nonconvex")[0].gamma
    one, _ = EF21PAGE.configure(sigsq, c, p=1.0, page_step="derived")
    assert one.gamma == pytest.approx(ef21_nc, rel=1e-12)
    algo, rec = EF21PAGE.configure(sigsq, c, page_step="derived")
    assert algo.gamma < ef21_nc and "deviation" in rec["theory"]["formula"]
    L, calL, p = sigsq.consts.L, sigsq.sample_smoothness(), 0.2
    ident, _ = EF21PAGE.configure(sigsq, parse_spec("identity"), p=p, page_step="derived")
    assert ident.gamma == pytest.approx(1 / (L + calL * math.sqrt((1 - p) / p)), rel=1e-12)
    states, _, _ = trajectory(algo, sigsq, 3000)
    assert grad_sq(sigsq, states[-1].x) <= grad_sq(sigsq, sigsq.x0) / 10
