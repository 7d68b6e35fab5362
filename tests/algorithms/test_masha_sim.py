"""MASHASim: the round against a NumPy reference written from its docstring, the server's local
solve against a linear solve, the bits each round charges, the theory step and its refusal
without a similarity constant."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.api import run
from algorithms.vi.masha_sim import MASHASim, inner_steps, masha_sim_step
from comm import SimulatedComm
from compressors import parse_spec
from problems import make_problem
from streams import tags

FLOAT = 32


@pytest.fixture(scope="module")
def game():
    return make_problem("quadratic-game", nodes=4, seed=2, dim=3, zeta2=5.0, similarity=0.05)


def reference(game, C, gamma, p, K, L1, T, seed) -> list[np.ndarray]:
    """The round of the docstring in NumPy. Node 0 is the server: ``zbar = (1-p) z + p w``;
    ``K`` extragradient steps at ``eta = 1/(2 (1 + gamma L1))`` from ``zbar`` on
    ``v - zbar + gamma (F_1(v) + F(w) - F_1(w))``; ``b_i = F_i(u) - F_i(w) - (F_1(u) -
    F_1(w))``; ``z = u - gamma mean_i C_i(b_i)``; ``w = z`` on the shared coin. The coins and
    the compressor's draws come from a comm with the same seed."""
    M = game.jacobians().numpy()
    m = game.grad(torch.zeros(game.d, dtype=torch.float64)).numpy()

    def F_i(z):
        return M @ z + m

    def F_1(z):
        return M[0] @ z + m[0]

    draws = SimulatedComm(game.n, seed=seed)
    eta = 1.0 / (2.0 * (1.0 + gamma * L1))
    z = game.x0.numpy().copy()
    w = z.copy()
    Fw_i = F_i(w)
    out = []
    for t in range(T):
        zbar = (1 - p) * z + p * w
        c = Fw_i.mean(0) - Fw_i[0]
        v = zbar.copy()
        for _ in range(K):
            vh = v - eta * (v - zbar + gamma * (F_1(v) + c))
            v = v - eta * (vh - zbar + gamma * (F_1(vh) + c))
        u = v
        a = F_i(u) - Fw_i
        b = torch.from_numpy(a - a[0])
        q = C.decode(C.encode(b, draws.rng_for(C, t))).numpy()
        z = u - gamma * q.mean(0)
        if draws.coin(t, p, tag=tags.MASHA_COIN):
            w = z.copy()
            Fw_i = F_i(w)
        out.append(z.copy())
    return out


@pytest.mark.parametrize("spec", ["randk:k=2", "permk", "identity"])
def test_round_matches_the_reference(game, spec):
    C = parse_spec(spec).bind(game.n)
    algo = MASHASim(compressor=C, gamma=0.7, p=0.4, inner_steps=6, server_lipschitz=2.0)
    comm = SimulatedComm(game.n, seed=7)
    state = algo.init(game.x0, game, comm)
    ref = reference(game, C, 0.7, 0.4, 6, 2.0, 20, seed=7)
    syncs = 0
    for t in range(20):
        state, info = algo.step(state, game, comm)
        syncs += info.extras["sync"]
        np.testing.assert_allclose(state.x.numpy(), ref[t], rtol=0, atol=1e-12)
    assert 0 < syncs < 20  # both branches ran


def test_local_solve_reaches_the_linear_solve(game):
    """At the default ``inner_steps`` the server's solve is the exact solution of
    ``u + gamma (F_1(u) + c) = zbar`` to the promised relative accuracy."""
    algo, rec = MASHASim.configure(game, parse_spec("randk:k=2"))
    M1 = game.jacobians()[0]
    m1 = game.grad(torch.zeros(game.d, dtype=torch.float64))[0]
    zbar = torch.linspace(-1.0, 2.0, game.d, dtype=torch.float64)
    c = torch.linspace(0.5, -0.5, game.d, dtype=torch.float64)
    g = algo.gamma
    u = torch.linalg.solve(torch.eye(game.d, dtype=torch.float64) + g * M1, zbar - g * (m1 + c))
    v = algo.solve_local(zbar, c, game)[0]
    assert float(((v - u) ** 2).sum()) <= 1e-2 * float(((zbar - u) ** 2).sum())
    assert rec["theory"]["inputs"]["inner_steps"] > 1


def test_bits_are_the_messages(game):
    d = game.d
    C = parse_spec("randk:k=2").bind(game.n)
    algo = MASHASim(compressor=C, gamma=0.5, p=0.5, inner_steps=3, server_lipschitz=2.0)
    comm = SimulatedComm(game.n, seed=1)
    state = algo.init(game.x0, game, comm)
    assert comm.ledger.up.tolist() == [FLOAT * d] * game.n  # F_i(w^0); F_1 costs nothing
    assert comm.ledger.down.tolist() == [0] * game.n
    seen = set()
    for _ in range(12):
        state, info = algo.step(state, game, comm)
        sync = info.extras["sync"]
        seen.add(sync)
        assert info.bits_up == C.bits(d) + sync * FLOAT * d
        assert info.bits_down == FLOAT * d * (2 + sync)  # u, F_1(u) - F_1(w), then w
    assert seen == {0.0, 1.0}


def test_theory_step(game):
    c, delta, n = game.consts, game.similarity, game.n
    algo, rec = MASHASim.configure(game, parse_spec("randk:k=2"))
    omega = 6 / 2 - 1
    delta_Q = math.sqrt(delta**2 + omega / n * 4 * delta**2)
    assert algo.p == pytest.approx(1 / (omega + 1))
    assert algo.gamma == pytest.approx(math.sqrt(algo.p / 2) / delta_Q, rel=1e-12)
    inputs = rec["theory"]["inputs"]
    assert inputs["server_lipschitz"] == c.L_max
    assert inputs["inner_steps"] == inner_steps(algo.gamma, c.L_max, min(0.0, c.mu - delta))
    assert rec["provenance"]["kind"] == "derived"
    perm, _ = MASHASim.configure(game, parse_spec("permk"))  # A = B = 1: delta^2 + L_pm^2
    assert perm.gamma == pytest.approx(
        math.sqrt(perm.p / 2) / math.sqrt(delta**2 + c.L_pm**2), rel=1e-12
    )
    with pytest.raises(ValueError, match="need 0 < p <= 1"):
        masha_sim_step(1.5, 1.0)
    with pytest.raises(ValueError, match="not strongly monotone"):
        inner_steps(10.0, 1.0, -0.2)


def test_converges_and_needs_a_similarity_constant(game):
    res = run("masha-sim", "randk:k=2", game, iters=60)
    assert res.history["f_gap"].iloc[-1] < 1e-10 * res.history["f_gap"].iloc[0]
    q = make_problem("quadratic", nodes=3, dim=6, lam=0.1, seed=0)
    with pytest.raises(ValueError, match="similarity"):
        MASHASim.theory(q, parse_spec("randk:k=2").bind(3), {})
