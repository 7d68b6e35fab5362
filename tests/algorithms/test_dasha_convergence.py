"""DASHA, DASHA-PAGE, DASHA-SYNC-MVR and DASHA-MVR at their theoretical steps: linear
convergence on the heterogeneous ridge (theory sheet §5 P9; the PAGE/SYNC steps are [U]), the
nonconvex bound, and MVR's noise floor."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.vr.dasha import DASHA
from algorithms.vr.dasha_mvr import DASHAMVR
from algorithms.vr.dasha_page import DASHAPAGE
from algorithms.vr.dasha_sync_mvr import DASHASYNCMVR
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


@pytest.fixture(scope="module")
def nonconvex():
    p = make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )
    return p


def run(algo, problem, T, seed=0, tail_from=None):
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    gn, tail = [float((problem.full_grad(state.x) ** 2).sum())], []
    for t in range(T):
        state, _ = algo.step(state, problem, comm)
        if tail_from is None:
            gn.append(float((problem.full_grad(state.x) ** 2).sum()))
        elif t >= tail_from and t % 5 == 0:
            tail.append(float(problem.loss(state.x)) - problem.consts.f_star)
    return state, gn, tail


def gap(problem, state) -> float:
    return float(problem.loss(state.x)) - problem.consts.f_star


@pytest.mark.parametrize("init", ["full", "zero"])
def test_dasha_converges_linearly_at_the_published_step(init, ridge):
    """P9: a = 1/19, gamma = 1/(L + sqrt(16 omega (2 omega + 1)/n) L_tilde) = 0.0196."""
    algo, rec = DASHA.configure(ridge, parse_spec("randk:k=2"), init_mode=init)
    assert algo.momentum == pytest.approx(1 / 19)
    assert algo.gamma == pytest.approx(0.0196, abs=1e-4)
    state, _, _ = run(algo, ridge, 800, tail_from=800)
    assert gap(ridge, state) <= 1e-8


@pytest.mark.parametrize(("cls", "T"), [(DASHAPAGE, 1500), (DASHASYNCMVR, 1750)])
def test_page_and_sync_mvr_converge_linearly_at_the_theory_step(cls, T, ridge):
    algo, rec = cls.configure(ridge, parse_spec("randk:k=2"), batch_size=30)
    assert "[U]" in rec["theory"]["source"]
    assert algo.p == pytest.approx(0.5 if cls is DASHAPAGE else 0.1)  # B/(B+m); min(K/d, .)
    state, _, _ = run(algo, ridge, T, tail_from=T)
    assert gap(ridge, state) <= 1e-8


@pytest.mark.parametrize(
    ("cls", "kw", "T"),
    [(DASHA, {}, 300), (DASHAPAGE, {"batch_size": 8}, 800), (DASHASYNCMVR, {"batch_size": 8}, 800)],
)
def test_nonconvex_gradient_drops_a_hundredfold(cls, kw, T, nonconvex):
    algo, _ = cls.configure(nonconvex, parse_spec("randk:k=2"), **kw)
    _, gn, _ = run(algo, nonconvex, T)
    assert gn[-1] <= gn[0] / 100


def test_dasha_average_gradient_is_below_the_nonconvex_bound(nonconvex):
    """With g_i^0 = h_i^0 = grad f_i(x^0) the initial-error terms vanish and the bound is
    2 Delta0/(gamma T), with Delta0 <= f(x^0) since f >= 0; mean over 3 seeds."""
    algo, _ = DASHA.configure(nonconvex, parse_spec("randk:k=2"))
    T = 100
    avg = np.mean([np.mean(run(algo, nonconvex, T, seed=s)[1][:T]) for s in range(3)])
    assert avg <= 2 * float(nonconvex.loss(nonconvex.x0)) / (algo.gamma * T)


def test_dasha_mvr_stalls_at_a_floor_that_grows_with_b_and_shrinks_with_the_batch():
    """Theory sheet §2.10: with bounded variance (additive gradient noise) DASHA-MVR converges
    to a floor proportional to b sigma^2/(n B)."""
    q = make_problem("quadratic", nodes=10, lam=0.1, grad_noise=1.0)
    q.sample_smoothness = lambda: q.consts.L_tilde  # differences on one batch are exact
    floors = {}
    for key, kw in {"default": {}, "b=0.2": {"b": 0.2}, "B=4": {"batch_size": 4}}.items():
        algo, rec = DASHAMVR.configure(q, parse_spec("randk:k=2"), **kw)
        if key == "default":
            assert algo.b == pytest.approx(1 / 19)
        _, _, tail = run(algo, q, 1000, tail_from=500)
        floors[key] = float(np.mean(tail))
    assert floors["default"] > 1e-3  # a floor, not convergence
    assert floors["b=0.2"] > 3 * floors["default"]
    assert floors["B=4"] < floors["default"] / 2
