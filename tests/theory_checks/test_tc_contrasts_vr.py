"""The fast subset of :mod:`theory_checks.contrasts_vr`, and checks that its verdict functions
can fail (a plateau above the bound, DIANA not converged, a wrong speedup)."""

from __future__ import annotations

import pytest

from theory_checks import contrasts_vr
from theory_checks.vr_problems import MeanSE


@pytest.mark.parametrize("chk", [c for c in contrasts_vr.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def _plateaus(high: float, low: float, diana: float) -> list[bool]:
    out = contrasts_vr.plateau_outcomes(
        {0.1: MeanSE(high, 0.01, 4), 0.025: MeanSE(low, 0.01, 4)},
        {0.1: 16.0, 0.025: 4.0},
        MeanSE(diana, diana / 10, 4),
        "s",
    )
    return [o.passed for o in out]


def test_plateau_checks_can_fail():
    assert all(_plateaus(3.5, 0.8, 1e-29))
    assert _plateaus(20.0, 0.8, 1e-29)[0] is False  # above 2 gamma omega zeta2/(mu n)
    assert _plateaus(3.5, 3.4, 1e-29)[2] is False  # not proportional to gamma
    assert _plateaus(3.5, 0.8, 1e-5)[3] is False  # DIANA not at x*
    assert _plateaus(1e-6, 2.5e-7, 1e-29)[0] is False  # converged: no plateau


def test_speedup_check_rejects_a_ratio_far_from_four():
    assert contrasts_vr.speedup_outcome(MeanSE(4.0, 0.05, 8), MeanSE(1.0, 0.02, 8), "s").passed
    assert not contrasts_vr.speedup_outcome(MeanSE(2.0, 0.05, 8), MeanSE(1.0, 0.02, 8), "s").passed
    assert not contrasts_vr.speedup_outcome(
        MeanSE(4.0, 2.0, 8), MeanSE(1.0, 0.5, 8), "s"
    ).passed  # too uncertain to confirm
