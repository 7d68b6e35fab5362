"""Byz-VR-MARINA: one step against a hand-written reference, bits per round, label flipping,
the honest objective it reports, bad options, the comm layer's gather, the runner, and parity
with gloo processes (sharded nodes, so the all-gather of row blocks is exercised)."""

from __future__ import annotations

import csv

import pytest
import torch
from runs import torch_dist_helpers

from algorithms.byzantine.byz_vr_marina import TAG_BYZ_BATCH, TAG_BYZ_COIN, ByzVRMARINA
from algorithms.robust.options import TAG_BUCKET
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, samples=60, features=6, seed=4, split="sorted")


def make(problem, **kw):
    opts = dict(byzantine=1, attack="bf", aggregator="cm", bucket=2, p=0.5, batch_size=2)
    opts.update(kw)
    return ByzVRMARINA.configure(problem, parse_spec("randk:k=2"), **opts)[0]


def reference_step(algo, state, problem, seed):
    """Alg. 1 of arXiv 2206.00529 written out for n = 5, K = 1, bit flipping, bucketed CM."""
    comm = SimulatedComm(problem.n, seed=seed)
    C, t = algo.compressor, state.t
    x = state.x - algo.gamma * state.g
    if comm.coin(t, algo.p, tag=TAG_BYZ_COIN):
        rows = problem.grad(x)
    else:
        batch = problem.sample(comm.rng(t, tag=TAG_BYZ_BATCH), algo.batch_size)
        diff = problem.grad(x, batch) - problem.grad(state.x, batch)
        rows = state.g + C.decode(C.encode(diff, comm.rng_for(C, t)))
    rows = rows.clone()
    rows[-1] = -rows[-1]  # the Byzantine node flips its message
    perm = comm.server_rng(t, tag=TAG_BUCKET).permutation(5)[0]
    means = torch.stack([rows[perm[0:2]].mean(0), rows[perm[2:4]].mean(0), rows[perm[4:5]][0]])
    return x, means.median(dim=0).values  # three buckets: the median is the middle one


def test_step_matches_the_reference(logreg):
    algo = make(logreg)
    comm = SimulatedComm(logreg.n, seed=7)
    state = algo.init(logreg.x0, logreg, comm)
    syncs = 0
    for _ in range(12):
        x, g = reference_step(algo, state, logreg, seed=7)
        state, info = algo.step(state, logreg, comm)
        torch.testing.assert_close(state.x, x, rtol=0, atol=1e-15)
        torch.testing.assert_close(state.g, g, rtol=1e-12, atol=1e-14)
        syncs += info.extras["sync"]
    assert 0 < syncs < 12  # both branches were exercised


def test_bits_per_round(logreg):
    algo = make(logreg, attack="ipm")
    comm = SimulatedComm(logreg.n, seed=1)
    state = algo.init(logreg.x0, logreg, comm)
    d, C = logreg.d, algo.compressor
    for _ in range(10):
        t = state.t
        sync = comm.coin(t, algo.p, tag=TAG_BYZ_COIN)
        batch = logreg.sample(comm.rng(t, tag=TAG_BYZ_BATCH), algo.batch_size)
        x = state.x - algo.gamma * state.g
        packet = C.encode(logreg.grad_diff(x, state.x, batch), comm.rng_for(C, t))
        state, info = algo.step(state, logreg, comm)
        assert info.bits_down == 32 * d
        assert info.bits_up == (32 * d if sync else float(packet.nbits.double().mean()))


def test_label_flipping_changes_only_the_byzantine_data(logreg):
    algo = make(logreg, attack="lf", aggregator="mean", bucket=1)
    state = algo.init(logreg.x0, logreg, SimulatedComm(logreg.n, seed=0))
    g_i = logreg.grad(logreg.x0)
    flipped = logreg.label_flipped([4]).grad(logreg.x0)
    torch.testing.assert_close(flipped[:4], g_i[:4], rtol=0, atol=0)
    assert not torch.allclose(flipped[4], g_i[4])
    torch.testing.assert_close(state.g, torch.cat([g_i[:4], flipped[4:]]).mean(0))
    with pytest.raises(ValueError, match="no labels to flip"):
        quad = make_problem("quadratic", nodes=4)
        make(quad, attack="lf", step=0.1).init(quad.x0, quad, SimulatedComm(4, seed=0))


