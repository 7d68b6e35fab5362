"""The check of :mod:`theory_checks.local_training`: its instance has the constants it claims,
the broken methods are the ones described, the rate fit reads a known geometric sequence (its
fast power is run by test_tc_power.py, the full version here under ``slow``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comm import SimulatedComm
from theory_checks import local_training as lt
from theory_checks.base import run_power


def test_the_checks_name_their_variants():
    rate, uplink = lt.CHECKS
    assert rate.fast and rate.rate
    assert {v.name for v in rate.variants} == {"no-control-variates", "p=1", "chi=2", "step/10"}
    assert not uplink.fast and not uplink.rate  # a comparison of bits; n = 64: full only
    assert {v.name for v in uplink.variants} == {"dense-payload", "no-control-variates"}


def test_the_instance_has_exact_kappa_and_heterogeneous_optima():
    p = lt.separable_quadratic(n=4, d=6, kappa=50.0, seed=0)
    c = p.consts
    assert c.L == pytest.approx(50.0) and c.mu == pytest.approx(1.0)
    assert c.L_i.tolist() == pytest.approx([50.0] * 4)
    g_star = p.grad(p.x_star)
    torch.testing.assert_close(
        g_star.mean(0), torch.zeros(6, dtype=g_star.dtype), atol=1e-9, rtol=0
    )
    assert float(g_star.norm(dim=1).min()) > 1.0  # every node's optimum differs from x*


def test_the_broken_methods_are_the_ones_described():
    p = lt.separable_quadratic(n=4, d=6, kappa=10.0, seed=1)
    nocv = lt._method(p, "no-control-variates")
    comm = SimulatedComm(p.n, seed=0)
    state = nocv.init(p.x0, p, comm)
    for _ in range(20):
        state, _ = nocv.step(state, p, comm)
    assert (state.h_i == 0).all()
    assert lt._method(p, "p=1").p == 1.0 and lt._method(p, "chi=2")._chi(p.n) == 2.0
    correct = lt._method(p, None)
    assert correct.p < 1.0 and correct.chi < 1.0 and correct.s == 2
    small = lt._method(p, "step/10")  # a tenth of the step, p and chi at theory
    assert small.gamma == pytest.approx(0.1 * correct.gamma)
    assert (small.p, small.chi, small.s) == (correct.p, correct.chi, correct.s)


def test_per_efold_reads_a_geometric_sequence():
    rounds = np.repeat(np.arange(100.0), 3)  # one round every third step
    err = np.exp(-rounds / 7.0)
    assert lt.per_efold(err, rounds) == pytest.approx(7.0)
    assert lt.per_efold(np.ones_like(err), rounds) == math.inf
    err[-1] = math.inf
    assert lt.per_efold(err, rounds) == math.inf


def test_the_dense_payload_variant_charges_whole_vectors():
    p = lt.separable_quadratic(n=4, d=6, kappa=10.0, seed=1)
    for variant, per_round in ((None, 32 * 2 * 6 / 4), ("dense-payload", 32 * 6)):
        algo = lt._method(p, variant, p=1.0)
        _, rounds, bits = lt.trajectory(algo, p, 5, seed=0)
        assert rounds[-1] == 5 and bits[-1] == 5 * per_round


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(lt.CHECKS)))
def test_the_full_checks_have_power(index):
    rows = run_power(lt.CHECKS[index], False)
    assert rows[0].verdict == "pass" and all(r.verdict == "rejected" for r in rows[1:]), rows
