"""FetchSGD: the update against a hand-written reference (a count sketch built from its own
hashes, a median unsketch, top-k, zeroing), and the bits of its messages."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.sketch import tables
from algorithms.sketch.fetchsgd import FetchSGD
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags

N, D, K, ROWS, COLS, RHO, GAMMA = 3, 12, 3, 3, 5, 0.9, 0.1


def hashes(comm, d):
    """The hash rows FetchSGD uses (the count sketch's draws from its fixed shared stream)."""
    sketch = tables.count_sketch(ROWS, COLS, comm)
    b, s = sketch._hashes(tables.sketch_streams(comm, tags.FETCHSGD_SKETCH)[:1], 1, d)
    return b[0], s[0]


def sketch_of(v, b, s):
    table = torch.zeros(ROWS, COLS, dtype=torch.float64)
    for r in range(ROWS):
        for j in range(v.shape[0]):
            table[r, b[r, j]] += s[r, j] * v[j]
    return table


def unsketch(table, b, s):
    est = torch.stack([torch.stack([s[r, j] * table[r, b[r, j]] for j in range(D)])
                       for r in range(ROWS)])  # fmt: skip
    return est.median(dim=0).values


def top_k(u):
    order = sorted(range(D), key=lambda j: (-abs(float(u[j])), j))[:K]
    out = torch.zeros(D, dtype=torch.float64)
    out[order] = u[order]
    return out


@pytest.mark.parametrize("mode", ["zero", "subtract"])
def test_matches_a_hand_written_reference(mode):
    p = make_problem("quadratic", nodes=N, lam=0.2, dim=D, seed=1)
    algo, _ = FetchSGD.configure(p, parse_spec("identity"), step=GAMMA, k=K, rows=ROWS,
                                 cols=COLS, rho=RHO, error_update=mode)  # fmt: skip
    comm = SimulatedComm(N, seed=4)
    state = algo.init(p.x0, p, comm)
    b, s = hashes(comm, D)
    x = p.x0.clone()
    V = torch.zeros(ROWS, COLS, dtype=torch.float64)
    E = V.clone()
    for _ in range(8):
        state, info = algo.step(state, p, comm)
        g = p.grad(x).mean(0)
        V = RHO * V + sketch_of(g, b, s)
        E = E + V
        delta = top_k(unsketch(E, b, s))
        sd = sketch_of(delta, b, s)
        E = torch.where(sd != 0, 0.0, E) if mode == "zero" else E - sd
        V = torch.where(sd != 0, 0.0, V)
        x = x - GAMMA * delta
        assert torch.allclose(state.x, x, rtol=0, atol=1e-12)
        assert torch.allclose(state.E, E.reshape(-1), rtol=0, atol=1e-12)
        assert torch.allclose(state.V, V.reshape(-1), rtol=0, atol=1e-12)
        assert info.bits_up == ROWS * COLS * 32
        assert info.bits_down == K * (32 + math.ceil(math.log2(D)))


def test_identity_limit_is_gradient_descent():
    """A sketch without collisions and k = d: every cell is hit each round, so V and E are
    reset and the step is x - gamma grad f(x)."""
    p = make_problem("quadratic", nodes=N, lam=0.2, dim=6, seed=2)
    algo, _ = FetchSGD.configure(p, parse_spec("identity"), step=0.3, k=6, rows=3, cols=4096)
    comm = SimulatedComm(N, seed=0)
    state = algo.init(p.x0, p, comm)
    x = p.x0.clone()
    for _ in range(5):
        state, _ = algo.step(state, p, comm)
        x = x - 0.3 * p.full_grad(x)
    assert torch.allclose(state.x, x, rtol=0, atol=1e-12)


def test_bits_up_do_not_grow_with_d():
    ups = []
    for d in (50, 400):
        p = make_problem("quadratic", nodes=2, lam=0.2, dim=d, seed=0)
        algo, _ = FetchSGD.configure(p, parse_spec("identity"), step=0.01, k=5, cols=20)
        comm = SimulatedComm(2, seed=0)
        _, info = algo.step(algo.init(p.x0, p, comm), p, comm)
        ups.append(info.bits_up)
    assert ups == [5 * 20 * 32] * 2


def test_bad_options_are_refused():
    p = make_problem("quadratic", nodes=2, lam=0.2, dim=8, seed=0)
    with pytest.raises(ValueError, match="rho"):
        FetchSGD.configure(p, parse_spec("identity"), step=0.1, rho=1.0)
    with pytest.raises(ValueError, match="identity"):
        FetchSGD.configure(p, parse_spec("topk:k=2"), step=0.1)
