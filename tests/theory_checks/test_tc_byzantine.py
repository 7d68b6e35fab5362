"""The check of :mod:`theory_checks.byzantine`: its variants, that the broken method is the one
described, that the instance is homogeneous (its fast power runs in test_tc_power.py; the full
version here under ``slow``)."""

from __future__ import annotations

import pytest
import torch

from algorithms.byzantine.byz_vr_marina import TAG_BYZ_BATCH
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import byzantine
from theory_checks.base import run_power


def test_checks_name_their_variants():
    kinds = {c.name: {v.kind for v in c.variants} for c in byzantine.CHECKS}
    assert kinds["byzantine.vr_antidote"] == {"other", "no-variance-reduction"}
    assert kinds["byzantine.dasha_page_antidote"] == {"other", "no-variance-reduction"}
    assert kinds["byzantine.ef21_exact"] == {"other", "no-error-feedback", "step-too-small"}
    assert kinds["byzantine.rosdhb_converges"] == {"other", "wrong-shift"}
    assert all(c.fast for c in byzantine.CHECKS)
    assert [c.rate for c in byzantine.CHECKS] == [False, False, True, False]


def test_instance_is_homogeneous():
    p = byzantine.homogeneous_logreg()
    g_i = p.grad(torch.randn(p.d, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(g_i, g_i[:1].expand_as(g_i), rtol=0, atol=1e-14)  # zeta^2 = 0


def test_no_vr_variant_aggregates_compressed_minibatch_gradients():
    p = byzantine.homogeneous_logreg(n=4)
    algo, _ = byzantine.ByzRobustSGD.configure(
        p, parse_spec("randk:k=2"), byzantine=0, aggregator="mean", bucket=1, p=0.2
    )
    comm = SimulatedComm(p.n, seed=0)
    s0 = algo.init(p.x0, p, comm)
    s1, _ = algo.step(s0, p, comm)
    x = p.x0 - algo.gamma * s0.g
    batch = p.sample(comm.rng(0, tag=TAG_BYZ_BATCH), 1)
    C = algo.compressor
    expect = C.decode(C.encode(p.grad(x, batch), comm.rng_for(C, 0))).mean(0)
    torch.testing.assert_close(s1.g, expect, rtol=1e-12, atol=1e-14)


def test_no_ef_variant_aggregates_compressed_gradients():
    p = byzantine.homogeneous_logreg(n=4)
    algo, _ = byzantine.ByzEF21NoEF.configure(
        p, parse_spec("topk:k=2"), byzantine=0, aggregator="mean", bucket=1
    )
    comm = SimulatedComm(p.n, seed=0)
    s0 = algo.init(p.x0, p, comm)
    s1, _ = algo.step(s0, p, comm)
    C = algo.compressor
    x = p.x0 - algo.gamma * s0.g
    torch.testing.assert_close(s1.g, C.decode(C.encode(p.grad(x), comm.rng_for(C, 0))).mean(0))
    torch.testing.assert_close(s1.g_i, s0.g_i)  # no memory update


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_full_version_has_power(index):
    rows = run_power(byzantine.CHECKS[index], fast=False)
    assert all(r.ok for r in rows), rows
