"""The error-feedback family: EF14, EF21-SGD, EF21-PP, EF21-BC, EF21-HB.

Reductions to GD and EF21 (theory sheet §5 P10), invariants, convergence at the theory step,
exact bit counts, determinism, refusal of the wrong compressor class, and the runner.
"""

from __future__ import annotations

import csv
import math

import pytest
import torch
from runs import gd, trajectory

from algorithms import stepsizes
from algorithms.bidirectional.ef21_bc import EF21BC
from algorithms.ef.ef14 import EF14
from algorithms.ef.ef21 import EF21
from algorithms.ef.ef21_hb import EF21HB
from algorithms.ef.ef21_pp import EF21PP
from algorithms.ef.ef21_sgd import EF21SGD
from algorithms.run import run
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

TOPK = "topk:k=2"


@pytest.fixture(scope="module")
def quad():
    """Strongly convex, heterogeneous (zeta2 = 1): L = 1, mu = 0.2, n = 5, d = 10."""
    return make_problem("quadratic", nodes=5, lam=0.2, dim=10, seed=0)


@pytest.fixture(scope="module")
def quad_hom():
    """The same with no heterogeneity at the optimum: every f_i is minimised at x*."""
    return make_problem("quadratic", nodes=5, lam=0.2, dim=10, zeta2=0.0, seed=0)


@pytest.fixture(scope="module")
def logreg():
    return make_problem("logreg", nodes=5, lam=0.1, samples=200, features=10, seed=1)


def final(algo, problem, T, seed=0):
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    for _ in range(T):
        state, _ = algo.step(state, problem, comm)
    return state, comm


def f_gap(problem, x):
    return float(problem.loss(x)) - problem.consts.f_star


def grad_sq(problem, x):
    return float((problem.full_grad(x) ** 2).sum())


def assert_same_path(states, xs, atol=1e-12):
    assert len(states) == len(xs)
    for s, x in zip(states, xs, strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=atol)


ALL = [EF14, EF21SGD, EF21PP, EF21BC, EF21HB]
# options that make each method plain EF21 (or GD with the identity)
AS_EF21 = {
    EF14: {},
    EF21SGD: {},
    EF21PP: {"participation": 1.0},
    EF21BC: {},
    EF21HB: {"eta": 0.0},
}


# ---------------------------------------------------------------- reductions (P10)
@pytest.mark.parametrize("cls", ALL)
def test_identity_compressor_is_gd(cls, nonconvex):
    algo, _ = cls.configure(nonconvex, parse_spec("identity"), **AS_EF21[cls])
    states, _, _ = trajectory(algo, nonconvex, 40)
    assert_same_path(states, gd(nonconvex, algo.gamma, 40))


@pytest.mark.parametrize("cls", [EF21SGD, EF21PP, EF21BC, EF21HB])
def test_reduces_to_ef21(cls, nonconvex):
    """EF21-SGD with full gradients, EF21-PP with p = 1, EF21-BC with the identity downlink
    and EF21-HB with eta = 0 are EF21 (the same step, the same iterates)."""
    c = parse_spec("topk:k=1")
    algo, _ = cls.configure(nonconvex, c, step=0.3, **AS_EF21[cls])
    ref, _ = EF21.configure(nonconvex, c, step=0.3)
    assert algo.gamma == ref.gamma
    assert_same_path(
        trajectory(algo, nonconvex, 60)[0], [s.x for s in trajectory(ref, nonconvex, 60)[0]]
    )


