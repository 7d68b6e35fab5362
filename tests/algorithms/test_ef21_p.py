"""EF21-P + DIANA and EF21-P + DCGD: the update against a plain loop written from the docstring,
the bits of each message, and the derived step's inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.bidirectional.ef21_p import EF21PDCGD, EF21PDIANA, ef21_p_diana_step
from comm import SimulatedComm
from compressors import parse_spec
from compressors.top_k import TopK
from problems.registry import make_problem

N, D, T = 4, 9, 25


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


def grads(problem, w: np.ndarray) -> np.ndarray:
    return problem.grad(torch.from_numpy(w)).numpy()


def reference(problem, gamma, k_up, k_down, alpha, diana: bool, steps: int):
    """The docstring's update, with deterministic Top-K both ways."""
    x = problem.x0.numpy().copy()
    w = x.copy()
    h_i = grads(problem, x) if diana else np.zeros((N, D))  # init "full"
    h = h_i.mean(0)
    for _ in range(steps):
        gi = grads(problem, w)
        if diana:
            d_i = topk(gi - h_i, k_up)
            g = h + d_i.mean(0)
            h_i, h = h_i + alpha * d_i, h + alpha * d_i.mean(0)
        else:
            g = topk(gi, k_up).mean(0)
        x = x - gamma * g
        w = w + topk(x - w, k_down)[0]
    return x, w


@pytest.mark.parametrize("cls", [EF21PDIANA, EF21PDCGD])
def test_matches_the_hand_written_loop_and_charges_each_message(quad, cls):
    up, down = TopK(k=3), TopK(k=2)
    kw = {"alpha": 0.3} if cls is EF21PDIANA else {}
    algo = cls(compressor=up, gamma=0.05, down_compressor=down, **kw)
    comm = SimulatedComm(N, seed=0)
    state = algo.init(quad.x0, quad, comm)
    init_up = comm.ledger.up.clone()
    assert init_up.tolist() == ([32 * D] * N if cls is EF21PDIANA else [0] * N)
    for _ in range(T):
        state, info = algo.step(state, quad, comm)
        assert info.bits_up == up.bits(D) and info.bits_down == down.bits(D)
    x, w = reference(quad, 0.05, 3, 2, 0.3, cls is EF21PDIANA, T)
    np.testing.assert_allclose(state.x.numpy(), x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.w.numpy(), w, rtol=0, atol=1e-12)
    assert comm.ledger.down.tolist() == [T * down.bits(D)] * N
    assert (comm.ledger.up - init_up).tolist() == [T * up.bits(D)] * N


def test_primal_error_is_reported_and_w_never_equals_x_by_luck(quad):
    algo = EF21PDIANA(compressor=TopK(k=3), gamma=0.05, down_compressor=TopK(k=1))
    comm = SimulatedComm(N, seed=0)
    state = algo.init(quad.x0, quad, comm)
    state, info = algo.step(state, quad, comm)
    assert info.extras["E"] == pytest.approx(float(((state.x - state.w) ** 2).sum()), rel=1e-12)
    assert info.extras["E"] > 0


def test_the_derived_step_and_its_inputs(quad):
    algo, rec = EF21PDIANA.configure(quad, parse_spec("randk:k=3"),
                                     down_compressor=parse_spec("topk:k=3"))  # fmt: skip
    c = quad.consts
    omega, delta = D / 3 - 1, 3 / D
    want = delta / (8 * (c.L + 6 * omega * c.L_max / N))
    assert algo.gamma == pytest.approx(want, rel=1e-12)
    assert ef21_p_diana_step(c.L, c.L_max, omega, N, delta) == pytest.approx(want, rel=1e-12)
    assert algo.alpha == pytest.approx(1 / (omega + 1)) and rec["provenance"]["kind"] == "derived"
    assert algo.down_compressor.spec() == "topk:k=3"
    # default downlink: Top-1, the authors' Top-K experiments
    algo, _ = EF21PDCGD.configure(quad, parse_spec("randk:k=3"))
    assert algo.down_compressor.spec() == "topk:k=1"
    assert algo.gamma == pytest.approx((1 / D) / (8 * (c.L + 6 * omega * c.L_max / N)))


def test_refuses_an_unbiased_downlink_and_has_no_nonconvex_step(quad):
    with pytest.raises(ValueError, match="contractive"):
        EF21PDIANA.configure(quad, parse_spec("randk:k=3"), down_compressor=parse_spec("randk:k=2"))
    nonconvex = make_problem("logreg-nonconvex", nodes=N, lam=0.1, seed=0)
    with pytest.raises(ValueError, match="strongly convex"):
        EF21PDIANA.configure(nonconvex, parse_spec("randk:k=3"))
    algo, rec = EF21PDCGD.configure(nonconvex, parse_spec("randk:k=3"), step=0.1)
    assert rec["step_origin"] == "given" and algo.gamma == 0.1


def test_converges_linearly_at_the_derived_step_with_top_k_down(quad):
    # x and w go to the exact x* (DIANA's shifts learn grad f_i(x*)), so E -> 0 as well
    algo, _ = EF21PDIANA.configure(quad, parse_spec("randk:k=3"),
                                   down_compressor=parse_spec("topk:k=3"))  # fmt: skip
    comm = SimulatedComm(N, seed=1)
    state = algo.init(quad.x0, quad, comm)
    d0 = float(((quad.x0 - quad.x_star) ** 2).sum())
    for _ in range(3000):
        state, _ = algo.step(state, quad, comm)
    d = float(((state.x - quad.x_star) ** 2).sum())
    assert math.isfinite(d) and d <= 1e-4 * d0  # measured ~1e-6: a slow (conservative) step
    assert float(((state.w - quad.x_star) ** 2).sum()) <= 1e-4 * d0
