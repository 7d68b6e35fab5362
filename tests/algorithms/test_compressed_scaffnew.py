"""CompressedScaffnew: the mask's ownership, one step against a hand-written reference, the
invariants (sum of control variates, fixed point), bits per round, Scaffnew at ``s = n``,
convergence at the theory parameters, bad options, the runner, and parity with gloo."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from runs import torch_dist_helpers, trajectory

from algorithms.local.compressed_scaffnew import CompressedScaffnew, ownership
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec

IDENTITY = parse_spec("identity")


def configure(problem, **opts):
    return CompressedScaffnew.configure(problem, IDENTITY, **opts)


@pytest.mark.parametrize("n, s, d", [(5, 2, 10), (5, 2, 7), (4, 3, 6), (7, 7, 3), (10, 2, 3)])
def test_every_coordinate_has_exactly_s_owners(n, s, d):
    for seed in range(20):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        q = ownership(perm, n, s, d)
        assert q.shape == (n, d) and q.dtype == torch.bool
        assert q.sum(dim=0).tolist() == [s] * d
        counts = q.sum(dim=1)
        if s * d >= n:  # every node owns floor or ceil of s d / n coordinates
            assert set(counts.tolist()) <= {(s * d) // n, -(-s * d // n)}
        else:  # s d nodes own one coordinate, the others none
            assert sorted(counts.tolist()) == [0] * (n - s * d) + [1] * (s * d)


def test_each_node_owns_each_coordinate_with_probability_s_over_n():
    n, s, d, draws = 5, 2, 7, 1500
    algo = CompressedScaffnew(compressor=IDENTITY, gamma=0.1, s=s, chi=0.5, p=0.5)
    hits = torch.zeros(n, d)
    for t in range(draws):
        hits += algo.mask(SimulatedComm(n, seed=1), t, n, d).double()
    assert torch.allclose(hits / draws, torch.full((n, d), s / n), atol=0.05)


def reference_step(problem, gamma, chi, p, s, x_i, h_i, q):
    """The update written out: local step, owners' average, masked control-variate step."""
    xhat = x_i - gamma * (problem.grad(x_i) - h_i)
    qd = q.double()
    xbar = (qd * xhat).sum(dim=0) / s
    return xbar, xbar.expand_as(xhat), h_i + (p * chi / gamma) * qd * (xbar - xhat)


def test_one_step_is_the_reference(quad):
    algo, _ = configure(quad, p=1.0)  # communicate every step
    comm = SimulatedComm(quad.n, seed=4)
    state = algo.init(quad.x0, quad, comm)
    for _ in range(3):
        gen = torch.Generator().manual_seed(state.t)
        start = replace(
            state,
            x_i=state.x_i + torch.randn(state.x_i.shape, generator=gen, dtype=torch.float64),
            h_i=state.h_i - state.h_i.mean(0),
        )
        q = algo.mask(comm, start.t, quad.n, quad.d)
        xbar, x_i, h_i = reference_step(
            quad, algo.gamma, algo.chi, 1.0, algo.s, start.x_i, start.h_i, q
        )
        state, info = algo.step(start, quad, comm)
        torch.testing.assert_close(state.x, xbar, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state.x_i, x_i, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state.h_i, h_i, rtol=1e-12, atol=1e-12)
        assert info.extras["sync"] == 1.0
        assert start.x_i is not state.x_i and not torch.equal(start.x_i, state.x_i)


def test_a_local_step_sends_nothing_and_keeps_the_server_model(quad):
    algo, _ = configure(quad, p=1e-12)  # the shared coin never fires
    comm = SimulatedComm(quad.n, seed=0)
    state = algo.init(quad.x0, quad, comm)
    before = state.x_i.clone()
    new, info = algo.step(state, quad, comm)
    torch.testing.assert_close(new.x_i, before - algo.gamma * quad.grad(before))
    assert torch.equal(new.h_i, state.h_i) and torch.equal(new.x, state.x)
    assert torch.equal(state.x_i, before)  # the input state is not mutated
    assert info.bits_up == 0 and info.bits_down == 0 and info.extras["sync"] == 0.0


def test_bits_per_round_are_the_formula(quad):
    n, d = quad.n, quad.d  # 5 nodes, d = 10: s d / n = 4 values per node
    algo, _ = configure(quad)
    _, infos, comm = trajectory(algo, quad, 60)
    syncs = [i for i in infos if i.extras["sync"]]
    assert 0 < len(syncs) < 60
    assert all(i.bits_up == 32 * algo.s * d / n and i.bits_down == 32 * d for i in syncs)
    assert all(i.bits_up == 0 and i.bits_down == 0 for i in infos if not i.extras["sync"])
    assert comm.ledger.up.tolist() == [32 * 4 * len(syncs)] * n


