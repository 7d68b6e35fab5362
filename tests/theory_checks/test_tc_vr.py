"""The fast subset of :mod:`theory_checks.vr_checks`, and checks that the verdict functions
can fail (a wrong rate, a too small bound, no decrease with the horizon)."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.diana import DIANA
from compressors import parse_spec
from theory_checks import vr_checks
from theory_checks.vr_problems import MeanSE, one_thread, ridge, run, sq_dist


@pytest.mark.parametrize("chk", [c for c in vr_checks.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


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
