"""Byz-DASHA-PAGE: one step against a hand-written reference, bits per round (one compressed
message, coin or not), the theory step and parameters, bad options, and parity with gloo."""

from __future__ import annotations

import math

import pytest
import torch
from runs import torch_dist_helpers

from algorithms.byzantine.byz_dasha_page import TAG_BDP_BATCH, TAG_BDP_COIN, ByzDASHAPAGE
from algorithms.robust.attacks import alie_z
from algorithms.robust.options import TAG_BUCKET
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

RANDK = "randk:k=2"


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, samples=60, features=6, seed=4, split="sorted")


def make(problem, spec=RANDK, **kw):
    opts = dict(byzantine=1, attack="alie", aggregator="cm", bucket=2, p=0.4, batch_size=2)
    opts.update(kw)
    return ByzDASHAPAGE.configure(problem, parse_spec(spec), **opts)[0]


def test_step_matches_the_reference(logreg):
    algo = make(logreg)
    comm = SimulatedComm(logreg.n, seed=5)
    state = algo.init(logreg.x0, logreg, comm)
    C, a, syncs = algo.compressor, algo.momentum, 0
    assert a == pytest.approx(1 / (2 * 2 + 1))  # omega = d/k - 1 = 2
    for _ in range(10):
        t = state.t
        x = state.x - algo.gamma * state.g
        sync = comm.coin(t, algo.p, tag=TAG_BDP_COIN)
        if sync:
            h_i = logreg.grad(x)
        else:
            batch = logreg.sample(comm.rng(t, tag=TAG_BDP_BATCH), algo.batch_size)
            h_i = state.h_i + logreg.grad(x, batch) - logreg.grad(state.x, batch)
        msg = h_i - state.h_i - a * (state.g_i - state.h_i)
        g_i = state.g_i + C.decode(C.encode(msg, comm.rng_for(C, t)))
        rows = g_i.clone()
        h = g_i[:4]
        rows[-1] = h.mean(0) - alie_z(5, 1) * h.std(0)  # ALIE with z_max(n = 5, K = 1)
        perm = comm.server_rng(t, tag=TAG_BUCKET).permutation(5)[0]
        b = torch.stack([rows[perm[0:2]].mean(0), rows[perm[2:4]].mean(0), rows[perm[4]]])
        state, info = algo.step(state, logreg, comm)
        syncs += info.extras["sync"]
        torch.testing.assert_close(state.x, x, rtol=0, atol=1e-15)
        torch.testing.assert_close(state.h_i, h_i, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(state.g_i, g_i, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(state.g, b.median(dim=0).values, rtol=1e-12, atol=1e-14)
    assert 0 < syncs < 10


def test_bits_per_round_are_one_compressed_message(logreg):
    algo = make(logreg, p=0.5)
    comm = SimulatedComm(logreg.n, seed=1)
    state = algo.init(logreg.x0, logreg, comm)
    for _ in range(6):
        state, info = algo.step(state, logreg, comm)
        assert info.bits_down == 32 * logreg.d
        assert info.bits_up == 2 * (32 + 3)  # Rand-2 of d = 6, sync round or not


def test_theory_step_and_parameters(logreg):
    algo = make(logreg, p=None, momentum=None)
    k, calL = logreg.consts, logreg.sample_smoothness()
    omega, b, m, c, G = 2.0, 2, 12, 256 / 15, 4
    R = 12 * omega * (2 * omega + 1) * (k.L_tilde**2 + calL**2 / b) + 2 * (m / b) * calL**2 / b
    R *= (math.sqrt(1 / G) + math.sqrt(8 * c * 1 / 5)) ** 2
    assert algo.gamma == pytest.approx(1 / (k.L + math.sqrt(R)), rel=1e-12)
    assert algo.p == pytest.approx(b / m) and algo.momentum == pytest.approx(1 / 5)


def test_bad_options_are_rejected(logreg):
    with pytest.raises(ValueError, match="unbiased"):
        make(logreg, spec="topk:k=2")
    with pytest.raises(ValueError, match="momentum must be in"):
        make(logreg, momentum=2.0)
    with pytest.raises(ValueError, match="honest majority"):
        make(logreg, byzantine=3)


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_sharded_parity(tmp_path):
    argv = ["byz-dasha-page", "--compressor", "randk:k=3", "--byzantine", "1", "--attack",
            "ipm", "--aggregator", "krum", "--step", "0.05"]  # fmt: skip
    torch_dist_helpers().sharded_parity(tmp_path, 2, 5, argv)


@pytest.mark.dist
def test_gloo_one_node_per_rank_label_flipping(tmp_path):
    h = torch_dist_helpers()
    argv = ["byz-dasha-page", "--compressor", "randk:k=3", "--byzantine", "1", "--attack", "lf",
            "--aggregator", "cc", *h.COMMON, "--problem", "logreg", "--nodes", "4"]  # fmt: skip
    proc, out = h.dist_run(tmp_path, 4, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert h.run([*argv, "--out", str(tmp_path / "sim")]) == 0
    h.assert_same_run(tmp_path / "sim", out)
