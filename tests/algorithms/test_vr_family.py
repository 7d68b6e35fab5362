"""DIANA, MARINA (VR-, PP-), DASHA (PAGE, MVR, SYNC-MVR) and COMP-AMS: exact reductions to GD
(theory sheet §5 P10, P11), invariants, bits, determinism, refusals, sampling, the runner and
the worked step-size numbers."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from runs import gd

from algorithms import stepsizes
from algorithms.momentum.comp_ams import CompAMS
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from algorithms.shifts.diana import DIANA
from algorithms.vr.dasha import DASHA
from algorithms.vr.dasha_mvr import DASHAMVR
from algorithms.vr.dasha_page import DASHAPAGE
from algorithms.vr.dasha_sync_mvr import DASHASYNCMVR
from algorithms.vr.marina import MARINA
from algorithms.vr.pp_marina import PPMARINA
from algorithms.vr.vr_marina import VRMARINA
from comm import SimulatedComm
from compressors import parse_spec
from problems.instances import heterogeneous_ridge
from problems.least_squares import LeastSquares
from problems.registry import make_problem
from streams import tags

UNBIASED = [DIANA, MARINA, VRMARINA, PPMARINA, DASHA, DASHAPAGE, DASHAMVR, DASHASYNCMVR]
ALL = [*UNBIASED, CompAMS]
# Options that make each method's stochastic parts run in the generic tests.
KW = {
    DIANA: {},
    MARINA: {"p": 0.3},
    VRMARINA: {"batch_size": 4, "p": 0.3},
    PPMARINA: {"participation": 0.5, "p": 0.3},
    DASHA: {},
    DASHAPAGE: {"batch_size": 4, "p": 0.3},
    DASHAMVR: {"batch_size": 4},
    DASHASYNCMVR: {"batch_size": 4, "p": 0.3},
    CompAMS: {"batch_size": 4},
}


def ridge_problem(identical: bool = False) -> LeastSquares:
    """The heterogeneous ridge of the theory sheet §3.6 (or its homogeneous variant)."""
    return heterogeneous_ridge(identical=identical)


@pytest.fixture(scope="module")
def ridge():
    return ridge_problem()


@pytest.fixture(scope="module")
def nonconvex():
    p = make_problem(
        "logreg-nonconvex", nodes=5, lam=0.1, samples=200, features=10, seed=2, x0="randn"
    )
    return p


@pytest.fixture(scope="module")
def quad():
    """Noise-free quadratic: a minibatch gradient is the exact gradient."""
    return make_problem("quadratic", nodes=10, lam=0.1)


def trajectory(algo, problem, T, seed=0):
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    xs, infos = [state.x], []
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        xs.append(state.x)
        infos.append(info)
    return xs, infos, state, comm


def assert_same(xs, ys):
    assert len(xs) == len(ys)
    for a, b in zip(xs, ys, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ step sizes (P4, P8, P9, P15)
def test_step_formulas_reproduce_the_worked_numbers(ridge):
    c, n, omega = ridge.consts, 10, 9.0  # RandK K = 2 of d = 20
    assert c.L == pytest.approx(1.611, abs=1e-3) and c.L_tilde == pytest.approx(2.991, abs=1e-3)
    assert stepsizes.marina(c.L, c.L_tilde, 0.1, omega, n) == pytest.approx(0.0988, abs=1e-4)
    assert stepsizes.dasha(c.L, c.L_tilde, omega, n) == pytest.approx(0.0196, abs=1e-4)
    code = stepsizes.dasha_code(float(c.L_i.mean()), c.L_tilde, omega, n)
    assert code == pytest.approx(0.0494, abs=1e-4)
    derived = stepsizes.dasha_derived(c.L, c.L_tilde, omega, n)
    assert stepsizes.dasha(c.L, c.L_tilde, omega, n) < derived < code
    assert stepsizes.diana(c.L, c.L_max, omega, n) == pytest.approx(1 / (c.L + 5.4 * c.L_max))
    assert stepsizes.diana_alpha(omega) == pytest.approx(0.1)
    assert stepsizes.dasha_momentum(omega) == pytest.approx(1 / 19)
    # Without compression or with p = 1 every step is 1/L.
    assert stepsizes.marina(c.L, c.L_tilde, 1.0, omega, n) == pytest.approx(1 / c.L)
    assert stepsizes.pp_marina(c.L, c.L_tilde, 1.0, omega, 3) == pytest.approx(1 / c.L)
    assert stepsizes.vr_marina(c.L, c.L_tilde, 5.0, 1.0, omega, n, 2) == pytest.approx(1 / c.L)
    assert stepsizes.dasha(c.L, c.L_tilde, 0.0, n) == pytest.approx(1 / c.L)
    # The AB form: independent compressors recover MARINA; PermK with L_pm = 0 gives 1/L (P11).
    A, B = stepsizes.ab_constants(omega, n, "independent")
    assert stepsizes.marina_ab(c.L, c.L_tilde, 0.1, A, B) == pytest.approx(
        stepsizes.marina(c.L, c.L_tilde, 0.1, omega, n)
    )
    assert stepsizes.marina_ab(c.L, c.L_tilde, 0.1, 1.0, 1.0, L_pm=0.0) == pytest.approx(1 / c.L)
    assert stepsizes.comp_ams(2.0, 1e-8, 0.0, 1.0) == pytest.approx(1e-4 / 2.0)
    with pytest.raises(ValueError, match="L_pm"):
        stepsizes.marina_ab(c.L, c.L_tilde, 0.1, 1.0, 1.0)


# ------------------------------------------------------------------ exact reductions (P10, P11)
@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (DIANA, {"init_mode": "zero"}),
        (DIANA, {"init_mode": "full"}),
        (MARINA, {}),  # identity: p = support/d = 1
        (PPMARINA, {"participation": 1.0, "p": 1.0}),
        (VRMARINA, {"batch_size": 3, "p": 1.0}),
        (DASHA, {"init_mode": "full"}),
        (DASHAPAGE, {"batch_size": 3, "p": 1.0}),
        (DASHASYNCMVR, {"batch_size": 3, "p": 1.0}),
    ],
)
def test_identity_compressor_is_gradient_descent(cls, kw, nonconvex):
    algo, rec = cls.configure(nonconvex, parse_spec("identity"), step=0.5, **kw)
    xs, *_ = trajectory(algo, nonconvex, 40)
    assert_same(xs, gd(nonconvex, 0.5, 40))
    for key in ("alpha", "momentum", "p"):
        if key in rec["params"] and kw.get(key) is None:
            assert rec["params"][key] == 1.0  # omega = 0: alpha = a = p = 1


@pytest.mark.parametrize("cls", [MARINA, PPMARINA, VRMARINA])
def test_marina_family_with_p_one_is_gd_whatever_the_compressor(cls, nonconvex):
    kw = {"participation": 0.4} if cls is PPMARINA else {}
    algo, _ = cls.configure(nonconvex, parse_spec("randk:k=2"), step=0.5, p=1.0, **kw)
    xs, infos, _, _ = trajectory(algo, nonconvex, 30)
    assert all(i.extras["sync"] == 1.0 for i in infos)
    assert_same(xs, gd(nonconvex, 0.5, 30))


def test_dasha_mvr_with_exact_gradients_is_gd(quad):
    """With identity and g_i^0 = h_i^0 = grad f_i(x^0), MVR's h stays the exact gradient on a
    noise-free quadratic, so DASHA-MVR (any b) is GD."""
    algo, _ = DASHAMVR.configure(quad, parse_spec("identity"), step=0.3, b=0.3, batch_size=2)
    xs, *_ = trajectory(algo, quad, 40)
    assert_same(xs, gd(quad, 0.3, 40))


@pytest.mark.parametrize("cls", [DASHA, DASHAPAGE, DASHASYNCMVR])
def test_dasha_zero_init_lags_gd_by_one_step(cls, nonconvex):
    kw = {} if cls is DASHA else {"batch_size": 3, "p": 1.0}
    algo, _ = cls.configure(nonconvex, parse_spec("identity"), step=0.5, init_mode="zero", **kw)
    xs, _, _, comm = trajectory(algo, nonconvex, 40)
    torch.testing.assert_close(xs[1], xs[0], rtol=0, atol=0)  # g^0 = 0: x^1 = x^0
    assert_same(xs[1:], gd(nonconvex, 0.5, 39))
    if cls is DASHA:
        assert comm.bits_totals()["bits_up"] == 40 * 32 * nonconvex.d  # nothing sent at init


def test_comp_ams_with_identity_is_amsgrad(nonconvex):
    for beta1, beta2 in ((0.9, 0.99), (0.0, 0.999)):
        eta, eps = 0.05, 1e-8
        algo, _ = CompAMS.configure(
            nonconvex, parse_spec("identity"), step=eta, beta1=beta1, beta2=beta2, eps=eps
        )
        xs, infos, state, _ = trajectory(algo, nonconvex, 40)
        assert all(i.extras["E"] == 0.0 for i in infos)
        x = nonconvex.x0.clone()
        m, v, v_hat, ref = torch.zeros_like(x), torch.zeros_like(x), torch.zeros_like(x), [x]
        for _ in range(40):
            g = nonconvex.full_grad(x)
            m = beta1 * m + (1 - beta1) * g
            v = beta2 * v + (1 - beta2) * g * g
            v_hat = torch.maximum(v_hat, v)
            x = x - eta * m / torch.sqrt(v_hat + eps)
            ref.append(x)
        assert_same(xs, ref)


def test_marina_with_permk_on_identical_nodes_is_gd_at_step_one_over_L():
    """Theory sheet P11: identical f_i give L_pm = 0, p = 1/n and gamma = 1/L; PermK's messages
    average exactly to the common difference, so MARINA is GD."""
    p = ridge_problem(identical=True)
    algo, rec = MARINA.configure(p, parse_spec("permk"), regime="nonconvex")
    assert rec["params"]["p"] == pytest.approx(0.1)  # ceil(d/n)/d = 1/n
    assert rec["theory"]["inputs"]["A"] == rec["theory"]["inputs"]["B"] == 1.0
    assert algo.gamma == pytest.approx(1 / p.consts.L, rel=1e-6)
    xs, infos, _, _ = trajectory(algo, p, 60)
    assert sum(i.extras["sync"] for i in infos) < 60
    for a, b in zip(xs, gd(p, algo.gamma, 60), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ invariants
def test_diana_keeps_h_equal_to_the_mean_of_h_i_and_reports_H(ridge):
    algo, _ = DIANA.configure(ridge, parse_spec("randk:k=2"), init_mode="full")
    comm = SimulatedComm(ridge.n, seed=0)
    state = algo.init(ridge.x0, ridge, comm)
    star = ridge.grad(ridge.x_star)
    for _ in range(100):
        state, info = algo.step(state, ridge, comm)
        torch.testing.assert_close(state.h, state.h_i.mean(dim=0), rtol=0, atol=1e-12)
        H = float(((state.h_i - star) ** 2).sum(dim=1).mean())
        assert info.extras["H"] == pytest.approx(H, rel=1e-12)


@pytest.mark.parametrize("cls", [DASHA, DASHAPAGE, DASHAMVR, DASHASYNCMVR])
@pytest.mark.parametrize("init", ["full", "zero"])
def test_dasha_keeps_g_equal_to_the_mean_of_g_i(cls, init, ridge):
    algo, _ = cls.configure(ridge, parse_spec("randk:k=2"), init_mode=init, **KW[cls])
    comm = SimulatedComm(ridge.n, seed=0)
    state = algo.init(ridge.x0, ridge, comm)
    torch.testing.assert_close(state.h_i, ridge.grad(ridge.x0), rtol=0, atol=0)
    for _ in range(60):
        state, info = algo.step(state, ridge, comm)
        torch.testing.assert_close(state.g, state.g_i.mean(dim=0), rtol=0, atol=1e-12)
        G = float(((state.g_i - state.h_i) ** 2).sum(dim=1).mean())
        assert info.extras["G"] == pytest.approx(G, rel=1e-12, abs=1e-300)
        if cls is DASHA:  # h_i is the exact local gradient
            torch.testing.assert_close(state.h_i, ridge.grad(state.x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [MARINA, VRMARINA, PPMARINA, DASHASYNCMVR])
def test_a_synchronisation_resets_g_to_the_gradient(cls, ridge):
    algo, _ = cls.configure(ridge, parse_spec("randk:k=2"), step=0.02, **KW[cls])
    comm = SimulatedComm(ridge.n, seed=0)
    state = algo.init(ridge.x0, ridge, comm)
    syncs = 0
    for _ in range(60):
        state, info = algo.step(state, ridge, comm)
        if info.extras["sync"]:
            syncs += 1
            torch.testing.assert_close(state.g, ridge.full_grad(state.x), rtol=0, atol=1e-12)
    assert 0 < syncs < 60


def test_comp_ams_error_feedback_identity(nonconvex):
    """EF14's identity: sum_t g_bar_t + mean_i e_i^{T} = sum_t mean_i g_i^t."""
    algo, _ = CompAMS.configure(nonconvex, parse_spec("topk:k=2"), step=0.02)
    comm = SimulatedComm(nonconvex.n, seed=0)
    state = algo.init(nonconvex.x0, nonconvex, comm)
    sent = torch.zeros_like(state.x)
    true = torch.zeros_like(state.x)
    for _ in range(60):
        true += nonconvex.grad(state.x).mean(dim=0)
        m_prev = state.m
        state, info = algo.step(state, nonconvex, comm)
        sent += (state.m - algo.beta1 * m_prev) / (1 - algo.beta1)  # g_bar_t, from m's update
        torch.testing.assert_close(sent + state.e_i.mean(dim=0), true, rtol=0, atol=1e-12)
        assert info.extras["E"] == pytest.approx(float((state.e_i**2).sum(1).mean()), rel=1e-12)
    assert float((state.e_i**2).sum()) > 0
    assert torch.all(state.v_hat >= state.v)


