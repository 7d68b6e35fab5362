"""LoCoDL: one step against a hand-written reference, the invariant mean_i u_i + v = 0 and the
fixed point, bits per round, the theory parameters, exact convergence, bad options."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from runs import trajectory

from algorithms.local.locodl import LoCoDL
from comm import SimulatedComm
from compressors import parse_spec
from streams import tags

RANDK = parse_spec("randk:k=3")


def configure(problem, spec=RANDK, **opts):
    return LoCoDL.configure(problem, spec, **opts)


def reference_step(problem, algo, state, d_i, sync, p):
    """The update written out node by node, with the compressed differences ``d_i``."""
    n, g, mu_g = problem.n, algo.gamma, algo.mu_g
    grads = problem.grad(state.x_i)  # row i: grad f_i(x_i)
    xhat = torch.stack([state.x_i[i] - g * (grads[i] - mu_g * state.x_i[i] - state.u_i[i])
                        for i in range(n)])  # fmt: skip
    yhat = state.y - g * (mu_g * state.y - state.v)
    if not sync:
        return xhat, state.u_i, yhat, state.v
    dbar = sum(d_i[i] for i in range(n)) / (2 * n)
    rho, chi, omega = algo.rho, algo.chi, algo.compressor.omega(problem.d)
    a = p * chi / (g * (1 + 2 * omega))
    x_new = torch.stack([(1 - rho) * xhat[i] + rho * (yhat + dbar) for i in range(n)])
    u_new = torch.stack([state.u_i[i] + a * (dbar - d_i[i]) for i in range(n)])
    return x_new, u_new, yhat + rho * dbar, state.v + a * dbar


@pytest.mark.parametrize("mu_g", [0.0, 0.1])
def test_steps_are_the_reference(quad, mu_g):
    algo, _ = configure(quad, p=0.5, mu_g=mu_g)
    comm = SimulatedComm(quad.n, seed=4)
    state = algo.init(quad.x0, quad, comm)
    syncs = 0
    for _ in range(8):
        gen = torch.Generator().manual_seed(state.t)
        noise = torch.randn(state.x_i.shape, generator=gen, dtype=torch.float64)
        u = state.u_i + noise
        start = replace(state, x_i=state.x_i + noise, u_i=u, v=-u.mean(0))
        t = start.t
        sync = comm.coin(t, 0.5, tag=tags.LOCODL_COIN)
        xhat = start.x_i - algo.gamma * (quad.grad(start.x_i) - mu_g * start.x_i - start.u_i)
        yhat = start.y - algo.gamma * (mu_g * start.y - start.v)
        streams = comm.rng_for(algo.compressor, t, tag=tags.LOCODL_COMPRESS)
        d_i = algo.compressor.decode(algo.compressor.encode(xhat - yhat, streams))
        ref = reference_step(quad, algo, start, d_i, sync, 0.5)
        state, info = algo.step(start, quad, comm)
        for got, want in zip((state.x_i, state.u_i, state.y, state.v), ref, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert torch.equal(state.x, state.y) and info.extras["sync"] == float(sync)
        assert abs(float((state.u_i.mean(0) + state.v).abs().max())) <= 1e-12
        d = quad.d
        bits = RANDK.bits(d) if sync else 0
        assert info.bits_up == bits and info.bits_down == (32 * d if sync else 0)
        syncs += sync
    assert 0 < syncs < 8


def test_theory_parameters(quad):
    algo, rec = configure(quad)
    c, n, d = quad.consts, quad.n, quad.d
    omega = RANDK.omega(d)
    assert algo.gamma == pytest.approx(1 / c.L_max) and algo.chi == 1.0
    assert algo.rho == pytest.approx(1 / (1 + omega / n))
    p = min(1.0, math.sqrt((1 + 2 * omega) * (1 + omega / n) * c.mu / c.L_max))
    assert algo.p == pytest.approx(p)
    assert rec["provenance"]["kind"] == "reconstruction"


def test_invariant_fixed_point_and_exact_convergence(quad):
    algo, _ = configure(quad, p=0.4)
    states, infos, comm = trajectory(algo, quad, 1500, seed=1)
    assert max(float((s.u_i.mean(0) + s.v).abs().max()) for s in states) <= 1e-9
    xs = quad.x_star
    err = float(((states[-1].y - xs) ** 2).sum() / ((quad.x0 - xs) ** 2).sum())
    assert err <= 1e-16, err
    assert bool((comm.ledger.up > 0).all())
    star = replace(states[-1], x_i=xs.expand(quad.n, -1).clone(), y=xs.clone(),
                   u_i=quad.grad(xs), v=torch.zeros_like(xs))  # fmt: skip
    for _ in range(10):
        star, _ = algo.step(star, quad, comm)
    torch.testing.assert_close(star.x_i, xs.expand(quad.n, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(star.u_i, quad.grad(xs), rtol=0, atol=1e-10)


def test_without_compression_and_full_steps_it_is_scaffnew_on_n_plus_1_variables(quad):
    algo, _ = configure(quad, spec=parse_spec("identity"), p=1.0)
    assert algo.rho == 1.0 and algo.chi == 1.0
    comm = SimulatedComm(quad.n, seed=0)
    state = algo.init(quad.x0, quad, comm)
    for _ in range(5):
        xhat = state.x_i - algo.gamma * (quad.grad(state.x_i) - state.u_i)
        yhat = state.y + algo.gamma * state.v
        mean = (xhat.mean(0) + yhat) / 2  # the weighted consensus point
        state, _ = algo.step(state, quad, comm)
        torch.testing.assert_close(state.y, mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(state.x_i, mean.expand_as(xhat), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("opts", [{"mu_g": -1.0}, {"rho": 0.0}, {"chi": 1.5}, {"p": 2.0}])
def test_bad_options_are_refused(quad, opts):
    with pytest.raises(ValueError):
        configure(quad, **opts)


def test_a_biased_compressor_is_refused(quad):
    with pytest.raises(ValueError, match="unbiased"):
        configure(quad, spec=parse_spec("topk:k=2"))
