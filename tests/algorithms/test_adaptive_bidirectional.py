"""byteps-adam: the update against a hand-written loop (Top-K and torch.optim.Adam written out),
the bits of a round, the identity case (plain Adam), the error identity and the variants."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.momentum.adaptive_bidirectional import BytePSAdam
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from theory_checks.adaptive_bidirectional import NoServerEF, NoWorkerEF

B1, B2, EPS, LR = 0.9, 0.999, 1e-8, 0.02


def topk_rows(w: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k of each row by magnitude, ties to the lower index (a stable sort by hand)."""
    out = torch.zeros_like(w)
    for r in range(w.shape[0]):
        order = sorted(range(w.shape[1]), key=lambda j: (-abs(float(w[r, j])), j))[:k]
        for j in order:
            out[r, j] = w[r, j]
    return out


def reference(problem, T, k_up, k_down, amsgrad=False, worker=True, server=True):
    n, d = problem.n, problem.d
    x = problem.x0.clone()
    z = torch.zeros(d, dtype=torch.float64)
    m, v, vmax, e = z.clone(), z.clone(), z.clone(), z.clone()
    e_i = torch.zeros(n, d, dtype=torch.float64)
    xs, errs = [], []
    for s in range(1, T + 1):
        g_i = problem.grad(x)
        p_i = g_i + e_i if worker else g_i
        c_i = topk_rows(p_i, k_up)
        if worker:
            e_i = p_i - c_i
        q = sum(c_i[i] for i in range(n)) / n + (e if server else 0.0)
        c = topk_rows(q[None], k_down)[0]
        if server:
            e = q - c
        m = B1 * m + (1 - B1) * c
        v = B2 * v + (1 - B2) * c * c
        vmax = torch.maximum(vmax, v)
        vh = vmax if amsgrad else v
        x = x - LR / (1 - B1**s) * m / ((vh / (1 - B2**s)).sqrt() + EPS)
        xs.append(x)
        errs.append((e_i.clone(), e.clone()))
    return xs, errs


def _run(cls, problem, spec, T, **opts):
    algo, _ = cls.configure(problem, parse_spec(spec), step=LR, **opts)
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    states, infos = [], []
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        states.append(state)
        infos.append(info)
    return states, infos


@pytest.mark.parametrize("moment", ["adam", "amsgrad"])
def test_matches_the_hand_written_loop_and_charges_the_payloads(moment):
    problem = make_problem("quadratic", nodes=4, lam=0.2, dim=9, seed=2)
    d, T = problem.d, 30
    states, infos = _run(
        BytePSAdam, problem, "topk:k=2", T, down_compressor=parse_spec("topk:k=3"), moment=moment
    )
    want, errs = reference(problem, T, 2, 3, amsgrad=moment == "amsgrad")
    idx = math.ceil(math.log2(d))
    for t in range(T):
        assert torch.allclose(states[t].x, want[t], rtol=0, atol=1e-12), t
        assert torch.allclose(states[t].e_i, errs[t][0], rtol=0, atol=1e-12)
        assert torch.allclose(states[t].e, errs[t][1], rtol=0, atol=1e-12)
        # Top-K: k values of 32 bits and k indices of ceil(log2 d) bits, up and down.
        assert (infos[t].bits_up, infos[t].bits_down) == (2 * (32 + idx), 3 * (32 + idx))


@pytest.mark.parametrize(("cls", "worker", "server"), [(NoWorkerEF, False, True),
                                                       (NoServerEF, True, False)])  # fmt: skip
def test_the_broken_variants_drop_one_memory(cls, worker, server):
    problem = make_problem("quadratic", nodes=3, lam=0.2, dim=7, seed=1)
    states, _ = _run(cls, problem, "topk:k=1", 15)
    want, _ = reference(problem, 15, 1, 1, worker=worker, server=server)
    for t in range(15):
        assert torch.allclose(states[t].x, want[t], rtol=0, atol=1e-12), t


def test_identity_both_ways_is_adam_on_the_full_gradient():
    problem = make_problem("quadratic", nodes=4, lam=0.2, dim=6, seed=3)
    states, infos = _run(BytePSAdam, problem, "identity", 20)
    param = torch.nn.Parameter(problem.x0.clone())
    opt = torch.optim.Adam([param], lr=LR, betas=(B1, B2), eps=EPS)
    for t in range(20):
        opt.zero_grad()
        param.grad = problem.full_grad(param.detach()).clone()
        opt.step()
        assert torch.allclose(states[t].x, param.detach(), rtol=0, atol=1e-12), t
        assert float(states[t].e_i.abs().max()) == 0.0 and float(states[t].e.abs().max()) == 0.0
    assert infos[0].bits_up == 32 * problem.d and infos[0].bits_down == 32 * problem.d


def test_error_identity_with_both_memories():
    """``sum_r c_r + e + mean_i e_i = sum_r mean_i g_i`` (the moments receive c_r)."""
    problem = make_problem("quadratic", nodes=4, lam=0.2, dim=8, seed=4)
    algo, _ = BytePSAdam.configure(problem, parse_spec("scaled-sign"), step=LR)
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    sent = torch.zeros(problem.d, dtype=torch.float64)
    grads = torch.zeros_like(sent)
    for _ in range(25):
        grads += problem.grad(state.x).mean(dim=0)
        m_before, s = state.m, state.t + 1
        state, _ = algo.step(state, problem, comm)
        sent += (state.m - B1 * m_before) / (1 - B1)  # c_r recovered from the moment
        assert s == state.t
    lhs = sent + state.e + state.e_i.mean(dim=0)
    assert torch.allclose(lhs, grads, rtol=0, atol=1e-10)


def test_defaults_and_bad_values():
    problem = make_problem("quadratic", nodes=2, lam=0.2, dim=5, seed=0)
    algo, rec = BytePSAdam.configure(problem, parse_spec("topk:k=2"), step="default")
    assert algo.gamma == 1e-3 and rec["step_origin"] == "practical"
    assert algo.down_compressor.spec() == algo.compressor.spec()  # the uplink's spec
    th, _ = BytePSAdam.configure(problem, parse_spec("topk:k=2"), step="theory")
    assert 0 < th.gamma < 1e-8  # COMP-AMS's form with eps outside the root: eps / (L C)
    with pytest.raises(ValueError, match="beta1"):
        BytePSAdam.configure(problem, parse_spec("topk:k=2"), beta1=1.0)
    with pytest.raises(ValueError, match="eps"):
        BytePSAdam.configure(problem, parse_spec("topk:k=2"), eps=0.0)
