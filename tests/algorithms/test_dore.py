"""DORE: one step against a hand-written reference, the bits of both directions, GD as the
uncompressed limit, linear convergence to x* at the theory step, the step's interval, bad
options, the runner, and parity with gloo processes."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.bidirectional.dore import DORE
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from streams import tags


def test_one_step_matches_the_reference(quad):
    C, CD = parse_spec("randk:k=3"), parse_spec("qsgd:levels=4")
    algo, _ = DORE.configure(quad, C, down_compressor=CD, init_mode="full")
    state = algo.init(quad.x0, quad, SimulatedComm(quad.n, seed=0))
    gen = torch.Generator().manual_seed(1)
    e = 0.1 * torch.randn(quad.d, generator=gen, dtype=state.x.dtype)
    state = replace(state, e=e, t=4)
    new, _ = algo.step(state, quad, SimulatedComm(quad.n, seed=7))
    # By hand, from the same streams (node i's at t = 4, the server's under DORE's tag).
    comm = SimulatedComm(quad.n, seed=7)
    a, b, eta, g = algo.alpha, algo.beta, algo.eta, algo.gamma
    D = C.decode(C.encode(quad.grad(state.x) - state.h_i, comm.rng_for(C, 4)))
    ghat = state.h + D.mean(0)
    x_server = state.x - g * ghat
    q = x_server - state.x + eta * e
    Q = CD.decode(CD.encode(q[None, :], comm.server_rng(4, tag=tags.DORE_DOWN)))[0]
    torch.testing.assert_close(new.x, state.x + b * Q, rtol=0, atol=1e-14)
    torch.testing.assert_close(new.e, q - Q, rtol=0, atol=1e-14)
    torch.testing.assert_close(new.h_i, state.h_i + a * D, rtol=0, atol=1e-14)
    torch.testing.assert_close(new.h, new.h_i.mean(0), rtol=1e-12, atol=1e-13)  # invariant
    assert new.t == 5 and state.t == 4 and torch.equal(state.e, e)  # input not mutated


def test_bits_per_round_are_the_payloads(quad):
    C, CD, d, T = parse_spec("randk:k=3"), parse_spec("natural"), quad.d, 15
    algo, _ = DORE.configure(quad, C, down_compressor=CD)
    _, infos, comm = trajectory(algo, quad, T)
    assert all(i.bits_up == C.bits(d) and i.bits_down == CD.bits(d) for i in infos)
    totals = comm.bits_totals()
    assert totals["bits_up"] == T * C.bits(d) and totals["bits_down"] == T * CD.bits(d)
    full, _ = DORE.configure(quad, C, down_compressor=CD, init_mode="full")
    assert trajectory(full, quad, 1)[2].bits_totals()["bits_up"] == 32 * d + C.bits(d)


def test_the_downlink_defaults_to_the_uplink_compressor(quad):
    algo, rec = DORE.configure(quad, parse_spec("qsgd:levels=4"))
    assert algo.down_compressor.spec() == parse_spec("qsgd:levels=4").spec()
    assert rec["params"]["beta"] == rec["params"]["alpha"]


def test_uncompressed_with_beta_one_is_gd(quad):
    algo, _ = DORE.configure(quad, parse_spec("identity"), beta=1.0)
    states, _, _ = trajectory(algo, quad, 25)
    for s, x in zip(states, gd(quad, algo.gamma, 25), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


def test_linear_convergence_to_x_star_at_the_theory_step(ridge):
    algo, rec = DORE.configure(ridge, parse_spec("qsgd:levels=4"))
    assert rec["gamma"] == rec["gamma_theory"] and "Thm 1" in rec["theory"]["source"]
    states, infos, _ = trajectory(algo, ridge, 300)
    assert float(((states[-1].x - ridge.x_star) ** 2).sum()) <= 1e-20
    assert infos[-1].extras["H"] <= 1e-18  # the memories learned grad f_i(x*)


def test_the_theory_step_satisfies_theorem_1(ridge):
    C = parse_spec("randk:k=2")
    algo, rec = DORE.configure(ridge, C)
    w, n, L, mu = C.omega(ridge.d), ridge.n, ridge.consts.L_max, ridge.consts.mu
    assert w == 9.0 and rec["theory"]["inputs"]["L_max"] == L
    alpha, beta, eta = 1 / (2 * (w + 1)), 1 / (2 * (w + 1)), algo.eta
    assert algo.alpha == alpha and algo.beta == beta
    c = 4 * w * (w + 1) / n
    assert 0 < eta <= (-w + math.sqrt(w * w + 4 * (1 - (w + 1) * beta))) / (2 * w) + 1e-15
    assert eta <= 4 * mu * L / ((mu + L) ** 2 * (1 + c * alpha) - 4 * mu * L) + 1e-15
    lo, hi = eta * (mu + L) / (2 * (1 + eta) * mu * L), 2 / ((1 + c * alpha) * (mu + L))
    assert lo < algo.gamma < hi and algo.gamma == pytest.approx((lo + hi) / 2, rel=1e-12)


def test_bad_options_are_refused(quad):
    C = parse_spec("randk:k=3")
    for opts, match in [
        ({"alpha": 1.5}, "alpha must be in"),
        ({"beta": 0.0}, "beta must be"),
        ({"eta": -1.0}, "eta must be"),
        ({"init_mode": "ones"}, "init must"),
    ]:
        with pytest.raises(ValueError, match=match):
            DORE.configure(quad, C, **opts)  # fmt: skip
    with pytest.raises(ValueError, match="needs an unbiased compressor"):
        DORE.configure(quad, parse_spec("topk:k=2"))
    with pytest.raises(ValueError, match=r"DORE \(downlink\) needs an unbiased"):
        DORE.configure(quad, C, down_compressor=parse_spec("topk:k=2"))


def test_runner(tmp_path):
    out = tmp_path / "r"
    argv = ["dore", "--compressor", "randk:k=3", "--down-compressor", "natural", "--nodes", "4",
            "--iters", "20", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "DORE" and cfg["step"]["gamma_theory"] > 0
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert {"H", "E"} <= set(header)


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["dore", "--compressor", "randk:k=3", "--down-compressor", "qsgd:levels=4"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
def test_gloo_matches_the_simulation_three_processes(tmp_path):
    argv = ["dore", "--compressor", "natural", "--init", "full"]
    torch_dist_helpers().parity(tmp_path, 3, argv)
