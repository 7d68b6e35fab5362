"""1-bit Adam and 0/1 Adam: the updates against hand-written loops (scaled sign written out),
the bits of each kind of round, the zero-variance mask."""

from __future__ import annotations

import pytest
import torch

from algorithms.sign.onebit_adam import OneBitAdam, ZeroOneAdam, _masked
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

B1, B2, EPS, LR = 0.9, 0.999, 1e-8, 0.02


def ssign(w: torch.Tensor) -> torch.Tensor:
    """Scaled sign by hand: (||w||_1 / d) sign(w) per row, sign(0) = +1."""
    scale = w.abs().sum(dim=-1, keepdim=True) / w.shape[-1]
    return scale * torch.where(w < 0, -1.0, 1.0).to(w.dtype)


def onebit_allreduce(p, e_i, e):
    w = p + e_i
    c_i = ssign(w)
    q = c_i.mean(dim=0) + e
    c = ssign(q[None])[0]
    return c, w - c_i, q - c


def onebit_reference(problem, T, freeze):
    n, d = problem.n, problem.d
    x = problem.x0.clone()
    m, v = torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    e_i, e = torch.zeros(n, d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    xs = []
    for t in range(T):
        g_i = problem.grad(x)
        if t < freeze:
            g = g_i.mean(dim=0)
            m = B1 * m + (1 - B1) * g
            v = B2 * v + (1 - B2) * g**2
        else:
            m, e_i, e = onebit_allreduce(B1 * m + (1 - B1) * g_i, e_i, e)
            m = torch.where(v > 0, m, 0.0)
        x = x - LR * m / (v.sqrt() + EPS)
        xs.append(x)
    return xs


def test_onebit_adam_matches_the_hand_written_loop_and_bits():
    problem = make_problem("quadratic", nodes=4, lam=0.2, dim=9, seed=2)
    d, freeze, T = problem.d, 10, 40
    algo, _ = OneBitAdam.configure(problem, parse_spec("scaled-sign"), step=LR,
                                   freeze_step=freeze)  # fmt: skip
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    want = onebit_reference(problem, T, freeze)
    for t in range(T):
        state, info = algo.step(state, problem, comm)
        assert torch.allclose(state.x, want[t], rtol=0, atol=1e-12), t
        bits = 32 * d if t < freeze else d + 32  # a full vector, or signs and one scale
        assert (info.bits_up, info.bits_down) == (bits, bits)


def zoadam_reference(problem, T, tv_end, kappa, scaler, clipper):
    """0/1 Adam as the docstring states it (DeepSpeed's zoadam schedule), rounds s = 1..T."""
    n, d = problem.n, problem.d
    x = problem.x0.expand(n, -1).clone()
    m, u = torch.zeros(n, d, dtype=torch.float64), torch.zeros(n, d, dtype=torch.float64)
    v = torch.zeros(d, dtype=torch.float64)
    e_i, e = torch.zeros(n, d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    var_int, var_cnt, loc_int, loc_cnt, k = 1, 0, 1, 0, 0
    xs, bits = [], []
    for s in range(1, T + 1):
        g_i = problem.grad(x)
        if s <= tv_end:
            if s % var_int == 0:
                g = g_i.mean(dim=0)
                v = B2 * v + (1 - B2) * g**2
                var_cnt += 1
                if var_cnt == kappa:
                    var_cnt, var_int = 0, 2 * var_int
                bits.append(32 * d)
            else:
                g, e_i, e = onebit_allreduce(g_i, e_i, e)
                g = torch.where(v > 0, g, 0.0)
                bits.append(d + 32)
            m = B1 * m + (1 - B1) * g
            x = x - LR * m / (v.sqrt() + EPS)
            if s == tv_end:
                e_i, e = torch.zeros_like(e_i), torch.zeros_like(e)
        else:
            r = v.sqrt() + EPS
            m = B1 * m + (1 - B1) * g_i
            x, u, k = x - LR * m / r, u - LR * m / r, k + 1
            if s % loc_int == 0:
                w, e_i, e = onebit_allreduce(u * r, e_i, e)
                w = torch.where(v > 0, w, 0.0)
                m = (-w / (LR * k)).expand(n, -1).clone()
                x = x - u + w / r
                u, k = torch.zeros_like(u), 0
                bits.append(d + 32)
            else:
                bits.append(0)
            loc_cnt += 1
            if loc_cnt == scaler:
                loc_cnt, loc_int = 0, min(clipper, 2 * loc_int)
        xs.append(x.mean(dim=0))
    return xs, bits


def test_zero_one_adam_matches_the_hand_written_loop_and_bits():
    problem = make_problem("quadratic", nodes=3, lam=0.2, dim=8, seed=5)
    T, opts = 70, {"tv_end": 20, "kappa": 2, "scaler": 3, "clipper": 4}
    algo, _ = ZeroOneAdam.configure(
        problem, parse_spec("scaled-sign"), step=LR, var_freeze_step=20, var_update_scaler=2,
        local_step_scaler=3, local_step_clipper=4,
    )  # fmt: skip
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    want, bits = zoadam_reference(problem, T, **opts)
    for t in range(T):
        state, info = algo.step(state, problem, comm)
        assert torch.allclose(state.x, want[t], rtol=0, atol=1e-12), t
        assert (info.bits_up, info.bits_down) == (bits[t], bits[t]), t
    # the schedule was exercised: full rounds, 1-bit rounds, local rounds that send nothing
    assert {32 * 8, 8 + 32, 0} <= set(bits)
    assert state.local_interval == 4


def test_mask_zeroes_momentum_where_the_variance_is_zero():
    m = torch.tensor([0.5, -0.25, 1.0], dtype=torch.float64)
    v = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
    assert _masked(m, v, "auto").tolist() == [0.5, 0.0, 1.0]
    assert _masked(m, v, "none").tolist() == m.tolist()


def test_options_are_checked():
    problem = make_problem("quadratic", nodes=2, lam=0.2, dim=4, seed=0)
    with pytest.raises(ValueError, match="beta1"):
        OneBitAdam.configure(problem, parse_spec("scaled-sign"), beta1=1.0)
    with pytest.raises(ValueError, match="freeze-step"):
        OneBitAdam.configure(problem, parse_spec("scaled-sign"), freeze_step=0)
    with pytest.raises(ValueError, match="contractive"):
        ZeroOneAdam.configure(problem, parse_spec("sign"))
    algo, rec = OneBitAdam.configure(problem, parse_spec("scaled-sign"))
    assert algo.gamma == 1e-3 and rec["provenance"]["kind"] == "authors-code"
