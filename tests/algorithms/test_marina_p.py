"""MARINA-P and M3: the update against a plain loop written from the docstring (the coins read
off the reports), per-worker downlink bits, PermK's invariant ``mean_i w_i = x`` and MARINA-P
with PermK on identical quadratic nodes being gradient descent."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algorithms.bidirectional.marina_p import M3, MARINAP, m3_beta, marina_p_step
from comm import SimulatedComm
from compressors import parse_spec
from compressors.top_k import TopK
from problems.instances import heterogeneous_ridge
from problems.registry import make_problem

N, D, T = 4, 8, 30


@pytest.fixture(scope="module")
def quad():
    return make_problem("quadratic", nodes=N, lam=0.2, dim=D, seed=5)


def topk(v: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros_like(v)
    for r in range(v.shape[0]):
        idx = sorted(range(v.shape[1]), key=lambda j: (-abs(v[r, j]), j))[:k]
        out[r, idx] = v[r, idx]
    return out


def grads(problem, X: np.ndarray) -> np.ndarray:
    return problem.grad(torch.from_numpy(X)).numpy()


def test_marina_p_matches_the_loop_and_charges_each_worker(quad):
    C = TopK(k=3)  # deterministic, so the loop needs only the coins
    algo = MARINAP(compressor=C, gamma=0.1, p=0.3)
    comm = SimulatedComm(N, seed=2)
    state = algo.init(quad.x0, quad, comm)
    assert comm.ledger.up.sum() == 0 and comm.ledger.down.sum() == 0
    x = quad.x0.numpy().copy()
    w = np.tile(x, (N, 1))
    syncs = 0
    for _ in range(T):
        state, info = algo.step(state, quad, comm)
        x_new = x - 0.1 * grads(quad, w).mean(0)
        if info.extras["sync"]:
            syncs += 1
            w = np.tile(x_new, (N, 1))
            assert info.bits_down == 32 * D
        else:
            w = w + topk(np.tile(x_new - x, (N, 1)), 3)
            assert info.bits_down == C.bits(D)
        assert info.bits_up == 32 * D
        x = x_new
    assert 0 < syncs < T
    np.testing.assert_allclose(state.x.numpy(), x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.w_i.numpy(), w, rtol=0, atol=1e-12)


def test_permk_gives_each_worker_its_own_block_and_keeps_the_mean(quad):
    algo, rec = MARINAP.configure(quad, parse_spec("permk"))
    assert algo.compressor.n == N and rec["params"]["p"] == pytest.approx(2 / D)
    comm = SimulatedComm(N, seed=0)
    state = algo.init(quad.x0, quad, comm)
    for _ in range(T):
        before = state
        state, info = algo.step(state, quad, comm)
        if not info.extras["sync"]:
            diff = (state.w_i - before.w_i) != 0
            assert int(diff.sum(0).max()) <= 1  # disjoint supports: one worker per coordinate
            assert info.bits_down == 32 * D / N  # each worker its d/n values, no indices
        assert torch.allclose(state.w_i.mean(0), state.x, rtol=0, atol=1e-13)


def test_marina_p_with_permk_is_gradient_descent_on_identical_quadratics():
    p = heterogeneous_ridge(identical=True)  # ten nodes, one quadratic: L_A = 0
    gamma = 1.0 / p.consts.L
    algo = MARINAP(compressor=parse_spec("permk").bind(p.n), gamma=gamma)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)
    x = p.x0.clone()
    for _ in range(60):
        state, _ = algo.step(state, p, comm)
        x = x - gamma * p.full_grad(x)
        assert float(((state.x - x) ** 2).sum()) <= 1e-24
    # independent draws (Rand-K with the same omega) are not gradient descent
    algo = MARINAP(compressor=parse_spec(f"randk:k={p.d // p.n}"), gamma=gamma)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)
    for _ in range(5):
        state, _ = algo.step(state, p, comm)
    x = p.x0.clone()
    for _ in range(5):
        x = x - gamma * p.full_grad(x)
    assert float(((state.x - x) ** 2).sum()) > 1e-8


def test_the_derived_step(quad):
    algo, rec = MARINAP.configure(quad, parse_spec("randk:k=2"))
    c, omega, pr = quad.consts, D / 2 - 1, 2 / D
    want = 1 / (c.L + c.L_max * np.sqrt(omega * (1 - pr) / pr))
    assert algo.gamma == pytest.approx(want, rel=1e-12)
    assert marina_p_step(c.L, c.L_max, omega, pr) == pytest.approx(want, rel=1e-12)
    assert rec["provenance"]["kind"] == "derived"


def test_m3_matches_the_loop(quad):
    Q, CD, beta = TopK(k=3), TopK(k=2), 0.5
    algo = M3(compressor=Q, gamma=0.05, down_compressor=CD, p=0.4, p_down=0.3, beta=beta)
    comm = SimulatedComm(N, seed=4)
    state = algo.init(quad.x0, quad, comm)
    assert comm.ledger.up.tolist() == [32 * D] * N
    x = quad.x0.numpy().copy()
    w = np.tile(x, (N, 1))
    z = w.copy()
    gz = grads(quad, z)
    g = gz.mean(0)
    seen = set()
    for _ in range(T):
        state, info = algo.step(state, quad, comm)
        e = info.extras
        seen.add((e["sync_down"], e["sync_up"]))
        x_new = x - 0.05 * g
        w = np.tile(x_new, (N, 1)) if e["sync_down"] else w + topk(np.tile(x_new - x, (N, 1)), 2)
        z = beta * w + (1 - beta) * z
        gz_new = grads(quad, z)
        g = gz_new.mean(0) if e["sync_up"] else g + topk(gz_new - gz, 3).mean(0)
        assert info.bits_up == (32 * D if e["sync_up"] else Q.bits(D))
        assert info.bits_down == (32 * D if e["sync_down"] else CD.bits(D))
        x, gz = x_new, gz_new
    assert len(seen) == 4  # every combination of the two coins happened
    np.testing.assert_allclose(state.x.numpy(), x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.z_i.numpy(), z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.g.numpy(), g, rtol=0, atol=1e-12)


def test_m3_binds_its_downlink_to_the_workers_and_needs_a_step(quad):
    with pytest.raises(ValueError, match="give --step"):
        M3.configure(quad, parse_spec("randk:k=2"), down_compressor=parse_spec("permk"))
    algo, rec = M3.configure(quad, parse_spec("randk:k=2"), step=0.1,
                             down_compressor=parse_spec("permk"))  # fmt: skip
    assert algo.down_compressor.n == N and rec["provenance"]["kind"] == "none"
    with pytest.raises(ValueError, match="unbiased"):
        M3.configure(quad, parse_spec("randk:k=2"), step=0.1, down_compressor=TopK(k=2))
    omega, omega_p = D / 2 - 1, N - 1
    assert m3_beta(omega, omega_p, N) == pytest.approx(
        min(1.0, (N / (omega * (omega + 1) * omega_p)) ** (1 / 3))
    )
    assert m3_beta(0.0, omega_p, N) == 1.0
