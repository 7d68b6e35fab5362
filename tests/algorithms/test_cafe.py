"""CAFe and CAFe-S: the update against a hand-written reference round, stateless nodes, the
bits of both directions, GD as the uncompressed (or perfectly predicted) case, convergence at
the derived steps, refusals, the runner, and parity with gloo processes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.shifts.cafe import CAFe, CAFeS, CAFeState
from algorithms.shifts.dcgd import DCGD
from algorithms.stepsizes.cafe import cafe as cafe_step
from algorithms.stepsizes.ef import ef21_theta_beta
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

TOPK = "topk:k=2"


@pytest.fixture(scope="module")
def het():
    """A heterogeneous quadratic (zeta2 = 1, L_pm = 0.1, d = 10, 5 nodes; the server's
    objective f + <s, x> with ||s||^2 = 0.1)."""
    return make_problem("quadratic", nodes=5, lam=0.2, dim=10, seed=0)


@pytest.fixture(scope="module")
def same():
    """Five identical nodes (zeta2 = L_pm = 0) and a server holding f itself."""
    return make_problem(
        "quadratic", nodes=5, lam=0.2, dim=10, zeta2=0.0, L_pm=0.0, server_zeta2=0.0, seed=1
    )


def reference(problem, C, gamma: float, T: int, predictor: str):
    """The rounds written out: node i sends C(grad f_i(x) - p), the server adds the mean."""
    x, g = problem.x0.clone(), torch.zeros(problem.d, dtype=problem.dtype)
    xs = [x]
    for _ in range(T):
        p = g if predictor == "aggregate" else problem.server_grad(x)
        msgs = torch.stack([C.decode(C.encode((problem.grad(x)[i] - p)[None], 0))[0]
                            for i in range(problem.n)])  # fmt: skip
        g = p + msgs.mean(0)
        x = x - gamma * g
        xs.append(x)
    return xs


@pytest.mark.parametrize("cls, predictor", [(CAFe, "aggregate"), (CAFeS, "server")])
def test_rounds_equal_the_reference(het, cls, predictor):
    C = parse_spec(TOPK)
    algo, _ = cls.configure(het, C)
    states, _, _ = trajectory(algo, het, 25)
    for s, x in zip(states, reference(het, C.bind(het.n), algo.gamma, 25, predictor), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


def test_round_zero_is_dcgd_and_the_nodes_keep_nothing(het):
    C = parse_spec(TOPK)
    algo, _ = CAFe.configure(het, C)
    dcgd, _ = DCGD.configure(het, C, step=algo.gamma)
    a, _, _ = trajectory(algo, het, 1)
    b, _, _ = trajectory(dcgd, het, 1)
    torch.testing.assert_close(a[1].x, b[1].x, rtol=0, atol=1e-14)
    # Stateless nodes: no per-node row in the state, only the model and the server's aggregate.
    assert [f.name for f in dataclasses.fields(CAFeState)] == ["x", "t", "g"]
    assert a[1].g.shape == (het.d,)
    torch.testing.assert_close(a[1].x, het.x0 - algo.gamma * a[1].g, rtol=0, atol=0)


def test_step_does_not_mutate_its_input(het):
    for cls in (CAFe, CAFeS):
        algo, _ = cls.configure(het, parse_spec(TOPK))
        comm = SimulatedComm(het.n, seed=0)
        state = algo.init(het.x0, het, comm)
        state, _ = algo.step(state, het, comm)
        before = {k: v.clone() for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
        algo.step(state, het, comm)
        for k, v in before.items():
            assert torch.equal(getattr(state, k), v), k


@pytest.mark.parametrize("spec", [TOPK, "scaled:randk:k=3"])
def test_bits_per_round_are_the_formula(het, spec):
    c, d, T = parse_spec(spec), het.d, 12
    for cls in (CAFe, CAFeS):
        algo, _ = cls.configure(het, c)
        _, infos, comm = trajectory(algo, het, T)
        assert all(i.bits_up == c.bits(d) for i in infos)
        # Down: the model and the predictor, 32 d each; CAFe's predictor is 0 in round 0.
        first = 32 * d if cls is CAFe else 64 * d
        assert [i.bits_down for i in infos] == [first] + [64 * d] * (T - 1)
        assert comm.bits_totals()["bits_up"] == T * c.bits(d)


def test_identity_and_a_perfect_predictor_are_gd(het, same):
    algo, _ = CAFe.configure(het, parse_spec("identity"), step=0.3)
    states, _, _ = trajectory(algo, het, 30)
    for s, x in zip(states, gd(het, 0.3, 30), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
    # Identical nodes and a server holding f: every node compresses 0, whatever C does.
    algo, rec = CAFeS.configure(same, parse_spec("topk:k=1"))
    assert rec["gamma_theory"] == pytest.approx(1.0 / same.consts.L)
    states, infos, _ = trajectory(algo, same, 30)
    for s, x in zip(states, gd(same, algo.gamma, 30), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
    assert max(i.extras["resid"] for i in infos) < 1e-24


def test_theory_steps(het):
    c = parse_spec(TOPK)
    delta = c.delta(het.d)
    theta, beta = ef21_theta_beta(delta)
    _, rec = CAFe.configure(het, c)
    assert rec["gamma_theory"] == pytest.approx(1.0 / (het.consts.L * (1 + (beta / theta) ** 0.5)))
    assert "derived for this library" in rec["theory"]["formula"]
    assert cafe_step(2.0, 1.0) == 0.5  # no compression: 1/L
    _, rec = CAFeS.configure(het, c)
    assert rec["gamma_theory"] == pytest.approx(1.0 / het.consts.L)


def test_identical_nodes_converge_linearly_at_the_theory_step(same):
    """zeta2 = 0: the derived bound's neighbourhood vanishes (CAFe is then EF21 on one node)."""
    algo, _ = CAFe.configure(same, parse_spec(TOPK))
    states, _, _ = trajectory(algo, same, 800)
    assert float(same.loss(states[-1].x)) - same.consts.f_star <= 1e-10


