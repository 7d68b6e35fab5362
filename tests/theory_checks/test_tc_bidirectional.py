"""The bidirectional checks (theory_checks.bidirectional): their variants and verdicts (the fast
checks' power is run by test_tc_power.py, the full versions here under ``slow``), and the
broken methods they build really differ from the correct ones."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from algorithms.bidirectional.dore import DORE
from algorithms.bidirectional.mcm import MCM
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import bidirectional as bd
from theory_checks.base import run_power
from theory_checks.vr_problems import ridge


def test_checks_name_variants():
    kinds = {c.name: {v.kind for v in c.variants} for c in bd.CHECKS}
    assert "no-variance-reduction" in kinds["bidirectional.dore-exact"]
    assert "no-variance-reduction" in kinds["bidirectional.artemis-memory"]
    assert {"wrong-shift", "no-variance-reduction", "other"} <= kinds[
        "bidirectional.mcm-preserved-model"
    ]
    assert all(c.fast and c.rate and "step-too-small" in kinds[c.name] for c in bd.CHECKS)


def test_verdicts_can_fail():
    assert bd.exact_outcome("s", 1e-25, "m").passed
    assert not bd.exact_outcome("s", 1e-15, "m").passed
    assert not bd.exact_outcome("s", float("nan"), "m").passed
    assert bd.stall_outcome("s", 0.1, "m").passed and not bd.stall_outcome("s", 1e-6, "m").passed
    assert bd.proportional_outcome("s", ((60.0, 0.06), (240.0, 0.25))).passed
    assert not bd.proportional_outcome("s", ((60.0, 0.06), (240.0, 0.06))).passed  # flat


def test_artemis_rate_is_the_derived_lyapunov_contraction():
    p = ridge()
    algo, rec = bd.Artemis.configure(p, parse_spec("qsgd:levels=4"), participation=0.5)
    rho, V0 = bd.artemis_lyapunov(p, rec)
    w, g = 0.3125, algo.gamma  # QSGD, 4 levels, d = 20: omega = d/s^2 = 20/16
    alpha = 1 / (2 * (w + 1))
    assert rho == pytest.approx(max(1 - g * p.consts.mu, 1 - alpha / 4))
    H0 = float((p.grad(p.x_star) ** 2).sum(1).mean())
    M = 4 * (1 + w) * ((1 + w) / 0.5 - 1) / (p.n * alpha * 0.5)
    assert V0 == pytest.approx(float((p.x_star**2).sum()) + M * g**2 * H0)
    assert bd.rate_outcome("s", 1e-12, 0.5, 1.0, 10).passed  # bound 9.8e-4
    assert not bd.rate_outcome("s", 1e-2, 0.5, 1.0, 10).passed
    assert bd.at_step(algo, "step/10").gamma == pytest.approx(algo.gamma / 10)
    assert bd.at_step(algo, None) is algo


def _fields(algo):
    return {f.name: getattr(algo, f.name) for f in dataclasses.fields(algo)}


def test_the_broken_methods_differ_from_the_correct_ones():
    p = ridge()
    C = parse_spec("randk:k=5")
    mcm, _ = MCM.configure(p, C)
    dore, _ = DORE.configure(p, C)
    for good, bad in ((mcm, bd._DegradedMCM(**_fields(mcm))),
                      (dore, bd._DOREModelCompressed(**_fields(dore)))):  # fmt: skip
        a = b = good.init(p.x0, p, SimulatedComm(p.n, seed=0))
        for _ in range(3):  # (from x^0 = H^0 the first MCM steps agree)
            a, _ = good.step(a, p, SimulatedComm(p.n, seed=0))
            b, _ = bad.step(b, p, SimulatedComm(p.n, seed=0))
        assert not torch.allclose(a.x, b.x)


@pytest.mark.slow
@pytest.mark.parametrize("chk", bd.CHECKS, ids=lambda c: c.name)
def test_full_checks_have_power(chk):
    rows = run_power(chk, False)
    assert rows[0].verdict == "pass", rows[0]
    assert all(r.verdict == "rejected" for r in rows[1:]), rows
