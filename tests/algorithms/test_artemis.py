"""Artemis: one step against a hand-written reference (full and partial participation, both
aggregations), bits of both directions (only participants send), GD as the uncompressed
limit, linear convergence to x* at the theory step, bad options, the runner, and parity with
gloo processes."""

from __future__ import annotations

import json

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.bidirectional.artemis import Artemis
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from streams import tags


def _reference(algo, problem, state, seed: int, mask=None):
    """One Artemis round by hand from the same streams."""
    C, CD, t, n = algo.compressor, algo.down_compressor, state.t, problem.n
    comm = SimulatedComm(n, seed=seed)
    D = C.decode(C.encode(problem.grad(state.x) - state.h_i, comm.rng_for(C, t)))
    if mask is None:
        g, h_i = state.h + D.mean(0), state.h_i + algo.alpha * D
    else:
        p, m = algo.participation, mask.to(D.dtype)[:, None]
        sent = (m * D).sum(0) / (p * n)
        if algo.estimator == "memory":
            g = state.h + sent
        else:
            g = sent + (m * state.h_i).sum(0) / (p * n)
        h_i = state.h_i + algo.alpha * m * D
    Om = CD.decode(CD.encode(g[None, :], comm.server_rng(t, tag=tags.ARTEMIS_DOWN)))[0]
    return state.x - algo.gamma * Om, h_i


@pytest.mark.parametrize(
    "opts", [{}, {"participation": 0.5}, {"participation": 0.5, "estimator": "sampled"}]
)
def test_one_step_matches_the_reference(ridge, opts):
    C, CD = parse_spec("randk:k=3"), parse_spec("qsgd:levels=4")
    algo, _ = Artemis.configure(ridge, C, down_compressor=CD, init_mode="full", **opts)
    state = algo.init(ridge.x0, ridge, SimulatedComm(ridge.n, seed=0))
    state, _ = algo.step(state, ridge, SimulatedComm(ridge.n, seed=1))  # memories differ
    comm = SimulatedComm(ridge.n, seed=5)
    mask = None
    if opts:
        mask = comm.rng(state.t, tag=tags.BIDIR_PART).uniform(1)[:, 0] < 0.5
        assert 0 < int(mask.sum()) < ridge.n
    new, info = algo.step(state, ridge, comm)
    x, h_i = _reference(algo, ridge, state, 5, mask)
    torch.testing.assert_close(new.x, x, rtol=0, atol=1e-13)
    torch.testing.assert_close(new.h_i, h_i, rtol=0, atol=1e-13)
    torch.testing.assert_close(new.h, new.h_i.mean(0), rtol=1e-12, atol=1e-12)  # invariant
    if mask is not None:
        assert info.extras["participants"] == pytest.approx(float(mask.double().mean()))


def test_only_participants_are_charged_uplink(ridge):
    C, CD, d = parse_spec("randk:k=3"), parse_spec("natural"), ridge.d
    algo, _ = Artemis.configure(ridge, C, down_compressor=CD, participation=0.5)
    comm = SimulatedComm(ridge.n, seed=2)
    state = algo.init(ridge.x0, ridge, comm)
    sent = torch.zeros(ridge.n, dtype=torch.int64)
    for _ in range(12):
        mask = comm.rng(state.t, tag=tags.BIDIR_PART).uniform(1)[:, 0] < 0.5
        sent += mask.to(torch.int64)
        state, info = algo.step(state, ridge, comm)
        assert info.bits_down == CD.bits(d)  # Omega to every node
    assert comm.ledger.up.tolist() == (sent * C.bits(d)).tolist()
    assert comm.ledger.down.tolist() == [12 * CD.bits(d)] * ridge.n


def test_full_participation_bits(quad):
    C, d = parse_spec("qsgd:levels=4"), quad.d
    _, infos, _ = trajectory(Artemis.configure(quad, C)[0], quad, 10)
    assert all(i.bits_up == C.bits(d) == i.bits_down for i in infos)


def test_uncompressed_with_alpha_one_is_gd(quad):
    algo, _ = Artemis.configure(quad, parse_spec("identity"), alpha=1.0)
    states, _, _ = trajectory(algo, quad, 25)
    for s, x in zip(states, gd(quad, algo.gamma, 25), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("part", [1.0, 0.5])
def test_linear_convergence_to_x_star_at_the_theory_step(ridge, part):
    C = parse_spec("qsgd:levels=4")
    algo, rec = Artemis.configure(ridge, C, participation=part)
    assert rec["gamma"] == rec["gamma_theory"]
    assert rec["params"]["alpha"] == 1 / (2 * (1 + C.omega(ridge.d)))
    states, _, _ = trajectory(algo, ridge, 600)
    assert float(((states[-1].x - ridge.x_star) ** 2).sum()) <= 1e-18


def test_the_theory_step_shrinks_with_participation_and_downlink(ridge):
    C = parse_spec("randk:k=2")
    g1 = Artemis.configure(ridge, C)[0].gamma
    g2 = Artemis.configure(ridge, C, participation=0.5)[0].gamma
    g3 = Artemis.configure(ridge, C, down_compressor=parse_spec("identity"))[0].gamma
    L, w, n = ridge.consts.L_max, 9.0, ridge.n
    assert g1 == pytest.approx(1 / (2 * L * (1 + w) * (1 + 4 * w / n)), rel=1e-12)
    assert g2 == pytest.approx(1 / (2 * L * (1 + w) * (1 + 4 * (2 * (1 + w) - 1) / n)), rel=1e-12)
    assert g2 < g1 < g3


def test_bad_options_are_refused(quad):
    C = parse_spec("randk:k=3")
    for opts, match in [
        ({"alpha": -0.1}, "alpha must be in"),
        ({"participation": 0.0}, "participation must be in"),
        ({"estimator": "mean"}, "estimator must be one of"),
        ({"init_mode": "ones"}, "init must"),
    ]:
        with pytest.raises(ValueError, match=match):
            Artemis.configure(quad, C, **opts)  # fmt: skip
    with pytest.raises(ValueError, match=r"Artemis \(downlink\) needs an unbiased"):
        Artemis.configure(quad, C, down_compressor=parse_spec("topk:k=2"))


def test_runner(tmp_path):
    out = tmp_path / "r"
    argv = ["artemis", "--compressor", "randk:k=3", "--participation", "0.5", "--nodes", "4",
            "--iters", "20", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "Artemis" and cfg["method"]["participation"] == 0.5
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert {"H", "participants"} <= set(header)


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["artemis", "--compressor", "randk:k=3", "--participation", "0.5"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
def test_gloo_matches_the_simulation_three_processes(tmp_path):
    argv = ["artemis", "--compressor", "natural", "--down-compressor", "randk:k=4",
            "--participation", "0.7", "--estimator", "sampled"]  # fmt: skip
    torch_dist_helpers().parity(tmp_path, 3, argv)
