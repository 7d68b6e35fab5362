"""The CAFe / CAFe-S checks (theory_checks.cafe): the instance's dissimilarity is exact, the
derived bounds are the formulas of algorithms.stepsizes.cafe, the broken variants break what
they say. (The fast checks and their power run in test_tc_power.py; the full ones are slow.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.shifts.cafe import CAFe, CAFeS
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import cafe as tc


def test_the_instance_has_exact_dissimilarity_and_server_distance():
    p = tc.instance(0.3, server_zeta2=0.05)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = 3 * torch.randn(p.d, generator=gen, dtype=torch.float64)
        diss = ((p.grad(x) - p.full_grad(x)) ** 2).sum(1).mean()
        assert float(diss) == pytest.approx(0.3, rel=1e-10)
        far = ((p.server_grad(x) - p.full_grad(x)) ** 2).sum()
        assert float(far) == pytest.approx(0.05, rel=1e-10)


def test_the_bounds_are_the_derived_formulas():
    delta = 0.1
    theta = 1 - math.sqrt(0.9)
    assert tc.cafe_bound(2.0, 0.5, 10, delta, 1.0) == pytest.approx(0.8 + 0.9 / theta)
    assert tc.cafe_s_bound(2.0, 0.5, 10, delta, 1.0, 0.5) == pytest.approx(0.8 + 0.9 * 1.5)
    assert tc._rounds_to(torch.tensor([3.0, 2.0, 0.5, 0.1]).numpy(), 1.0) == 2
    assert tc._rounds_to(torch.tensor([3.0]).numpy(), 1.0) == math.inf


def test_the_bound_is_checked_at_every_horizon():
    g = np.array([4.0, 1.0, 1.0, 1.0, 1.0])  # running means 4, 2.5, 2, 1.75
    ok = tc.horizon_outcome("s", g, lambda t: 1.0 + 4.0 / t, 4, "1 + 4/T'")
    assert ok.passed and "worst T' = 4" in ok.measured  # margins 0.2, 0.17, 0.14, 0.125
    assert ok.margin == pytest.approx(1 - 1.75 / 2.0)
    # the bound holds at T' = 4 (1.75 <= 2) but not at T' = 1 (4 > 3): rejected
    late = tc.horizon_outcome("s", g, lambda t: 3.0 - 0.25 * t, 4, "-")
    assert not late.passed and late.margin == pytest.approx(1 - 4 / 2.75)
    assert not tc.horizon_outcome("s", np.array([np.inf, 1.0]), lambda t: 1.0, 1, "-").passed
    assert all(c.rate and "step-too-small" in {v.kind for v in c.variants} for c in tc.CHECKS)


@pytest.mark.parametrize("cls, broken", [(CAFe, tc._NoAddBack), (CAFeS, tc._ServerNoAddBack)])
def test_the_no_add_back_variants_drop_the_predictor_on_the_server_only(cls, broken):
    p, C = tc.instance(1.0, 0.5), parse_spec(tc.SPEC)
    algo, _ = cls.configure(p, C)
    bad = broken(compressor=algo.compressor, gamma=algo.gamma)
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)
    for _ in range(3):
        state, _ = algo.step(state, p, comm)
    good, _ = algo.step(state, p, SimulatedComm(p.n, seed=0))
    worse, info = bad.step(state, p, SimulatedComm(p.n, seed=0))
    predictor = state.g if cls is CAFe else p.server_grad(state.x)
    # x_good - x_bad = -gamma * predictor: the same messages, the predictor not added back.
    torch.testing.assert_close(good.x - worse.x, -algo.gamma * predictor, rtol=1e-10, atol=1e-12)
    assert info.bits_up == C.bits(p.d)


@pytest.mark.slow
@pytest.mark.parametrize("chk", tc.CHECKS, ids=lambda c: c.name)
def test_full_checks_pass(chk):
    outcomes = chk.fn(False)
    assert outcomes and all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