# ------------------------------------------------------------------ bits (P14)
@pytest.mark.parametrize("cls", ALL)
def test_bits_are_the_message_formula_plus_uncompressed_sends(cls, ridge):
    d, T = ridge.d, 40
    spec = "topk:k=3" if cls is CompAMS else "randk:k=2"
    c = parse_spec(spec)
    full = 32 * d
    algo, _ = cls.configure(ridge, c, step=0.01, **KW[cls])
    _, infos, _, comm = trajectory(algo, ridge, T)
    sync = [i.extras.get("sync", 0.0) for i in infos]
    if cls is PPMARINA:
        per_round = [
            full if s else i.extras["participation"] * c.bits(d)
            for s, i in zip(sync, infos, strict=True)
        ]
    elif cls is DASHAPAGE:  # the coin changes computation only
        per_round = [c.bits(d)] * T
    else:
        per_round = [full if s else c.bits(d) for s in sync]
    init = 0 if cls in (DIANA, CompAMS) else full  # DIANA: zero init by default
    totals = comm.bits_totals()
    assert totals["bits_up"] == pytest.approx(init + sum(per_round), rel=1e-12)
    assert totals["bits_down"] == T * full
    for info, expected in zip(infos, per_round, strict=True):
        assert info.bits_up == pytest.approx(expected, rel=1e-12)
        assert info.bits_down == full
    if cls in (MARINA, VRMARINA, PPMARINA, DASHASYNCMVR):
        assert 0 < sum(sync) < T


