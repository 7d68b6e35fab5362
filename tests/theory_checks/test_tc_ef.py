"""The error-feedback theorem checks (theory_checks.ef_checks): fast checks pass, and each bound
evaluator reports a violation when fed a wrong constant."""

from __future__ import annotations

import pytest

from algorithms.ef21 import EF21
from compressors import parse_spec
from theory_checks import ef_checks as ec
from theory_checks.ef_instances import G_of, f_gap, heterogeneous_ridge, run


@pytest.mark.parametrize("chk", [c for c in ec.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def test_nonconvex_bound_fails_with_a_wrong_gamma():
    gn2 = [1.0] * 10
    lhs, rhs = ec.nonconvex_bound(gn2, f0=5.0, f_inf=0.0, gamma=1.0, G0=0.0, A=1.0)
    assert lhs <= rhs  # 1 <= 2*5/10
    lhs, rhs = ec.nonconvex_bound(gn2, f0=5.0, f_inf=0.0, gamma=10.0, G0=0.0, A=1.0)
    assert lhs > rhs


def test_descent_check_flags_an_increase():
    f, gn2, G = [1.0, 1.0, 1.2], [0.1, 0.1, 0.1], [0.0, 0.0, 0.0]
    bad, worst = ec.descent_violations(f, gn2, G, 0.0, gamma=0.1, A=1.0)
    assert bad == 2 and worst > 0  # 1.0 > 1 - 0.005 and 1.2 > 1.0 - 0.005
    bad, _ = ec.descent_violations([1.0, 0.9], [0.1, 0.1], [0.0, 0.0], 0.0, gamma=0.1, A=1.0)
    assert bad == 0
    # the G term counts with weight gamma/(2A): a growing G breaks descent
    bad, _ = ec.descent_violations([1.0, 0.9], [0.1, 0.1], [0.0, 10.0], 0.0, gamma=0.1, A=1.0)
    assert bad == 1


def test_pl_ratio_fails_with_a_wrong_mu():
    R = heterogeneous_ridge(x0="ones")
    algo, rec = EF21.configure(R, parse_spec("topk:k=2"), init_mode="compressed")
    th = rec["theory"]["inputs"]["theta"]
    _, psi = run(algo, R, 200, observe=lambda s: f_gap(R, s.x) + algo.gamma / th * G_of(s, R))
    assert ec.pl_ratio(psi, algo.gamma, R.consts.mu) <= 1.0
    assert ec.pl_ratio(psi, algo.gamma, 10.0 * R.consts.mu) > 1.0
