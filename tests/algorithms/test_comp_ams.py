"""COMP-AMS: convergence on a nonconvex problem at a stated learning rate, the minibatch noise
floor, and the [U] theory step's justification (a descent method in the worst case)."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms import stepsizes
from algorithms.momentum.comp_ams import CompAMS
from comm import SimulatedComm
from compressors import parse_spec


def tail_ratio(algo, problem, T=2000, start=1500, seed=0) -> float:
    """Mean of ||grad f(x^t)||^2 / ||grad f(x^0)||^2 over t >= start (AMSGrad oscillates)."""
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    g0 = float((problem.full_grad(problem.x0) ** 2).sum())
    out = []
    for t in range(T):
        state, _ = algo.step(state, problem, comm)
        if t >= start:
            out.append(float((problem.full_grad(state.x) ** 2).sum()) / g0)
    return float(np.mean(out))


def test_comp_ams_nonconvex_gradient_drops_a_hundredfold(nonconvex):
    """Top-2 of d = 10 with error feedback, eta = 0.02, beta1 = 0.9, beta2 = 0.999."""
    algo, _ = CompAMS.configure(nonconvex, parse_spec("topk:k=2"), step=0.02)
    assert tail_ratio(algo, nonconvex) <= 1e-2


def test_comp_ams_minibatch_floor_shrinks_with_eta(nonconvex):
    floors = []
    for eta in (0.02, 0.01):
        algo, _ = CompAMS.configure(nonconvex, parse_spec("topk:k=2"), step=eta, batch_size=8)
        floors.append(tail_ratio(algo, nonconvex))
    full, _ = CompAMS.configure(nonconvex, parse_spec("topk:k=2"), step=0.02)
    assert floors[0] > tail_ratio(full, nonconvex)  # minibatch noise adds a floor
    assert floors[1] < floors[0] / 1.5


def test_theory_step_is_a_descent_step_without_momentum_or_compression(nonconvex):
    """[U] eta = sqrt(eps)/(L (1 + beta1/(1-beta1) + 2q/(1-q^2))): with beta1 = 0 and q = 0 the
    per-coordinate step eta/sqrt(v_hat + eps) is at most 1/L, so f never increases."""
    algo, rec = CompAMS.configure(nonconvex, parse_spec("identity"), beta1=0.0)
    L = nonconvex.consts.L
    assert algo.gamma == pytest.approx(np.sqrt(1e-8) / L)
    assert "[U]" in rec["theory"]["source"]
    comm = SimulatedComm(nonconvex.n, seed=0)
    state = algo.init(nonconvex.x0, nonconvex, comm)
    f = [float(nonconvex.loss(state.x))]
    for _ in range(200):
        state, _ = algo.step(state, nonconvex, comm)
        f.append(float(nonconvex.loss(state.x)))
    assert np.all(np.diff(f) <= 1e-15) and f[-1] < f[0]
    # Compression (q > 0) and momentum only shrink the step.
    topk = parse_spec("topk:k=2")
    assert stepsizes.comp_ams(L, 1e-8, 0.9, topk.delta(10)) < algo.gamma / 10