def test_marina_syncs_at_the_rate_p(ridge):
    """The shared coin: the number of synchronisations is Binomial(T, p)."""
    T, p = 600, 0.1
    algo, _ = MARINA.configure(ridge, parse_spec("randk:k=2"))
    assert algo.p == pytest.approx(p)
    _, infos, _, _ = trajectory(algo, ridge, T)
    k = sum(i.extras["sync"] for i in infos)
    assert abs(k - p * T) <= 5 * math.sqrt(T * p * (1 - p))


def test_pp_marina_samples_the_documented_fraction(ridge):
    """r = round(participation n) draws with replacement: on non-sync rounds the expected
    fraction of nodes that send is 1 - (1 - 1/n)^r, and only they are charged."""
    n, T = ridge.n, 1500
    algo, _ = PPMARINA.configure(ridge, parse_spec("randk:k=2"), participation=0.5, p=1e-9)
    comm = SimulatedComm(n, seed=0)
    state = algo.init(ridge.x0, ridge, comm)
    fracs, charged = [], torch.zeros(n)
    for _ in range(T):
        before = comm.ledger.up.clone()
        state, info = algo.step(state, ridge, comm)
        assert info.extras["sync"] == 0.0
        sent = (comm.ledger.up - before) > 0
        assert float(sent.double().mean()) == pytest.approx(info.extras["participation"])
        fracs.append(info.extras["participation"])
        charged += sent
    f = torch.tensor(fracs, dtype=torch.float64)
    expected = 1 - (1 - 1 / n) ** 5
    assert abs(float(f.mean()) - expected) <= 5 * float(f.std()) / math.sqrt(T)
    # Each node is drawn with the same probability.
    per_node = charged / T
    assert float((per_node - expected).abs().max()) <= 5 * math.sqrt(expected / T)


