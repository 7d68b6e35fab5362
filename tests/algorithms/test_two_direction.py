"""2Direction: the update against a plain loop written from the docstring (with ``Gamma_t``
itself, not its inverse), the bits of each message, the reconstructed step and the scalar
recursion's long-run behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.bidirectional.two_direction import (
    TwoDirection,
    coefficients,
    two_direction_lbar,
    two_direction_p,
    two_direction_tau,
)
from comm import SimulatedComm
from compressors import parse_spec
from compressors.identity import Identity
from compressors.top_k import TopK
from problems.registry import make_problem
from streams import tags

N, D, T = 4, 9, 30


@pytest.fixture(scope="module")
def quad():
    return make_problem("quadratic", nodes=N, lam=0.2, dim=D, seed=3)


def topk(v: np.ndarray, k: int) -> np.ndarray:
    """Keep the k largest magnitudes of each row (ties to the lower index)."""
    v = np.atleast_2d(v)
    out = np.zeros_like(v)
    for r in range(v.shape[0]):
        idx = sorted(range(v.shape[1]), key=lambda j: (-abs(v[r, j]), j))[:k]
        out[r, idx] = v[r, idx]
    return out


def grads(problem, x: np.ndarray) -> np.ndarray:
    return problem.grad(torch.from_numpy(x)).numpy()


def gradient_step(prev, direction, y, Lbar, mu, G, G1):
    """``((Lbar + G mu) prev + mu gam y - gam direction)/(Lbar + G1 mu)``, ``gam = G1 - G``."""
    gam = G1 - G
    return ((Lbar + G * mu) * prev + mu * gam * y - gam * direction) / (Lbar + G1 * mu)


def reference(problem, Lbar, mu, p, tau, beta, k_up, k_down, feedback, coins, steps):
    """The docstring's rounds 1-5 with Top-K both ways, ``Gamma_0 = 1`` and init ``full``."""
    alpha = k_down / D
    cap = 0.25 * min(1.0, alpha / p, tau / p, beta / p)
    x = problem.x0.numpy().copy()
    u, w, z = x.copy(), x.copy(), x.copy()
    h_i = grads(problem, x)
    h = h_i.mean(0)
    k, v = h.copy(), h.copy()
    G = 1.0
    for t in range(steps):
        # theta: the positive root of p Lbar G th^2 + p (Lbar + G mu) th - (Lbar + G mu) = 0
        a, b, c = p * Lbar * G, p * (Lbar + G * mu), -(Lbar + G * mu)
        th = min((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a), cap)
        gam = p * th * G / (1 - p * th)
        G1 = G + gam
        y = th * w + (1 - th) * z
        m_i = topk(grads(problem, y) - h_i, k_up)
        g = h + m_i.mean(0)
        u = gradient_step(u, g, y, Lbar, mu, G, G1)
        if feedback == "bespoke":
            base = gradient_step(w, k, y, Lbar, mu, G, G1)
        elif feedback == "ef21-p":
            base = w
        else:
            base = np.zeros(D)
        w = base + topk(u - base, k_down)[0]
        x = th * u + (1 - th) * z
        if coins[t]:
            k, z = v, x
        m_i = topk(grads(problem, z) - h_i, k_up)
        v = (1 - tau) * v + tau * (h + m_i.mean(0))
        h_i, h = h_i + beta * m_i, h + beta * m_i.mean(0)
        G = G1
    return x, u, w, z, k


@pytest.mark.parametrize("feedback", ["bespoke", "ef21-p", "none"])
def test_matches_the_hand_written_loop_and_charges_each_message(quad, feedback):
    up, down = TopK(k=3), TopK(k=2)
    mu, p, tau, beta, gamma = quad.consts.mu, 0.5, 0.3, 0.4, 0.2
    algo = TwoDirection(compressor=up, gamma=gamma, down_compressor=down, mu=mu, p=p, tau=tau,
                        beta=beta, feedback=feedback)  # fmt: skip
    comm = SimulatedComm(N, seed=0)
    state = algo.init(quad.x0, quad, comm)
    assert comm.ledger.up.tolist() == [32 * D] * N  # h_i^0, uncompressed
    assert comm.ledger.down.tolist() == [32 * D] * N  # k^0 = h^0, uncompressed
    coins = [SimulatedComm(N, seed=0).coin(t, p, tag=tags.TWO_DIRECTION_COIN) for t in range(T)]
    assert 0 < sum(coins) < T  # both branches are exercised
    for t in range(T):
        state, info = algo.step(state, quad, comm)
        assert info.extras["refresh"] == float(coins[t])
        assert info.bits_up == 2 * up.bits(D)
        assert info.bits_down == down.bits(D) + coins[t] * 2 * 32 * D
    x, u, w, z, k = reference(quad, 1 / gamma, mu, p, tau, beta, 3, 2, feedback, coins, T)
    for got, want in ((state.x, x), (state.u, u), (state.w, w), (state.z, z), (state.k, k)):
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    assert comm.ledger.up.tolist() == [32 * D + T * 2 * up.bits(D)] * N
    assert comm.ledger.down.tolist() == [32 * D + T * down.bits(D) + sum(coins) * 64 * D] * N
    assert info.extras["E"] == pytest.approx(float(((state.u - state.w) ** 2).sum()), rel=1e-12)


