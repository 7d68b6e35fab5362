"""The acceleration checks of :mod:`theory_checks.accelerated`: the variants they name (their
fast power is run by test_tc_power.py, the full versions here under ``slow``), and their
measures: the rounds to the distance or gap tolerances and the bits spent, censored at the
cap."""

from __future__ import annotations

import math

import pytest

from algorithms.shifts.adiana import ADIANA
from algorithms.shifts.canita import CANITA
from compressors import parse_spec
from theory_checks import accelerated
from theory_checks.base import run_power


def test_the_checks_name_acceleration_removed_and_a_step_too_small():
    adiana, canita = accelerated.CHECKS
    assert adiana.fast and adiana.rate
    assert {v.name for v in adiana.variants} == {"theta1=0", "z-frozen", "step/10"}
    assert canita.fast and canita.rate  # fast: d = 100, a few seconds; full: 10 min (slow)
    assert {v.name for v in canita.variants} == {"theta1=0", "coupling-never-grows", "step/10"}


def test_the_step_too_small_variants_run_a_tenth_of_the_theory_step():
    p, _ = accelerated.adiana_problem(100.0)
    good, small = accelerated._adiana(p, None), accelerated._adiana(p, "step/10")
    assert small.gamma == pytest.approx(0.1 * good.gamma)
    assert small.theta1 == pytest.approx(good.theta1 / 10**0.5)  # theta1 follows the step
    q = accelerated.canita_problem(accelerated.FAST_CD)
    C = parse_spec(f"randk:k={accelerated.FAST_CK}")
    assert C.omega(q.d) == pytest.approx(1.0)  # the fast form keeps omega = 1 and n
    full, _ = CANITA.configure(q, C)
    tenth, _ = CANITA.configure(q, C, step_mult=0.1)
    assert q.n == accelerated.CN and tenth.gamma == pytest.approx(0.1 * full.gamma)


def test_rounds_to_gaps_counts_every_tolerance_and_censors():
    p = accelerated.canita_problem()
    assert p.consts.mu == pytest.approx(p.lam) and abs(p._sigma) < 1e-12  # A_i = a_i T
    C = parse_spec(f"randk:k={accelerated.CK}")
    algo, _ = CANITA.configure(p, C)
    rounds, bits = accelerated.rounds_to_gaps(algo, p, (0.5, 0.1), seed=0, T_max=1000)
    assert 1 <= rounds[0] <= rounds[1] < 1000
    assert bits == [r * 2 * C.bits(p.d) for r in rounds]  # two messages per round, per eps
    short, short_bits = accelerated.rounds_to_gaps(algo, p, (0.5, 0.1), 0, int(rounds[0]))
    assert short == [rounds[0], math.inf] and short_bits == [bits[0], math.inf]


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
    assert [r.verdict for r in rows] == ["pass", "rejected", "rejected", "rejected"], rows


@pytest.mark.slow
def test_full_canita_check_has_power():
    rows = run_power(accelerated.CHECKS[1], fast=False)
    assert [r.verdict for r in rows] == ["pass", "rejected", "rejected", "rejected"], rows