# ------------------------------------------------------------------ determinism and sampling
@pytest.mark.parametrize("cls", ALL)
def test_same_seed_same_iterates(cls, ridge):
    spec = "topk:k=3" if cls is CompAMS else "randk:k=2"
    algo, _ = cls.configure(ridge, parse_spec(spec), step=0.01, **KW[cls])
    a, *_ = trajectory(algo, ridge, 25, seed=5)
    b, *_ = trajectory(algo, ridge, 25, seed=5)
    c, *_ = trajectory(algo, ridge, 25, seed=6)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not torch.equal(a[-1], c[-1])


def test_minibatches_are_drawn_from_each_nodes_stream(ridge):
    """DIANA with identity and alpha = 1 is minibatch GD on the batches of comm.rng(t)."""
    algo, _ = DIANA.configure(ridge, parse_spec("identity"), step=0.05, batch_size=3)
    xs, _, _, comm = trajectory(algo, ridge, 10, seed=3)
    x = ridge.x0.clone()
    for t in range(10):
        batch = ridge.sample(comm.rng(t, tag=tags.BATCH), 3)
        x = x - 0.05 * ridge.grad(x, batch).mean(dim=0)
        torch.testing.assert_close(xs[t + 1], x, rtol=0, atol=1e-12)
    assert not torch.allclose(xs[-1], gd(ridge, 0.05, 10)[-1], atol=1e-6)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("cls", UNBIASED)
