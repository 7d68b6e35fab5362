"""RoSDHB: one step against a hand-written reference, one coordinated mask for every node,
bits per round, no theory step without --step, bad options, and parity with gloo processes."""

from __future__ import annotations

import pytest
import torch
from runs import torch_dist_helpers

from algorithms.byzantine.rosdhb import RoSDHB
from algorithms.robust.options import TAG_BUCKET
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

SHARED = "randk:k=2,shared=true"


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, samples=60, features=6, seed=4, split="sorted")


def make(problem, spec=SHARED, **kw):
    opts = dict(byzantine=1, attack="bf", aggregator="cm", bucket=2, step=0.5)
    opts.update(kw)
    return RoSDHB.configure(problem, parse_spec(spec), **opts)[0]


def test_step_matches_the_reference(logreg):
    algo = make(logreg)
    comm = SimulatedComm(logreg.n, seed=3)
    state = algo.init(logreg.x0, logreg, comm)
    C, m_i = algo.compressor, torch.zeros(5, logreg.d, dtype=torch.float64)
    for _ in range(6):
        t = state.t
        tilde = C.decode(C.encode(logreg.grad(state.x), comm.rng_for(C, t)))
        probe = C.decode(C.encode(torch.ones(5, logreg.d, dtype=torch.float64), comm.rng_for(C, t)))
        assert (probe == probe[:1]).all()  # one mask for every node
        m_i = 0.9 * m_i + 0.1 * tilde
        rows = m_i.clone()
        rows[-1] = -m_i[-1]
        perm = comm.server_rng(t, tag=TAG_BUCKET).permutation(5)[0]
        b = torch.stack([rows[perm[0:2]].mean(0), rows[perm[2:4]].mean(0), rows[perm[4]]])
        x = state.x - 0.5 * b.median(dim=0).values
        state, info = algo.step(state, logreg, comm)
        torch.testing.assert_close(state.m_i, m_i, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(state.x, x, rtol=1e-13, atol=1e-15)
        assert info.bits_down == 32 * logreg.d
        packet = C.encode(logreg.grad(state.x), comm.rng_for(C, t + 1))
        assert int(packet.nbits[0]) < 32 * logreg.d


def test_needs_a_step_and_checks_beta(logreg):
    with pytest.raises(ValueError, match="give --step"):
        make(logreg, step="theory")
    with pytest.raises(ValueError, match="beta must be in"):
        make(logreg, beta=1.0)
    with pytest.raises(ValueError, match="unbiased"):
        make(logreg, spec="topk:k=2")


def test_runner_cli(tmp_path):
    argv = ["rosdhb", "--compressor", SHARED, "--problem", "logreg", "--nodes", "6",
            "--byzantine", "1", "--attack", "ipm", "--step", "0.5", "--beta", "0.8",
            "--iters", "10", "--quiet", "--out", str(tmp_path / "r")]  # fmt: skip
    assert run(argv) == 0
    assert run([*argv[:-1], str(tmp_path / "s"), "--step", "theory"]) == 2


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_sharded_parity(tmp_path):
    argv = ["rosdhb", "--compressor", "randk:k=3,shared=true", "--byzantine", "1", "--attack",
            "alie", "--aggregator", "cm", "--step", "0.05"]  # fmt: skip
    torch_dist_helpers().sharded_parity(tmp_path, 2, 5, argv)


@pytest.mark.dist
def test_gloo_one_node_per_rank_label_flipping(tmp_path):
    h = torch_dist_helpers()
    argv = ["rosdhb", "--compressor", SHARED, "--byzantine", "1", "--attack", "lf",
            "--aggregator", "gm", "--bucket", "1", "--step", "0.5", *h.COMMON,
            "--problem", "logreg", "--nodes", "4"]  # fmt: skip
    proc, out = h.dist_run(tmp_path, 4, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, "--out", str(tmp_path / "sim")]) == 0
    h.assert_same_run(tmp_path / "sim", out)
