"""MASHA1: the round against a NumPy reference written from its docstring, the bits each round
charges, extragradient at p = 1, the theory step, linear convergence on the quadratic game and
the refusal of minimisation methods on it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.api import run
from algorithms.vi.masha1 import MASHA1, masha1_rate, masha1_step
from comm import SimulatedComm
from compressors import parse_spec
from problems import make_problem
from streams import tags

FLOAT = 32


@pytest.fixture(scope="module")
def game():
    return make_problem("quadratic-game", nodes=3, seed=2, dim=3, zeta2=5.0, similarity=0.4)


def reference(game, C, gamma: float, p: float, T: int, seed: int) -> list[np.ndarray]:
    """The round of the docstring in NumPy: ``zbar = (1-p) z + p w``, ``z_h = zbar - gamma F(w)``,
    ``g = F(w) + mean_i C_i(F_i(z_h) - F_i(w))``, ``z = zbar - gamma g``, ``w = z`` on the
    shared coin. The coins and the compressor's draws come from a comm with the same seed."""
    M = game.jacobians().numpy()
    m = game.grad(torch.zeros(game.d, dtype=torch.float64)).numpy()

    def F_i(z):
        return M @ z + m

    draws = SimulatedComm(game.n, seed=seed)
    z = game.x0.numpy().copy()
    w = z.copy()
    Fw_i = F_i(w)
    out = []
    for t in range(T):
        zbar = (1 - p) * z + p * w
        z_h = zbar - gamma * Fw_i.mean(0)
        diff = torch.from_numpy(F_i(z_h) - Fw_i)
        c = C.decode(C.encode(diff, draws.rng_for(C, t))).numpy()
        z = zbar - gamma * (Fw_i.mean(0) + c.mean(0))
        if draws.coin(t, p, tag=tags.MASHA_COIN):
            w = z.copy()
            Fw_i = F_i(w)
        out.append(z.copy())
    return out


@pytest.mark.parametrize("spec", ["randk:k=2", "identity"])
def test_round_matches_the_reference(game, spec):
    C = parse_spec(spec).bind(game.n)
    algo = MASHA1(compressor=C, gamma=0.3, p=0.4)
    comm = SimulatedComm(game.n, seed=7)
    state = algo.init(game.x0, game, comm)
    ref = reference(game, C, 0.3, 0.4, 25, seed=7)
    syncs = 0
    for t in range(25):
        state, info = algo.step(state, game, comm)
        syncs += info.extras["sync"]
        np.testing.assert_allclose(state.x.numpy(), ref[t], rtol=0, atol=1e-12)
    assert 0 < syncs < 25  # both branches ran


def test_identity_at_p1_is_extragradient(game):
    algo = MASHA1(compressor=parse_spec("identity"), gamma=0.25, p=1.0)
    comm = SimulatedComm(game.n, seed=0)
    state = algo.init(game.x0, game, comm)
    z = game.x0.clone()
    for _ in range(20):
        state, _ = algo.step(state, game, comm)
        z_h = z - 0.25 * game.full_grad(z)
        z = z - 0.25 * game.full_grad(z_h)
        torch.testing.assert_close(state.x, z, rtol=0, atol=1e-12)
        assert torch.equal(state.w, state.x)  # the coin always lands: w = z


def test_bits_are_the_messages(game):
    d = game.d
    C = parse_spec("randk:k=2").bind(game.n)
    algo = MASHA1(compressor=C, gamma=0.1, p=0.5)
    comm = SimulatedComm(game.n, seed=1)
    state = algo.init(game.x0, game, comm)
    assert comm.ledger.up.tolist() == [FLOAT * d] * game.n  # F_i(w^0), uncompressed
    seen = set()
    for _ in range(12):
        state, info = algo.step(state, game, comm)
        sync = info.extras["sync"]
        seen.add(sync)
        assert info.bits_up == C.bits(d) + sync * FLOAT * d
        assert info.bits_down == FLOAT * d * (1 + sync)
    assert seen == {0.0, 1.0}


def test_theory_step_and_default_p(game):
    C = parse_spec("randk:k=2")
    algo, rec = MASHA1.configure(game, C)
    c, omega, n = game.consts, 6 / 2 - 1, game.n
    L_Q = math.sqrt(c.L**2 + omega / n * c.L_tilde**2)
    assert algo.p == pytest.approx(1 / (omega + 1))
    assert algo.gamma == pytest.approx(math.sqrt(algo.p / 2) / L_Q, rel=1e-12)
    assert rec["provenance"]["kind"] == "derived"
    perm, _ = MASHA1.configure(game, parse_spec("permk"))  # A = B = 1: L^2 + L_pm^2
    L_Q = math.sqrt(c.L**2 + c.L_pm**2)
    assert perm.gamma == pytest.approx(math.sqrt(perm.p / 2) / L_Q, rel=1e-12)
    with pytest.raises(ValueError, match="need 0 < p <= 1"):
        masha1_step(0.0, 1.0)
    assert masha1_rate(0.2, 0.5, 0.1) == pytest.approx(0.025)


def test_linear_convergence_at_the_theory_step(game):
    """The derived bound ``E Phi_k <= (1 - rho)^k Phi_0`` on one seed (its margin is wide)."""
    algo, _ = MASHA1.configure(game, parse_spec("randk:k=2"))
    p, zs = algo.p, game.x_star
    rho = masha1_rate(p, algo.gamma, game.consts.mu)
    comm = SimulatedComm(game.n, seed=3)
    state = algo.init(game.x0, game, comm)
    phi0 = (2 - p) * float(((game.x0 - zs) ** 2).sum())
    for _ in range(300):
        state, _ = algo.step(state, game, comm)
    phi = (1 - p) * float(((state.x - zs) ** 2).sum()) + float(((state.w - zs) ** 2).sum())
    assert phi <= (1 - rho) ** 300 * phi0
    assert phi <= 1e-8 * phi0


def test_runner_logs_the_distance_and_refuses_minimisers(game):
    res = run("masha1", "randk:k=2", game, iters=200)
    hist = res.history
    assert hist["f_gap"].iloc[-1] < 1e-6 * hist["f_gap"].iloc[0]
    last = res.summary
    assert last["reason"] == "completed"
    with pytest.raises(ValueError, match="variational inequality"):
        run("ef21", "topk:k=2", game, iters=2)
    with pytest.raises(ValueError, match="variational inequality"):
        run("diana", "randk:k=2", game, iters=2)


def test_runs_on_a_minimisation_problem():
    """A gradient field is a monotone operator: MASHA1 also solves ``min f``."""
    q = make_problem("quadratic", nodes=3, dim=6, lam=0.1, seed=0)
    res = run("masha1", "randk:k=2", q, iters=400)
    assert res.history["f_gap"].iloc[-1] < 1e-6 * res.history["f_gap"].iloc[0]