def test_uneven_ownership_charges_each_node_its_own_values(quad):
    algo, _ = configure(quad, s=3, p=1.0)  # s d / n = 6: every node owns exactly 6
    _, _, comm = trajectory(algo, quad, 5)
    assert comm.ledger.up.tolist() == [32 * 6 * 5] * quad.n
    algo, _ = configure(quad, s=2, p=1.0)
    q = algo.mask(SimulatedComm(quad.n, seed=0), 0, quad.n, 7)  # 14 values over 5 nodes
    assert sorted(q.sum(1).tolist()) == [2, 3, 3, 3, 3]


def test_control_variates_sum_to_zero_and_the_solution_is_a_fixed_point(quad):
    algo, _ = configure(quad)
    states, _, comm = trajectory(algo, quad, 200)
    assert max(float(s.h_i.sum(0).abs().max()) for s in states) <= 1e-9
    xs = quad.x_star
    star = replace(states[-1], x_i=xs.expand(quad.n, -1).clone(), h_i=quad.grad(xs))
    for _ in range(10):
        star, _ = algo.step(star, quad, comm)
    torch.testing.assert_close(star.x_i, xs.expand(quad.n, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(star.h_i, quad.grad(xs), rtol=0, atol=1e-10)


def test_s_equal_n_is_scaffnew(quad):
    algo, _ = configure(quad, s=quad.n)
    assert algo.chi == 1.0 and algo.p == pytest.approx(min(1.0, 1 / math.sqrt(kappa(quad))))
    comm = SimulatedComm(quad.n, seed=2)
    state = algo.init(quad.x0, quad, comm)
    for _ in range(40):
        x_i, h_i = state.x_i, state.h_i
        state, info = algo.step(state, quad, comm)
        if info.extras["sync"]:
            xhat = x_i - algo.gamma * (quad.grad(x_i) - h_i)
            torch.testing.assert_close(state.x, xhat.mean(0), rtol=1e-12, atol=1e-12)
            assert info.bits_up == 32 * quad.d


def kappa(problem) -> float:
    return problem.consts.L_max / problem.consts.mu


def test_theory_parameters(quad):
    algo, rec = configure(quad)
    n, k = quad.n, kappa(quad)
    assert algo.gamma == pytest.approx(1 / quad.consts.L_max) and algo.s == 2
    assert algo.chi == pytest.approx(n * 1 / (2 * (n - 1)))
    assert algo.p == pytest.approx(min(1.0, math.sqrt((n - 1) / k)))
    assert rec["theory"]["formula"] == "1 / L_max" and "2210.13277" in rec["theory"]["source"]


def test_linear_convergence_to_the_exact_solution_at_the_theory_step(ridge):
    algo, _ = configure(ridge)  # kappa ~ 5.4: p = 1 here; the theory check varies kappa
    states, infos, _ = trajectory(algo, ridge, 1500)
    err = float(((states[-1].x - ridge.x_star) ** 2).sum())
    assert err <= 1e-16 * float(((ridge.x0 - ridge.x_star) ** 2).sum())
    assert infos[-1].extras["H"] <= 1e-12  # the control variates reach grad f_i(x*)


def test_bad_options_are_refused(quad):
    for opts, match in (
        ({"s": 0}, "s must be a positive integer"),
        ({"chi": 1.5}, r"chi must be in \(0, 1\]"),
        ({"p": 0.0}, r"p must be in \(0, 1\]"),
    ):
        with pytest.raises(ValueError, match=match):
            configure(quad, **opts)
    for s in (1, quad.n + 1):
        with pytest.raises(ValueError, match=r"s \(--owners\) must be in \[2, 5\]"):
            configure(quad, s=s)


def test_runner(tmp_path):
    assert ALGORITHMS["compressed-scaffnew"] is CompressedScaffnew
    out = tmp_path / "r"
    argv = ["compressed-scaffnew", "--problem", "quadratic", "--nodes", "6", "--iters", "100",
            "--owners", "3", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "CompressedScaffnew" and cfg["method"]["s"] == 3
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    assert "sync" in header and "H" in header


# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_gloo_matches_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["compressed-scaffnew"])


@pytest.mark.dist
@pytest.mark.parametrize("nproc, nodes, s", [(3, 3, 2), (2, 5, 2), (3, 7, 3)])
def test_gloo_matches_the_simulation_with_a_real_mask(tmp_path, nproc, nodes, s):
    argv = ["compressed-scaffnew", "--owners", str(s)]
    if nodes == nproc:
        torch_dist_helpers().parity(tmp_path, nproc, argv)
    else:
        torch_dist_helpers().sharded_parity(tmp_path, nproc, nodes, argv)
