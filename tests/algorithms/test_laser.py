"""LASER against a NumPy loop written from its docstring (alternating half power steps, local
EF14 memories, the channel's rescaled noise from the server stream), the bits it is charged,
Z-SGD (``payload=full``) and the fixed scale with clipping (``norm_bound``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.lowrank.laser import LASER
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags


def _gs(a):
    a = a.copy()
    for j in range(a.shape[1]):
        a[:, j] /= np.linalg.norm(a[:, j]) + 1e-8
        for k in range(j + 1, a.shape[1]):
            a[:, k] -= (a[:, j] @ a[:, k]) * a[:, j]
    return a


def _clip(v, G):
    return v if G == 0 else v * min(1.0, G / np.linalg.norm(v))


def _reference(problem, comm, gamma, r, power, G, ef, payload, T):
    n, d, m1, m2 = problem.n, problem.d, 4, 3
    x, e = problem.x0.numpy().copy(), np.zeros((n, d))
    P = comm.rng(0, shared=True, tag=tags.LASER_P0).normal(m1, r)[0].numpy()
    Q = None
    xs, bits = [], []

    def channel(outs, t):
        k = outs.shape[1]
        mean = outs.mean(0)
        if power == 0:
            return mean, k
        c = G if G > 0 else max(np.linalg.norm(o) for o in outs)
        z = comm.server_rng(t, tag=tags.LASER_NOISE).normal(k)[0].numpy()
        return mean + z * c / (n * math.sqrt(power)), k + (0 if G > 0 else 1)

    for t in range(T):
        g = problem.grad(torch.from_numpy(x)).numpy()
        if payload == "full":
            upd, k = channel(np.stack([_clip(gi, G) for gi in g]), t)
            x = x - gamma * upd
            xs.append(x.copy())
            bits.append(32 * k)
            continue
        M = g + (e if ef else 0.0)
        mats = np.zeros((n, m1 * m2))
        mats[:, :d] = M
        mats = mats.reshape(n, m1, m2)
        if t % 2 == 0:
            P = _gs(P)
            outs = np.stack([_clip(mats[i].T @ P, G) for i in range(n)])  # (n, m2, r)
            local = [P @ o.T for o in outs]
            out, k = channel(outs.reshape(n, -1), t)
            Q = out.reshape(m2, r)
        else:
            Q = _gs(Q)
            outs = np.stack([_clip(mats[i] @ Q, G) for i in range(n)])  # (n, m1, r)
            local = [o @ Q.T for o in outs]
            out, k = channel(outs.reshape(n, -1), t)
            P = out.reshape(m1, r)
        e = np.stack([M[i] - local[i].reshape(-1)[:d] for i in range(n)]) if ef else e * 0
        x = x - gamma * (P @ Q.T).reshape(-1)[:d]
        xs.append(x.copy())
        bits.append(32 * k)
    return xs, bits


CASES = [  # rank, power, norm_bound, ef, payload
    (1, 1000.0, 0.0, "ef14", "factors"),
    (2, 10.0, 0.0, "none", "factors"),
    (2, 0.0, 0.0, "ef14", "factors"),
    (1, 50.0, 0.5, "ef14", "factors"),
    (1, 50.0, 0.0, "ef14", "full"),
    (1, 50.0, 0.7, "ef14", "full"),
]


@pytest.mark.parametrize("rank,power,G,ef,payload", CASES)
def test_matches_a_hand_written_loop(rank, power, G, ef, payload):
    problem = make_problem("quadratic", nodes=3, dim=10, seed=2, lam=0.2)
    algo, _ = LASER.configure(problem, parse_spec("identity"), step=0.2, rank=rank, power=power,
                              norm_bound=G, ef=ef, payload=payload)  # fmt: skip
    comm = SimulatedComm(3, seed=4)
    ref_comm = SimulatedComm(3, seed=4)
    xs, bits = _reference(problem, ref_comm, 0.2, rank, power, G, ef == "ef14", payload, 6)
    state = algo.init(problem.x0, problem, comm)
    for t in range(6):
        state, info = algo.step(state, problem, comm)
        assert np.allclose(state.x.numpy(), xs[t], rtol=0, atol=1e-12), t
        assert info.bits_up == bits[t] and info.bits_down == bits[t], t
        assert (info.extras["noise"] > 0) == (power > 0)


def test_noise_is_the_same_for_every_node_split_and_changes_with_the_seed():
    problem = make_problem("quadratic", nodes=4, dim=10, seed=0, lam=0.2)
    algo, _ = LASER.configure(problem, parse_spec("identity"), step=0.2, power=5.0)
    runs = []
    for seed in (0, 0, 1):
        comm = SimulatedComm(4, seed=seed)
        state = algo.init(problem.x0, problem, comm)
        for _ in range(4):
            state, _ = algo.step(state, problem, comm)
        runs.append(state.x)
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_refuses_bad_options():
    problem = make_problem("quadratic", nodes=2, dim=6, seed=0)
    for key, value in (("power", -1.0), ("noise_std", math.inf), ("norm_bound", -0.5)):
        with pytest.raises(ValueError, match="must be a finite number >= 0"):
            LASER.configure(problem, parse_spec("identity"), **{key: value})
    with pytest.raises(ValueError, match="--payload must be one of factors, full"):
        LASER.configure(problem, parse_spec("identity"), payload="sign")
