"""PowerSGD+ against a NumPy loop written from its docstring (refreshes by SVD of the mean,
warm-started power steps with Gram-Schmidt, EF14 memories), the bits it is charged, and the
lock-in of PowerSGD (``period=0``) that the refresh removes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algorithms.lowrank.powersgd_plus import PowerSGDPlus
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags
from theory_checks.lowrank import lock_instance


def _gs(a):
    a = a.copy()
    for j in range(a.shape[1]):
        a[:, j] /= np.linalg.norm(a[:, j]) + 1e-8
        for k in range(j + 1, a.shape[1]):
            a[:, k] -= (a[:, j] @ a[:, k]) * a[:, j]
    return a


def _reference(problem, gamma, rank, period, ef, T, Q0):
    n, d = problem.n, problem.d
    m1, m2 = 4, 3  # the near-square view of d = 10
    x, e = problem.x0.numpy().copy(), np.zeros((n, d))
    Q, xs, bits = None, [], []
    for t in range(T):
        M = problem.grad(torch.from_numpy(x)).numpy() + (e if ef else 0.0)
        mats = np.zeros((n, m1 * m2))
        mats[:, :d] = M
        mats = mats.reshape(n, m1, m2)
        if period and t % period == 0:
            upd = M.mean(0)
            Q = np.linalg.svd(mats.mean(0))[2][:rank].T
            e = np.zeros((n, d))
            bits.append(32 * d)
        else:
            q = _gs(Q0 if t == 0 else Q)
            P = _gs(np.mean([mats[i] @ q for i in range(n)], axis=0))
            Q = np.mean([mats[i].T @ P for i in range(n)], axis=0)
            upd = (P @ Q.T).reshape(-1)[:d]
            e = M - upd if ef else np.zeros((n, d))
            bits.append(32 * rank * (m1 + m2))
        x = x - gamma * upd
        xs.append(x.copy())
    return xs, bits


@pytest.mark.parametrize("period,ef", [(2, "ef14"), (3, "none"), (0, "ef14")])
def test_matches_a_hand_written_loop(period, ef):
    problem = make_problem("quadratic", nodes=3, dim=10, seed=1, lam=0.2)
    algo, _ = PowerSGDPlus.configure(problem, parse_spec("identity"), step=0.3, rank=2,
                                     period=period, ef=ef)  # fmt: skip
    comm = SimulatedComm(3, seed=5)
    Q0 = comm.rng(0, shared=True, tag=tags.POWERSGD_PLUS_Q0).normal(3, 2)[0].numpy()
    xs, bits = _reference(problem, 0.3, 2, period, ef == "ef14", 6, Q0)
    state = algo.init(problem.x0, problem, comm)
    for t in range(6):
        state, info = algo.step(state, problem, comm)
        assert np.allclose(state.x.numpy(), xs[t], rtol=0, atol=1e-12), t
        assert info.bits_up == bits[t] and info.bits_down == bits[t]
        assert info.extras["refresh"] == float(bool(period) and t % period == 0)


def test_refresh_escapes_the_lock_that_stalls_powersgd():
    problem = lock_instance()
    gaps = {}
    for period in (0, 10):
        algo, _ = PowerSGDPlus.configure(problem, parse_spec("identity"), period=period)
        comm = SimulatedComm(problem.n, seed=0)
        state = algo.init(problem.x0, problem, comm)
        for _ in range(300):
            state, _ = algo.step(state, problem, comm)
        gaps[period] = float(problem.loss(state.x))
        if period == 0:  # the query stayed in span(e_1): x3 never moved
            assert state.Q[1].abs().max() == 0 and state.x[3] == 0
    assert gaps[0] == pytest.approx(0.25, rel=1e-6) and gaps[10] < 1e-9


def test_refuses_bad_options():
    problem = make_problem("quadratic", nodes=2, dim=6, seed=0)
    with pytest.raises(ValueError, match="--period must be an integer >= 0"):
        PowerSGDPlus.configure(problem, parse_spec("identity"), period=-1)
    with pytest.raises(ValueError, match="takes no compressor"):
        PowerSGDPlus.configure(problem, parse_spec("topk:k=2"))
