"""The AdaCGD check (theory_checks.adacgd): its hard triples reach each branch of the
mechanism, and each broken variant violates the 3PC inequality it names. (The fast check and
its power run in test_tc_power.py; the full one is slow.)"""

from __future__ import annotations

import pytest

from algorithms.ef.adacgd import adaptive, parse_levels
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import adacgd as tc


def test_the_triples_reach_every_outcome():
    seen = []
    for zeta in (0.5, 4.0):
        h, y, x = tc.triples(800, zeta)
        coarse, C = parse_levels(tc.LEVELS, 800), parse_spec(tc.FINEST)
        _, _, level = adaptive(h, y, x, coarse, C, zeta, SimulatedComm(800, 0), 0)
        seen.append(set(level.tolist()))
    assert seen[0] == {0, 1, 2, 3} and {0, 1, 3} <= seen[1]


def test_the_correct_mechanism_holds_and_the_variants_break_it():
    assert tc.worst_ratio(4.0, None, 2000)[0] <= 1
    assert tc.worst_ratio(0.5, "no-fallback", 2000)[0] > 1
    assert tc.worst_ratio(0.5, "no-error-feedback", 2000)[0] > 1
    assert tc.worst_ratio(0.5, "zeta-dropped", 2000)[0] <= 1  # zeta < beta: B is unchanged
    assert tc.worst_ratio(4.0, "zeta-dropped", 2000)[0] > 1


def test_a_tenth_of_the_step_misses_the_rate_at_the_pl_step():
    ratio, bound = tc._pl_rate(True)
    assert ratio <= bound
    ratio, bound_small = tc._pl_rate(True, "step/10")
    assert bound_small == bound and ratio > bound


@pytest.mark.slow
def test_the_full_check_passes():
    assert all(o.passed for o in tc._adaptive_3pc(False))
