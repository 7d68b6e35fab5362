"""The error-feedback theorem checks (theory_checks.ef_checks): fast checks pass, and each bound
evaluator reports a violation when fed a wrong constant."""

from __future__ import annotations

import pytest
import torch

from algorithms.ef.ef14 import EF14
from algorithms.ef.ef21 import EF21
from compressors import parse_spec
from theory_checks import ef_checks as ec
from theory_checks.ef_instances import DecayedEF14, G_of, f_gap, heterogeneous_ridge, run


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
    bad, worst, made = ec.descent_violations(f, gn2, G, 0.0, gamma=0.1, A=1.0)
    assert bad == 2 and worst > 0 and made == 2  # 1.0 > 1 - 0.005 and 1.2 > 1.0 - 0.005
    bad, _, _ = ec.descent_violations([1.0, 0.9], [0.1, 0.1], [0.0, 0.0], 0.0, gamma=0.1, A=1.0)
    assert bad == 0
    # the G term counts with weight gamma/(2A): a growing G breaks descent
    bad, _, _ = ec.descent_violations([1.0, 0.9], [0.1, 0.1], [0.0, 10.0], 0.0, gamma=0.1,
                                      A=1.0)  # fmt: skip
    assert bad == 1
    # steps at the float floor (Phi^t <= 1e-20 Phi^0) are not compared
    bad, _, made = ec.descent_violations([1.0, 1e-25, 2e-25], [0.0] * 3, [0.0] * 3, 0.0, 0.1, 1.0)
    assert bad == 0 and made == 1


def test_tight_quadratic_is_exact_at_one_over_L():
    """GD at 1/L from x* + e_1 reaches x* in one step: the nonconvex bound holds with equality,
    and 1.01/L breaks it (what the step-too-large variant relies on)."""
    r = ec._trajectory("tight", "EF21", 4, "full", True)
    lhs, rhs = ec.nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], 0.0, 1.0)
    assert lhs == pytest.approx(rhs, rel=1e-9)
    r = ec._trajectory("tight", "EF21", 4, "full", True, variant="step-x1.01")
    lhs, rhs = ec.nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], 0.0, 1.0)
    assert lhs / rhs == pytest.approx(1 / (2 - 1.01), rel=1e-6)


def test_worst_inputs_make_the_three_point_inequality_exact():
    import math

    import torch

    from algorithms.ef import three_pc_mechanisms as mech
    from comm import SimulatedComm
    from compressors import parse_spec

    d, alpha = 10, 0.2
    C = parse_spec("topk:k=2")
    r = math.sqrt(1 - alpha)
    A, B = 1 - r, (1 - alpha) / (1 - r)
    h, y, x = ec.worst_inputs("ef21", A, B, alpha, 1.0, d)
    ctx = mech.Ctx(C, None, 1.0, None, "ef21", SimulatedComm(1, seed=0), 0)
    lhs = float(((mech.ef21(h, y, x, ctx).g_i - x) ** 2).sum())
    rhs = (1 - A) * float(((h - y) ** 2).sum()) + B * float(((x - y) ** 2).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12)
    assert isinstance(h, torch.Tensor)


def test_pl_ratio_fails_with_a_wrong_mu():
    R = heterogeneous_ridge(x0="ones")
    algo, rec = EF21.configure(R, parse_spec("topk:k=2"), init_mode="compressed")
    th = rec["theory"]["inputs"]["theta"]
    _, psi = run(algo, R, 200, observe=lambda s: f_gap(R, s.x) + algo.gamma / th * G_of(s, R))
    assert ec.pl_ratio(psi, algo.gamma, R.consts.mu) <= 1.0
    assert ec.pl_ratio(psi, algo.gamma, 10.0 * R.consts.mu) > 1.0


def test_step_too_small_is_judged_at_the_theory_step():
    """GD at 1/(10 L) on the tight quadratic meets the nonconvex bound at its own step but
    misses it at 1/L by 1/(c (2 - c)), c = 0.1 (what the step/10 variant relies on)."""
    r = ec._trajectory("tight", "EF21", 4, "full", True, variant=ec.SMALL)
    assert r["gamma_pred"] == pytest.approx(10 * r["gamma"])
    lhs, rhs = ec.nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma_pred"], 0.0, 1.0)
    assert lhs / rhs == pytest.approx(1 / (0.1 * 1.9), rel=1e-4)
    _, own = ec.nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], 0.0, 1.0)
    assert lhs <= own
    assert ec.pred_gamma("step-x1.01", 1.01, 1.0) == 1.01 and ec.pred_gamma(None, 1.0, 1.0) == 1


def test_decayed_memory_keeps_half_of_ef14s_error():
    R = heterogeneous_ridge(x0="ones")
    algo = EF14.configure(R, parse_spec("topk:k=2"))[0]
    s1, _ = run(algo, R, 1)
    s2, _ = run(DecayedEF14(algo, 0.5), R, 1)
    assert torch.equal(s1.x, s2.x) and torch.allclose(s2.e_i, 0.5 * s1.e_i)
    assert bool((s1.e_i != 0).any())
