"""DCGD and EF21: reductions to GD, invariants, convergence at the theory step, bits."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import stepsizes
from algorithms.ef.ef21 import EF21
from algorithms.shifts.dcgd import DCGD
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, lam=0.1, samples=200, features=10, seed=1)


@pytest.fixture(scope="module")
def nonconvex():
    return make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )


def trajectory(algo, problem, T, seed=0):
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    xs = [state.x]
    for _ in range(T):
        state, _ = algo.step(state, problem, comm)
        xs.append(state.x)
    return xs, state, comm


def gd(problem, gamma, T):
    x, xs = problem.x0.clone(), [problem.x0.clone()]
    for _ in range(T):
        x = x - gamma * problem.full_grad(x)
        xs.append(x)
    return xs


@pytest.mark.parametrize("cls", [DCGD, EF21])
def test_identity_compressor_is_gd(cls, nonconvex):
    algo, _ = cls.configure(nonconvex, parse_spec("identity"))
    xs, _, _ = trajectory(algo, nonconvex, 50)
    for a, b in zip(xs, gd(nonconvex, algo.gamma, 50), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_ef21_keeps_g_equal_to_the_mean_of_g_i(nonconvex):
    algo, _ = EF21.configure(nonconvex, parse_spec("topk:k=2"), init_mode="compressed")
    comm = SimulatedComm(nonconvex.n, seed=0)
    state = algo.init(nonconvex.x0, nonconvex, comm)
    for _ in range(100):
        state, info = algo.step(state, nonconvex, comm)
        torch.testing.assert_close(state.g, state.g_i.mean(dim=0), rtol=0, atol=1e-12)
        G = float(((state.g_i - nonconvex.grad(state.x)) ** 2).sum(dim=1).mean())
        assert info.extras["G"] == pytest.approx(G, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("spec", ["topk:k=1", "topk:k=3", "scaled-sign", "rank:r=1"])
def test_ef21_converges_linearly_at_the_pl_step(spec, logreg):
    algo, rec = EF21.configure(logreg, parse_spec(spec))
    assert rec["theory"]["formula"].startswith("min(")
    _, state, _ = trajectory(algo, logreg, 3000)
    assert float(logreg.loss(state.x)) - logreg.consts.f_star <= 1e-8


def test_ef21_nonconvex_gradient_drops_a_hundredfold(nonconvex):
    algo, rec = EF21.configure(nonconvex, parse_spec("topk:k=1"))
    assert rec["theory"]["formula"] == "1 / (L + L_tilde sqrt(beta / theta))"
    g0 = float((nonconvex.full_grad(nonconvex.x0) ** 2).sum())
    _, state, _ = trajectory(algo, nonconvex, 1000)
    assert float((nonconvex.full_grad(state.x) ** 2).sum()) <= g0 / 100


def test_ef21_bits_and_init_modes(nonconvex):
    c = parse_spec("topk:k=2")
    d, T = nonconvex.d, 10
    for mode, init_bits in (("full", 32 * d), ("compressed", c.bits(d)), ("zero", 0)):
        algo, _ = EF21.configure(nonconvex, c, init_mode=mode)
        _, _, comm = trajectory(algo, nonconvex, T)
        assert comm.bits_totals()["bits_up"] == init_bits + T * c.bits(d)


def test_dcgd_stalls_at_a_neighbourhood_that_shrinks_with_the_step(logreg):
    """Theory sheet §2.1: DCGD converges only to a neighbourhood of size O(gamma omega zeta2/n)
    on heterogeneous data, so a 4x smaller step gives a smaller plateau."""
    c = parse_spec("randk:k=2")
    algo, _ = DCGD.configure(logreg, c)
    gaps = []
    for mult in (1.0, 0.25):
        a = DCGD(compressor=algo.compressor, gamma=algo.gamma * mult)
        comm = SimulatedComm(logreg.n, seed=0)
        state = a.init(logreg.x0, logreg, comm)
        tail = []
        for t in range(1500):
            state, _ = a.step(state, logreg, comm)
            if t >= 1000 and t % 10 == 0:
                tail.append(float(logreg.loss(state.x)) - logreg.consts.f_star)
        gaps.append(sum(tail) / len(tail))
    assert gaps[0] > 1e-6  # a plateau, not convergence
    assert gaps[1] < gaps[0] / 2


def test_dcgd_minibatches_come_from_each_nodes_stream(logreg):
    algo, _ = DCGD.configure(logreg, parse_spec("identity"), batch_size=4)
    xs1, _, _ = trajectory(algo, logreg, 20, seed=3)
    xs2, _, _ = trajectory(algo, logreg, 20, seed=3)
    xs3, _, _ = trajectory(algo, logreg, 20, seed=4)
    assert torch.equal(xs1[-1], xs2[-1]) and not torch.equal(xs1[-1], xs3[-1])
    full = gd(logreg, algo.gamma, 20)[-1]
    assert not torch.allclose(xs1[-1], full, atol=1e-6)


def test_methods_refuse_the_wrong_class_unless_forced(nonconvex):
    with pytest.raises(ValueError, match="needs a contractive compressor.*randk"):
        EF21.configure(nonconvex, parse_spec("randk"))
    algo, _ = EF21.configure(nonconvex, parse_spec("randk:k=2"), step=0.01, force=True)
    assert algo.gamma == 0.01


def test_dcgd_nonconvex_step_depends_on_the_horizon(nonconvex):
    """Khaled & Richtárik 2020, Thm 2 (theory sheet §2.1): gamma <= 1/L and
    (1 + L gamma^2 A')^T <= e, with A' = omega L_max / n; the larger T, the smaller the step."""
    c = parse_spec("randk:k=2")
    k = nonconvex.consts
    A = c.omega(nonconvex.d) * k.L_max / nonconvex.n
    steps = []
    for T in (10, 1000, 100000):
        algo, rec = DCGD.configure(nonconvex, c, horizon=T)
        g = algo.gamma
        assert rec["theory"]["inputs"]["T"] == T
        assert g <= 1 / k.L * (1 + 1e-12)
        assert (1 + k.L * g * g * A) ** T <= math.e * (1 + 1e-9)
        # the largest such step: one of the two conditions is active
        assert g == pytest.approx(1 / k.L) or k.L * g * g * A * T == pytest.approx(1.0)
        steps.append(g)
    assert steps[0] >= steps[1] > steps[2]
    with pytest.raises(ValueError, match="horizon"):
        DCGD.configure(nonconvex, c)  # no T, no theory step


def test_dcgd_nonconvex_worked_number():
    # L = 2, L_max = 3, omega = 4, n = 6: A' = 2, 1/sqrt(L A' T) at T = 100 is 1/20 < 1/L
    assert stepsizes.dcgd_nonconvex(2.0, 3.0, 4.0, 6, 100) == pytest.approx(0.05)
    assert stepsizes.dcgd_nonconvex(2.0, 3.0, 4.0, 6, 1) == pytest.approx(0.5)  # 1/L active


def test_dcgd_converges_at_the_nonconvex_theory_step(nonconvex):
    T = 2000
    algo, _ = DCGD.configure(nonconvex, parse_spec("randk:k=5"), horizon=T)
    xs, _, _ = trajectory(algo, nonconvex, T)
    g = [float((nonconvex.full_grad(x) ** 2).sum()) for x in xs]
    # the theorem bounds min_t ||grad f(x^t)||^2; it falls at least tenfold here
    assert min(g) <= g[0] / 10


def test_runner_fills_the_horizon_from_iters(tmp_path):
    import json

    from algorithms.run import run

    argv = ["dcgd", "--compressor", "randk:k=2", "--problem", "logreg-nonconvex"]
    assert run([*argv, "--iters", "30", "--out", str(tmp_path / "a"), "--quiet"]) == 0
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["step"]["theory"]["inputs"]["T"] == 30
    assert (
        run([*argv, "--iters", "30", "--horizon", "7", "--out", str(tmp_path / "b"), "--quiet"])
        == 0
    )
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg["step"]["theory"]["inputs"]["T"] == 7
