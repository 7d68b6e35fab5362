"""The variants :mod:`theory_checks.vr_checks` names (their power is run by test_tc_power.py),
checks that the verdict functions can fail (a wrong rate, a too small bound, no decrease with
the horizon, a diverged run) and that the tight instances are what their docstrings say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.shifts.diana import DIANA
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import vr_checks
from theory_checks.vr_problems import (
    MeanSE,
    disjoint_quadratic,
    one_thread,
    ridge,
    ridge_top_start,
    run,
    scaled_ridge,
    sq_dist,
)


def test_checks_name_the_variants_the_issue_asks_for():
    """Power itself (the correct method passes, each variant is rejected) is run for every fast
    check by tests/theory_checks/test_tc_power.py; here: the kinds each check must reject."""
    kinds = {c.name: {v.kind for v in c.variants} for c in vr_checks.CHECKS}
    assert kinds["ridge.constants"] == {"wrong-constant"}
    assert {"step-too-large", "wrong-shift", "step-too-small"} <= kinds[
        "diana.strongly-convex-lyapunov"
    ]
    assert kinds["marina.nonconvex-bound"] == {"no-variance-reduction", "step-too-small"}
    assert {"no-variance-reduction", "wrong-shift", "step-too-small"} <= kinds[
        "dasha.nonconvex-bound"
    ]
    assert kinds["comp-ams.sqrt-t-rate"] == {"no-amsgrad", "step-too-small"}
    assert all(c.fast for c in vr_checks.CHECKS)
    # the method checks state rates (a contraction factor, O(1/T), O(1/sqrt T)); the ridge's
    # constants are not one
    assert {c.name for c in vr_checks.CHECKS if c.rate} == set(kinds) - {"ridge.constants"}


def test_diana_step_too_small_is_judged_at_the_theory_step():
    """``step/10`` runs a tenth of the theory step while V and the rate keep the theory step;
    a step-too-large variant is judged at the step it runs (the rate claimed for it)."""
    p = ridge()
    theory = DIANA.configure(p, parse_spec("randk:k=2"))[0].gamma
    algo, _, _, claimed = vr_checks._diana_algo(p, "step/10")
    assert algo.gamma == pytest.approx(theory / 10) and claimed == theory
    algo, _, _, claimed = vr_checks._diana_algo(p, "step-x2")
    assert algo.gamma == pytest.approx(2 * theory) and claimed == algo.gamma


def _diana_lyapunov(T: int = 200, seeds: int = 2) -> tuple[np.ndarray, float]:
    p = ridge()
    algo, _ = DIANA.configure(p, parse_spec("randk:k=2"))
    M = 4.0 * 9.0 / (p.n * algo.alpha) * algo.gamma**2
    xs = p.x_star

    def V(state, info, prob):
        return sq_dist(state.x, xs) + M * float(
            ((state.h_i - state.grad_star_i) ** 2).sum(1).mean()
        )

    with one_thread():
        Vs = np.stack([run(algo, p, T, s, V)[1] for s in range(seeds)])
    rate = max(1.0 - algo.gamma * p.consts.mu, 1.0 - algo.alpha / 2.0)
    return Vs, rate


def test_diana_lyapunov_check_rejects_a_too_fast_rate():
    Vs, rate = _diana_lyapunov()
    assert vr_checks.diana_lyapunov_outcome(Vs, rate, "right rate").passed
    assert not vr_checks.diana_lyapunov_outcome(Vs, 0.8, "wrong rate 0.8").passed


def test_diana_lyapunov_check_rejects_no_decrease():
    V = np.ones((3, 50))
    assert not vr_checks.diana_lyapunov_outcome(V, 0.95, "flat").passed


def test_nonconvex_bound_check_can_fail():
    est = MeanSE(0.01, 0.001, 10)
    assert vr_checks.nonconvex_bound_outcome(est, 0.02, "s", "b").passed
    assert not vr_checks.nonconvex_bound_outcome(est, 0.011, "s", "b").passed  # within 3 s.e.
    assert not vr_checks.nonconvex_bound_outcome(est, 0.001, "s", "b").passed


def test_dasha_bound_grows_with_the_initial_error_and_shrinks_with_gamma():
    p = vr_checks.logreg_nonconvex()
    full = vr_checks.dasha_bound(p, 0.1, 4.0, 100, "full")
    zero = vr_checks.dasha_bound(p, 0.1, 4.0, 100, "zero")
    assert zero > full == pytest.approx(2 * float(p.loss(p.x0)) / (0.1 * 100))
    # a wrong (100x larger) step gives a bound the measured average cannot meet
    assert vr_checks.dasha_bound(p, 10.0, 4.0, 100, "full") < full / 50


def test_rate_ratio_check_rejects_no_decrease_with_the_horizon():
    a1, a2 = MeanSE(0.01, 1e-4, 5), MeanSE(0.004, 1e-4, 5)
    assert vr_checks.rate_ratio_outcome(a1, a2, 100, 400, 0.25, "s").passed
    assert not vr_checks.rate_ratio_outcome(a1, MeanSE(0.008, 1e-4, 5), 100, 400, 0.25, "s").passed


def test_one_step_outcome_can_fail():
    ok = vr_checks.one_step_outcome(1.0, np.full(50, 0.9), 0.95, "s")
    assert ok.passed and ok.margin == pytest.approx(1.0)
    short = vr_checks.one_step_outcome(1.0, np.full(50, 0.97), 0.95, "s")
    assert not short.passed and short.margin == pytest.approx(-0.4)


def test_bound_and_rate_outcomes_fail_on_divergence():
    inf = MeanSE(math.inf, math.nan, 3)
    assert not vr_checks.nonconvex_bound_outcome(inf, 1.0, "s", "b").passed
    assert not vr_checks.rate_ratio_outcome(inf, inf, 100, 400, 0.25, "s").passed
    assert not vr_checks.rate_ratio_outcome(MeanSE(1.0, 0.0, 3), inf, 100, 400, 0.25, "s").passed


def test_disjoint_quadratic_is_the_tight_instance():
    q = disjoint_quadratic()
    c = q.consts
    assert c.L == pytest.approx(0.1) and c.mu == pytest.approx(0.1)
    assert c.L_max == pytest.approx(1.0)
    x = q.x_star + torch.randn(q.d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    diff = q.grad(x) - q.grad(q.x_star)
    # ||grad f_i(x) - grad f_i(x*)||^2 = L_max <x - x*, H_i (x - x*)> for every node
    quad = (diff * (x - q.x_star)).sum(1)
    assert torch.allclose((diff**2).sum(1), c.L_max * quad)


def test_ridge_top_start_makes_the_descent_lemma_an_equality():
    p, x0 = ridge_top_start()
    g = p.full_grad(x0)
    L = p.consts.L
    drop = float(p.loss(x0) - p.loss(x0 - g / L))
    assert drop == pytest.approx(float((g**2).sum()) / (2 * L), rel=1e-9)


def test_comp_ams_without_normalisation_steps_by_eta_m():
    p = scaled_ridge(1.0)
    algo = vr_checks.CompAMSNoNorm(compressor=parse_spec("topk:k=2").bind(p.n), gamma=0.01)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)
    new, _ = algo.step(state, p, comm)
    assert torch.allclose(new.x, state.x - 0.01 * new.m)
    assert new.v_hat.abs().sum() > 0  # AMSGrad's moments still tracked, only not applied
