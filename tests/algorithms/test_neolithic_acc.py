"""Accelerated NEOLITHIC (a labelled reconstruction): one round against a hand-written
Nesterov step over NEOLITHIC's module, the momentum schedules, ``beta = 0`` being NEOLITHIC
itself, the theory's ``mu``, refused options, the runner, and parity with gloo (dist)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from runs import torch_dist_helpers

from algorithms.multistage.neolithic import NEOLITHIC, TAG_MSC, msc
from algorithms.multistage.neolithic_acc import NEOLITHICAcc
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.stepsizes.neolithic import nesterov_momentum
from comm import SimulatedComm
from compressors import parse_spec

SPEC = "scaled:randk:k=3"


def _scrambled(state, k: int):
    g = torch.Generator().manual_seed(100 + k)
    r = lambda t: torch.randn(t.shape, generator=g, dtype=t.dtype)  # noqa: E731
    return replace(state, t=k, x=r(state.x), x_prev=r(state.x), e_i=r(state.e_i))


@pytest.mark.parametrize("k", [0, 1, 9])
def test_one_round_is_nesterov_over_neolithics_module(quad, k):
    algo, _ = NEOLITHICAcc.configure(quad, parse_spec(SPEC), rounds=3)
    C = algo.compressor
    start = _scrambled(algo.init(quad.x0, quad, SimulatedComm(quad.n, seed=0)), k)
    new, info = algo.step(start, quad, SimulatedComm(quad.n, seed=5))
    beta = nesterov_momentum(algo.gamma, quad.consts.mu)
    assert info.extras["beta"] == pytest.approx(beta)
    z = start.x + beta * (start.x - start.x_prev)
    ref = SimulatedComm(quad.n, seed=5)
    p_i = quad.grad(z) + start.e_i
    v_i, _ = msc(C, p_i, 3, lambda r: ref.rng_for(C, k, tag=TAG_MSC + r))
    torch.testing.assert_close(new.x, z - algo.gamma * v_i.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.e_i, p_i - v_i, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.x_prev, start.x, rtol=0, atol=0)
    assert new.t == k + 1


def test_schedules():
    assert nesterov_momentum(1.0, 0.01) == pytest.approx(0.9 / 1.1)
    assert nesterov_momentum(2.0, 1.0) == 0.0  # gamma mu clipped to 1
    with pytest.raises(ValueError, match="must be > 0"):
        nesterov_momentum(1.0, 0.0)
    C = parse_spec(SPEC)
    convex = NEOLITHICAcc(compressor=C, gamma=0.5, rounds=2, nesterov="convex")
    assert [convex.momentum_at(t) for t in (0, 1, 7)] == [0.0, 0.25, 0.7]
    strong = NEOLITHICAcc(compressor=C, gamma=0.5, rounds=2, mu=0.02)  # auto: strong
    assert strong.momentum_at(3) == strong.momentum_at(300) == pytest.approx(0.9 / 1.1)
    fixed = NEOLITHICAcc(compressor=C, gamma=0.5, rounds=2, mu=0.02, beta=0.3)
    assert fixed.momentum_at(5) == 0.3


def test_beta_zero_is_neolithic(quad):
    C = parse_spec(SPEC)
    acc, _ = NEOLITHICAcc.configure(quad, C, rounds=3, beta=0.0)
    plain, _ = NEOLITHIC.configure(quad, C, rounds=3)
    assert acc.gamma == plain.gamma
    xs = []
    for algo in (acc, plain):
        comm = SimulatedComm(quad.n, seed=2)
        state = algo.init(quad.x0, quad, comm)
        for _ in range(15):
            state, _ = algo.step(state, quad, comm)
        xs.append(state.x)
    torch.testing.assert_close(xs[0], xs[1], rtol=0, atol=0)


def test_theory_takes_mu_from_a_convex_problem_and_refuses_others(quad, nonconvex):
    C = parse_spec(SPEC)
    algo, _ = NEOLITHICAcc.configure(quad, C)
    assert algo.mu == pytest.approx(quad.consts.mu) and algo.mu > 0
    assert algo.gamma == NEOLITHIC.configure(quad, C)[0].gamma
    algo, _ = NEOLITHICAcc.configure(quad, C, nesterov="convex")
    assert algo.mu is None and algo.momentum_at(2) == 0.4
    with pytest.raises(ValueError, match="for convex problems: give --step"):
        NEOLITHICAcc.configure(nonconvex, C)
    algo, _ = NEOLITHICAcc.configure(nonconvex, C, step=0.01)  # a given step runs anywhere
    assert algo.gamma == 0.01 and algo.mu is None and algo.momentum_at(1) == 0.25


def test_refused_options(quad):
    C = parse_spec(SPEC)
    for kw, msg in (({"beta": 1.0}, "beta must be in"), ({"mu": -1.0}, "mu must be > 0"),
                    ({"nesterov": "heavy"}, "nesterov must be one of")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            NEOLITHICAcc.configure(quad, C, **kw)
    with pytest.raises(ValueError, match="needs mu"):
        NEOLITHICAcc(compressor=C, gamma=0.1, rounds=2, nesterov="strong")


def test_runner_and_acceleration(tmp_path):
    assert "neolithic-acc" in ALGORITHMS
    gaps = {}
    for name in ("neolithic-acc", "neolithic"):
        out = tmp_path / name
        argv = [name, "--compressor", "topk:k=2", "--problem", "quadratic", "--nodes", "10",
                "--iters", "200", "--quiet", "--out", str(out)]  # fmt: skip
        assert run(argv) == 0
        gaps[name] = json.loads((out / "summary.json").read_text())["final"]["f_gap"]
    cfg = json.loads((tmp_path / "neolithic-acc" / "config.json").read_text())
    assert cfg["algorithm_class"] == "NEOLITHICAcc"
    assert "[U] reconstruction" in cfg["step"]["theory"]["formula"]
    assert math.isfinite(gaps["neolithic"]) and gaps["neolithic-acc"] < gaps["neolithic"] / 100
    with open(tmp_path / "neolithic-acc" / "history.csv") as fh:
        assert {"E", "beta"} <= set(fh.readline().strip().split(","))
    bad = ["neolithic-acc", "--compressor", "topk:k=2", "--beta", "1.5", "--iters", "2",
           "--quiet", "--out", str(tmp_path / "bad")]  # fmt: skip
    assert run(bad) == 2


# Parity with gloo processes (the round is NEOLITHIC's, whose parity runs in the dist suite too).
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["neolithic-acc", "--compressor", "topk:k=2", "--down-compressor", "topk:k=5"]
    torch_dist_helpers().parity(tmp_path, 2, argv)
