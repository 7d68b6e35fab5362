"""The step-size table (theory_checks.stepsize_table): fast checks pass, a wrong formula fails."""

from __future__ import annotations

import pytest

from theory_checks import stepsize_table as st


@pytest.mark.parametrize("chk", [c for c in st.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def test_compare_rejects_a_wrong_step():
    gamma = st._gamma("ef21", st.TOPK, st.table_problem(mu=None, convex=False))
    assert st.compare("right", gamma, st._ef21_nc(), "EF21 Thm 1").passed
    # the PL step, or the NC step at the wrong alpha, is not EF21's Theorem 1 step
    assert not st.compare("PL instead", gamma, st._ef21_pl(), "EF21 Thm 1").passed
    assert not st.compare("wrong alpha", gamma, st._ef21_nc(a=0.2), "EF21 Thm 1").passed
    assert not st.compare("1e-9 off", 1.0 + 1e-9, 1.0, "one").passed


def test_hand_formulas_reproduce_the_sheet_numbers():
    theta, beta = st._tb(0.1)
    assert abs((beta / theta) ** 0.5 - 18.4868) < 5e-5
    assert abs(st._ef21_pl(1 / 3, 103 / 6, 34.5, 7 / 6) - 0.0042688) < 5e-8
    assert abs(st._ef21_nc(1 / 3, 103 / 6, 34.5) - 0.0058591) < 5e-8
