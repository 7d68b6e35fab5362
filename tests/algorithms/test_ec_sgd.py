"""EC-SGD with absolute compressors: the update against a hand-written step, the virtual
iterate, bits from the payloads, the neighbourhood at the theory step, bad input, the runner
and parity with gloo processes."""

from __future__ import annotations

import json

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms import stepsizes
from algorithms.absolute.ec_sgd import ECSGD
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.stepsizes.absolute import ec_distance_bound
from comm import SimulatedComm
from compressors import parse_spec

SPECS = ["threshold:lam=0.02", "round:h=0.05,rounding=random", "threshold:lam=0.01,index=auto"]


def reference(problem, C, gamma: float, T: int, seed: int = 0):
    """EC-SGD one node at a time, written out: ``v = e + gamma grad f_i(x)``, send ``C(v)``,
    ``e <- v - C(v)``, ``x <- x - mean_i C(v_i)``; node ``i``'s draws from its own stream."""
    comm = SimulatedComm(problem.n, seed=seed)
    x = problem.x0.clone()
    e = [torch.zeros(problem.d, dtype=x.dtype) for _ in range(problem.n)]
    xs = [x]
    for t in range(T):
        grads = problem.grad(x)
        rng = comm.rng_for(C, t)
        sent = []
        for i in range(problem.n):
            v = e[i] + gamma * grads[i]
            c = C(v[None], rng[i : i + 1])[0]
            e[i] = v - c
            sent.append(c)
        x = x - sum(sent) / problem.n
        xs.append(x)
    return xs, e


@pytest.mark.parametrize("spec", SPECS)
def test_update_matches_the_hand_written_step(quad, spec):
    C = parse_spec(spec)
    algo, _ = ECSGD.configure(quad, C)
    states, _, _ = trajectory(algo, quad, 15)
    xs, e = reference(quad, C, algo.gamma, 15)
    for s, x in zip(states, xs, strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-13)
    torch.testing.assert_close(states[-1].e_i, torch.stack(e), rtol=0, atol=1e-13)


@pytest.mark.parametrize("spec", SPECS[:2])
def test_virtual_iterate_is_gd_on_the_true_points_and_errors_stay_bounded(quad, spec):
    C = parse_spec(spec)
    algo, _ = ECSGD.configure(quad, C)
    states, infos, _ = trajectory(algo, quad, 40)
    tilde = quad.x0.clone()
    for k, s in enumerate(states):
        torch.testing.assert_close(s.x - s.e_i.mean(0), tilde, rtol=0, atol=1e-12)
        tilde = tilde - algo.gamma * quad.full_grad(s.x)
        if C.deterministic:  # hard threshold: every error below Delta^2, pointwise
            assert (s.e_i.pow(2).sum(1) <= C.abs_delta_sq(quad.d)).all(), k
    E = torch.tensor([i.extras["E"] for i in infos])
    assert float(E.mean()) <= C.abs_delta_sq(quad.d)


@pytest.mark.parametrize("spec", SPECS)
def test_bits_per_round_are_the_payloads(quad, spec):
    C = parse_spec(spec)
    d = quad.d
    algo, _ = ECSGD.configure(quad, C)
    comm = SimulatedComm(quad.n, seed=0)
    state = algo.init(quad.x0, quad, comm)
    total = 0
    for t in range(12):
        v_i = state.e_i + algo.gamma * quad.grad(state.x)
        nbits = C.encode(v_i, comm.rng_for(C, t)).nbits
        if C.deterministic:
            nnz = (~(v_i.abs() < C.lam)).sum(1)
            assert torch.equal(nbits, C.row_bits(nnz, d))  # the documented formula
        state, info = algo.step(state, quad, comm)
        assert info.bits_up == pytest.approx(float(nbits.double().mean()), rel=0, abs=1e-9)
        assert info.bits_down == 32 * d
        total += int(nbits.sum())
    assert int(comm.ledger.up.sum()) == total


@pytest.mark.parametrize("spec", ["threshold:lam=0.01", "round:h=0.02"])
def test_reaches_the_neighbourhood_at_the_theory_step(quad, spec):
    C = parse_spec(spec)
    algo, rec = ECSGD.configure(quad, C)
    c = quad.consts
    assert rec["gamma"] == pytest.approx(1 / (4 * c.L)) == stepsizes.ec_sgd(c.L, c.mu, quad.n)
    assert "2203.02383" in rec["theory"]["source"]
    T = 600
    states, _, _ = trajectory(algo, quad, T)
    x_star = quad.x_star
    r0 = float(((quad.x0 - x_star) ** 2).sum())
    bound = ec_distance_bound(c.L, c.mu, algo.gamma, C.abs_delta_sq(quad.d), r0, T)
    dist = float(((states[-1].x - x_star) ** 2).sum())
    assert dist <= bound
    assert dist <= 1e-3 * r0  # and it did converge, not merely stay within a loose bound


def test_minibatch_step_reads_the_per_sample_smoothness(nonconvex):
    from problems.registry import make_problem

    p = make_problem("logreg", nodes=4, lam=0.1, samples=80, features=6, seed=1)
    algo, rec = ECSGD.configure(p, parse_spec("threshold"), batch_size=2)
    c, calL = p.consts, p.sample_smoothness()
    assert rec["gamma"] == pytest.approx(1 / (4 * (c.L + 2 * calL**2 / (c.mu * 4 * 2))))
    states, _, _ = trajectory(algo, p, 5)
    assert torch.isfinite(states[-1].x).all()


def test_refuses_relative_compressors_and_bad_options(quad):
    with pytest.raises(ValueError, match="needs an absolute compressor"):
        ECSGD.configure(quad, parse_spec("topk:k=2"))
    with pytest.raises(ValueError, match="--batch-size must be a positive integer, got 0"):
        ECSGD.configure(quad, parse_spec("threshold"), batch_size=0)
    with pytest.raises(ValueError, match="lam must be a finite number > 0"):
        parse_spec("threshold:lam=0")
    with pytest.raises(ValueError, match="rounding must be deterministic or random"):
        parse_spec("round:rounding=up")


def test_runner(tmp_path):
    assert ALGORITHMS["ec-sgd"] is ECSGD
    out = tmp_path / "r"
    argv = ["ec-sgd", "--compressor", "threshold:lam=0.01", "--nodes", "4", "--iters", "30",
            "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "ECSGD" and cfg["step"]["gamma_theory"] > 0
    with open(out / "history.csv") as fh:
        assert "E" in fh.readline().strip().split(",")


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["ec-sgd", "--compressor", "threshold:lam=0.01"])


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_randomized(tmp_path, nproc):
    argv = ["ec-sgd", "--compressor", "round:h=0.02,rounding=random", "--batch-size", "2"]
    torch_dist_helpers().parity(tmp_path, nproc, argv)
