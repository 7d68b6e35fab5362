"""The FedNL / Newton-3PC checks (theory_checks.newton): the instance, the verdict function on
hand-made trajectories, the broken variants break what they say, the parameter formulas. (The
fast checks and their power run in test_tc_power.py; the full ones are slow.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms.second_order.fednl import FedNL
from algorithms.stepsizes.newton import fednl_alpha, newton_local_rate, newton_locality
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import newton as tc


def test_the_instance_is_ill_conditioned_and_solved():
    p = tc.instance()
    c = p.consts
    assert c.mu == 1e-3 and c.L / c.mu > 100
    assert float(torch.linalg.vector_norm(p.full_grad(p.x_star))) < 1e-9


def test_the_verdicts_on_made_up_trajectories():
    quad = 0.3 * np.array([2.0 ** -(2**k - 1) for k in range(7)])  # superlinear
    lin = 0.3 * 0.05 ** np.arange(11)  # linear, ratio 0.05
    H_drop, H_flat = np.geomspace(1.0, 1e-3, 11), np.ones(11)
    assert all(o.passed for o in tc.fednl_outcomes(quad, H_drop[:7], "quad"))
    verdicts = [o.passed for o in tc.fednl_outcomes(lin, H_flat, "lin")]
    assert verdicts == [True, False, False]  # 2^-k holds; no learning, no superlinearity
    slow = 0.3 * 0.9 ** np.arange(11)
    assert not tc.fednl_outcomes(slow, H_drop, "slow")[0].passed  # slower than 2^-k


def test_the_variants_break_what_they_say():
    p = tc.instance()
    C = parse_spec(f"topk:k={3 * p.d}")
    frozen, _ = tc._Frozen.configure(p, C)
    comm = SimulatedComm(p.n, seed=0)
    s0 = frozen.init(p.x0, p, comm)
    s1, _ = frozen.step(s0, p, comm)
    assert torch.equal(s1.h_i, s0.h_i) and torch.equal(s1.h, s0.h)
    biased, _ = tc._MeanOfSenders.configure(p, C, p=0.5)
    comm = SimulatedComm(p.n, seed=0)
    state = biased.init(p.x0, p, comm)
    for _ in range(3):
        state, _ = biased.step(state, p, comm)
    assert not torch.allclose(state.h, state.h_i.mean(0))  # H is no longer mean_i H_i


def test_both_checks_are_rate_checks_with_a_tenth_of_the_unit_step():
    for chk in tc.CHECKS:
        assert chk.rate and "step/10" in {v.name for v in chk.variants}
    assert tc.STEP_MULT["step/10"] == 0.1
    p = tc.instance()
    algo, _ = FedNL.configure(p, parse_spec(f"topk:k={3 * p.d}"), step_mult=0.1, option=1)
    assert algo.gamma == pytest.approx(0.1) and algo.option == 1  # the paper's local setting


def test_the_parameter_formulas():
    assert fednl_alpha(delta=0.75) == pytest.approx(0.5)
    assert fednl_alpha(omega=3.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="exactly one"):
        fednl_alpha()
    assert newton_local_rate(0.3) == pytest.approx(0.85)
    assert newton_local_rate(1.0) == pytest.approx(2 / 3)
    c, r = newton_locality(1e-2, 2.0, 3.0, 2)
    assert c == 8 and r == pytest.approx(1e-2 / math.sqrt(2 * 64))


@pytest.mark.slow
@pytest.mark.parametrize("chk", tc.CHECKS, ids=lambda c: c.name)
def test_full_checks_pass(chk):
    outcomes = chk.fn(False)
    assert outcomes and all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