def test_ef21_theory_steps_where_the_variant_is_ef21(quad):
    """Where a variant is EF21 (identity downlink, eta = 0, p = 1) its default step is EF21's;
    EF21-SGD's own step is smaller (its recursion carries the sampling noise)."""
    c = parse_spec(TOPK)
    ref, _ = EF21.configure(quad, c)
    assert EF21BC.configure(quad, c)[0].gamma == pytest.approx(ref.gamma, rel=1e-12)
    assert EF21HB.configure(quad, c, eta=0.0)[0].gamma == pytest.approx(ref.gamma, rel=1e-12)
    assert EF21PP.configure(quad, c, participation=1.0)[0].gamma == ref.gamma
    assert EF21SGD.configure(quad, c)[0].gamma < ref.gamma
    nc, _ = EF21.configure(quad, c, regime="nonconvex")
    assert EF14.configure(quad, c)[0].gamma == nc.gamma  # EF14: EF21's Theorem 1 step
    pp, _ = EF21PP.configure(quad, c, participation=1.0, regime="nonconvex")
    assert pp.gamma == nc.gamma
    hb, _ = EF21HB.configure(quad, c, eta=0.9)
    assert hb.gamma == pytest.approx(0.1 * ref.gamma, rel=1e-12)


def test_heavy_ball_with_identity_is_heavy_ball_gd(nonconvex):
    algo, _ = EF21HB.configure(nonconvex, parse_spec("identity"), eta=0.6)
    states, _, _ = trajectory(algo, nonconvex, 40)
    x, v = nonconvex.x0.clone(), nonconvex.full_grad(nonconvex.x0)
    for s in states[1:]:
        x = x - algo.gamma * v
        v = 0.6 * v + nonconvex.full_grad(x)
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- invariants
def test_ef14_virtual_iterate(quad):
    """``x^t - mean_i e_i^t`` follows GD on the gradients at the real iterates."""
    for spec in ("topk:k=1", "scaled-sign", "scaled:randk:k=3"):
        algo, _ = EF14.configure(quad, parse_spec(spec))
        states, infos, _ = trajectory(algo, quad, 60)
        virtual = quad.x0.clone()
        for s, s_next, info in zip(states, states[1:], infos, strict=False):
            virtual = virtual - algo.gamma * quad.grad(s.x).mean(dim=0)
            torch.testing.assert_close(
                s_next.x - s_next.e_i.mean(dim=0), virtual, rtol=0, atol=1e-12
            )
            E = float((s_next.e_i**2).sum(dim=1).mean())
            assert info.extras["E"] == pytest.approx(E, rel=1e-12, abs=1e-300)
        assert float(states[-1].e_i.abs().max()) > 0  # the memory is used


@pytest.mark.parametrize("cls", [EF21SGD, EF21PP, EF21HB])
def test_g_is_the_mean_of_g_i(cls, logreg):
    kw = {"batch_size": 3} if cls is EF21SGD else {}
    algo, _ = cls.configure(logreg, parse_spec(TOPK), init_mode="compressed", **kw)
    states, infos, _ = trajectory(algo, logreg, 60)
    for s, info in zip(states[1:], infos, strict=True):
        torch.testing.assert_close(s.g, s.g_i.mean(dim=0), rtol=0, atol=1e-12)
        if "G" in info.extras:
            G = float(((s.g_i - logreg.grad(s.x)) ** 2).sum(dim=1).mean())
            assert info.extras["G"] == pytest.approx(G, rel=1e-12, abs=1e-300)


def test_ef21_hb_momentum_recursion(logreg):
    algo, _ = EF21HB.configure(logreg, parse_spec(TOPK), eta=0.7)
    states, _, _ = trajectory(algo, logreg, 30)
    torch.testing.assert_close(states[0].v, states[0].g, rtol=0, atol=0)
    for s, s_next in zip(states, states[1:], strict=False):
        torch.testing.assert_close(s_next.x, s.x - algo.gamma * s.v, rtol=0, atol=0)
        torch.testing.assert_close(s_next.v, 0.7 * s.v + s_next.g, rtol=0, atol=1e-15)


def test_ef21_pp_only_participants_move(logreg):
    algo, _ = EF21PP.configure(logreg, parse_spec(TOPK), participation=0.4)
    states, infos, _ = trajectory(algo, logreg, 80)
    for s, s_next, info in zip(states, states[1:], infos, strict=False):
        torch.testing.assert_close(s_next.g, s_next.g_i.mean(dim=0), rtol=0, atol=1e-12)
        moved = (s_next.g_i != s.g_i).any(dim=1)
        assert int(moved.sum()) <= round(info.extras["participants"] * logreg.n)