def test_heterogeneous_nodes_reach_the_derived_neighbourhood(het):
    c = parse_spec(TOPK)
    delta = c.delta(het.d)
    for cls, T in ((CAFe, 1500), (CAFeS, 300)):
        algo, _ = cls.configure(het, c)
        states, _, _ = trajectory(algo, het, T)
        g = [float((het.full_grad(s.x) ** 2).sum()) for s in states]
        g0 = g[0]
        assert sum(g[T // 2 :]) / (T - T // 2 + 1) <= g0 / 10
        assert all(v == v and v < 1e3 * g0 for v in g)  # no divergence
    assert 0 < delta < 1


def test_refusals(het):
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        CAFe.configure(het, parse_spec("randk:k=3"))
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        CAFeS.configure(het, parse_spec("randk:k=3"))
    logreg = make_problem("logreg", nodes=4, samples=100, features=5)
    with pytest.raises(
        ValueError, match=r"needs data of the server.s own \(server_data\).*server_rows=K"
    ):
        CAFeS.configure(logreg, parse_spec(TOPK))
    with pytest.raises(ValueError, match="takes no option"):
        CAFe.configure(het, parse_spec(TOPK), momentum=0.5)


def test_runner(tmp_path, capsys):
    assert "cafe" in ALGORITHMS and "cafe-s" in ALGORITHMS
    for name, extra in (("cafe", []), ("cafe-s", ["--problem-opt", "server_rows=400"])):
        out = tmp_path / name
        argv = [name, "--compressor", TOPK, "--problem", "logreg", *extra, "--nodes", "4",
                "--iters", "15", "--quiet", "--out", str(out)]  # fmt: skip
        assert run(argv) == 0
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["step"]["gamma_theory"] > 0
        with open(out / "history.csv") as fh:
            assert "resid" in fh.readline().strip().split(",")
    argv = ["cafe-s", "--compressor", TOPK, "--problem", "logreg", "--iters", "3", "--quiet",
            "--out", str(tmp_path / "none")]  # fmt: skip
    assert run(argv) == 2
    assert "--problem-opt server_rows=K" in capsys.readouterr().err


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
@pytest.mark.parametrize("name", ["cafe", "cafe-s"])
def test_gloo_matches_the_simulation(tmp_path, name):
    # (the helper's problem is the default quadratic, whose server holds f + <s, x>)
    torch_dist_helpers().parity(tmp_path, 2, [name, "--compressor", TOPK])


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_with_random_compressors(tmp_path, nproc):
    helpers = torch_dist_helpers()
    for name in ("cafe", "cafe-s"):
        helpers.parity(tmp_path / name, nproc, [name, "--compressor", "scaled:randk:k=3"])
