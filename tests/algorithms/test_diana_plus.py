"""DIANA+: the sampling's probabilities and constant, one step against a hand-written reference,
the bits of every message, the invariants, GD when every coordinate is sent, the theory step
(DIANA's when sampling is uniform), linear convergence, bad input, and parity with gloo."""

from __future__ import annotations

import math

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms.shifts import smoothness_aware as sa
from algorithms.shifts.diana import DIANA
from algorithms.shifts.diana_plus import DIANAPlus
from comm import SimulatedComm
from compressors import parse_spec
from problems.least_squares import LeastSquares
from streams import Streams
from theory_checks.matrix_smoothness import scaled_least_squares

SPEC = "randk:k=2"


def scaled_ls(n=3, d=6, m=30, decay=2.0) -> LeastSquares:
    """Least squares whose feature scales span ``10^decay`` (``L_i`` far from scalar)."""
    return scaled_least_squares(n=n, d=d, m=m, decay=decay)


@pytest.fixture(scope="module")
def ls():
    return scaled_ls()


def test_probabilities_water_fill_the_square_roots_of_the_diagonal():
    Ld = torch.tensor([[100.0, 1.0, 1.0, 0.0], [4.0, 4.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    p = sa.probabilities(Ld, 2.0, "diag")
    torch.testing.assert_close(p.sum(1)[:2], torch.full((2,), 2.0, dtype=torch.float64))
    # row 0: sqrt = 10, 1, 1, 0 -> the first capped at 1, the rest share 1 equally
    torch.testing.assert_close(p[0], torch.tensor([1.0, 0.5, 0.5, 0.0], dtype=torch.float64))
    # row 1: sqrt = 2, 2, 1, 1 -> s = 2/6, nothing capped
    torch.testing.assert_close(p[1], torch.tensor([2, 2, 1, 1], dtype=torch.float64) / 3)
    # a row with no positive diagonal samples uniformly
    torch.testing.assert_close(p[2], torch.full((4,), 0.5, dtype=torch.float64))
    torch.testing.assert_close(sa.probabilities(Ld, 2.0, "uniform"), torch.full((3, 4), 0.5,
                                dtype=torch.float64))  # fmt: skip
    assert (sa.probabilities(Ld[:2], 4.0, "diag")[1] == 1).all()


def test_the_constant_bounds_the_variance_and_is_omega_lambda_max_for_uniform(ls):
    L = ls.smoothness_matrices()
    d = ls.d
    p_u = sa.probabilities(torch.diagonal(L, dim1=1, dim2=2), 2.0, "uniform")
    top = torch.linalg.eigvalsh(L)[:, -1]
    torch.testing.assert_close(sa.expected_smoothness(L, p_u), (d / 2 - 1) * top)
    p = sa.probabilities(torch.diagonal(L, dim1=1, dim2=2), 2.0, "diag")
    calL = sa.expected_smoothness(L, p)
    # v = L^{1/2} w: E||S(v) - v||^2 = v^T (P^-1 - I) v <= calL ||w||^2, tight at the top
    # eigenvector, and the Monte Carlo variance matches v^T (P^-1 - I) v
    ev, U = torch.linalg.eigh(L)
    root = (U * ev.clamp_min(0).sqrt()[:, None, :]) @ U.transpose(1, 2)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(ls.n, d, generator=gen, dtype=torch.float64)
    v = torch.einsum("mij,mj->mi", root, w)
    exact = (v * v * (1 / p - 1)).sum(1)
    assert (exact <= calL * (w * w).sum(1) * (1 + 1e-12)).all()
    draws = 20000
    rng = Streams.for_nodes(5, torch.arange(ls.n * draws), 0xD1A9, 0, 0)  # distinct streams
    vv = v.repeat(draws, 1)
    out, _, _ = sa.sparsify(vv, p.repeat(draws, 1), rng, 32)
    mc = ((out - vv) ** 2).sum(1).reshape(draws, ls.n).mean(0)
    torch.testing.assert_close(mc, exact, rtol=0.06, atol=0)
    assert float(calL.max()) < float(sa.expected_smoothness(L, p_u).max()) / 2


def test_one_step_matches_a_hand_written_reference_and_charges_the_payload(ls):
    algo, _ = DIANAPlus.configure(ls, parse_spec(SPEC))
    comm = SimulatedComm(ls.n, seed=4)
    s0 = algo.init(ls.x0, ls, comm)
    n, d = ls.n, ls.d
    assert comm.ledger.up.tolist() == [32 * d] * n  # p_i sent once
    state, _, _ = trajectory(algo, ls, 3, seed=4)
    s = state[2]
    nxt, info = algo.step(s, ls, SimulatedComm(ls.n, seed=4))
    # reference: the same draws, written out
    u = SimulatedComm(ls.n, seed=4).rng(s.t, tag=sa.TAG_SAMPLE).uniform(d)
    kept = u < s.p_i
    delta = ls.grad(s.x) - s.h_i
    c = torch.where(kept, delta / s.p_i, 0.0)
    x_ref = s.x - algo.gamma * (s.h + c.mean(0))
    h_i_ref = torch.where(kept, ls.grad(s.x), s.h_i)  # alpha_ij = p_ij: kept shifts jump
    torch.testing.assert_close(nxt.x, x_ref, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(nxt.h_i, h_i_ref, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(nxt.h, h_i_ref.mean(0), rtol=1e-13, atol=1e-15)
    nnz = kept.sum(1).to(torch.float64)
    bits = math.ceil(math.log2(d + 1)) + nnz * (32 + math.ceil(math.log2(d)))
    assert info.bits_up == pytest.approx(float(bits.mean()), abs=1e-9)
    assert info.bits_down == 32 * d
    assert s0.h_i.abs().sum() == 0 and nxt.p_i is s.p_i
    assert "H" in info.extras


def test_every_coordinate_sent_is_gradient_descent(ls):
    algo, _ = DIANAPlus.configure(ls, parse_spec(f"randk:k={ls.d}"))
    states, infos, _ = trajectory(algo, ls, 6)
    for s, x in zip(states, gd(ls, algo.gamma, 6), strict=True):
        torch.testing.assert_close(s.x, x, rtol=1e-12, atol=1e-14)
    assert all(torch.allclose(s.h, s.h_i.mean(0), atol=1e-14) for s in states)


def test_the_theory_step_is_dianas_for_uniform_sampling_and_larger_for_diag(ls):
    uni, rec = DIANAPlus.configure(ls, parse_spec(SPEC), sampling="uniform")
    diana, _ = DIANA.configure(ls, parse_spec(SPEC))
    assert uni.gamma == pytest.approx(diana.gamma, rel=1e-9)
    plus, rec = DIANAPlus.configure(ls, parse_spec(SPEC))
    k = rec["theory"]["inputs"]
    assert plus.gamma == pytest.approx(1 / (k["L"] + 6 * k["calL_max"] / ls.n), rel=1e-12)
    assert plus.gamma > 2 * uni.gamma
    assert k["tau"] == 2 and not k["indefinite_L_i"]


def test_converges_linearly_at_the_theory_step(ls):
    algo, rec = DIANAPlus.configure(ls, parse_spec(SPEC))
    rho = rec["theory"]["inputs"]["rate"]
    xs = ls.x_star
    states, _, _ = trajectory(algo, ls, 600, seed=1)
    e = [float(((s.x - xs) ** 2).sum()) for s in states]
    assert e[-1] <= rho**600 * e[0] * 10  # Psi^0 adds the shifts' initial error
    assert e[-1] < 1e-12 * e[0]
    assert float(((states[-1].h_i - ls.grad(xs)) ** 2).sum()) < 1e-10


@pytest.mark.parametrize(
    "opts, spec, match",
    [
        (dict(sampling="importance"), SPEC, "sampling must be one of diag, uniform"),
        (dict(alpha=1.5), SPEC, "alpha must be in"),
        ({}, "topk:k=2", "needs an unbiased compressor"),
        ({}, "randk:k=2,shared=true", "independent sparsifier"),
        ({}, "qsgd", "independent sparsifier"),
    ],
)
def test_bad_input_is_refused(ls, opts, spec, match):
    with pytest.raises(ValueError, match=match):
        algo, _ = DIANAPlus.configure(ls, parse_spec(spec), **opts)
        algo.init(ls.x0, ls, SimulatedComm(ls.n, seed=0))


def test_no_theory_step_without_matrices_or_strong_convexity():
    from problems.registry import make_problem

    p = make_problem("logreg-nonconvex", nodes=2, samples=40, features=4)
    with pytest.raises(ValueError, match="strongly convex"):
        DIANAPlus.theory(p, parse_spec(SPEC), {"sampling": "diag"})


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_two_processes_match_the_simulation(tmp_path):
    torch_dist_helpers().parity(tmp_path, 2, ["diana-plus", "--compressor", "randk:k=3"])


@pytest.mark.dist
@pytest.mark.parametrize("nproc, nodes", [(2, 5), (3, 3)])
def test_gloo_sharded_nodes_match_the_simulation(tmp_path, nproc, nodes):
    # each rank builds the probabilities of its own block of nodes from their L_i
    argv = ["diana-plus", "--compressor", "randk:k=3", "--problem-opt", "L_pm=0"]
    torch_dist_helpers().sharded_parity(tmp_path, nproc, nodes, argv)