def test_ef21_bc_server_and_node_estimators(logreg):
    algo, _ = EF21BC.configure(logreg, parse_spec(TOPK), down_compressor=parse_spec("topk:k=3"))
    states, infos, _ = trajectory(algo, logreg, 60)
    for s, s_next, info in zip(states, states[1:], infos, strict=False):
        torch.testing.assert_close(s_next.gt, s_next.gt_i.mean(dim=0), rtol=0, atol=1e-12)
        torch.testing.assert_close(s_next.x, s.x - algo.gamma * s.g, rtol=0, atol=0)
        gap = s_next.gt - s.g  # the downlink sends TopK-3 of it
        assert int((s_next.g != s.g).sum()) <= 3
        assert info.extras["G_down"] == pytest.approx(float(((s_next.g - s_next.gt) ** 2).sum()))
        assert float(((s_next.g - s_next.gt) ** 2).sum()) <= float((gap**2).sum()) + 1e-30


# ---------------------------------------------------------------- convergence at the theory step
CONVERGE = [
    (EF21PP, {}, 1500),
    # the derived EF21-BC step is conservative (12.6x below EF21's here): 7.6e-13 at 10^4
    (EF21BC, {"down_compressor": parse_spec("topk:k=3")}, 10000),
    (EF21HB, {}, 3000),  # eta = 0.9: gamma = 0.1 gamma_EF21, with momentum
    (EF21HB, {"eta": 0.5}, 1000),
    (EF21SGD, {}, 2000),  # full gradients at EF21-SGD's own (smaller) step
]


@pytest.mark.parametrize(("cls", "kw", "T"), CONVERGE)
def test_linear_convergence_at_the_theory_step(cls, kw, T, quad):
    algo, rec = cls.configure(quad, parse_spec(TOPK), **kw)
    assert rec["gamma"] == rec["gamma_theory"]
    state, _ = final(algo, quad, T)
    assert f_gap(quad, state.x) <= 1e-8


