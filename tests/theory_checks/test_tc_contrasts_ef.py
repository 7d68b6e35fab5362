"""The Beznosikov et al. 2020 contrast (theory_checks.contrasts_ef): fast checks pass, the
closed form rejects a wrong step."""

from __future__ import annotations

import pytest

from algorithms.shifts.dcgd import DCGD
from compressors import parse_spec
from theory_checks import contrasts_ef as ce
from theory_checks.ef_instances import beznosikov, run


@pytest.mark.parametrize("chk", [c for c in ce.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def test_beznosikov_constants_are_exact():
    c = beznosikov().consts
    assert abs(c.L - 103 / 6) < 1e-12 and abs(c.mu - 7 / 6) < 1e-12
    assert abs(c.L_max - 34.5) < 1e-12 and c.f_star == 0.0


def test_closed_form_rejects_a_wrong_gamma():
    B = beznosikov()
    algo, _ = DCGD.configure(B, parse_spec("topk:k=1"), step=0.01, force=True)
    _, xs = run(algo, B, 20, observe=lambda s: s.x.clone())
    assert ce.closed_form_error(xs, 0.01) <= 1e-12
    assert ce.closed_form_error(xs, 0.011) > 1e-3
