"""The checks of :mod:`theory_checks.absolute`: the variants they name (their fast power is run
by test_tc_power.py, the full version here under ``slow``), that the broken methods are the
ones described, and that the constant check fails an overclaiming compressor."""

from __future__ import annotations

import pytest
import torch

from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import absolute
from theory_checks.base import run_power


def test_checks_name_variants():
    kinds = {c.name: {v.kind for v in c.variants} for c in absolute.CHECKS}
    assert kinds["absolute.declared-constants"] == {"wrong-constant"}
    assert {"no-error-feedback", "step-too-large", "step-too-small"} <= kinds[
        "absolute.ec-sgd-neighbourhood"
    ]
    assert {"no-variance-reduction", "wrong-shift", "step-too-small"} <= kinds[
        "absolute.ec-lsvrg-no-variance-term"
    ]
    assert all(c.fast for c in absolute.CHECKS)
    assert [c.rate for c in absolute.CHECKS] == [False, True, True]


def test_constant_check_fails_a_halved_declaration():
    c = parse_spec("threshold:lam=0.1")
    assert absolute.check_absolute(c, fast=True).passed
    bad = absolute.check_absolute(c, fast=True, declared=0.5 * c.abs_delta_sq(absolute.D))
    assert not bad.passed and bad.margin < 0
    # a loose declaration (4 Delta^2) holds, but its worst case is far from attaining it
    loose = absolute.check_absolute(c, fast=True, declared=4 * c.abs_delta_sq(absolute.D))
    assert not loose.passed and loose.margin == pytest.approx(0.25 / 0.9 - 1, rel=1e-4)


def test_no_ec_sends_the_compressed_step_and_keeps_no_memory():
    p = absolute.flat_quadratic(n=2, d=4)
    C = parse_spec("threshold:lam=0.5")
    algo = absolute.NoEC(C, 0.25)
    comm = SimulatedComm(p.n, seed=0)
    s0 = algo.init(p.x0, p, comm)
    s1, _ = algo.step(s0, p, comm)
    step = C(0.25 * p.grad(p.x0), 0).mean(0)
    torch.testing.assert_close(s1.x, p.x0 - step, rtol=0, atol=1e-15)
    assert (s1.e_i == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(absolute.CHECKS)))
def test_full_checks_have_power(index):
    rows = run_power(absolute.CHECKS[index], False)
    assert rows[0].verdict == "pass" and all(r.verdict == "rejected" for r in rows[1:]), rows
