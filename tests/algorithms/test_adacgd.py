"""AdaCGD: each branch of the adaptive mechanism on crafted rows with its bits, EF21 when no
level can pass, the invariant, the theory step (CLAG's constants), convergence, bad input, and
parity with gloo processes."""

from __future__ import annotations

import math

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms.ef.adacgd import AdaCGD, adaptive, level_flag_bits, parse_levels
from algorithms.ef.ef21 import EF21
from algorithms.stepsizes import three_pc_AB
from comm import SimulatedComm
from compressors import parse_spec

FINEST, LEVELS = "topk:k=3", "topk:k=1|topk:k=2"


def test_each_branch_on_crafted_rows():
    d = 6
    x = torch.zeros(4, d, dtype=torch.float64)
    h = x.clone()
    h[0] = torch.tensor([0.1, 0, 0, 0, 0, 0])  # ||x - h||^2 = 0.01 <= zeta ||x - y||^2: skip
    h[1] = torch.tensor([-3.0, 0, 0, 0, 0, 0])  # one spike: Top-1 is exact
    h[2] = torch.tensor([-3.0, -2.0, 0, 0, 0, 0])  # two spikes: Top-2
    h[3] = -torch.ones(d)  # flat: no coarse level passes, the finest (Top-3) is sent
    y = x.clone()
    y[:, -1] = 1.0  # ||x - y||^2 = 1
    coarse, C = parse_levels(LEVELS, 4), parse_spec(FINEST)
    delta, nbits, level = adaptive(h, y, x, coarse, C, 0.5, SimulatedComm(4, seed=0), 0)
    assert level.tolist() == [0, 1, 2, 3]
    torch.testing.assert_close(delta[0], torch.zeros(d, dtype=torch.float64))
    torch.testing.assert_close(h[1:3] + delta[1:3], x[1:3])
    assert (delta[3] != 0).sum() == 3
    flag, idx = level_flag_bits(2), math.ceil(math.log2(d))
    assert flag == 2
    assert nbits.tolist() == [flag, flag + 32 + idx, flag + 2 * (32 + idx), flag + 3 * (32 + idx)]


def test_with_zeta_zero_it_is_ef21(quad):
    C = parse_spec(FINEST)
    ada, _ = AdaCGD.configure(quad, C, levels=LEVELS, zeta=0.0, step=0.1)
    ef21, _ = EF21.configure(quad, C, step=0.1)
    a, ia, _ = trajectory(ada, quad, 15)
    b, ib, _ = trajectory(ef21, quad, 15)
    for sa, sb in zip(a, b, strict=True):
        torch.testing.assert_close(sa.x, sb.x, rtol=1e-12, atol=1e-14)
    # EF21's Top-3 payload plus the outcome flag, every round
    for x, y in zip(ia, ib, strict=True):
        assert x.bits_up == y.bits_up + level_flag_bits(2)
        assert x.extras["level"] == 3


def test_theory_step_invariant_and_convergence(quad):
    C = parse_spec(FINEST)
    algo, rec = AdaCGD.configure(quad, C, levels=LEVELS)
    A, B = three_pc_AB("clag", C.delta(quad.d), zeta=1.0)
    th = rec["theory"]["inputs"]
    assert (th["A"], th["B"]) == (A, B)
    c = quad.consts
    g = min(1 / (c.L + c.L_tilde * math.sqrt(2 * B / A)), A / (2 * c.mu))
    assert algo.gamma == pytest.approx(g, rel=1e-12)
    states, infos, _ = trajectory(algo, quad, 400)
    for s in states[::50]:
        torch.testing.assert_close(s.g, s.g_i.mean(0), rtol=1e-10, atol=1e-12)
    gap0 = float(quad.loss(states[0].x)) - c.f_star
    gap = float(quad.loss(states[-1].x)) - c.f_star
    assert gap <= (1 - algo.gamma * c.mu) ** 400 * gap0
    assert min(i.extras["level"] for i in infos) < 3  # the coarse levels or skips are used


@pytest.mark.parametrize(
    "opts, spec, match",
    [
        (dict(levels="randk:k=1"), FINEST, "contractive"),
        (dict(levels=""), FINEST, "levels must be"),
        (dict(zeta=-1.0), FINEST, "zeta must be >= 0"),
        ({}, "randk:k=2", "needs a contractive compressor"),
    ],
)
def test_bad_input_is_refused(quad, opts, spec, match):
    with pytest.raises(ValueError, match=match):
        AdaCGD.configure(quad, parse_spec(spec), **opts)


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_two_processes_match_the_simulation(tmp_path):
    argv = ["adacgd", "--compressor", FINEST, "--levels", LEVELS]
    torch_dist_helpers().parity(tmp_path, 2, argv)
