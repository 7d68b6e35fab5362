"""DCGD+: one step against a hand-written reference and its bits, an unbiased server gradient,
GD when every coordinate is sent, the theory step (DCGD's for uniform sampling), linear
convergence where ``grad f_i(x*) = 0``, bad input, and parity with gloo processes."""

from __future__ import annotations

import math

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.shifts import smoothness_aware as sa
from algorithms.shifts.dcgd import DCGD
from algorithms.shifts.dcgd_plus import DCGDPlus
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks.matrix_smoothness import scaled_least_squares

SPEC = "randk:k=2"


@pytest.fixture(scope="module")
def ls():
    return scaled_least_squares(n=3, d=6, m=30, decay=2.0)


def test_one_step_matches_a_hand_written_reference_and_charges_the_payload(ls):
    algo, _ = DCGDPlus.configure(ls, parse_spec(SPEC))
    states, _, _ = trajectory(algo, ls, 2, seed=9)
    s = states[-1]
    comm = SimulatedComm(ls.n, seed=9)
    nxt, info = algo.step(s, ls, comm)
    d = ls.d
    kept = SimulatedComm(ls.n, seed=9).rng(s.t, tag=sa.TAG_SAMPLE).uniform(d) < s.p_i
    g = torch.where(kept, ls.grad(s.x) / s.p_i, 0.0).mean(0)
    torch.testing.assert_close(nxt.x, s.x - algo.gamma * g, rtol=1e-13, atol=1e-15)
    bits = math.ceil(math.log2(d + 1)) + kept.sum(1) * (32 + math.ceil(math.log2(d)))
    assert comm.ledger.up.tolist() == bits.tolist()
    assert info.bits_down == 32 * d
    torch.testing.assert_close(s.p_i.sum(1), torch.full((ls.n,), 2.0, dtype=torch.float64))


def test_the_server_gradient_is_unbiased(ls):
    algo, _ = DCGDPlus.configure(ls, parse_spec(SPEC), step=1.0)
    x0 = ls.x0 + 0.3
    state = algo.init(x0, ls, SimulatedComm(ls.n, seed=0))
    seeds = 4000
    g = torch.stack(
        [x0 - algo.step(state, ls, SimulatedComm(ls.n, seed=s))[0].x for s in range(seeds)]
    )
    se = g.std(0) / math.sqrt(seeds)
    assert ((g.mean(0) - ls.full_grad(x0)).abs() <= 4 * se + 1e-12).all()


def test_every_coordinate_sent_is_gradient_descent(ls):
    algo, _ = DCGDPlus.configure(ls, parse_spec(f"randk:k={ls.d}"))
    states, _, _ = trajectory(algo, ls, 5)
    for s, x in zip(states, gd(ls, algo.gamma, 5), strict=True):
        torch.testing.assert_close(s.x, x, rtol=1e-12, atol=1e-14)


def test_the_theory_step_is_dcgds_for_uniform_sampling_and_larger_for_diag(ls):
    uni, _ = DCGDPlus.configure(ls, parse_spec(SPEC), sampling="uniform")
    dcgd, _ = DCGD.configure(ls, parse_spec(SPEC))
    assert uni.gamma == pytest.approx(dcgd.gamma, rel=1e-9)
    plus, rec = DCGDPlus.configure(ls, parse_spec(SPEC))
    k = rec["theory"]["inputs"]
    assert plus.gamma == pytest.approx(1 / (k["L"] + 2 * k["calL_max"] / ls.n), rel=1e-12)
    assert plus.gamma > 1.5 * uni.gamma


def test_converges_linearly_to_x_star_when_the_nodes_agree_there():
    # one node: grad f_1(x*) = 0, no neighbourhood
    p = scaled_least_squares(n=1, d=6, m=60, decay=2.0)
    algo, _ = DCGDPlus.configure(p, parse_spec(SPEC))
    xs = p.x_star
    states, _, _ = trajectory(algo, p, 1500, seed=2)
    e0, e = (float(((s.x - xs) ** 2).sum()) for s in (states[0], states[-1]))
    assert e <= (1 - algo.gamma * p.consts.mu) ** 1500 * e0 * 10
    assert e < 1e-10 * e0


@pytest.mark.parametrize(
    "opts, spec, match",
    [
        (dict(sampling="importance"), SPEC, "sampling must be one of diag, uniform"),
        ({}, "randk:k=2,shared=true", "independent sparsifier"),
        ({}, "natural", "independent sparsifier"),
    ],
)
def test_bad_input_is_refused(ls, opts, spec, match):
    with pytest.raises(ValueError, match=match):
        algo, _ = DCGDPlus.configure(ls, parse_spec(spec), **opts)
        algo.init(ls.x0, ls, SimulatedComm(ls.n, seed=0))


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_two_processes_match_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["dcgd-plus", "--compressor", "randk:k=3"])
