"""The step-size table (theory_checks.stepsize_table): fast checks pass; the theorem conditions
reject a step that is too large or too small, and a worked number a wrong value."""

from __future__ import annotations

import math

import pytest

from theory_checks import stepsize_table as st


@pytest.mark.parametrize("chk", [c for c in st.CHECKS if c.fast], ids=lambda c: c.name)
def test_fast_checks_pass(chk):
    outcomes = chk.fn(True)
    assert outcomes
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


def test_quad_condition_accepts_the_papers_step_and_rejects_others():
    a, b = 2.0, 300.0
    paper = 1.0 / (a + math.sqrt(b))
    root = 2.0 / (a + math.sqrt(a * a + 4.0 * b))
    assert st.quad_condition("paper", paper, a, b, "-").passed
    # the theorem states 1/(a + sqrt b): a step off it is a wrong constant, even one that
    # still meets the condition (the root) or sits within 19% of it (the former 0.809 test)
    assert root > 1.01 * paper and not st.quad_condition("root", root, a, b, "-").passed
    assert not st.quad_condition("too large", 1.01 * root, a, b, "-").passed
    assert not st.quad_condition("too small", 0.9 * paper, a, b, "-").passed
    assert not st.quad_condition("over the cap", paper, a, b, "-", cap=0.5 * paper).passed
    assert st.quad_condition("at the cap", 0.5 * paper, a, b, "-", cap=0.5 * paper).passed


def test_ef21_condition_optimises_young_and_rejects_wrong_alpha():
    # EF21 Thm 1's closed form (optimal s) meets the condition; with alpha in place of theta
    # (beta/theta ~ 2/alpha^2 replaced by a smaller ratio) the step is too large.
    alpha = 0.1
    r = math.sqrt(1 - alpha)
    theta, beta = 1 - r, (1 - alpha) / (1 - r)
    good = 1.0 / (2.0 + 3.0 * math.sqrt(beta / theta))
    assert st.ef21_condition("good", good, alpha, 2.0, 3.0).passed
    wrong = 1.0 / (2.0 + 3.0 * math.sqrt(beta / alpha))
    assert not st.ef21_condition("alpha for theta", wrong, alpha, 2.0, 3.0).passed
    pl = min(1.0 / (2.0 + 3.0 * math.sqrt(2 * beta / theta)), theta / (2 * 0.5))
    assert st.ef21_condition("pl", pl, alpha, 2.0, 3.0, mu=0.5).passed
    assert not st.ef21_condition("pl, alpha/(2 mu)", alpha / (2 * 0.5), alpha, 2.0, 3.0,
                                 mu=0.5).passed  # fmt: skip


def test_compare_rejects_a_wrong_number():
    assert st.compare("ok", 0.0058591211, 0.0058591, "P15", rel=1e-5).passed
    assert not st.compare("off", 0.0059, 0.0058591, "P15", rel=1e-5).passed
