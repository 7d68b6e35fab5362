"""LIEC-SGD: both kinds of round against a hand-written step, its reductions (distributed GD with
no compression or H = 1), the virtual-iterate invariant, bits in both directions, the default
downlink, convergence at the default step, minibatches, rejected options, the runner, and
parity with gloo processes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.momentum.liec_sgd import LIECSGD, LIECSGDState
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec

TOPK = "topk:k=2"


def topk_rows(v: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k by magnitude per row (ties to the lower index), written out independently."""
    out = torch.zeros_like(v)
    for i in range(v.shape[0]):
        order = sorted(range(v.shape[1]), key=lambda j: (-abs(float(v[i, j])), j))[:k]
        out[i, order] = v[i, order]
    return out


def random_state(problem, t: int, seed: int = 0) -> LIECSGDState:
    gen = torch.Generator().manual_seed(seed)
    kw = {"generator": gen, "dtype": torch.float64}
    x = torch.randn(problem.d, **kw)
    x_i = x + 0.2 * torch.randn(problem.n, problem.d, **kw)
    return LIECSGDState(x=x, t=t, x_i=x_i, e=0.1 * torch.randn(problem.d, **kw))


def test_a_compressed_round_is_the_hand_written_update(nonconvex):
    algo, _ = LIECSGD.configure(nonconvex, parse_spec(TOPK), down_compressor=parse_spec("topk:k=3"))
    state = random_state(nonconvex, t=4)
    before = [state.x.clone(), state.x_i.clone(), state.e.clone()]
    new, info = algo.step(state, nonconvex, SimulatedComm(nonconvex.n, seed=0))
    g_i = nonconvex.grad(state.x_i)  # each node at its own model
    c_i = topk_rows(g_i, 2)
    v = c_i.mean(0) + state.e
    b = topk_rows(v[None, :], 3)[0]
    torch.testing.assert_close(new.e, v - b, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(new.x, state.x - algo.gamma * b, rtol=1e-13, atol=1e-15)
    want = state.x_i - algo.gamma * (b + g_i - c_i)
    torch.testing.assert_close(new.x_i, want, rtol=1e-13, atol=1e-15)
    assert new.t == 5 and info.extras["E"] == pytest.approx(float(((v - b) ** 2).sum()))
    drift = float(((want - new.x) ** 2).sum(1).mean())
    assert info.extras["drift"] == pytest.approx(drift, rel=1e-12)
    for got, was in zip((state.x, state.x_i, state.e), before, strict=True):
        torch.testing.assert_close(got, was, rtol=0, atol=0)  # the input is not mutated


def test_an_averaging_round_is_the_hand_written_update(nonconvex):
    algo, _ = LIECSGD.configure(nonconvex, parse_spec(TOPK), period=4)
    state = random_state(nonconvex, t=7)  # (7 + 1) % 4 == 0
    new, info = algo.step(state, nonconvex, SimulatedComm(nonconvex.n, seed=0))
    g_bar = nonconvex.grad(state.x_i).mean(0)
    x = state.x_i.mean(0) - algo.gamma * (g_bar + state.e)
    torch.testing.assert_close(new.x, x, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(new.x_i, x.expand_as(state.x_i), rtol=1e-13, atol=1e-14)
    assert float(new.e.abs().max()) == 0.0 and info.extras["drift"] == 0.0
    d = nonconvex.d
    assert info.bits_up == 64 * d and info.bits_down == 64 * d  # models and gradients, full


@pytest.mark.parametrize("period", [1, 5])
def test_identity_or_every_round_averaging_is_distributed_gd(quad, period):
    spec = "identity" if period == 5 else TOPK
    algo, rec = LIECSGD.configure(quad, parse_spec(spec), period=period)
    assert rec["gamma"] == pytest.approx(1.0 / quad.consts.L, rel=1e-14)
    states, infos, _ = trajectory(algo, quad, 30)
    for s, x in zip(states, gd(quad, algo.gamma, 30), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
        torch.testing.assert_close(s.x_i, x.expand_as(s.x_i), rtol=0, atol=1e-12)
    if period == 1:
        assert all(i.bits_up == 64 * quad.d == i.bits_down for i in infos)


def test_virtual_iterate_and_bits(nonconvex):
    c, down, d, H = parse_spec("topk:k=3"), parse_spec("scaled-sign"), nonconvex.d, 6
    algo, _ = LIECSGD.configure(nonconvex, c, down_compressor=down, period=H)
    states, infos, comm = trajectory(algo, nonconvex, 24)
    for s, s1 in zip(states[:-1], states[1:], strict=True):
        v0 = s.x_i.mean(0) - algo.gamma * s.e
        v1 = s1.x_i.mean(0) - algo.gamma * s1.e
        step = algo.gamma * nonconvex.grad(s.x_i).mean(0)
        torch.testing.assert_close(v1, v0 - step, rtol=1e-12, atol=1e-13)
        if s1.t % H == 0:  # after an average, the shared model is the nodes' average
            torch.testing.assert_close(s1.x, s1.x_i.mean(0), rtol=0, atol=1e-14)
    for t, i in enumerate(infos):
        sync = (t + 1) % H == 0
        assert i.bits_up == (64 * d if sync else c.bits(d))
        assert i.bits_down == (64 * d if sync else down.bits(d))
    rounds = 24 // H
    assert comm.bits_totals()["bits_up"] == rounds * 64 * d + (24 - rounds) * c.bits(d)
    assert comm.bits_totals()["bits_down"] == rounds * 64 * d + (24 - rounds) * down.bits(d)


def test_default_downlink_is_the_uplink_compressor(nonconvex):
    algo, rec = LIECSGD.configure(nonconvex, parse_spec("topk:k=3"))
    assert algo.down_compressor.spec() == algo.compressor.spec()
    assert rec["theory"]["inputs"]["delta_down"] == rec["theory"]["inputs"]["delta_up"]
    assert "2402.11857" in rec["theory"]["source"] and "derived" in rec["theory"]["source"]
    assert rec["params"]["period"] == 32


def test_the_default_step_formula(nonconvex):
    c, d = nonconvex.consts, nonconvex.d
    up, down = parse_spec("topk:k=3"), parse_spec("topk:k=5")
    _, rec = LIECSGD.configure(nonconvex, up, down_compressor=down, period=6)
    du, dd = 3 / d, 5 / d
    theta = 1 - math.sqrt(1 - dd)
    ef_term = math.sqrt((1 - dd) / theta**2)  # sqrt(beta/theta), beta = (1 - a)/theta
    want = 1 / (c.L + c.L_tilde * (ef_term + 5 * math.sqrt(1 - du)))
    assert rec["gamma"] == pytest.approx(want, rel=1e-12)


def test_converges_at_the_default_step(quad, nonconvex):
    algo, rec = LIECSGD.configure(quad, parse_spec(TOPK), period=8)
    assert rec["gamma"] == rec["gamma_theory"]
    states, _, _ = trajectory(algo, quad, 800)
    assert float(quad.loss(states[-1].x)) - quad.consts.f_star <= 1e-3
    algo, _ = LIECSGD.configure(nonconvex, parse_spec(TOPK), period=8)
    states, _, _ = trajectory(algo, nonconvex, 600)
    g0 = float((nonconvex.full_grad(nonconvex.x0) ** 2).sum())
    assert float((nonconvex.full_grad(states[-1].x) ** 2).sum()) <= g0 / 1000


def test_minibatches_are_per_node_and_reproducible(nonconvex):
    algo, _ = LIECSGD.configure(nonconvex, parse_spec(TOPK), batch_size=4, period=4)
    a, _, _ = trajectory(algo, nonconvex, 12, seed=7)
    b, _, _ = trajectory(algo, nonconvex, 12, seed=7)
    c, _, _ = trajectory(algo, nonconvex, 12, seed=8)
    torch.testing.assert_close(a[-1].x_i, b[-1].x_i, rtol=0, atol=0)
    assert not torch.equal(a[-1].x_i, c[-1].x_i)


def test_bad_options_and_compressors_are_refused(nonconvex):
    c = parse_spec(TOPK)
    for period in (0, -3, 2.5):
        with pytest.raises(ValueError, match="period must be a positive integer"):
            LIECSGD.configure(nonconvex, c, period=period)
    with pytest.raises(ValueError, match="--batch-size must be a positive integer"):
        LIECSGD.configure(nonconvex, c, batch_size=0)
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        LIECSGD.configure(nonconvex, parse_spec("randk:k=3"))
    with pytest.raises(ValueError, match=r"LIECSGD \(downlink\) needs a contractive"):
        LIECSGD.configure(nonconvex, c, down_compressor=parse_spec("randk:k=3"))


def test_runner(tmp_path):
    assert ALGORITHMS["liec-sgd"] is LIECSGD
    out = tmp_path / "r"
    argv = ["liec-sgd", "--compressor", TOPK, "--down-compressor", "scaled-sign", "--period",
            "5", "--problem", "logreg-nonconvex", "--nodes", "4", "--iters", "20", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "LIECSGD" and cfg["step"]["params"]["period"] == 5
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert "E" in header and "drift" in header


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["liec-sgd", "--compressor", "topk:k=2", "--period", "7"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_with_minibatches(tmp_path, nproc):
    argv = ["liec-sgd", "--compressor", "scaled-sign", "--down-compressor", "topk:k=3",
            "--period", "6", "--batch-size", "3"]  # fmt: skip
    torch_dist_helpers().parity(tmp_path, nproc, argv)
