"""EControl: one step against a hand-written update, the virtual iterate, eta = 0 is EF21, the
bits, the default eta and step, and that the full error fed back (eta = 1) diverges here."""

from __future__ import annotations

import pytest
import torch
from runs import trajectory

from algorithms.ef.econtrol import EControl, EControlState
from algorithms.ef.ef21 import EF21
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
    eta = 0.4
    algo, _ = EControl.configure(nonconvex, parse_spec(TOPK), eta=eta)
    m, d = nonconvex.n, nonconvex.d
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    e_i, h_i = (torch.randn(m, d, generator=gen, dtype=torch.float64) for _ in range(2))
    state = EControlState(x=x, t=2, e_i=e_i, h_i=h_i, h=h_i.mean(0))
    before = {k: v.clone() for k, v in vars(state).items() if torch.is_tensor(v)}
    new, info = algo.step(state, nonconvex, SimulatedComm(m, seed=0))
    g = nonconvex.grad(x)
    delta = topk_rows(eta * e_i + g - h_i, 2)
    torch.testing.assert_close(new.x, x - algo.gamma * (h_i + delta).mean(0), rtol=1e-12,
                               atol=1e-12)  # fmt: skip
    torch.testing.assert_close(new.e_i, e_i + g - h_i - delta, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.h_i, h_i + delta, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.h, (h_i + delta).mean(0), rtol=1e-12, atol=1e-12)
    assert new.t == 3
    E = float(((e_i + g - h_i - delta) ** 2).sum(1).mean())
    assert info.extras["E"] == pytest.approx(E, rel=1e-12)
    for k, v0 in before.items():  # the input state is not mutated
        torch.testing.assert_close(getattr(state, k), v0, rtol=0, atol=0)


def test_virtual_iterate_follows_gradient_descent(ridge):
    algo, _ = EControl.configure(ridge, parse_spec("topk:k=1"))
    states, _, _ = trajectory(algo, ridge, 40)
    for s, s1 in zip(states[:-1], states[1:], strict=True):
        virtual = s.x - algo.gamma * s.e_i.mean(0)
        virtual1 = s1.x - algo.gamma * s1.e_i.mean(0)
        expected = virtual - algo.gamma * ridge.full_grad(s.x)
        torch.testing.assert_close(virtual1, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(s1.h, s1.h_i.mean(0), rtol=1e-12, atol=1e-12)


def test_eta_zero_is_ef21(nonconvex):
    c = parse_spec(TOPK)
    ec, _ = EControl.configure(nonconvex, c, step=0.05, eta=0.0)
    ef, _ = EF21.configure(nonconvex, c, step=0.05)
    a, ia, _ = trajectory(ec, nonconvex, 20)
    b, ib, _ = trajectory(ef, nonconvex, 21)
    # EControl's h^{t+1} is EF21's g^t: both step x^{t+1} = x^t - gamma g^t
    for t in range(20):
        torch.testing.assert_close(a[t].x, b[t].x, rtol=0, atol=1e-13)
        torch.testing.assert_close(a[t + 1].h_i, b[t].g_i, rtol=0, atol=1e-13)
    assert [i.bits_up for i in ia] == [i.bits_up for i in ib[:20]]
    assert [i.bits_down for i in ia] == [i.bits_down for i in ib[:20]]


def test_bits_defaults_and_options(ridge):
    c, d = parse_spec("topk:k=3"), ridge.d
    algo, rec = EControl.configure(ridge, c, batch_size=2)
    assert algo.eta == pytest.approx(c.delta(d)) and rec["provenance"]["kind"] == "borrowed"
    assert algo.gamma == EF21.configure(ridge, c)[0].gamma
    states, infos, comm = trajectory(algo, ridge, 12)
    # uplink: the one Top-K message per round; downlink: the model
    assert all(i.bits_up == c.bits(d) and i.bits_down == 32 * d for i in infos)
    assert comm.bits_totals()["bits_up"] == 32 * d + 12 * c.bits(d)  # h_i^0 sent in full
    again, _, _ = trajectory(algo, ridge, 12)
    assert torch.equal(states[-1].x, again[-1].x)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="eta"):
            EControl.configure(ridge, c, eta=bad)


def test_full_feedback_diverges_where_the_default_converges(ridge):
    """The measurement behind the practical eta = delta (Top-1: delta = 1/20)."""
    c = parse_spec("topk:k=1")
    g0 = float((ridge.full_grad(ridge.x0) ** 2).sum())
    last = {}
    for eta in (None, 1.0):
        algo, _ = EControl.configure(ridge, c, eta=eta)
        states, _, _ = trajectory(algo, ridge, 400)
        last[eta] = float((ridge.full_grad(states[-1].x) ** 2).sum()) / g0
    assert last[None] < 1e-2
    assert not last[1.0] < 1.0
