"""SketchedAMSGrad: the update against a hand-written reference, the bits of its messages, and
the error memories staying bounded on heterogeneous nodes."""

from __future__ import annotations

import math

import torch

from algorithms.sketch import tables
from algorithms.sketch.sketched_amsgrad import SketchedAMSGrad
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags

N, D, K, ROWS, COLS, GAMMA = 3, 12, 3, 3, 6, 0.05
B1, B2, EPS = 0.9, 0.99, 1e-8


def hashes(comm, d):
    sketch = tables.count_sketch(ROWS, COLS, comm)
    b, s = sketch._hashes(tables.sketch_streams(comm, tags.SKETCHED_AMS_SKETCH)[:1], 1, d)
    return b[0], s[0]


def median_estimate(v, b, s):
    """U(S(v)): the sketch of ``v`` built by hand, then the median of the rows' estimates."""
    table = torch.zeros(ROWS, COLS, dtype=torch.float64)
    for r in range(ROWS):
        for j in range(D):
            table[r, b[r, j]] += s[r, j] * v[j]
    est = torch.stack([torch.stack([s[r, j] * table[r, b[r, j]] for j in range(D)])
                       for r in range(ROWS)])  # fmt: skip
    return est.median(dim=0).values


def test_matches_a_hand_written_reference():
    p = make_problem("quadratic", nodes=N, lam=0.2, dim=D, seed=3)
    algo, _ = SketchedAMSGrad.configure(p, parse_spec("identity"), step=GAMMA, k=K, rows=ROWS,
                                        cols=COLS, beta1=B1, beta2=B2, eps=EPS)  # fmt: skip
    comm = SimulatedComm(N, seed=2)
    state = algo.init(p.x0, p, comm)
    b, s = hashes(comm, D)
    x = p.x0.clone()
    m_i = torch.zeros(N, D, dtype=torch.float64)
    e_i = m_i.clone()
    v = torch.zeros(D, dtype=torch.float64)
    v_hat = v.clone()
    for _ in range(8):
        state, info = algo.step(state, p, comm)
        g_i = p.grad(x)
        m_i = B1 * m_i + (1 - B1) * g_i
        p_i = m_i + e_i
        u = median_estimate(p_i.mean(0), b, s)
        h = median_estimate(g_i.mean(0), b, s)
        v = B2 * v + (1 - B2) * h**2
        v_hat = torch.maximum(v_hat, v)
        scaled = u / torch.sqrt(v_hat + EPS)
        keep = sorted(range(D), key=lambda j: (-abs(float(scaled[j])), j))[:K]
        delta = torch.zeros(D, dtype=torch.float64)
        delta[keep] = scaled[keep]
        e_i = p_i.clone()
        e_i[:, keep] = 0.0
        x = x - GAMMA * delta
        assert torch.allclose(state.x, x, rtol=0, atol=1e-12)
        assert torch.allclose(state.e_i, e_i, rtol=0, atol=1e-12)
        assert torch.allclose(state.v_hat, v_hat, rtol=0, atol=1e-12)
        assert info.bits_up == 2 * ROWS * COLS * 32  # two tables in one message
        assert info.bits_down == K * (32 + math.ceil(math.log2(D)))


def test_errors_stay_bounded_on_heterogeneous_nodes():
    """Zeroing the errors on the selected coordinates keeps each node's memory bounded where
    subtracting the common recovered value would let its deviation from the mean add up."""
    p = make_problem("quadratic", nodes=4, lam=0.2, dim=50, seed=0, zeta2=1.0)
    algo, _ = SketchedAMSGrad.configure(p, parse_spec("identity"), step=0.01, k=5)
    comm = SimulatedComm(4, seed=0)
    state = algo.init(p.x0, p, comm)
    E = []
    for _ in range(400):
        state, info = algo.step(state, p, comm)
        E.append(info.extras["E"])
    assert max(E[200:]) <= 2.0 * max(E[:200])
    assert float((p.full_grad(state.x) ** 2).sum()) < 1e-6 * float((p.full_grad(p.x0) ** 2).sum())


def test_default_step_is_the_practical_one():
    p = make_problem("quadratic", nodes=2, lam=0.2, dim=10, seed=0)
    algo, rec = SketchedAMSGrad.configure(p, parse_spec("identity"), step="default")
    assert algo.gamma == 1e-3 and rec["step_origin"] == "practical"
    theory, _ = SketchedAMSGrad.configure(p, parse_spec("identity"), step="theory")
    assert theory.gamma < 1e-3
