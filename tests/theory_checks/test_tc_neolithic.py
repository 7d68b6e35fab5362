"""The NEOLITHIC checks (theory_checks.neolithic): the scaled Rand-K module attains its bound in
expectation, the broken modules break what they say, the instance is what the docstring says.
(The fast checks and their power run in test_tc_power.py; the full ones are slow.)"""

from __future__ import annotations

import pytest
import torch

from algorithms.multistage.neolithic import msc
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import neolithic as tc


def test_scaled_randk_stages_miss_a_coordinate_with_probability_one_minus_delta_to_the_R():
    """Scaled Rand-K keeps k coordinates unscaled: after R stages the residual is x on the
    coordinates no stage picked, each missed with probability (1 - k/d)^R."""
    C, d, R, S = parse_spec("scaled:randk:k=2"), 8, 3, 3000
    comm = SimulatedComm(S, seed=4)
    x = torch.ones(S, d, dtype=torch.float64)
    v, _ = msc(C, x, R, lambda r: comm.rng_for(C, 0, tag=r))
    assert set(torch.unique(v).tolist()) <= {0.0, 1.0}  # picked coordinates are sent exactly
    missed = float((v == 0).double().mean())
    assert missed == pytest.approx(0.75**3, abs=4 * (0.42 * 0.58 / (S * d)) ** 0.5)


def test_the_broken_modules():
    C = parse_spec("topk:k=2")
    x = torch.tensor([[4.0, -3.0, 2.0, 1.0]], dtype=torch.float64)
    fixed = SimulatedComm(1, seed=0).rng_for(C, 0)
    good, bits = msc(C, x, 2, lambda r: fixed)
    torch.testing.assert_close(good, x)  # two Top-2 stages send all four coordinates
    piled, bits2 = tc.msc_no_residual(C, x, 2, lambda r: fixed)
    torch.testing.assert_close(piled, torch.tensor([[8.0, -6.0, 0.0, 0.0]], dtype=torch.float64))
    once, bits1 = tc.msc_single_stage(C, x, 2, lambda r: fixed)
    torch.testing.assert_close(once, torch.tensor([[4.0, -3.0, 0.0, 0.0]], dtype=torch.float64))
    assert bits.tolist() == bits2.tolist() == [2 * C.bits(4)] and bits1.tolist() == [C.bits(4)]


def test_nesterov_rounds_is_the_theorem_bound():
    """``(1 - sqrt(gamma mu))^K (2 gap0/mu + dist0) = tol dist0`` at the returned ``K``."""
    gamma, mu, gap0, dist0, tol = 0.9, 1e-3, 0.5, 2.0, 1e-2
    K = tc.nesterov_rounds(gamma, mu, gap0, dist0, tol)
    q = (gamma * mu) ** 0.5
    assert (1 - q) ** K * (2 * gap0 / mu + dist0) == pytest.approx(tol * dist0)
    assert tc.nesterov_rounds(gamma / 10, mu, gap0, dist0, tol) > 3 * K  # sqrt(10) slower


def test_only_the_accelerated_check_is_a_rate_check():
    rates = {c.name: c.rate for c in tc.CHECKS}
    assert rates == {"neolithic.msc-geometric": False, "neolithic.tracks-sgd": False,
                     "neolithic.acc-sqrt-kappa": True}  # fmt: skip
    acc = tc.CHECKS[2]
    assert {v.name: v.kind for v in acc.variants}["step/10"] == "step-too-small"


def test_the_instance():
    p = tc.instance()
    c = p.consts
    assert (p.n, p.d) == (10, 20)
    assert c.L == pytest.approx(1.0) and c.mu == pytest.approx(0.2) and p.grad_noise == 1.0
    zeta2 = float((p.grad(p.x_star) ** 2).sum(1).mean())
    assert zeta2 == pytest.approx(10.0, rel=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("chk", tc.CHECKS, ids=lambda c: c.name)
def test_full_checks_pass(chk):
    outcomes = chk.fn(False)
    assert outcomes and all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
