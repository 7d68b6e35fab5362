"""EC-LSVRG with absolute compressors: the update against a hand-written step, the refresh
coins, bits from the payloads, the theory step and convergence without a noise floor, bad
input, the runner and parity with gloo processes."""

from __future__ import annotations

import json

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms.absolute.ec_lsvrg import ECLSVRG, TAG_LSVRG_BATCH, TAG_LSVRG_COIN
from algorithms.absolute.ec_sgd import ECSGD
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def ridge():
    """Least squares with a ridge term, 4 nodes of 20 samples: finite sums with
    ``sample_smoothness``."""
    return make_problem("least-squares", nodes=4, lam=0.5, samples=80, features=5, seed=1)


def reference(problem, C, gamma: float, p: float, b: int, T: int, seed: int = 0):
    """EC-LSVRG one node at a time: ``g = grad f_iB(x) - grad f_iB(w_i) + grad f_i(w_i)``,
    ``v = e + gamma g``, send ``C(v)``, ``e <- v - C(v)``, ``x <- x - mean C(v_i)``; then node
    ``i`` sets ``w_i = x^k`` (and its full gradient) when its own coin is below ``p``."""
    comm = SimulatedComm(problem.n, seed=seed)
    x = problem.x0.clone()
    n = problem.n
    e = [torch.zeros(problem.d, dtype=x.dtype) for _ in range(n)]
    w = [x.clone() for _ in range(n)]
    gw = list(problem.grad(x))
    for t in range(T):
        batch = problem.sample(comm.rng(t, tag=TAG_LSVRG_BATCH), b)
        at_x = problem.grad(x, batch)
        at_w = problem.grad(torch.stack(w), batch)
        coins = comm.rng(t, tag=TAG_LSVRG_COIN).uniform(1)[:, 0]
        full = problem.grad(x)
        rng = comm.rng_for(C, t)
        sent = []
        for i in range(n):
            v = e[i] + gamma * (at_x[i] - at_w[i] + gw[i])
            c = C(v[None], rng[i : i + 1])[0]
            e[i] = v - c
            sent.append(c)
            if coins[i] < p:
                w[i], gw[i] = x.clone(), full[i]
        x = x - sum(sent) / n
    return x, torch.stack(e), torch.stack(w)


@pytest.mark.parametrize("spec", ["threshold:lam=0.01", "round:h=0.02,rounding=random"])
def test_update_matches_the_hand_written_step(ridge, spec):
    C = parse_spec(spec)
    algo, rec = ECLSVRG.configure(ridge, C, batch_size=3)
    assert rec["params"]["p"] == pytest.approx(3 / 20)  # min(1, b/m), m = 20 samples a node
    states, _, _ = trajectory(algo, ridge, 25)
    x, e, w = reference(ridge, C, algo.gamma, algo.p, 3, 25)
    last = states[-1]
    torch.testing.assert_close(last.x, x, rtol=0, atol=1e-12)
    torch.testing.assert_close(last.e_i, e, rtol=0, atol=1e-12)
    torch.testing.assert_close(last.w_i, w, rtol=0, atol=1e-12)
    torch.testing.assert_close(last.gw_i, ridge.grad(last.w_i), rtol=0, atol=1e-12)
    # the coins are per node: after 25 steps at p = 0.15 the reference points differ
    assert len({tuple(r.tolist()) for r in last.w_i}) > 1


def test_virtual_iterate_follows_the_estimator(ridge):
    C = parse_spec("threshold:lam=0.02")
    algo, _ = ECLSVRG.configure(ridge, C, batch_size=2)
    comm = SimulatedComm(ridge.n, seed=1)
    state = algo.init(ridge.x0, ridge, comm)
    for t in range(20):
        batch = ridge.sample(comm.rng(t, tag=TAG_LSVRG_BATCH), 2)
        g = ridge.grad(state.x, batch) - ridge.grad(state.w_i, batch) + state.gw_i
        new, _ = algo.step(state, ridge, comm)
        torch.testing.assert_close(
            new.x - new.e_i.mean(0), state.x - state.e_i.mean(0) - algo.gamma * g.mean(0),
            rtol=0, atol=1e-12,
        )  # fmt: skip
        assert (new.e_i.pow(2).sum(1) <= C.abs_delta_sq(ridge.d)).all()
        state = new


def test_bits_per_round_are_the_payloads(ridge):
    C = parse_spec("threshold:lam=0.01,index=auto")
    algo, _ = ECLSVRG.configure(ridge, C)
    comm = SimulatedComm(ridge.n, seed=0)
    state = algo.init(ridge.x0, ridge, comm)
    for t in range(10):
        batch = ridge.sample(comm.rng(t, tag=TAG_LSVRG_BATCH), 1)
        g = ridge.grad(state.x, batch) - ridge.grad(state.w_i, batch) + state.gw_i
        v = state.e_i + algo.gamma * g
        nbits = C.row_bits((~(v.abs() < C.lam)).sum(1), ridge.d)
        state, info = algo.step(state, ridge, comm)
        assert info.bits_up == pytest.approx(float(nbits.double().mean()), rel=0, abs=1e-9)
        assert info.bits_down == 32 * ridge.d  # the model; refreshes send nothing


def test_theory_step_and_no_noise_floor_where_ec_sgd_has_one(ridge):
    C = parse_spec("threshold:lam=1e-6")
    algo, rec = ECLSVRG.configure(ridge, C, batch_size=2)
    c, calL = ridge.consts, ridge.sample_smoothness()
    assert algo.gamma == pytest.approx(1 / (4 * (c.L + 6 * calL**2 / (c.mu * 4 * 2))))
    assert "2203.02383" in rec["theory"]["source"]
    T = 1500
    states, _, _ = trajectory(algo, ridge, T)
    sgd = ECSGD(C, algo.gamma, batch_size=2)
    other, _, _ = trajectory(sgd, ridge, T)
    r0 = float(((ridge.x0 - ridge.x_star) ** 2).sum())
    dist = float(((states[-1].x - ridge.x_star) ** 2).sum())
    floor = float(((other[-1].x - ridge.x_star) ** 2).sum())
    assert dist <= 1e-8 * r0  # linear convergence down to the compressor's tiny Delta^2
    assert floor >= 100 * dist  # EC-SGD at the same step keeps its stochastic floor


def test_refuses_relative_compressors_and_bad_options(ridge):
    with pytest.raises(ValueError, match="needs an absolute compressor"):
        ECLSVRG.configure(ridge, parse_spec("randk:k=2"))
    with pytest.raises(ValueError, match="p must be in \\(0, 1\\], got 0"):
        ECLSVRG.configure(ridge, parse_spec("threshold"), p=0.0)
    with pytest.raises(ValueError, match="--batch-size must be a positive integer, got 0"):
        ECLSVRG(parse_spec("threshold"), 0.1, batch_size=0)


def test_runner(tmp_path):
    assert ALGORITHMS["ec-lsvrg"] is ECLSVRG
    out = tmp_path / "r"
    argv = ["ec-lsvrg", "--compressor", "round:h=0.01", "--problem", "logreg", "--nodes", "4",
            "--iters", "20", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "ECLSVRG" and cfg["step"]["gamma_theory"] > 0


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["ec-lsvrg", "--compressor", "threshold:lam=0.01", "--p", "0.3"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_randomized(tmp_path, nproc):
    argv = ["ec-lsvrg", "--compressor", "round:h=0.02,rounding=random", "--batch-size", "2",
            "--p", "0.4"]  # fmt: skip
    torch_dist_helpers().parity(tmp_path, nproc, argv)