def test_zero_init_sends_nothing(quad):
    algo = TwoDirection(compressor=TopK(k=3), gamma=0.2, down_compressor=TopK(k=2),
                        init_mode="zero")  # fmt: skip
    comm = SimulatedComm(N, seed=0)
    state = algo.init(quad.x0, quad, comm)
    assert comm.ledger.up.tolist() == [0] * N and comm.ledger.down.tolist() == [0] * N
    assert float(state.h.abs().sum()) == 0 and float(state.k.abs().sum()) == 0


def test_the_reconstructed_step_and_the_authors_parameters(quad):
    algo, rec = TwoDirection.configure(quad, parse_spec("randk:k=1"),
                                       down_compressor=parse_spec("topk:k=1"))  # fmt: skip
    c = quad.consts
    omega, alpha = D - 1.0, 1.0 / D
    p = min(1.0, max(1 / (omega + 1), 1 / ((omega + 1) * math.sqrt(alpha * omega))))
    assert two_direction_p(omega, alpha) == pytest.approx(p, rel=1e-15) and p < 1
    tau = min(1.0, omega ** (-1 / 3) * (omega + 1) ** (-2 / 3))
    assert two_direction_tau(omega) == pytest.approx(tau, rel=1e-15)
    Lbar = p * (c.L * (omega + 1) / alpha + c.L_max * omega**2 / N)
    assert two_direction_lbar(c.L, c.L_max, omega, N, alpha, p) == pytest.approx(Lbar)
    assert algo.gamma == pytest.approx(1 / Lbar, rel=1e-12)
    assert (algo.p, algo.tau, algo.beta, algo.mu) == pytest.approx((p, tau, 1 / (omega + 1), c.mu))
    assert rec["provenance"]["kind"] == "reconstruction"
    # exact messages: p = tau = beta = 1 and Lbar = L, Nesterov's step
    algo, _ = TwoDirection.configure(quad, Identity(), down_compressor=Identity())
    assert (algo.p, algo.tau, algo.beta) == (1.0, 1.0, 1.0)
    assert algo.gamma == pytest.approx(1 / c.L, rel=1e-12)
    # the default downlink is Top-1; an unbiased one is refused; no theory without convexity
    algo, _ = TwoDirection.configure(quad, parse_spec("randk:k=3"))
    assert algo.down_compressor.spec() == "topk:k=1"
    with pytest.raises(ValueError, match="contractive"):
        TwoDirection.configure(quad, parse_spec("randk:k=3"),
                               down_compressor=parse_spec("randk:k=2"))  # fmt: skip
    nonconvex = make_problem("logreg-nonconvex", nodes=N, lam=0.1, seed=0)
    algo, rec = TwoDirection.configure(nonconvex, parse_spec("randk:k=3"), step=0.1)
    assert rec["step_origin"] == "given" and algo.gamma == 0.1 and rec["theory"] is None


def test_exact_messages_give_nesterov_and_converge_at_an_accelerated_rate():
    # identity both ways: w = u every round, p = 1 (z = x every round): Nesterov's method with
    # Lbar = L; kappa = 1e3, rounds to 1e-8 well under the ~kappa log(1e8) of gradient descent
    prob = make_problem("quadratic", nodes=N, lam=1e-3, dim=D, seed=1)
    algo, _ = TwoDirection.configure(prob, Identity(), down_compressor=Identity())
    comm = SimulatedComm(N, seed=0)
    state = algo.init(prob.x0, prob, comm)
    d0 = float(((prob.x0 - prob.x_star) ** 2).sum())
    kappa = prob.consts.L / prob.consts.mu
    t = 0
    while float(((state.x - prob.x_star) ** 2).sum()) > 1e-8 * d0 and t < 20_000:
        state, info = algo.step(state, prob, comm)
        t += 1
        assert torch.allclose(state.w, state.u, rtol=0, atol=1e-12)  # q + (u - q)
        assert info.extras["refresh"] == 1.0
    # measured 330; gradient descent needs ~kappa log(1e8) / 2 ~ 9200
    assert t < math.sqrt(kappa) * math.log(1e8), (t, kappa)


def test_the_scalar_recursion_neither_overflows_nor_loses_its_limit():
    # Gamma_t grows like (1 - p theta)^-t and would overflow after ~700/(p theta) rounds; the
    # recursion on s = 1/Gamma keeps theta -> its strongly convex limit for ever
    Lbar, mu, p, cap = 10.0, 1e-2, 0.5, 0.25
    s = 1.0
    for _ in range(100_000):
        theta, s, A, B, Cg = coefficients(s, Lbar, mu, p, cap)
    limit = (-p * mu + math.sqrt((p * mu) ** 2 + 4 * p * Lbar * mu)) / (2 * p * Lbar)
    assert theta == pytest.approx(limit, rel=1e-12)
    assert s < 1e-300 and A + B == pytest.approx(1.0) and Cg == pytest.approx(p * theta / mu)
    # general convex (mu = 0): theta ~ 2/(p t)-like decay, Gamma polynomial, all finite
    s = 1.0
    for _ in range(10_000):
        theta, s, A, B, Cg = coefficients(s, Lbar, 0.0, p, cap)
    assert 0 < theta < 1e-2 and s > 0 and B == 0.0 and math.isfinite(Cg)
