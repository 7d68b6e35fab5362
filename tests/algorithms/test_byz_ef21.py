"""Byz-EF21: one step against a hand-written reference, EF21 exactly when nothing is
Byzantine and the aggregator is the mean, bits per round, the theory step, bad options, and
parity with gloo processes."""

from __future__ import annotations

import pytest
import torch
from runs import torch_dist_helpers

from algorithms.byzantine.byz_ef21 import ByzEF21
from algorithms.ef.ef21 import EF21
from algorithms.robust.options import TAG_BUCKET
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

TOPK = "topk:k=2"


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, samples=60, features=6, seed=4, split="sorted")


def make(problem, spec=TOPK, **kw):
    opts = dict(byzantine=1, attack="ipm", aggregator="cm", bucket=2)
    opts.update(kw)
    return ByzEF21.configure(problem, parse_spec(spec), **opts)[0]


def test_step_matches_the_reference(logreg):
    algo = make(logreg)
    comm = SimulatedComm(logreg.n, seed=2)
    state = algo.init(logreg.x0, logreg, comm)
    C = algo.compressor
    for _ in range(8):
        t = state.t
        x = state.x - algo.gamma * state.g
        g_i = state.g_i + C.decode(C.encode(logreg.grad(x) - state.g_i, comm.rng_for(C, t)))
        rows = g_i.clone()
        rows[-1] = -0.1 * g_i[:4].mean(0)  # IPM, eps = 0.1
        perm = comm.server_rng(t, tag=TAG_BUCKET).permutation(5)[0]
        b = torch.stack([rows[perm[0:2]].mean(0), rows[perm[2:4]].mean(0), rows[perm[4]]])
        state, _ = algo.step(state, logreg, comm)
        torch.testing.assert_close(state.x, x, rtol=0, atol=0)
        torch.testing.assert_close(state.g_i, g_i, rtol=0, atol=0)
        torch.testing.assert_close(state.g, b.median(dim=0).values, rtol=0, atol=1e-15)


def test_is_ef21_without_byzantine_nodes_and_with_the_mean(logreg):
    byz = make(logreg, byzantine=0, aggregator="mean", bucket=1, step=0.3)
    ef21, _ = EF21.configure(logreg, parse_spec(TOPK), step=0.3)
    c1, c2 = SimulatedComm(logreg.n, seed=0), SimulatedComm(logreg.n, seed=0)
    a, b = byz.init(logreg.x0, logreg, c1), ef21.init(logreg.x0, logreg, c2)
    for _ in range(15):
        (a, ia), (b, ib) = byz.step(a, logreg, c1), ef21.step(b, logreg, c2)
        torch.testing.assert_close(a.x, b.x, rtol=1e-13, atol=1e-15)
        assert ia.bits_up == ib.bits_up and ia.bits_down == ib.bits_down


def test_bits_per_round(logreg):
    algo = make(logreg, attack="bf")
    comm = SimulatedComm(logreg.n, seed=0)
    state = algo.init(logreg.x0, logreg, comm)
    d = logreg.d
    for _ in range(3):
        state, info = algo.step(state, logreg, comm)
        assert info.bits_down == 32 * d
        assert info.bits_up == 2 * (32 + 3)  # Top-2 of d = 6: values and 3-bit indices


def test_theory_step(logreg):
    c, K, n = 256 / 15, 1, logreg.n
    k, alpha = logreg.consts, 2 / 6
    expect = 1 / (k.L + (2 / alpha) * (1 + (8 * c * K / n) ** 0.5) * k.L_tilde)
    assert make(logreg).gamma == pytest.approx(expect, rel=1e-12)
    assert make(logreg, byzantine=0).gamma > make(logreg).gamma


def test_bad_options_are_rejected(logreg):
    with pytest.raises(ValueError, match="contractive"):
        make(logreg, spec="randk:k=2")
    with pytest.raises(ValueError, match="honest majority"):
        make(logreg, byzantine=3)
    with pytest.raises(ValueError, match="aggregator must be one of"):
        make(logreg, aggregator="trimmed")


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_sharded_parity(tmp_path):
    argv = ["byz-ef21", "--compressor", TOPK, "--byzantine", "1", "--attack", "bf",
            "--aggregator", "gm", "--step", "0.05"]  # fmt: skip
    torch_dist_helpers().sharded_parity(tmp_path, 2, 5, argv)


@pytest.mark.dist
def test_gloo_one_node_per_rank_label_flipping(tmp_path):
    h = torch_dist_helpers()
    argv = ["byz-ef21", "--compressor", TOPK, "--byzantine", "1", "--attack", "lf",
            "--aggregator", "krum", *h.COMMON, "--problem", "logreg", "--nodes", "4"]  # fmt: skip
    proc, out = h.dist_run(tmp_path, 4, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert h.run([*argv, "--out", str(tmp_path / "sim")]) == 0
    h.assert_same_run(tmp_path / "sim", out)
