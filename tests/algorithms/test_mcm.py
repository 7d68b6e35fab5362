"""MCM and Rand-MCM: one step against a hand-written reference (the server's model is
preserved, the nodes' copies perturbed), per-node downlink draws and their bits, GD as the
uncompressed limit, linear convergence to x* at the theory step, bad options, the runner, and
parity with gloo processes (per-node server randomness under partial participation)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.bidirectional.mcm import MCM
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from streams import tags


def _started(algo, problem):
    """A state after two rounds, so that memories and the model differ from ``x^0``."""
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    for _ in range(2):
        state, _ = algo.step(state, problem, comm)
    return state


@pytest.mark.parametrize("randomized", [False, True])
def test_one_step_matches_the_reference(ridge, randomized):
    C, CD = parse_spec("randk:k=3"), parse_spec("qsgd:levels=4")
    algo, _ = MCM.configure(ridge, C, down_compressor=CD, randomized=randomized)
    state = _started(algo, ridge)
    new, info = algo.step(state, ridge, SimulatedComm(ridge.n, seed=9))
    comm, t, a, a_dn = SimulatedComm(ridge.n, seed=9), state.t, algo.alpha, algo.alpha_down
    if randomized:
        diff = state.x[None, :] - state.H_i
        Om = CD.decode(CD.encode(diff, comm.rng(t, tag=tags.MCM_DOWN_I)))
        assert not torch.allclose(Om[0], Om[1])  # an independent draw per node
    else:
        assert torch.equal(state.H_i[0], state.H_i[-1])  # one common memory
        diff = (state.x - state.H_i[0])[None, :]
        Om = CD.decode(CD.encode(diff, comm.server_rng(t, tag=tags.MCM_DOWN))).expand_as(state.H_i)
    w_hat = state.H_i + Om
    D = C.decode(C.encode(ridge.grad(w_hat) - state.h_i, comm.rng_for(C, t)))
    g = state.h + D.mean(0)
    torch.testing.assert_close(new.x, state.x - algo.gamma * g, rtol=0, atol=1e-13)  # preserved
    torch.testing.assert_close(new.H_i, state.H_i + a_dn * Om, rtol=0, atol=1e-13)
    torch.testing.assert_close(new.h_i, state.h_i + a * D, rtol=0, atol=1e-13)
    torch.testing.assert_close(new.h, new.h_i.mean(0), rtol=1e-12, atol=1e-12)
    p_ref = float(((w_hat - state.x) ** 2).sum(1).mean())
    assert info.extras["P"] == pytest.approx(p_ref, rel=1e-12)


def test_rand_mcm_charges_each_participant_its_own_downlink(ridge):
    C, CD, d = parse_spec("randk:k=3"), parse_spec("natural"), ridge.d
    algo, _ = MCM.configure(ridge, C, down_compressor=CD, randomized=True, participation=0.5)
    comm = SimulatedComm(ridge.n, seed=4)
    state = algo.init(ridge.x0, ridge, comm)
    sent = torch.zeros(ridge.n, dtype=torch.int64)
    for _ in range(10):
        mask = comm.rng(state.t, tag=tags.BIDIR_PART).uniform(1)[:, 0] < 0.5
        old = state.H_i
        state, _ = algo.step(state, ridge, comm)
        assert torch.equal(state.H_i[~mask], old[~mask])  # only participants move H_i
        sent += mask.to(torch.int64)
    assert comm.ledger.up.tolist() == (sent * C.bits(d)).tolist()
    assert comm.ledger.down.tolist() == (sent * CD.bits(d)).tolist()


def test_mcm_broadcasts_one_message_to_every_node(quad):
    C, d = parse_spec("qsgd:levels=4"), quad.d
    algo, _ = MCM.configure(quad, C, participation=0.5)
    _, infos, comm = trajectory(algo, quad, 8)
    assert all(i.bits_down == C.bits(d) for i in infos)
    assert comm.ledger.down.tolist() == [8 * C.bits(d)] * quad.n


def test_uncompressed_with_unit_memory_steps_is_gd(quad):
    for randomized in (False, True):
        algo, _ = MCM.configure(quad, parse_spec("identity"), alpha=1.0, randomized=randomized)
        states, infos, _ = trajectory(algo, quad, 20)
        for s, x in zip(states, gd(quad, algo.gamma, 20), strict=True):
            torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
        assert all(i.extras["P"] <= 1e-28 for i in infos)  # w_hat = w up to rounding


@pytest.mark.parametrize("opts", [{}, {"randomized": True, "participation": 0.5}])
def test_linear_convergence_to_x_star_at_the_theory_step(ridge, opts):
    C = parse_spec("qsgd:levels=4")
    algo, rec = MCM.configure(ridge, C, **opts)
    assert rec["gamma"] == rec["gamma_theory"]
    assert algo.alpha == algo.alpha_down == 1 / (2 * (1 + C.omega(ridge.d)))
    states, infos, _ = trajectory(algo, ridge, 700)
    assert float(((states[-1].x - ridge.x_star) ** 2).sum()) <= 1e-18
    assert infos[-1].extras["P"] <= 1e-16  # the nodes' copies meet the preserved model


def test_the_input_state_is_not_mutated(ridge):
    algo, _ = MCM.configure(ridge, parse_spec("randk:k=3"), randomized=True)
    state = _started(algo, ridge)
    copy = replace(state, **{k: getattr(state, k).clone() for k in ("x", "h_i", "h", "H_i")})
    algo.step(state, ridge, SimulatedComm(ridge.n, seed=1))
    for k in ("x", "h_i", "h", "H_i"):
        assert torch.equal(getattr(state, k), getattr(copy, k))


def test_bad_options_are_refused(quad):
    C = parse_spec("randk:k=3")
    for opts, match in [
        ({"alpha_down": 2.0}, "--alpha-down must be in"),
        ({"alpha": -1.0}, "alpha must be in"),
        ({"randomized": "yes"}, "randomized must be"),
        ({"participation": 1.5}, "participation must be in"),
        ({"estimator": "x"}, "estimator must be one of"),
    ]:
        with pytest.raises(ValueError, match=match):
            MCM.configure(quad, C, **opts)  # fmt: skip
    with pytest.raises(ValueError, match=r"MCM \(downlink\) needs an unbiased"):
        MCM.configure(quad, C, down_compressor=parse_spec("topk:k=2"))


def test_runner(tmp_path):
    out = tmp_path / "r"
    argv = ["mcm", "--compressor", "randk:k=3", "--randomized", "true", "--participation",
            "0.5", "--nodes", "4", "--iters", "20", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "MCM" and cfg["method"]["randomized"] is True
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert {"H", "P", "participants"} <= set(header)


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["mcm", "--compressor", "randk:k=3", "--randomized", "true", "--participation", "0.6"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
@pytest.mark.parametrize("extra", [[], ["--randomized", "true"]])
def test_gloo_matches_the_simulation_three_processes(tmp_path, extra):
    argv = ["mcm", "--compressor", "natural", "--down-compressor", "randk:k=4", *extra]
    torch_dist_helpers().parity(tmp_path, 3, argv)


@pytest.mark.dist
def test_sharded_nodes_match_the_simulation(tmp_path):
    """Five nodes over two processes: each process draws its own nodes' downlink messages."""
    argv = ["mcm", "--compressor", "randk:k=3", "--randomized", "true", "--participation", "0.6"]
    torch_dist_helpers().sharded_parity(tmp_path, 2, 5, argv)