def test_reports_the_honest_objective(logreg):
    algo = make(logreg)
    comm = SimulatedComm(logreg.n, seed=0)
    state, info = algo.step(algo.init(logreg.x0, logreg, comm), logreg, comm)
    honest = logreg.local([0, 1, 2, 3])
    f = float(honest.node_loss(state.x.expand(4, -1)).mean())
    g = honest.grad(state.x).mean(0)
    assert info.extras["f_honest"] == pytest.approx(f, rel=1e-12)
    assert info.extras["grad_norm_sq_honest"] == pytest.approx(float(g @ g), rel=1e-12)


def test_gather_rows_charges_and_returns_every_row():
    comm = SimulatedComm(3, seed=0)
    rows = torch.arange(6.0).reshape(3, 2)
    torch.testing.assert_close(comm.gather_rows(rows, torch.tensor([5, 6, 7])), rows)
    assert comm.ledger.up.tolist() == [5, 6, 7]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"attack": "nope"}, "attack must be one of"),
        ({"aggregator": "avg"}, "aggregator must be one of"),
        ({"bucket": 0}, "bucket must be a positive integer"),
        ({"byzantine": -1}, "byzantine must be an integer"),
        ({"cc_tau": 0.0}, "cc_tau must be > 0"),
        ({"p": 1.5}, r"p must be in \(0, 1\]"),
    ],
)
def test_bad_options_are_rejected(logreg, kw, match):
    with pytest.raises(ValueError, match=match):
        make(logreg, **kw)


def test_an_honest_majority_is_required(logreg):
    with pytest.raises(ValueError, match="honest majority"):
        make(logreg, byzantine=3)  # the theory step
    algo = make(logreg, byzantine=3, step=0.1)
    with pytest.raises(ValueError, match="honest majority"):
        algo.init(logreg.x0, logreg, SimulatedComm(logreg.n, seed=0))


def test_theory_step_shrinks_with_the_byzantine_fraction(logreg):
    steps = [make(logreg, byzantine=k, p=None).gamma for k in (0, 1, 2)]
    assert steps[0] > steps[1] > steps[2] > 0


def test_runner_writes_the_honest_columns(tmp_path):
    argv = ["byz-vr-marina", "--compressor", "randk:k=2", "--problem", "logreg", "--nodes", "6",
            "--byzantine", "1", "--attack", "alie", "--aggregator", "krum", "--bucket", "1",
            "--iters", "20", "--quiet", "--out", str(tmp_path / "r")]  # fmt: skip
    assert run(argv) == 0
    with open(tmp_path / "r" / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert float(rows[-1]["grad_norm_sq_honest"]) >= 0 and rows[-1]["f_honest"]


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_gloo_sharded_parity(tmp_path):
    argv = ["byz-vr-marina", "--compressor", "randk:k=3", "--byzantine", "1", "--attack",
            "alie", "--aggregator", "cm", "--step", "0.05"]  # fmt: skip
    torch_dist_helpers().sharded_parity(tmp_path, 2, 5, argv)


@pytest.mark.dist
@pytest.mark.parametrize(
    "extra",
    [
        ["--attack", "ipm", "--aggregator", "gm", "--problem", "logreg"],
        ["--attack", "lf", "--aggregator", "krum", "--bucket", "1", "--problem", "logreg"],
        ["--attack", "bf", "--aggregator", "cc", "--problem", "logreg"],
    ],
)
def test_gloo_one_node_per_rank_parity(tmp_path, extra):
    h = torch_dist_helpers()
    argv = ["byz-vr-marina", "--compressor", "randk:k=3", "--byzantine", "1", "--step", "0.5",
            *h.COMMON, *extra, "--nodes", "4"]  # fmt: skip
    proc, out = h.dist_run(tmp_path, 4, argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run([*argv, "--out", str(tmp_path / "sim")]) == 0
    h.assert_same_run(tmp_path / "sim", out)
