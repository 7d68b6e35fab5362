"""The smoothness-matrix check (theory_checks.matrix_smoothness): its instance is far from
scalar smoothness, the predicted ratio is the ratio of the bounds' round counts computed by hand,
and the broken variants break what they say. (The fast check and its power, the scalar-constant
variant included, run in test_tc_power.py; the full one is slow.)"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from algorithms.shifts.diana_plus import DIANAPlus
from compressors import parse_spec
from theory_checks import matrix_smoothness as tc


def test_the_instance_is_far_from_scalar_smoothness():
    p = tc.scaled_least_squares()
    L = p.smoothness_matrices()[0]
    diag = torch.diagonal(L)
    assert float(diag.max() / diag.min()) > 15  # lambda = 0.05 floors the small scales
    ev = torch.linalg.eigvalsh(L)
    assert float(ev[-1] / ev[0]) > 15


def test_the_prediction_is_the_ratio_of_the_bounds_rounds():
    p = tc.scaled_least_squares()
    c = p.consts
    spec = parse_spec("randk:k=2")
    k = DIANAPlus.configure(p, spec)[1]["theory"]["inputs"]
    g = 1 / (c.L + 6 * k["calL_max"])  # n = 1
    g_u = 1 / (c.L + 6 * (10 / 2 - 1) * c.L_max)  # uniform: calL = omega L_max, omega = 4
    rho = max(1 - g * c.mu, 1 - k["p_min"] / 2)
    rho_u = max(1 - g_u * c.mu, 1 - 0.2 / 2)
    assert tc.bound_rounds(rho_u, 1e-4) / tc.bound_rounds(rho, 1e-4) == pytest.approx(
        math.log(rho) / math.log(rho_u), rel=0.01
    )
    assert math.log(rho) / math.log(rho_u) > 3  # the claim is a large saving


@pytest.mark.parametrize("change", [dict(sampling="uniform"), dict(alpha=1.0)])
def test_the_diverging_variants_diverge(change):
    p = tc.scaled_least_squares()
    algo, _ = DIANAPlus.configure(p, parse_spec("randk:k=2"))
    assert tc.hitting(algo, p, 1e-4, 2000, 0)[0] < 400
    broken = dataclasses.replace(algo, **change)
    assert tc.hitting(broken, p, 1e-4, 2000, 0) == (math.inf, math.inf)


def test_rate_checks_name_a_tenth_of_the_step():
    for chk in tc.CHECKS:
        assert chk.rate and "step/10" in {v.name for v in chk.variants}
    p = tc.scaled_least_squares()
    algo, _ = DIANAPlus.configure(p, parse_spec("randk:k=2"))
    slow = dataclasses.replace(algo, gamma=algo.gamma / 10)
    assert tc.hitting(slow, p, 1e-4, 400, 0) == (math.inf, math.inf)  # the correct: < 400


@pytest.mark.slow
def test_the_full_checks_pass():
    assert all(o.passed for o in tc._diana_plus_bits(False))
    assert all(o.passed for o in tc._dcgd_plus_bits(False))