def test_unbiased_methods_refuse_topk_unless_forced(cls, ridge):
    with pytest.raises(ValueError, match="unbiased compressor.*topk"):
        cls.configure(ridge, parse_spec("topk:k=2"), **KW[cls])
    algo, rec = cls.configure(ridge, parse_spec("topk:k=2"), step=0.01, force=True, **KW[cls])
    assert rec["theory"] is None and "unbiased" in rec["theory_unavailable"]
    xs, *_ = trajectory(algo, ridge, 5)
    assert torch.isfinite(xs[-1]).all()


def test_comp_ams_refuses_an_unbiased_only_compressor_unless_forced(ridge):
    with pytest.raises(ValueError, match="contractive compressor.*randk"):
        CompAMS.configure(ridge, parse_spec("randk:k=2"))
    algo, _ = CompAMS.configure(ridge, parse_spec("randk:k=2"), step=0.01, force=True)
    xs, *_ = trajectory(algo, ridge, 5)
    assert torch.isfinite(xs[-1]).all()


@pytest.mark.parametrize(
    ("cls", "kw", "words"),
    [
        (DIANA, {"alpha": 0.0}, "alpha"),
        (DIANA, {"init_mode": "compressed"}, "init"),
        (MARINA, {"p": 1.5}, "p must be"),
        (PPMARINA, {"participation": 0.0}, "participation"),
        (VRMARINA, {"batch_size": 0}, "--batch-size"),
        (DASHA, {"momentum": 2.0}, "momentum"),
        (DASHAMVR, {"b": 0.0}, "mvr-b"),
        (DASHASYNCMVR, {"mega_batch": 0}, "mega-batch"),
        (CompAMS, {"beta2": 1.0}, "beta2"),
    ],
)
def test_bad_hyperparameters_are_named(cls, kw, words, ridge):
    spec = "topk:k=2" if cls is CompAMS else "randk:k=2"
    with pytest.raises(ValueError, match=words):
        cls.configure(ridge, parse_spec(spec), step=0.01, **kw)


