"""The variants :mod:`theory_checks.contrasts_vr` names (the fast checks' power is run by
test_tc_power.py, the slow speedup check's here under ``slow``), and checks that its verdict
functions can fail (a plateau above the bound, DIANA not converged, a wrong speedup) and that
the broken comm shares one stream."""

from __future__ import annotations

import pytest
import torch

from comm import SimulatedComm
from theory_checks import contrasts_vr
from theory_checks.base import run_power
from theory_checks.vr_problems import MeanSE


def test_checks_name_variants():
    """Power itself is run for every fast check by tests/theory_checks/test_tc_power.py."""
    kinds = {c.name: {v.kind for v in c.variants} for c in contrasts_vr.CHECKS}
    assert {"no-variance-reduction", "wrong-shift"} <= kinds["contrast.dcgd-vs-diana-plateau"]
    assert {"no-variance-reduction", "wrong-shift"} <= kinds["contrast.dasha-vs-marina-bits"]
    assert kinds["contrast.diana-linear-speedup"] == {"other", "wrong-shift"}
    # a plateau level, a comparison of bits, a ratio of noise floors: no rate claim
    assert not any(c.rate for c in contrasts_vr.CHECKS)


@pytest.mark.slow
def test_speedup_check_rejects_shared_noise_and_a_full_shift_step():
    rows = run_power(contrasts_vr.CHECKS[2], False)
    assert [r.verdict for r in rows] == ["pass", "rejected", "rejected"], rows


def test_shared_noise_comm_gives_every_node_the_same_stream():
    good, bad = SimulatedComm(4, seed=0), contrasts_vr.SharedNoiseComm(4, seed=0)
    u = good.rng(3, tag=1).uniform(5)
    assert not torch.allclose(u[0], u[1])
    v = bad.rng(3, tag=1).uniform(5)
    assert all(torch.allclose(v[0], v[i]) for i in range(1, 4))


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
