"""ADIANA: the update against a hand-written step, its parameters against the reference code's
formulas, the two messages' bits, the shift invariant, linear convergence at the theory
parameters, refused options, the runner, and parity with gloo processes."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from runs import scrambled_accelerated as scrambled
from runs import torch_dist_helpers, trajectory

from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.shifts.adiana import ADIANA, TAG_AT_W, TAG_AT_X
from algorithms.stepsizes.accelerated import adiana_eta, adiana_momentum, adiana_p
from comm import SimulatedComm
from compressors import parse_spec

# The problems (quad, nonconvex, ridge) are the shared fixtures of tests/algorithms/conftest.py.


@pytest.mark.parametrize("spec", ["identity", "randk:k=3"])
def test_one_step_equals_the_algorithm_box(spec, quad):
    """Algorithm 2 written out by hand, with the messages drawn from the documented streams."""
    C = parse_spec(spec)
    algo, _ = ADIANA.configure(quad, C, p=0.5, theta2=0.3)
    C = algo.compressor
    q = algo.resolved(quad.n, quad.d)
    assert (q["p"], q["theta2"]) == (0.5, 0.3)
    state = algo.init(quad.x0, quad, SimulatedComm(quad.n, seed=0))
    for k in range(6):
        start = replace(scrambled(state, k), t=k)
        comm = SimulatedComm(quad.n, seed=4)
        new, info = algo.step(start, quad, comm)
        eta, th1, th2 = algo.gamma, q["theta1"], q["theta2"]
        x = th1 * start.z + th2 * start.w + (1 - th1 - th2) * start.x
        ref = SimulatedComm(quad.n, seed=4)
        m_i = C.decode(C.encode(quad.grad(x) - start.h_i, ref.rng_for(C, k, tag=TAG_AT_X)))
        mt_i = C.decode(C.encode(quad.grad(start.w) - start.h_i, ref.rng_for(C, k, tag=TAG_AT_W)))
        if spec == "identity":  # no compression: the messages are the differences themselves
            torch.testing.assert_close(m_i, quad.grad(x) - start.h_i)
        g = start.h + m_i.mean(0)
        y = x - eta * g
        z = q["beta"] * start.z + (1 - q["beta"]) * x + q["gamma_z"] / eta * (y - x)
        w = start.x if info.extras["refresh"] else start.w
        for got, want in ((new.x, y), (new.z, z), (new.w, w), (new.h_i, start.h_i + q["alpha"]
                          * mt_i), (new.h, start.h + q["alpha"] * mt_i.mean(0))):  # fmt: skip
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert new.t == k + 1
        torch.testing.assert_close(start.x, scrambled(state, k).x)  # input not mutated


def test_parameters_are_the_reference_codes():
    """Rustem-Islamov/FedNL-Public methods.py::adiana, by hand for omega = 1, n = 100, L = 2."""
    assert adiana_p(1.0, 100) == pytest.approx(0.25)  # max(alpha/2, (alpha/2)(sqrt(100/32)-1))
    assert adiana_p(1.0, 10_000) == 1.0  # capped at 1
    assert adiana_p(0.0, 3) == 1.0
    assert adiana_eta(2.0, 1.0, 100, 0.25) == pytest.approx(100 / (64 * 2 * 4))
    assert adiana_eta(2.0, 0.0, 100, 1.0) == pytest.approx(0.25)  # 1/(2L)
    assert adiana_eta(2.0, 0.01, 100, 1.0) == pytest.approx(0.25)  # min picks 1/(2L)
    theta1, gamma_z, beta = adiana_momentum(0.1, 0.01, 0.25)
    assert theta1 == pytest.approx(math.sqrt(0.004))
    assert gamma_z == pytest.approx(0.1 / (2 * (theta1 + 0.001)))
    assert beta == pytest.approx(1 - gamma_z * 0.01)
    assert adiana_momentum(1.0, 1.0, 1.0)[0] == 0.25  # theta1 capped at 1/4


def test_configure_takes_theory_and_derives_momentum_from_the_step_used(quad):
    C = parse_spec("randk:k=5")  # d = 10: omega = 1
    algo, rec = ADIANA.configure(quad, C)
    c, n = quad.consts, quad.n
    p = adiana_p(1.0, n)
    assert rec["theory"]["inputs"]["omega"] == 1.0 and "FedNL-Public" in rec["theory"]["source"]
    assert algo.gamma == pytest.approx(adiana_eta(c.L_max, 1.0, n, p))
    assert (algo.alpha, algo.p, algo.theta2, algo.mu) == (0.5, p, 0.5, c.mu)
    assert (algo.theta1, algo.gamma_z, algo.beta) == adiana_momentum(algo.gamma, c.mu, p)
    assert rec["params"]["theta1"] == algo.theta1
    fast, _ = ADIANA.configure(quad, C, step_mult=4.0)
    assert fast.theta1 == pytest.approx(2 * algo.theta1)  # sqrt(eta mu / p) with 4 eta
    given, _ = ADIANA.configure(quad, C, step=0.01, theta1=0.0)
    assert given.gamma == 0.01 and given.theta1 == 0.0
    assert given.gamma_z == pytest.approx(0.01 / (2 * 0.01 * c.mu))


@pytest.mark.parametrize("init", ["zero", "full"])
def test_bits_two_messages_up_the_direction_down(init, quad):
    C, d, T = parse_spec("randk:k=3"), quad.d, 15
    algo, _ = ADIANA.configure(quad, C, init_mode=init)
    _, infos, comm = trajectory(algo, quad, T)
    assert all(i.bits_up == 2 * C.bits(d) and i.bits_down == 32 * d for i in infos)
    init_bits = 32 * d if init == "full" else 0
    assert comm.bits_totals()["bits_up"] == init_bits + T * 2 * C.bits(d)
    assert comm.bits_totals()["bits_down"] == T * 32 * d


def test_shift_invariant_and_anchor_coin(quad):
    algo, _ = ADIANA.configure(quad, parse_spec("randk:k=3"), p=0.3)
    states, infos, _ = trajectory(algo, quad, 200)
    for s in states:
        torch.testing.assert_close(s.h, s.h_i.mean(0), rtol=1e-10, atol=1e-12)
    refresh = [i.extras["refresh"] for i in infos]
    assert 0.2 <= sum(refresh) / len(refresh) <= 0.4  # Bernoulli(0.3) over 200 rounds
    for prev, new, r in zip(states, states[1:], refresh, strict=False):
        torch.testing.assert_close(new.w, prev.x if r else prev.w, rtol=0, atol=0)


@pytest.mark.parametrize("spec", ["randk:k=5", "natural"])
def test_linear_convergence_at_the_theory_parameters(spec, ridge):
    algo, _ = ADIANA.configure(ridge, parse_spec(spec))
    states, infos, _ = trajectory(algo, ridge, 1500)
    gap = float(ridge.loss(states[-1].x)) - ridge.consts.f_star
    assert gap <= 1e-10 * (float(ridge.loss(ridge.x0)) - ridge.consts.f_star)
    assert infos[-1].extras["H"] <= 1e-8 * infos[0].extras["H"]  # shifts learn grad f_i(x*)


def test_refused_options_and_compressors(quad, nonconvex):
    C = parse_spec("randk:k=3")
    for kw, msg in (({"theta1": 1.5}, "theta1 must be in"), ({"p": 0.0}, "p must be in"),
                    ({"theta1": 0.6, "theta2": 0.5}, "theta1 \\+ theta2 must be <= 1"),
                    ({"gamma_z": -1.0}, "gamma_z must be > 0"),
                    ({"init_mode": "compressed"}, "init must be one of zero, full")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            ADIANA.configure(quad, C, **kw)
    with pytest.raises(ValueError, match="needs an unbiased compressor"):
        ADIANA.configure(quad, parse_spec("topk:k=2"))
    with pytest.raises(ValueError, match="independent compressors"):
        ADIANA.configure(quad, parse_spec("randk:k=3,shared=true"))
    with pytest.raises(ValueError, match="convex problem"):
        ADIANA.configure(nonconvex, C)
    with pytest.raises(ValueError, match="need mu"):
        ADIANA.configure(nonconvex, C, step=0.01)
    algo, _ = ADIANA.configure(nonconvex, C, step=0.01, mu=0.1)  # a given mu is enough
    assert algo.theta1 == pytest.approx(min(0.25, math.sqrt(0.001 / algo.p)))


def test_runner(tmp_path):
    assert "adiana" in ALGORITHMS
    out = tmp_path / "r"
    argv = ["adiana", "--compressor", "randk:k=3", "--problem", "quadratic", "--nodes", "4",
            "--iters", "30", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "ADIANA" and cfg["step"]["gamma_theory"] > 0
    assert cfg["method"]["theta1"] > 0 and cfg["method"]["theta2"] == 0.5
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert "refresh" in header and "H" in header


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_gloo_matches_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["adiana", "--compressor", "randk:k=3"])


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [3])
def test_gloo_matches_the_simulation_more_processes(tmp_path, nproc):
    argv = ["adiana", "--compressor", "natural", "--init", "full", "--p", "0.5"]
    torch_dist_helpers().parity(tmp_path, nproc, argv)
