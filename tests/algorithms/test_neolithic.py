"""NEOLITHIC: one round against a hand-written reference, the multi-step module, bits per
round, the error-feedback invariant, the theory parameters, convergence, bad options, the
runner, and parity with gloo processes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from runs import gd, torch_dist_helpers, trajectory

from algorithms import stepsizes
from algorithms.multistage.neolithic import NEOLITHIC, TAG_BATCH, TAG_MSC, msc
from algorithms.run import run
from algorithms.stepsizes.neolithic import msc_delta, neolithic_rounds
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

TOPK = "topk:k=2"


@pytest.fixture(scope="module")
def noisy():
    """A heterogeneous quadratic with stochastic gradients (4 nodes, d = 8)."""
    return make_problem(
        "quadratic", nodes=4, dim=8, lam=0.2, zeta2=2.0, grad_noise=0.5, seed=1, x0="randn"
    )


def topk_by_hand(x: torch.Tensor, k: int) -> torch.Tensor:
    """Keep each row's k largest magnitudes (no ties in random data)."""
    idx = x.abs().topk(k, dim=1).indices
    return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))


def test_one_round_is_the_hand_written_update(noisy):
    algo, _ = NEOLITHIC.configure(noisy, parse_spec(TOPK), rounds=3, batch_size=2, step=0.3)
    comm = SimulatedComm(noisy.n, seed=5)
    state = algo.init(noisy.x0, noisy, comm)
    for _ in range(2):  # non-zero error memories
        state, _ = algo.step(state, noisy, comm)
    assert float(state.e_i.abs().sum()) > 0
    e_before = state.e_i.clone()
    new, info = algo.step(state, noisy, SimulatedComm(noisy.n, seed=5))
    # by hand: 3 x 2 samples at x^t, e_i + g_i, three Top-2 stages of the residual
    batch = noisy.sample(SimulatedComm(noisy.n, seed=5).rng(state.t, tag=TAG_BATCH), 6)
    p_i = noisy.grad(state.x, batch) + state.e_i
    v_i = torch.zeros_like(p_i)
    for _ in range(3):
        v_i += topk_by_hand(p_i - v_i, 2)
    torch.testing.assert_close(new.e_i, p_i - v_i, rtol=0, atol=1e-14)
    torch.testing.assert_close(new.x, state.x - 0.3 * v_i.mean(0), rtol=0, atol=1e-14)
    assert info.extras["E"] == pytest.approx(float(((p_i - v_i) ** 2).sum(1).mean()))
    assert new.t == state.t + 1 and torch.equal(state.e_i, e_before)  # input not mutated


def test_random_stages_draw_from_their_own_streams(noisy):
    C = parse_spec("scaled:randk:k=3")
    algo, _ = NEOLITHIC.configure(noisy, C, rounds=4, step=0.2)
    comm = SimulatedComm(noisy.n, seed=2)
    state = algo.init(noisy.x0, noisy, comm)
    new, _ = algo.step(state, noisy, comm)
    p_i, v_i = noisy.grad(state.x), torch.zeros(noisy.n, noisy.d, dtype=torch.float64)
    for r in range(4):
        v_i += C.decode(C.encode(p_i - v_i, comm.rng_for(C, 0, tag=TAG_MSC + r)))
    torch.testing.assert_close(new.x, state.x - 0.2 * v_i.mean(0), rtol=0, atol=1e-14)
    # the stages differ: a coordinate left by one stage can be taken by the next
    ones = torch.ones(noisy.n, noisy.d, dtype=torch.float64)
    picked = [C.decode(C.encode(ones, comm.rng_for(C, 0, tag=TAG_MSC + r)))[0]
              for r in range(4)]  # fmt: skip
    assert len({tuple(x.nonzero()[:, 0].tolist()) for x in picked}) > 1


