"""TAMUNA: CompressedScaffnew at full participation, one step against a hand-written
reference with partial participation, the cohort's mask, the bits of a round, the invariant
sum of control variates, exact convergence with partial participation, bad options."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from runs import trajectory

from algorithms.local.compressed_scaffnew import CompressedScaffnew
from algorithms.local.tamuna import TAMUNA
from comm import SimulatedComm
from compressors import parse_spec

IDENTITY = parse_spec("identity")


def configure(problem, **opts):
    return TAMUNA.configure(problem, IDENTITY, **opts)


def test_full_participation_is_compressed_scaffnew_draw_for_draw(quad):
    a, _ = configure(quad)
    b, _ = CompressedScaffnew.configure(quad, IDENTITY)
    assert (a.p, a.chi, a.s, a.gamma) == (b.p, b.chi, b.s, b.gamma)
    sa, ia, ca = trajectory(a, quad, 40, seed=3)
    sb, ib, cb = trajectory(b, quad, 40, seed=3)
    for x, y in zip(sa, sb, strict=True):
        assert torch.equal(x.x, y.x) and torch.equal(x.h_i, y.h_i)
    assert torch.equal(ca.ledger.up, cb.ledger.up) and torch.equal(ca.ledger.down, cb.ledger.down)


def test_the_cohort_and_its_mask(quad):
    n, d = quad.n, quad.d
    algo, _ = configure(quad, cohort=3, s=2, p=1.0)
    comm = SimulatedComm(n, seed=1)
    seen = torch.zeros(n)
    for t in range(300):
        member = algo.members(comm, t, n)
        assert int(member.sum()) == 3
        q = algo.mask(comm, t, member, d)
        assert q.sum(0).tolist() == [2] * d  # every coordinate: exactly s owners
        assert not bool(q[~member].any())  # only members own anything
        seen += member.double()
    assert torch.allclose(seen / 300, torch.full((n,), 3 / n), atol=0.1)


def reference_step(problem, gamma, chi, p, s, x_i, h_i, member, q):
    """The update written out node by node (a loop, as the description reads)."""
    n = x_i.shape[0]
    xhat, grads = x_i.clone(), problem.grad(x_i)  # row i: grad f_i(x_i)
    for i in range(n):
        if member[i]:
            xhat[i] = x_i[i] - gamma * (grads[i] - h_i[i])
    xbar = torch.zeros_like(x_i[0])
    for i in range(n):
        if member[i]:
            xbar += q[i].double() * xhat[i]
    xbar /= s
    h = h_i.clone()
    for i in range(n):
        if member[i]:
            h[i] = h_i[i] + (p * chi / gamma) * q[i].double() * (xbar - xhat[i])
    return xbar, h


def test_one_step_with_partial_participation_is_the_reference(quad):
    algo, _ = configure(quad, cohort=3, p=1.0)  # communicate every step
    comm = SimulatedComm(quad.n, seed=4)
    state = algo.init(quad.x0, quad, comm)
    for _ in range(4):
        gen = torch.Generator().manual_seed(state.t)
        noise = torch.randn(state.x_i.shape, generator=gen, dtype=torch.float64)
        start = replace(state, x_i=state.x_i + noise, h_i=state.h_i - state.h_i.mean(0))
        member = algo.members(comm, start.round_start, quad.n)
        q = algo.mask(comm, start.t, member, quad.d)
        xbar, h = reference_step(
            quad, algo.gamma, algo.chi, 1.0, algo.s, start.x_i, start.h_i, member, q
        )
        state, info = algo.step(start, quad, comm)
        torch.testing.assert_close(state.x, xbar, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state.h_i, h, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state.x_i, xbar.expand_as(state.x_i), rtol=0, atol=0)
        assert state.round_start == start.t + 1
        # bits: owned values uplink; the model to the next cohort, owned values to the rest
        owned = q.sum(1)
        assert info.bits_up == pytest.approx(float((32 * owned).sum()) / quad.n)
        after = algo.members(comm, start.t + 1, quad.n)
        down = torch.where(after, 32 * quad.d, torch.where(member, 32 * owned, 0))
        assert info.bits_down == pytest.approx(float(down.sum()) / quad.n)


def test_idle_clients_do_not_move_between_communications(quad):
    algo, _ = configure(quad, cohort=2, p=1e-12)  # the shared coin never fires
    comm = SimulatedComm(quad.n, seed=0)
    state = algo.init(quad.x0, quad, comm)
    noisy = replace(state, x_i=state.x_i + 1.0)
    member = algo.members(comm, 0, quad.n)
    new, info = algo.step(noisy, quad, comm)
    step = noisy.x_i - algo.gamma * quad.grad(noisy.x_i)
    torch.testing.assert_close(new.x_i[member], step[member], rtol=0, atol=0)
    assert torch.equal(new.x_i[~member], noisy.x_i[~member])
    assert info.bits_up == 0 and info.bits_down == 0 and new.round_start == 0


def test_control_variates_sum_to_zero_and_it_converges_exactly_with_partial_participation(quad):
    algo, rec = configure(quad, cohort=3)
    states, infos, comm = trajectory(algo, quad, 1500)
    assert max(float(s.h_i.sum(0).abs().max()) for s in states) <= 1e-9
    err = float(((states[-1].x - quad.x_star) ** 2).sum() / ((quad.x0 - quad.x_star) ** 2).sum())
    assert err <= 1e-16, err
    assert 0 < sum(i.extras["sync"] for i in infos) < 1500
    assert bool((comm.ledger.up > 0).all())


@pytest.mark.parametrize(
    "opts", [{"cohort": 6}, {"cohort": 1}, {"cohort": 3, "s": 4}, {"cohort": 4, "s": 1}]
)
def test_bad_cohort_or_owners_are_refused(quad, opts):
    with pytest.raises(ValueError):
        algo, _ = configure(quad, **opts)
        algo.init(quad.x0, quad, SimulatedComm(quad.n, seed=0))
