"""The scaling-law checks (:mod:`theory_checks.scaling`): their verdict functions can fail, the
rounds measure counts what it says, and the checks are in the catalogue. The fast checks and
their broken variants run in ``test_tc_power.py`` (power mode over the catalogue)."""

from __future__ import annotations

import math

import pytest

from algorithms.ef.ef21 import EF21
from compressors import parse_spec
from problems.instances import heterogeneous_ridge
from theory_checks import scaling
from theory_checks.catalogue import all_checks


def test_slope_outcome_accepts_the_law_and_rejects_a_flat_or_steep_one():
    x = [1.0, 2.0, 4.0, 8.0]
    assert scaling.fit_slope(x, [3 * v for v in x]) == pytest.approx(1.0)
    assert scaling.slope_outcome("s", "c", x, [5 * v**1.1 for v in x], 1.0, 0.15).passed
    flat = scaling.slope_outcome("s", "c", x, [7.0, 7.1, 6.9, 7.0], 1.0, 0.15)
    assert not flat.passed and flat.margin < 0
    assert not scaling.slope_outcome("s", "c", x, [v**1.5 for v in x], 1.0, 0.15).passed
    stalled = scaling.slope_outcome("s", "c", x, [1.0, 2.0, math.inf, 8.0], 1.0, 0.15)
    assert not stalled.passed and math.isnan(scaling.fit_slope(x, [1.0, 2.0, math.inf, 8.0]))


def test_ratio_outcome_is_two_sided():
    assert scaling.ratio_outcome("s", "c", 2.5, 2.53, 1.2).passed
    assert not scaling.ratio_outcome("s", "c", 1.0, 2.53, 1.2).passed  # step not reduced
    assert not scaling.ratio_outcome("s", "c", 4.0, 2.53, 1.2).passed
    assert not scaling.ratio_outcome("s", "c", math.inf, 2.53, 1.2).passed
    assert scaling.ratio_outcome("s", "c", 2.53, 2.53, 1.2).margin == pytest.approx(1.0)


def test_count_outcome_fails_on_an_unreached_or_slower_run():
    ok = scaling.count_outcome("s", {1: 10.0, 2: 20.0}, {1: 40.0, 2: 40.0})
    assert ok.passed and ok.margin == pytest.approx(0.5)
    assert not scaling.count_outcome("s", {1: 10.0, 2: math.inf}, {1: 40.0, 2: 40.0}).passed
    assert not scaling.count_outcome("s", {1: 41.0}, {1: 40.0}).passed


def test_pl_rounds_bounds_gradient_descent_and_grows_as_the_step_shrinks():
    """EF21 with the identity compressor is gradient descent, for which EF21's Thm 2 holds; for
    a small ``gamma mu`` the count at a tenth of the step is about ten times the count."""
    p = heterogeneous_ridge(x0="zeros")
    gamma = 1 / p.consts.L
    algo, _ = EF21.configure(p, parse_spec("identity"), step=gamma)
    count = scaling.pl_rounds(p, gamma, 1e-6)
    rounds, _ = scaling.rounds_to(algo, p, 1e-6, 0, math.ceil(count))
    assert rounds <= count
    small = scaling.pl_rounds(p, 0.01, 1e-6)
    assert scaling.pl_rounds(p, 0.001, 1e-6) == pytest.approx(10 * small, rel=0.01)


def test_rounds_to_counts_rounds_and_bits_of_gradient_descent():
    """EF21 with the identity compressor and ``g_i^0 = grad f_i(x^0)`` is gradient descent: on
    the ridge ``grad f(x^t) = (I - gamma H)^t grad f(x^0)``, so the first round below the
    tolerance is known, and each round sends ``32 d`` bits per node."""
    import torch

    p = heterogeneous_ridge(x0="zeros")
    algo, _ = EF21.configure(p, parse_spec("identity"), step=0.5)
    g = p.full_grad(p.x0)
    H = torch.stack([p.full_grad(e) - p.full_grad(torch.zeros_like(e))
                     for e in torch.eye(p.d, dtype=g.dtype)])  # fmt: skip
    g0, t = float((g**2).sum()), 0
    while float((g**2).sum()) > 1e-6 * g0:
        g, t = g - 0.5 * H @ g, t + 1
    rounds, bits = scaling.rounds_to(algo, p, 1e-6, 0, 10_000)
    assert rounds == t
    init_bits = bits - t * 32 * p.d
    assert init_bits in (0.0, 32.0 * p.d)  # the uncompressed g_i^0, if the ledger charges it
    assert scaling.rounds_to(algo, p, 1e-6, 0, t - 1) == (math.inf, math.inf)


def test_every_scaling_check_is_catalogued_with_variants():
    names = {c.name for c in all_checks()}
    for c in scaling.CHECKS:
        assert c.name in names and c.variants, c.name
    fast = sum(c.fast for c in scaling.CHECKS)
    assert 1 <= fast < len(scaling.CHECKS)
    # the checks with a theorem's round count at the theory step are rate checks
    assert {c.name for c in scaling.CHECKS if c.rate} == {
        "scaling.ef21-rounds-vs-alpha",
        "scaling.ef21pp-rounds-bits",
        "scaling.ef21-rounds-vs-n-homogeneous",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "chk",
    [c for c in scaling.CHECKS if not c.fast],
    ids=lambda c: c.name,
)
def test_full_checks_pass_and_reject_their_variants(chk):
    from theory_checks.base import run_power

    rows = run_power(chk, fast=False)
    assert all(r.ok for r in rows), [(r.variant, r.verdict, r.margin) for r in rows]