def test_the_module_contracts_geometrically_and_is_exact_with_topk_at_d_over_k():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 12, generator=gen, dtype=torch.float64)
    C = parse_spec("topk:k=3")
    fixed = SimulatedComm(6, seed=0).rng_for(C, 0)
    errs = []
    for R in range(1, 5):
        v, nbits = msc(C, x, R, lambda r: fixed)
        errs.append(((x - v) ** 2).sum(1))
        assert nbits.tolist() == [R * C.bits(12)] * 6
        assert (errs[-1] <= (1 - 3 / 12) ** R * (x**2).sum(1) + 1e-12).all()
    assert all((a >= b).all() for a, b in zip(errs, errs[1:], strict=False))
    assert float(errs[-1].max()) == 0.0  # 4 stages of Top-3 in d = 12: everything sent


def test_bits_per_round_are_the_payload_formula(noisy):
    d = noisy.d
    C, CM = parse_spec("topk:k=3"), parse_spec("topk:k=2")
    algo, _ = NEOLITHIC.configure(noisy, C, rounds=5)
    _, infos, comm = trajectory(algo, noisy, 4)
    assert all(i.bits_up == 5 * C.bits(d) and i.bits_down == 32 * d for i in infos)
    assert comm.bits_totals()["bits_up"] == 4 * 5 * C.bits(d)
    algo, _ = NEOLITHIC.configure(noisy, C, rounds=5, down_compressor=CM)
    _, infos, comm = trajectory(algo, noisy, 4)
    assert all(i.bits_up == 5 * C.bits(d) and i.bits_down == 5 * CM.bits(d) for i in infos)
    assert comm.ledger.down.tolist() == [4 * 5 * CM.bits(d)] * noisy.n


def test_error_feedback_invariants(noisy):
    """Full gradients, identity downlink: the virtual iterate ``x - gamma mean_i e_i`` is GD's
    step from ``x``'s gradient; with a downlink module, ``u + e' = e + v`` on the server."""
    algo, _ = NEOLITHIC.configure(noisy, parse_spec(TOPK), rounds=2, step=0.25)
    states, _, _ = trajectory(algo, noisy, 6)
    for a, b in zip(states, states[1:], strict=False):
        va = a.x - 0.25 * a.e_i.mean(0)
        vb = b.x - 0.25 * b.e_i.mean(0)
        torch.testing.assert_close(vb, va - 0.25 * noisy.full_grad(a.x), rtol=0, atol=1e-12)
    CM = parse_spec("topk:k=3")
    algo, _ = NEOLITHIC.configure(noisy, parse_spec(TOPK), rounds=2, step=0.25,
                                  down_compressor=CM)  # fmt: skip
    states, _, _ = trajectory(algo, noisy, 4)
    for a, b in zip(states, states[1:], strict=False):
        v = (noisy.grad(a.x) + a.e_i - b.e_i).mean(0)  # mean_i (p_i - e_i') = mean_i v_i
        u = (a.x - b.x) / 0.25
        torch.testing.assert_close(u + b.e, a.e + v, rtol=0, atol=1e-12)


def test_identity_is_gradient_descent(noisy):
    algo, rec = NEOLITHIC.configure(noisy, parse_spec("identity"))
    assert algo.rounds == 1 and rec["theory"]["inputs"]["delta_R"] == 1.0
    states, infos, _ = trajectory(algo, noisy, 15)
    for s, x in zip(states, gd(noisy, algo.gamma, 15), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)
    assert algo.gamma == pytest.approx(1 / noisy.consts.L)


