"""3PC and its mechanisms: reductions (P10), invariants, constants, convergence, exact bits."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from runs import gd, trajectory

from algorithms import stepsizes
from algorithms.ef import three_pc_mechanisms as mech
from algorithms.ef.ef21 import EF21
from algorithms.ef.three_pc import ThreePC
from algorithms.run import run
from compressors import parse_spec

MECHANISMS = ("ef21", "lag", "clag", "v1", "v2", "v3", "v4", "v5")


def same_path(a, b, atol=1e-12):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=atol)


# ---------------------------------------------------------------- reductions (P10)
@pytest.mark.parametrize("spec", ["topk:k=2", "scaled:randk:k=3"])
def test_ef21_mechanism_is_ef21_exactly(spec, nonconvex):
    c = parse_spec(spec)
    algo, rec = ThreePC.configure(nonconvex, c)
    ref, ref_rec = EF21.configure(nonconvex, c)
    assert algo.gamma == ref.gamma
    a, _, ca = trajectory(algo, nonconvex, 50)
    b, _, cb = trajectory(ref, nonconvex, 50)
    for s, r in zip(a, b, strict=True):
        assert torch.equal(s.x, r.x) and torch.equal(s.g_i, r.g_i) and torch.equal(s.g, r.g)
    assert ca.bits_totals() == cb.bits_totals()


def test_clag_with_zeta_zero_is_ef21(nonconvex):
    c = parse_spec("topk:k=1")
    algo, _ = ThreePC.configure(nonconvex, c, mechanism="clag", zeta=0.0, step=0.3)
    ref, _ = EF21.configure(nonconvex, c, step=0.3)
    same_path(
        [s.x for s in trajectory(algo, nonconvex, 60)[0]],
        [s.x for s in trajectory(ref, nonconvex, 60)[0]],
    )


@pytest.mark.parametrize(
    ("mechanism", "kw"),
    [("lag", {"zeta": 0.0}), ("v5", {"p": 1.0}), ("clag", {"zeta": 0.0})],
)
def test_reductions_to_gd_with_a_real_compressor(mechanism, kw, nonconvex):
    """LAG with zeta = 0 and 3PCv5 with p = 1 are GD whatever the compressor."""
    algo, _ = ThreePC.configure(
        nonconvex, parse_spec("topk:k=1"), mechanism=mechanism, step=0.5, **kw
    )
    if mechanism == "clag":  # CLAG(0) is EF21, not GD: only with the identity
        algo, _ = ThreePC.configure(
            nonconvex, parse_spec("identity"), mechanism="clag", step=0.5, **kw
        )
    states, _, _ = trajectory(algo, nonconvex, 40)
    same_path([s.x for s in states], gd(nonconvex, 0.5, 40))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_identity_compressor_is_gd(mechanism, nonconvex):
    kw = {"zeta": 0.0} if mechanism in ("lag", "clag") else {}
    if mechanism == "v5":
        kw = {"p": 0.3}  # the coin does not matter: h + (x - y) = x when h = y
    algo, _ = ThreePC.configure(nonconvex, parse_spec("identity"), mechanism=mechanism, **kw)
    assert algo.gamma == pytest.approx(1 / nonconvex.consts.L, rel=1e-15)
    states, _, _ = trajectory(algo, nonconvex, 40)
    same_path([s.x for s in states], gd(nonconvex, algo.gamma, 40))


def test_v3_with_the_ef21_inner_mechanism_is_v4(quad):
    c = parse_spec("topk:k=2")
    a, ra = ThreePC.configure(quad, c, mechanism="v3", mechanism_compressor="topk:k=3")
    b, rb = ThreePC.configure(quad, c, mechanism="v4", mechanism_compressor="topk:k=3")
    assert a.gamma == b.gamma
    for s, r in zip(trajectory(a, quad, 30)[0], trajectory(b, quad, 30)[0], strict=True):
        assert torch.equal(s.x, r.x)


# ---------------------------------------------------------------- invariants
CASES = [
    ("ef21", {}),
    ("lag", {"zeta": 0.5}),
    ("clag", {"zeta": 0.5}),
    ("v1", {}),
    ("v2", {"mechanism_compressor": "randk:k=3"}),
    ("v3", {"inner_mechanism": "clag", "zeta": 0.5}),
    ("v3", {"inner_mechanism": "lag", "zeta": 0.5}),
    ("v4", {}),
    ("v5", {"p": 0.3}),
]


@pytest.mark.parametrize(("mechanism", "kw"), CASES)
def test_g_is_the_mean_of_g_i_and_y_i_the_last_gradient(mechanism, kw, quad):
    algo, _ = ThreePC.configure(
        quad, parse_spec("topk:k=2"), mechanism=mechanism, init_mode="compressed", **kw
    )
    states, infos, _ = trajectory(algo, quad, 40)
    for s, info in zip(states[1:], infos, strict=True):
        torch.testing.assert_close(s.g, s.g_i.mean(dim=0), rtol=0, atol=1e-12)
        torch.testing.assert_close(s.y_i, quad.grad(s.x), rtol=0, atol=0)
        G = float(((s.g_i - s.y_i) ** 2).sum(dim=1).mean())
        assert info.extras["G"] == pytest.approx(G, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize(("mechanism", "kw"), CASES)
def test_three_point_inequality_holds_on_average(mechanism, kw, quad):
    """Each step obeys ``||g_i^+ - x||^2 <= (1-A)||h - y||^2 + B||x - y||^2`` summed over
    nodes and steps (in expectation: deterministic compressors make it pointwise for most)."""
    algo, rec = ThreePC.configure(
        quad, parse_spec("topk:k=2"), mechanism=mechanism, init_mode="zero", **kw
    )
    A, B = rec["theory"]["inputs"]["A"], rec["theory"]["inputs"]["B"]
    states, _, _ = trajectory(algo, quad, 60)
    lhs = rhs = 0.0
    for s, s1 in zip(states, states[1:], strict=False):
        lhs += float(((s1.g_i - s1.y_i) ** 2).sum())
        rhs += (1 - A) * float(((s.g_i - s.y_i) ** 2).sum())
        rhs += B * float(((s1.y_i - s.y_i) ** 2).sum())
    assert lhs <= rhs * (1 + 1e-9)


# ---------------------------------------------------------------- constants and steps
def test_constants_table():
    a = 0.2
    theta, beta = stepsizes.ef21_theta_beta(a)
    assert stepsizes.three_pc_AB("ef21", a) == (theta, beta)
    assert stepsizes.three_pc_AB("lag", a, zeta=3.0) == (1.0, 3.0)
    assert stepsizes.three_pc_AB("clag", a, zeta=100.0) == (theta, 100.0)
    assert stepsizes.three_pc_AB("clag", a, zeta=0.0) == (theta, beta)
    assert stepsizes.three_pc_AB("v1", a) == (1.0, pytest.approx(0.8))
    assert stepsizes.three_pc_AB("v2", a, omega=9.0) == (a, pytest.approx(7.2))
    bar = 1 - 0.8 * 0.7
    assert stepsizes.three_pc_AB("v4", a, alpha2=0.3) == stepsizes.ef21_theta_beta(bar)
    assert stepsizes.three_pc_AB("v5", a, p=1.0) == (1.0, 0.0)  # GD
    A, B = stepsizes.three_pc_AB("v5", a, p=0.2)
    assert A == pytest.approx(1 - math.sqrt(0.8))
    assert B == pytest.approx(0.8 * 0.8 / (1 - math.sqrt(0.8)))
    assert stepsizes.three_pc_AB("v3", a, zeta=2.0, inner="lag") == (1.0, pytest.approx(1.6))
    assert stepsizes.three_pc(1.0, 2.0, theta, beta) == stepsizes.ef21(1.0, 2.0, a)
    assert stepsizes.three_pc_pl(1.0, 2.0, theta, beta, 0.1) == stepsizes.ef21_pl(1.0, 2.0, a, 0.1)


def test_theory_records_and_defaults(quad):
    c = parse_spec("topk:k=2")
    algo, rec = ThreePC.configure(quad, c, mechanism="v5")
    assert algo.p == c.delta(quad.d)  # K/d, as the authors' code
    algo, rec = ThreePC.configure(quad, c, mechanism="v2")
    assert rec["theory"]["inputs"]["second_compressor"] == "randk:k=2"
    algo, rec = ThreePC.configure(quad, c, mechanism="v4")
    assert rec["theory"]["inputs"]["second_compressor"] == "topk:k=2"
    g_lag = ThreePC.configure(quad, c, mechanism="lag", zeta=0.5)[0].gamma
    assert g_lag == stepsizes.three_pc_pl(
        quad.consts.L, quad.consts.L_tilde, 1.0, 0.5, quad.consts.mu
    )


# ---------------------------------------------------------------- convergence
@pytest.mark.parametrize(("mechanism", "kw"), CASES)
def test_linear_convergence_at_the_theory_step(mechanism, kw, quad):
    algo, rec = ThreePC.configure(quad, parse_spec("topk:k=2"), mechanism=mechanism, **kw)
    assert rec["theory"]["formula"].startswith("min(")
    states, _, _ = trajectory(algo, quad, 800)
    assert float(quad.loss(states[-1].x)) - quad.consts.f_star <= 1e-8


@pytest.mark.parametrize(("mechanism", "kw"), CASES)
def test_nonconvex_gradient_drops_a_hundredfold(mechanism, kw, nonconvex):
    algo, rec = ThreePC.configure(nonconvex, parse_spec("topk:k=2"), mechanism=mechanism, **kw)
    assert rec["theory"]["formula"] == "1 / (L + L_tilde sqrt(B / A))"
    states, _, _ = trajectory(algo, nonconvex, 400)
    g = [float((nonconvex.full_grad(s.x) ** 2).sum()) for s in (states[0], states[-1])]
    assert g[1] <= g[0] / 100


# ---------------------------------------------------------------- bits
def _fires(s, s1, zeta):
    return ((s1.y_i - s.g_i) ** 2).sum(dim=1) > zeta * ((s1.y_i - s.y_i) ** 2).sum(dim=1)


def test_lag_bits_are_full_vectors_or_one_bit(quad):
    d, T = quad.d, 40
    algo, _ = ThreePC.configure(quad, parse_spec("identity"), mechanism="lag", zeta=1.0)
    states, _, comm = trajectory(algo, quad, T)
    fires = torch.stack([_fires(s, s1, 1.0) for s, s1 in zip(states, states[1:], strict=False)])
    n_fire = int(fires.sum())
    assert 0 < n_fire < T * quad.n
    expected = quad.n * 32 * d + n_fire * 32 * d + (T * quad.n - n_fire) * mech.SKIP_BITS
    assert int(comm.ledger.up.sum()) == expected


def test_clag_bits_are_compressed_or_one_bit(quad):
    c, d, T = parse_spec("topk:k=2"), quad.d, 40
    algo, _ = ThreePC.configure(quad, c, mechanism="clag", zeta=2.0)
    states, _, comm = trajectory(algo, quad, T)
    fires = torch.stack([_fires(s, s1, 2.0) for s, s1 in zip(states, states[1:], strict=False)])
    n_fire = int(fires.sum())
    assert 0 < n_fire < T * quad.n
    expected = quad.n * 32 * d + n_fire * c.bits(d) + (T * quad.n - n_fire) * mech.SKIP_BITS
    assert int(comm.ledger.up.sum()) == expected


def test_v5_bits_follow_the_shared_coins(quad):
    c, d, T, p = parse_spec("topk:k=2"), quad.d, 60, 0.25
    algo, _ = ThreePC.configure(quad, c, mechanism="v5", p=p)
    _, _, comm = trajectory(algo, quad, T, seed=3)
    coins = [comm.coin(t, p, tag=mech.TAG_COIN) for t in range(T)]
    assert 0 < sum(coins) < T
    per_node = 32 * d + sum(32 * d if k else c.bits(d) for k in coins)
    assert comm.bits_totals()["bits_up"] == per_node


@pytest.mark.parametrize(
    ("mechanism", "kw", "per_round"),
    [
        ("ef21", {}, lambda c, q, d: c.bits(d)),
        ("v1", {}, lambda c, q, d: c.bits(d)),
        ("v2", {"mechanism_compressor": "randk:k=3"}, lambda c, q, d: c.bits(d) + q.bits(d)),
        ("v4", {"mechanism_compressor": "topk:k=3"}, lambda c, q, d: c.bits(d) + q.bits(d)),
    ],
)
def test_fixed_size_bits(mechanism, kw, per_round, quad):
    c, d, T = parse_spec("topk:k=2"), quad.d, 12
    q = parse_spec(kw.get("mechanism_compressor", "identity"))
    algo, _ = ThreePC.configure(quad, c, mechanism=mechanism, init_mode="zero", **kw)
    _, _, comm = trajectory(algo, quad, T)
    assert comm.bits_totals()["bits_up"] == T * per_round(c, q, d)
    assert comm.bits_totals()["bits_down"] == T * 32 * d


# ---------------------------------------------------------------- determinism and refusal
@pytest.mark.parametrize(("mechanism", "kw"), [("v2", {}), ("v5", {"p": 0.4}), ("clag", {})])
def test_same_seed_same_iterates(mechanism, kw, quad):
    algo, _ = ThreePC.configure(quad, parse_spec("scaled:randk:k=3"), mechanism=mechanism, **kw)
    a = trajectory(algo, quad, 25, seed=1)[0][-1].x
    b = trajectory(algo, quad, 25, seed=1)[0][-1].x
    c = trajectory(algo, quad, 25, seed=2)[0][-1].x
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_refusals(quad):
    with pytest.raises(ValueError, match="contractive.*randk"):
        ThreePC.configure(quad, parse_spec("randk:k=2"))
    algo, _ = ThreePC.configure(quad, parse_spec("randk:k=2"), step=0.01, force=True)
    assert algo.gamma == 0.01
    with pytest.raises(ValueError, match="unbiased.*topk"):
        ThreePC.configure(
            quad, parse_spec("topk:k=2"), mechanism="v2", mechanism_compressor="topk:k=2"
        )
    with pytest.raises(ValueError, match="contractive.*randk"):
        ThreePC.configure(
            quad, parse_spec("topk:k=2"), mechanism="v4", mechanism_compressor="randk:k=2"
        )
    bad = [
        ({"mechanism": "v9"}, "mechanism"),
        ({"zeta": -1.0}, "zeta"),
        ({"p": 0.0}, "p"),
        ({"mechanism": "v5"}, "p"),
        ({"inner_mechanism": "v2"}, "inner"),
    ]
    for kw, words in bad:
        with pytest.raises(ValueError, match=words):
            ThreePC(compressor=parse_spec("topk:k=1"), gamma=0.1, **kw)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_runner(mechanism, tmp_path):
    out = tmp_path / "r"
    argv = ["3pc", "--compressor", "topk:k=2", "--mechanism", mechanism, "--zeta", "0.5"]
    assert run([*argv, "--nodes", "4", "--out", str(out), "--quiet", "--iters", "50"]) == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 51 and float(rows[-1]["f_gap"]) < float(rows[0]["f_gap"])
