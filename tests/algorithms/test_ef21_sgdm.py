"""EF21-SGDM and EF21-SGD2M: one step against a hand-written update, eta = 1 is EF21-SGD, the
identity compressor is SGD with Polyak momentum, the bits, minibatches and the default step."""

from __future__ import annotations

import pytest
import torch
from runs import trajectory

from algorithms.ef.ef21 import EF21
from algorithms.ef.ef21_sgd import EF21SGD
from algorithms.ef.ef21_sgdm import EF21SGD2M, EF21SGDM, EF21SGD2MState, EF21SGDMState
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


def _random_rows(m: int, d: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    return [x] + [torch.randn(m, d, generator=gen, dtype=torch.float64) for _ in range(3)]


def test_one_step_is_the_hand_written_update(nonconvex):
    eta = 0.3
    algo, _ = EF21SGDM.configure(nonconvex, parse_spec(TOPK), eta=eta)
    m, d = nonconvex.n, nonconvex.d
    x, v_i, g_i, _ = _random_rows(m, d, 0)
    state = EF21SGDMState(x=x, t=3, v_i=v_i, g_i=g_i, g=g_i.mean(0))
    before = {k: v.clone() for k, v in vars(state).items() if torch.is_tensor(v)}
    new, info = algo.step(state, nonconvex, SimulatedComm(m, seed=0))
    x1 = x - algo.gamma * g_i.mean(0)
    v1 = (1 - eta) * v_i + eta * nonconvex.grad(x1)
    c = topk_rows(v1 - g_i, 2)
    torch.testing.assert_close(new.x, x1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.v_i, v1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.g_i, g_i + c, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.g, g_i.mean(0) + c.mean(0), rtol=1e-12, atol=1e-12)
    assert new.t == 4
    G = float(((g_i + c - v1) ** 2).sum(1).mean())
    assert info.extras["G"] == pytest.approx(G, rel=1e-12)
    for k, v0 in before.items():  # the input state is not mutated
        torch.testing.assert_close(getattr(state, k), v0, rtol=0, atol=0)


def test_double_momentum_step_is_the_hand_written_update(nonconvex):
    eta = 0.25
    algo, _ = EF21SGD2M.configure(nonconvex, parse_spec(TOPK), eta=eta)
    m, d = nonconvex.n, nonconvex.d
    x, v_i, g_i, u_i = _random_rows(m, d, 1)
    state = EF21SGD2MState(x=x, t=0, v_i=v_i, g_i=g_i, g=g_i.mean(0), u_i=u_i)
    new, _ = algo.step(state, nonconvex, SimulatedComm(m, seed=0))
    x1 = x - algo.gamma * g_i.mean(0)
    v1 = (1 - eta) * v_i + eta * nonconvex.grad(x1)
    u1 = (1 - eta) * u_i + eta * v1
    c = topk_rows(u1 - g_i, 2)
    torch.testing.assert_close(new.v_i, v1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.u_i, u1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.g_i, g_i + c, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.g, g_i.mean(0) + c.mean(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [EF21SGDM, EF21SGD2M])
def test_eta_one_is_ef21_sgd(nonconvex, cls):
    # with full local gradients: EF21-SGD's and this method's minibatch streams differ
    c = parse_spec(TOPK)
    assert EF21SGD.configure(nonconvex, c, step=0.05)[0].batch_size is None
    algo_full, _ = cls.configure(nonconvex, c, step=0.05, eta=1.0)
    ref_full, _ = EF21SGD.configure(nonconvex, c, step=0.05)
    a, ia, _ = trajectory(algo_full, nonconvex, 20)
    b, ib, _ = trajectory(ref_full, nonconvex, 20)
    for s, r in zip(a, b, strict=True):
        torch.testing.assert_close(s.x, r.x, rtol=0, atol=1e-13)
        torch.testing.assert_close(s.g_i, r.g_i, rtol=0, atol=1e-13)
    assert [i.bits_up for i in ia] == [i.bits_up for i in ib]
    assert [i.bits_down for i in ia] == [i.bits_down for i in ib]


def test_identity_is_sgd_with_polyak_momentum(quad):
    eta = 0.2
    algo, _ = EF21SGDM.configure(quad, parse_spec("identity"), eta=eta)
    states, _, _ = trajectory(algo, quad, 30)
    x, v = quad.x0.clone(), quad.full_grad(quad.x0)
    for s in states[1:]:
        x = x - algo.gamma * v
        v = (1 - eta) * v + eta * quad.full_grad(x)
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


def test_bits_and_minibatches(nonconvex):
    c, d = parse_spec("topk:k=3"), nonconvex.d
    algo, _ = EF21SGDM.configure(nonconvex, c, batch_size=2)
    states, infos, comm = trajectory(algo, nonconvex, 15)
    # uplink: the Top-K payload (the momentum stays on the node); downlink: the model
    assert all(i.bits_up == c.bits(d) and i.bits_down == 32 * d for i in infos)
    assert comm.bits_totals()["bits_up"] == 32 * d + 15 * c.bits(d)  # g_i^0 sent in full
    again, _, _ = trajectory(algo, nonconvex, 15)
    assert all(torch.equal(s.x, r.x) for s, r in zip(states, again, strict=True))
    full, _, _ = trajectory(EF21SGDM.configure(nonconvex, c)[0], nonconvex, 15)
    assert not torch.equal(states[-1].x, full[-1].x)  # minibatches are drawn


def test_default_step_is_ef21s_and_eta_is_checked(ridge):
    c = parse_spec(TOPK)
    algo, rec = EF21SGDM.configure(ridge, c)
    assert algo.gamma == EF21.configure(ridge, c)[0].gamma
    assert algo.eta == 0.1 and rec["provenance"]["kind"] == "borrowed"
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="eta"):
            EF21SGDM.configure(ridge, c, eta=bad)