def test_minibatch_theory_needs_the_per_sample_smoothness():
    # The quadratic has no per-sample structure to bound; the GLMs provide calL.
    p = make_problem("quadratic", nodes=4, seed=0)
    glm = make_problem("logreg", nodes=4, samples=80, features=6, seed=0)
    for cls in (VRMARINA, DASHAPAGE, DASHAMVR, DASHASYNCMVR):
        with pytest.raises(ValueError, match="sample_smoothness.*--step"):
            cls.configure(p, parse_spec("randk:k=2"))
        _, rec = cls.configure(p, parse_spec("randk:k=2"), step=0.1)
        assert "sample_smoothness" in rec["theory_unavailable"]
        algo, rec = cls.configure(glm, parse_spec("randk:k=2"))
        assert algo.gamma == rec["gamma_theory"] > 0


def test_correlated_compressors_use_the_ab_step_or_ask_for_a_step(ridge):
    shared = parse_spec("randk:k=2,shared=true")
    _, rec = MARINA.configure(ridge, shared, regime="nonconvex")
    omega = 9.0
    assert rec["theory"]["inputs"]["A"] == omega and rec["theory"]["inputs"]["B"] == 0.0
    assert rec["gamma"] == pytest.approx(
        stepsizes.marina(ridge.consts.L, ridge.consts.L_tilde, 0.1, omega, 1)
    )
    for cls in (DIANA, DASHA):
        with pytest.raises(ValueError, match="independent compressors"):
            cls.configure(ridge, shared)


# ------------------------------------------------------------------ the runner
RUNS = {
    "diana": "--compressor randk:k=2",
    "marina": "--compressor randk:k=2",
    "pp-marina": "--compressor randk:k=2 --participation 0.5",
    "vr-marina": "--compressor randk:k=2 --problem logreg --step 0.1",
    "dasha": "--compressor randk:k=2 --init zero",
    "dasha-page": "--compressor randk:k=2 --problem logreg --step 0.5",
    "dasha-mvr": "--compressor randk:k=2 --problem logreg --step 0.05 --mvr-b 0.05 --batch-size 8",
    "dasha-sync-mvr": "--compressor randk:k=2 --problem logreg --step 0.1 --mega-batch 8",
    "comp-ams": "--compressor topk:k=2 --step 0.01 --beta1 0.5",
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runner_runs_each_method(name, tmp_path):
    assert name in ALGORITHMS
    out = tmp_path / "r"
    rc = run(
        [name, *RUNS[name].split(), "--nodes", "4", "--out", str(out), "--quiet", "--iters", "50"]
    )
    assert rc == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["iter"]) for r in rows] == list(range(51))
    for key in ALGORITHMS[name].reports:
        assert key in rows[0]
    d = 50 if "logreg" in RUNS[name] else 20
    assert float(rows[-1]["bits_down"]) == 50 * 32 * d
    assert float(rows[-1]["bits_up"]) > 0 and math.isfinite(float(rows[-1]["f"]))
