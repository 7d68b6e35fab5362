"""GMC: the update against a hand-written step, its reductions (EF-SGD at beta = 0, heavy-ball
GD with no compression), the virtual-iterate invariant, bits, convergence at the default step,
minibatches, rejected options, the runner, and parity with gloo processes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms.ef.ef14 import EF14
from algorithms.momentum.gmc import GMC, GMCState
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec

TOPK = "topk:k=2"


def topk_rows(v: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k by magnitude per row (ties to the lower index), written out independently."""
    out = torch.zeros_like(v)
    for i in range(v.shape[0]):
        order = sorted(range(v.shape[1]), key=lambda j: (-abs(float(v[i, j])), j))[:k]
        out[i, order] = v[i, order]
    return out


def test_one_step_is_the_hand_written_update(nonconvex):
    algo, _ = GMC.configure(nonconvex, parse_spec(TOPK), beta=0.7)
    gen = torch.Generator().manual_seed(0)
    d, m = nonconvex.d, nonconvex.n
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    x_prev = x + 0.3 * torch.randn(d, generator=gen, dtype=torch.float64)
    e_i = 0.1 * torch.randn(m, d, generator=gen, dtype=torch.float64)
    state = GMCState(x=x, t=4, e_i=e_i, x_prev=x_prev)
    before = {k: v.clone() for k, v in vars(state).items() if torch.is_tensor(v)}
    new, info = algo.step(state, nonconvex, SimulatedComm(m, seed=0))
    p = e_i + algo.gamma * nonconvex.grad(x) + 0.7 * (x_prev - x)
    v = topk_rows(p, 2)
    torch.testing.assert_close(new.x, x - v.mean(0), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(new.e_i, p - v, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(new.x_prev, x, rtol=0, atol=0)
    assert new.t == 5
    assert info.extras["E"] == pytest.approx(float(((p - v) ** 2).sum(1).mean()), rel=1e-12)
    for k, v0 in before.items():  # the input state is not mutated
        torch.testing.assert_close(getattr(state, k), v0, rtol=0, atol=0)


def test_beta_zero_is_ef_sgd(nonconvex):
    c = parse_spec(TOPK)
    ef, _ = EF14.configure(nonconvex, c)
    gmc, rec = GMC.configure(nonconvex, c, beta=0.0)
    assert gmc.gamma == ef.gamma and rec["params"]["beta"] == 0.0
    a, ia, _ = trajectory(gmc, nonconvex, 30)
    b, ib, _ = trajectory(ef, nonconvex, 30)
    for s, r in zip(a, b, strict=True):
        torch.testing.assert_close(s.x, r.x, rtol=0, atol=1e-14)
        torch.testing.assert_close(s.e_i, r.e_i, rtol=0, atol=1e-14)
    assert [i.bits_up for i in ia] == [i.bits_up for i in ib]
    assert [i.bits_down for i in ia] == [i.bits_down for i in ib]


def test_identity_is_heavy_ball_gd(quad):
    algo, _ = GMC.configure(quad, parse_spec("identity"))
    states, _, _ = trajectory(algo, quad, 40)
    x_prev, x = quad.x0.clone(), quad.x0.clone()
    for s in states[1:]:
        x, x_prev = x - algo.gamma * quad.full_grad(x) + 0.9 * (x - x_prev), x
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
        assert float(s.e_i.abs().max()) == 0.0


def test_virtual_iterate_and_bits(nonconvex):
    c, d = parse_spec("topk:k=3"), nonconvex.d
    algo, _ = GMC.configure(nonconvex, c)
    states, infos, comm = trajectory(algo, nonconvex, 25)
    for s, s1 in zip(states[:-1], states[1:], strict=True):
        virtual, virtual1 = s.x - s.e_i.mean(0), s1.x - s1.e_i.mean(0)
        step = algo.gamma * nonconvex.full_grad(s.x) - 0.9 * (s.x - s.x_prev)
        torch.testing.assert_close(virtual1, virtual - step, rtol=1e-12, atol=1e-13)
    # uplink: the Top-K payload only (the momentum travels for free); downlink: the model
    assert all(i.bits_up == c.bits(d) and i.bits_down == 32 * d for i in infos)
    assert comm.bits_totals()["bits_up"] == 25 * c.bits(d)


def test_converges_at_the_default_step(quad, nonconvex):
    algo, rec = GMC.configure(quad, parse_spec(TOPK))
    ef, _ = EF14.configure(quad, parse_spec(TOPK))
    assert rec["gamma"] == rec["gamma_theory"] == pytest.approx(0.1 * ef.gamma, rel=1e-14)
    assert "1905.12948" in rec["theory"]["source"] and "derived" in rec["theory"]["source"]
    states, _, _ = trajectory(algo, quad, 600)
    assert float(quad.loss(states[-1].x)) - quad.consts.f_star <= 1e-3
    algo, _ = GMC.configure(nonconvex, parse_spec(TOPK))
    states, _, _ = trajectory(algo, nonconvex, 400)
    g0 = float((nonconvex.full_grad(nonconvex.x0) ** 2).sum())
    assert float((nonconvex.full_grad(states[-1].x) ** 2).sum()) <= g0 / 1000


def test_minibatches_are_per_node_and_reproducible(nonconvex):
    algo, _ = GMC.configure(nonconvex, parse_spec(TOPK), batch_size=4)
    a, _, _ = trajectory(algo, nonconvex, 15, seed=7)
    b, _, _ = trajectory(algo, nonconvex, 15, seed=7)
    c, _, _ = trajectory(algo, nonconvex, 15, seed=8)
    torch.testing.assert_close(a[-1].x, b[-1].x, rtol=0, atol=0)
    assert not torch.equal(a[-1].x, c[-1].x)
    full, _ = GMC.configure(nonconvex, parse_spec(TOPK))
    state = replace(a[3])
    sto, _ = algo.step(state, nonconvex, SimulatedComm(nonconvex.n, seed=7))
    det, _ = full.step(state, nonconvex, SimulatedComm(nonconvex.n, seed=7))
    assert not torch.equal(sto.x, det.x)  # the minibatch is used


def test_bad_options_and_compressor_are_refused(nonconvex):
    for beta in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"beta must be in \[0, 1\)"):
            GMC.configure(nonconvex, parse_spec(TOPK), beta=beta)
    with pytest.raises(ValueError, match="--batch-size must be a positive integer"):
        GMC.configure(nonconvex, parse_spec(TOPK), batch_size=0)
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        GMC.configure(nonconvex, parse_spec("randk:k=3"))


def test_runner(tmp_path):
    assert ALGORITHMS["gmc"] is GMC
    out = tmp_path / "r"
    argv = ["gmc", "--compressor", TOPK, "--problem", "logreg-nonconvex", "--nodes", "4",
            "--iters", "20", "--beta", "0.5", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "GMC" and cfg["step"]["params"]["beta"] == 0.5
    with open(out / "history.csv") as fh:
        assert "E" in fh.readline().strip().split(",")


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["gmc", "--compressor", "topk:k=2"])


@pytest.mark.dist
@pytest.mark.parametrize("nproc", [2, 3])
def test_gloo_matches_the_simulation_with_minibatches(tmp_path, nproc):
    argv = ["gmc", "--compressor", "scaled-sign", "--batch-size", "3"]
    torch_dist_helpers().parity(tmp_path, nproc, argv)