def test_theory_parameters(noisy):
    C = parse_spec(TOPK)
    delta = C.delta(noisy.d)
    algo, rec = NEOLITHIC.configure(noisy, C)
    R = algo.rounds
    assert (1 - delta) ** R <= 0.01 < (1 - delta) ** (R - 1)
    assert R == neolithic_rounds(delta, 0.01) == math.ceil(math.log(100) / -math.log(0.75))
    c = noisy.consts
    assert algo.gamma == pytest.approx(stepsizes.ef21(c.L, c.L_tilde, 1 - (1 - delta) ** R))
    assert rec["theory"]["params"] == {"rounds": R} and "2206.03665" in rec["theory"]["source"]
    # a given R is used by the step; a tighter tolerance gives more stages
    few, _ = NEOLITHIC.configure(noisy, C, rounds=1)
    assert few.gamma == pytest.approx(stepsizes.ef21(c.L, c.L_tilde, delta))
    assert few.gamma < algo.gamma
    assert NEOLITHIC.configure(noisy, C, msc_tol=1e-4)[0].rounds > R
    assert msc_delta(0.25, 3) == pytest.approx(1 - 0.75**3)
    assert neolithic_rounds(1.0, 0.5) == 1 and neolithic_rounds(0.5, 0.5) == 1


def test_converges_at_the_theory_parameters(noisy):
    quad = make_problem("quadratic", nodes=5, lam=0.2, dim=10, seed=0)
    algo, _ = NEOLITHIC.configure(quad, parse_spec(TOPK))
    states, _, _ = trajectory(algo, quad, 150)
    assert float(quad.loss(states[-1].x)) - quad.consts.f_star <= 1e-10
    nonconvex = make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )
    algo, _ = NEOLITHIC.configure(nonconvex, parse_spec("scaled:randk:k=3"))
    states, _, _ = trajectory(algo, nonconvex, 150)
    g0 = float((nonconvex.full_grad(nonconvex.x0) ** 2).sum())
    assert float((nonconvex.full_grad(states[-1].x) ** 2).sum()) <= g0 / 100


def test_bad_options_are_refused(noisy):
    C = parse_spec(TOPK)
    with pytest.raises(ValueError, match="needs a contractive compressor"):
        NEOLITHIC.configure(noisy, parse_spec("randk:k=3"))
    with pytest.raises(ValueError, match=r"downlink.*needs a contractive compressor"):
        NEOLITHIC.configure(noisy, C, down_compressor=parse_spec("randk:k=3"))
    for bad, match in [({"rounds": 0}, "rounds must be a positive integer"),
                       ({"msc_tol": 1.0}, r"msc_tol must be in \(0, 1\)"),
                       ({"memory": "x"}, "memory must be one of ef, none"),
                       ({"batch_size": 0}, "--batch-size must be a positive integer")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            NEOLITHIC(compressor=C, gamma=0.1, **bad)
    with pytest.raises(ValueError, match="tol must be in"):
        neolithic_rounds(0.5, 0.0)


def test_runner(tmp_path):
    out = tmp_path / "r"
    argv = ["neolithic", "--compressor", TOPK, "--nodes", "4", "--iters", "10", "--rounds", "3",
            "--batch-size", "2", "--memory", "none", "--quiet", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algorithm_class"] == "NEOLITHIC" and cfg["step"]["params"]["rounds"] == 3
    with open(out / "history.csv") as fh:
        assert "E" in fh.readline().strip().split(",")


# The default suite runs one parity test per mechanism (adiana, mcm, fednl, byz-vr-marina,
# compressed-scaffnew); this one runs under -m dist.
@pytest.mark.dist
def test_gloo_matches_the_simulation(tmp_path):
    argv = ["neolithic", "--compressor", "scaled:randk:k=3", "--rounds", "3", "--batch-size", "2"]
    torch_dist_helpers().parity(tmp_path, 2, argv)


@pytest.mark.dist
@pytest.mark.parametrize(
    "nproc, extra",
    [(3, ["--down-compressor", "scaled:randk:k=4"]), (2, ["--memory", "none", "--msc-tol", "0.1"])],
)
def test_gloo_matches_the_simulation_more(tmp_path, nproc, extra):
    argv = ["neolithic", "--compressor", "scaled:randk:k=3", "--batch-size", "1", *extra]
    torch_dist_helpers().parity(tmp_path, nproc, argv)