@pytest.mark.parametrize(("cls", "kw", "T"), [*CONVERGE, (EF14, {}, 1000)])
def test_nonconvex_gradient_drops_a_hundredfold(cls, kw, T, nonconvex):
    """Every variant at its default nonconvex step (EF21-HB with eta = 0.9 included: its
    default keeps the effective step ``gamma/(1 - eta)`` at EF21's)."""
    algo, rec = cls.configure(nonconvex, parse_spec(TOPK), **kw)
    state, _ = final(algo, nonconvex, T // 2)
    assert grad_sq(nonconvex, state.x) <= grad_sq(nonconvex, nonconvex.x0) / 100


def test_ef14_exact_without_heterogeneity(quad_hom):
    algo, rec = EF14.configure(quad_hom, parse_spec(TOPK))
    assert rec["theory"]["formula"].startswith("1 / (L + L_tilde sqrt(beta / theta))")
    state, _ = final(algo, quad_hom, 1000)
    assert f_gap(quad_hom, state.x) <= 1e-8


def test_ef14_plateau_shrinks_like_gamma_squared(quad):
    """Theory sheet §2.2 / P7: with full gradients on heterogeneous data EF14 stalls at a level
    ~ gamma^2: a 4x smaller step gives a ~16x lower plateau (at least 8x asserted)."""
    algo, _ = EF14.configure(quad, parse_spec(TOPK))
    plateaus = []
    for mult, T in ((1.0, 1500), (0.25, 4000)):
        a = EF14(compressor=algo.compressor, gamma=algo.gamma * mult)
        comm = SimulatedComm(quad.n, seed=0)
        state = a.init(quad.x0, quad, comm)
        tail = []
        for t in range(T):
            state, _ = a.step(state, quad, comm)
            if t >= T - 300:
                tail.append(f_gap(quad, state.x))
        plateaus.append(max(tail))
    assert plateaus[0] > 1e-7  # a plateau, not convergence
    assert plateaus[1] < plateaus[0] / 8


def test_ef21_sgd_noise_floor_falls_with_the_batch(logreg):
    """B&W Fig. 1 / P13: with a constant step, EF21-SGD stalls at a floor of ``||grad f||^2``
    that falls as the minibatch ``tau`` grows (observed: about 2e-3, 2e-4, 6e-5)."""
    floors = []
    for tau in (1, 16, 64):
        algo, _ = EF21SGD.configure(logreg, parse_spec(TOPK), batch_size=tau)
        comm = SimulatedComm(logreg.n, seed=0)
        state = algo.init(logreg.x0, logreg, comm)
        tail = []
        for t in range(900):
            state, _ = algo.step(state, logreg, comm)
            if t >= 600 and t % 10 == 0:
                tail.append(grad_sq(logreg, state.x))
        floors.append(sum(tail) / len(tail))
    assert floors[2] > 1e-6  # still a floor, not convergence
    assert floors[1] < floors[0] / 4
    assert floors[2] < floors[1] / 2


# ---------------------------------------------------------------- bits
@pytest.mark.parametrize("cls", ALL)
def test_bits_are_the_formula_times_iterations(cls, logreg):
    c, d, T = parse_spec("topk:k=3"), logreg.d, 12
    algo, _ = cls.configure(logreg, c, **AS_EF21[cls])
    _, _, comm = trajectory(algo, logreg, T)
    init_up = 0 if cls is EF14 else 32 * d  # the full g_i^0, sent uncompressed
    tot = comm.bits_totals()
    assert tot["bits_up"] == init_up + T * c.bits(d)
    init_down = 32 * d if cls is EF21BC else 0  # EF21-BC sends g^0 to the nodes
    assert tot["bits_down"] == init_down + T * 32 * d  # the model, or identity downlink


def test_ef21_bc_downlink_is_the_down_compressor(logreg):
    c, cm, d, T = parse_spec("topk:k=2"), parse_spec("topk:k=4"), logreg.d, 15
    for mode, up0, down0 in (
        ("full", 32 * d, 32 * d),
        ("compressed", c.bits(d), 32 * d),
        ("zero", 0, 0),
    ):
        algo, _ = EF21BC.configure(logreg, c, down_compressor=cm, init_mode=mode)
        _, _, comm = trajectory(algo, logreg, T)
        tot = comm.bits_totals()
        assert (tot["bits_up"], tot["bits_down"]) == (up0 + T * c.bits(d), down0 + T * cm.bits(d))


def test_ef21_pp_charges_only_participants(logreg):
    c, d, T = parse_spec("topk:k=2"), logreg.d, 40
    algo, _ = EF21PP.configure(logreg, c, participation=0.3)
    _, infos, comm = trajectory(algo, logreg, T)
    sends = sum(round(i.extras["participants"] * logreg.n) for i in infos)
    assert 0 < sends < T * logreg.n
    assert int(comm.ledger.up.sum()) == logreg.n * 32 * d + sends * c.bits(d)


# ---------------------------------------------------------------- participation
def test_poisson_participation_fraction(logreg):
    algo, _ = EF21PP.configure(logreg, parse_spec(TOPK), participation=0.3, step=1e-3)
    T = 400
    _, infos, _ = trajectory(algo, logreg, T)
    N = T * logreg.n
    frac = sum(i.extras["participants"] for i in infos) / T
    assert abs(frac - 0.3) <= 5 * math.sqrt(0.3 * 0.7 / N)
    counts = {round(i.extras["participants"] * logreg.n) for i in infos}
    assert len(counts) > 2  # the number of participants varies (independent coins)


def test_nice_participation_takes_floor_pn_nodes(logreg):
    algo, _ = EF21PP.configure(
        logreg, parse_spec(TOPK), participation=0.5, sampling="nice", step=1e-3
    )
    T = 400
    states, infos, _ = trajectory(algo, logreg, T)
    assert {round(i.extras["participants"] * logreg.n) for i in infos} == {2}
    moved = torch.stack(
        [(b.g_i != a.g_i).any(dim=1) for a, b in zip(states, states[1:], strict=False)]
    )
    per_node = moved.double().mean(dim=0)  # each node takes part with probability 2/5
    assert (per_node - 0.4).abs().max() <= 5 * math.sqrt(0.4 * 0.6 / T)


def test_ef21_pp_step_shrinks_with_participation(quad):
    c = parse_spec(TOPK)
    alpha, k = c.delta(quad.d), quad.consts
    for regime, ref in (
        ("nonconvex", stepsizes.ef21(k.L, k.L_tilde, alpha)),
        ("pl", stepsizes.ef21_pl(k.L, k.L_tilde, alpha, k.mu)),
    ):
        steps = [
            EF21PP.configure(quad, c, participation=p, regime=regime)[0].gamma
            for p in (1.0, 0.5, 0.1)
        ]
        assert steps[0] > steps[1] > steps[2]
        assert steps[0] == pytest.approx(ref, rel=1e-12)


# ---------------------------------------------------------------- determinism and refusal
@pytest.mark.parametrize("cls", ALL)
def test_same_seed_same_iterates(cls, logreg):
    kw = {"batch_size": 4} if cls in (EF14, EF21SGD) else {}
    if cls is EF21BC:
        kw = {"down_compressor": parse_spec("scaled:randk:k=3")}
    algo, _ = cls.configure(logreg, parse_spec("scaled:randk:k=3"), **kw)
    a = final(algo, logreg, 25, seed=5)[0].x
    b = final(algo, logreg, 25, seed=5)[0].x
    c = final(algo, logreg, 25, seed=6)[0].x
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("cls", ALL)
def test_refuses_an_unbiased_compressor_unless_forced(cls, logreg):
    with pytest.raises(ValueError, match="contractive.*randk"):
        cls.configure(logreg, parse_spec("randk:k=2"))
    algo, _ = cls.configure(logreg, parse_spec("randk:k=2"), step=0.01, force=True)
    assert algo.gamma == 0.01 and math.isfinite(float(final(algo, logreg, 5)[0].x.sum()))


def test_ef21_bc_refuses_an_unbiased_downlink(logreg):
    with pytest.raises(ValueError, match="downlink.*randk"):
        EF21BC.configure(logreg, parse_spec(TOPK), down_compressor=parse_spec("randk:k=2"))
    EF21BC.configure(logreg, parse_spec(TOPK), down_compressor=parse_spec("randk:k=2"), force=True)


@pytest.mark.parametrize(
    ("cls", "kw", "words"),
    [
        (EF21PP, {"participation": 0.0}, "participation"),
        (EF21PP, {"sampling": "all"}, "sampling"),
        (EF21HB, {"eta": 1.0}, "eta"),
        (EF21SGD, {"batch_size": 0}, "--batch-size"),
        (EF14, {"batch_size": -2}, "--batch-size"),
    ],
)
def test_bad_hyperparameters(cls, kw, words):
    with pytest.raises(ValueError, match=words):
        cls(compressor=parse_spec(TOPK), gamma=0.1, **kw)


def test_minibatches_differ_from_full_gradients(logreg):
    algo, _ = EF21SGD.configure(logreg, parse_spec("identity"), batch_size=2)
    x = final(algo, logreg, 20)[0].x
    assert not torch.allclose(x, gd(logreg, algo.gamma, 20)[-1], atol=1e-6)


# ---------------------------------------------------------------- the runner
@pytest.mark.parametrize(
    "argv",
    [
        ["ef-sgd", "--compressor", TOPK],
        ["ef14", "--compressor", "scaled-sign", "--batch-size", "2", "--problem", "logreg"],
        ["ef21-sgd", "--compressor", TOPK, "--batch-size", "3", "--problem", "logreg"],
        ["ef21-pp", "--compressor", TOPK, "--participation", "0.5", "--sampling", "nice"],
        ["ef21-bc", "--compressor", TOPK, "--down-compressor", "topk:k=5"],
        ["ef21-hb", "--compressor", TOPK, "--eta", "0.5"],
    ],
)
def test_runner(argv, tmp_path):
    out = tmp_path / "r"
    assert run([*argv, "--nodes", "4", "--out", str(out), "--quiet", "--iters", "50"]) == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["iter"]) for r in rows] == list(range(51))
    assert float(rows[-1]["bits_up"]) > 0
