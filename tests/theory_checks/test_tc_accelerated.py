"""The acceleration check of :mod:`theory_checks.accelerated`: the variants it names (its fast
power is run by test_tc_power.py, the full version here under ``slow``), and its measure: the
rounds to the distance tolerance and the bits spent, censored at the cap."""

from __future__ import annotations

import math

import pytest

from algorithms.adiana import ADIANA
from compressors import parse_spec
from theory_checks import accelerated
from theory_checks.base import run_power


def test_the_check_names_acceleration_removed():
    (check,) = accelerated.CHECKS
    assert check.fast and {v.name for v in check.variants} == {"theta1=0", "z-frozen"}


def test_rounds_to_distance_counts_rounds_bits_and_censors():
    p, x0 = accelerated.adiana_problem(100.0)
    C = parse_spec(f"randk:k={accelerated.K}")
    algo, _ = ADIANA.configure(p, C)
    rounds, bits = accelerated.rounds_to_distance(algo, p, x0, 0.5, seed=0, T_max=10_000)
    assert 1 <= rounds < 10_000
    assert bits == rounds * 2 * C.bits(p.d)  # two compressed messages per round, init free
    assert accelerated.rounds_to_distance(algo, p, x0, 0.5, 0, int(rounds) - 1) == (
        math.inf,
        math.inf,
    )
    assert accelerated.rounds_to_distance(algo, p, x0, 10.0, 0, 5)[0] == 0.0  # already there


@pytest.mark.slow
def test_full_check_has_power():
    rows = run_power(accelerated.CHECKS[0], fast=False)
    assert [r.verdict for r in rows] == ["pass", "rejected", "rejected"], rows
