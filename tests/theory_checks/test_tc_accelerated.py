"""The acceleration check of :mod:`theory_checks.accelerated`: the variants it names (its fast
power is run by test_tc_power.py, the full version here under ``slow``), and its measure: the
rounds to the distance tolerance and the bits spent, censored at the cap."""

from __future__ import annotations

import math

import pytest

from algorithms.shifts.adiana import ADIANA
from algorithms.shifts.canita import CANITA
from compressors import parse_spec
from theory_checks import accelerated
from theory_checks.base import run_power


def test_the_checks_name_acceleration_removed():
    adiana, canita = accelerated.CHECKS
    assert adiana.fast and {v.name for v in adiana.variants} == {"theta1=0", "z-frozen"}
    assert not canita.fast  # about 35 s fast, 10 min full: the slow suite runs its power
    assert {v.name for v in canita.variants} == {"theta1=0", "coupling-never-grows"}


def test_rounds_to_gaps_counts_every_tolerance_and_censors():
    p = accelerated.canita_problem()
    assert p.consts.mu == pytest.approx(p.lam) and abs(p._sigma) < 1e-12  # A_i = a_i T
    C = parse_spec(f"randk:k={accelerated.CK}")
    algo, _ = CANITA.configure(p, C)
    rounds, bits = accelerated.rounds_to_gaps(algo, p, (0.5, 0.1), seed=0, T_max=1000)
    assert 1 <= rounds[0] <= rounds[1] < 1000 and bits == rounds[1] * 2 * C.bits(p.d)
    short, inf_bits = accelerated.rounds_to_gaps(algo, p, (0.5, 0.1), 0, int(rounds[0]))
    assert short == [rounds[0], math.inf] and inf_bits == math.inf


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


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_canita_check_has_power(fast):
    rows = run_power(accelerated.CHECKS[1], fast=fast)
    assert [r.verdict for r in rows] == ["pass", "rejected", "rejected"], rows
