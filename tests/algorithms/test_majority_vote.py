"""signSGD / Signum with majority vote: the update against a hand-written loop, the bits of both
directions, the tie rule and the recalled step."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.sign.majority_vote import SIGN, SignSGDMV, SignumMV, majority_vote
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags


def reference(problem, gamma, beta, T, batch_size=None, seed=0):
    """The docstring's update, written out: m_i = beta m_i + (1 - beta) g_i, s_i = sign(m_i)
    with sign(0) = +1, vote = sign(sum_i s_i) with a tie = +1, x -= gamma vote."""
    comm = SimulatedComm(problem.n, seed=seed)  # only its streams, for the same minibatches
    x = problem.x0.clone()
    m = torch.zeros(problem.n, problem.d, dtype=torch.float64)
    xs = [x]
    for t in range(T):
        batch = None
        if batch_size is not None:
            batch = problem.sample(comm.rng(t, tag=tags.SIGN_MV_BATCH), batch_size)
        g = problem.grad(x, batch)
        m = beta * m + (1 - beta) * g
        s = torch.where(m < 0, -1.0, 1.0).to(torch.float64)
        total = s.sum(dim=0)
        x = x - gamma * torch.where(total < 0, -1.0, 1.0).to(torch.float64)
        xs.append(x)
    return xs


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("cls, beta", [(SignSGDMV, 0.0), (SignumMV, 0.9), (SignumMV, 0.5)])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_update_matches_the_hand_written_loop_and_bits(n, cls, beta, batch_size):
    problem = make_problem("quadratic", nodes=n, lam=0.2, dim=7, seed=3, grad_noise=0.5)
    algo, _ = cls.configure(problem, parse_spec("identity"), step=0.03, beta=beta,
                            batch_size=batch_size)  # fmt: skip
    comm = SimulatedComm(n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    want = reference(problem, 0.03, beta, 30, batch_size)
    for t in range(30):
        state, info = algo.step(state, problem, comm)
        assert torch.allclose(state.x, want[t + 1], rtol=0, atol=1e-12)
        assert info.bits_up == problem.d and info.bits_down == problem.d  # one bit each way
    assert comm.ledger.up.tolist() == [30 * problem.d] * n


def test_a_tie_is_decided_as_plus_one_and_costs_one_bit():
    comm = SimulatedComm(4, seed=0)
    rows = torch.tensor([[1.0, -1.0, 2.0], [-1.0, -1.0, -2.0], [3.0, 1.0, 0.0],
                         [-2.0, -4.0, -1.0]], dtype=torch.float64)  # fmt: skip
    # sums of signs: 0 (tie), -2, 0 (tie: sign(0) = +1 on the uplink too)
    vote = majority_vote(SIGN.encode(rows, comm.rng_for(SIGN, 0)), comm)
    assert vote.tolist() == [1.0, -1.0, 1.0]
    assert comm.ledger.up.tolist() == [3] * 4 and comm.ledger.down.tolist() == [3] * 4


def test_the_vote_is_the_majority_for_odd_n():
    comm = SimulatedComm(5, seed=0)
    g = torch.randn(5, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    vote = majority_vote(SIGN.encode(g, comm.rng_for(SIGN, 0)), comm)
    positive = (g > 0).sum(dim=0)
    assert torch.equal(vote, torch.where(positive >= 3, 1.0, -1.0).to(torch.float64))


def test_theory_step_is_one_over_sqrt_of_L1_times_K_and_labelled():
    problem = make_problem("quadratic", nodes=4, lam=0.2, dim=8, seed=0)
    algo, rec = SignSGDMV.configure(problem, parse_spec("identity"), horizon=400)
    assert algo.gamma == pytest.approx(1 / math.sqrt(8 * problem.consts.L * 400))
    assert rec["provenance"]["kind"] == "reconstruction"
    _, rec = SignumMV.configure(problem, parse_spec("identity"), horizon=400)
    assert rec["provenance"]["kind"] == "borrowed"
    with pytest.raises(ValueError, match="beta"):
        SignumMV.configure(problem, parse_spec("identity"), beta=1.0, horizon=4)
    with pytest.raises(ValueError, match="takes no compressor"):
        SignumMV.configure(problem, parse_spec("topk:k=2"), horizon=4)


def test_homogeneous_noiseless_quadratic_reaches_the_step_scale():
    """Sign descent on identical nodes reaches a neighbourhood of x* of the step's size:
    every coordinate within gamma of x* after enough rounds (the last step overshoots by at
    most gamma)."""
    problem = make_problem("quadratic", nodes=3, lam=1.0, dim=6, seed=1, zeta2=0.0, L_pm=0.0)
    algo, _ = SignSGDMV.configure(problem, parse_spec("identity"), step=0.01)
    comm = SimulatedComm(3, seed=0)
    state = algo.init(problem.x0, problem, comm)
    for _ in range(2000):
        state, _ = algo.step(state, problem, comm)
    assert float((state.x - problem.x_star).abs().max()) <= 0.01 + 1e-12
