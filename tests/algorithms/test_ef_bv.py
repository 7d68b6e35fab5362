"""EF-BV: reductions (EF21, GD), invariants, parameters, derived step, bits, refusal."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from runs import gd, trajectory

from algorithms import stepsizes
from algorithms.ef.ef21 import EF21
from algorithms.ef.ef_bv import EFBV, bv_class
from algorithms.run import run
from compressors import parse_spec


def test_lambda_nu_one_is_ef21_up_to_the_index_shift(nonconvex):
    """EF-BV(1, 1) with h_i^0 = grad f_i(x^0) has EF21's iterates, and h^{t+1} = g^t_EF21."""
    c = parse_spec("topk:k=2")
    algo, _ = EFBV.configure(nonconvex, c, lam=1.0, nu=1.0, step=0.3)
    ref, _ = EF21.configure(nonconvex, c, step=0.3)
    bv, _, _ = trajectory(algo, nonconvex, 60)
    ef, _, _ = trajectory(ref, nonconvex, 60)
    for t in range(60):
        torch.testing.assert_close(bv[t].x, ef[t].x, rtol=0, atol=1e-12)
        torch.testing.assert_close(bv[t + 1].h, ef[t].g, rtol=0, atol=1e-12)
        torch.testing.assert_close(bv[t + 1].h_i, ef[t].g_i, rtol=0, atol=1e-12)


def test_identity_compressor_is_gd(nonconvex):
    algo, rec = EFBV.configure(nonconvex, parse_spec("identity"))
    assert (algo.lam, algo.nu) == (1.0, 1.0)
    assert algo.gamma == pytest.approx(1 / nonconvex.consts.L, rel=1e-15)
    states, _, _ = trajectory(algo, nonconvex, 40)
    for s, x in zip(states, gd(nonconvex, algo.gamma, 40), strict=True):
        torch.testing.assert_close(s.x, x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("spec", ["topk:k=2", "randk:k=3", "scaled:randk:k=3"])
def test_h_is_the_mean_of_h_i_and_G_is_reported(spec, quad):
    algo, _ = EFBV.configure(quad, parse_spec(spec), init_mode="zero")
    states, infos, _ = trajectory(algo, quad, 40)
    for s, s_next, info in zip(states, states[1:], infos, strict=False):
        torch.testing.assert_close(s_next.h, s_next.h_i.mean(dim=0), rtol=0, atol=1e-12)
        G = float(((s.h_i - quad.grad(s.x)) ** 2).sum(dim=1).mean())
        assert info.extras["G"] == pytest.approx(G, rel=1e-12, abs=1e-300)


def test_parameters_from_the_compressor_class(quad):
    d, n = quad.d, quad.n
    # deterministic contractive: eta = sqrt(1 - delta), omega = 0 -> lambda* = nu* = 1 (EF21)
    eta, omega, omega_av = bv_class(parse_spec("topk:k=2"), d, n)
    assert (eta, omega, omega_av) == (math.sqrt(0.8), 0.0, 0.0)
    algo, rec = EFBV.configure(quad, parse_spec("topk:k=2"))
    assert (algo.lam, algo.nu) == (1.0, 1.0)
    assert rec["theory"]["inputs"]["class_constants"] == "exact"
    # the authors' step with r = r_av = eta^2 = 0.8, s* = sqrt(1.8/1.6) - 1
    c = quad.consts
    s_star = math.sqrt(1.8 / 1.6) - 1
    assert algo.gamma == pytest.approx(1 / (c.L + c.L_tilde * 1.0 / s_star), rel=1e-12)
    derived, _ = EFBV.configure(quad, parse_spec("topk:k=2"), step_rule="derived")
    assert derived.gamma == pytest.approx(
        EF21.configure(quad, parse_spec("topk:k=2"))[0].gamma, rel=1e-12
    )
    # unbiased: eta = 0, lambda* = 1/(1 + omega) (DIANA's), nu* = 1/(1 + omega/n)
    c = parse_spec("randk:k=2")
    w = c.omega(d)
    algo, rec = EFBV.configure(quad, c)
    assert algo.lam == pytest.approx(1 / (1 + w)) and algo.nu == pytest.approx(1 / (1 + w / n))
    assert rec["theory"]["inputs"]["omega_av"] == pytest.approx(w / n)
    # scaled Rand-2 at d = 10: E C(x) = x/5, so eta = 0.8 exactly and the variance is
    # E||C - x/5||^2 = (1/25) E||RandK(x) - x||^2 = (4/25)||x||^2: omega = 0.16, not the bound
    # (sqrt(0.8), 0.8) from delta, and lambda* = min(0.2/(0.04 + 0.16), 1) = 1
    eta, omega, _ = bv_class(parse_spec("scaled:randk:k=2"), d, n)
    assert eta == pytest.approx(0.8) and omega == pytest.approx(0.16)
    algo, _ = EFBV.configure(quad, parse_spec("scaled:randk:k=2"))
    assert algo.lam == pytest.approx(1.0)
    # user values are kept
    algo, _ = EFBV.configure(quad, c, lam=0.1, nu=0.5)
    assert (algo.lam, algo.nu) == (0.1, 0.5)


def test_authors_step_worked_number():
    """L = 1, L_tilde = 2, r = 1/4, r_av = 1/16: s* = sqrt(5/2) - 1 = 0.58113883...,
    sqrt(r_av/r) = 1/2, gamma = 1/(1 + 2 (1/2)/s*) = 0.36754447..."""
    assert stepsizes.ef_bv_authors(1.0, 2.0, 0.25, 0.0625) == pytest.approx(0.3675444679663, 1e-10)
    # identity (r = r_av = 0): the limit is 1/L
    assert stepsizes.ef_bv_authors(1.5, 2.0, 0.0, 0.0) == pytest.approx(1 / 1.5)
    with pytest.raises(ValueError, match="r < 1"):
        stepsizes.ef_bv_authors(1.0, 1.0, 1.0, 0.5)


def test_derived_step_matches_ef21_at_lambda_nu_one():
    for alpha in (0.05, 0.3, 0.9):
        r = 1 - alpha
        assert stepsizes.ef_bv(1.3, 2.0, r, r) == pytest.approx(
            stepsizes.ef21(1.3, 2.0, alpha), rel=1e-12
        )
        assert stepsizes.ef_bv_pl(1.3, 2.0, r, r, 0.01) == pytest.approx(
            stepsizes.ef21_pl(1.3, 2.0, alpha, 0.01), rel=1e-12
        )
    lam, nu = stepsizes.ef_bv_lambda_nu(0.0, 4.0, 0.8)
    assert (lam, nu) == (pytest.approx(0.2), pytest.approx(1 / 1.8))
    # lambda* minimises r
    grid = [stepsizes.ef_bv_r(k / 1000, 0.0, 4.0) for k in range(1, 1001)]
    assert stepsizes.ef_bv_r(lam, 0.0, 4.0) <= min(grid) + 1e-12


@pytest.mark.parametrize("rule", ["authors", "derived"])
@pytest.mark.parametrize(
    ("spec", "T"), [("topk:k=2", 1000), ("randk:k=3", 1000), ("scaled:randk:k=3", 1000)]
)
def test_linear_convergence_at_the_theory_step(spec, T, rule, quad):
    algo, rec = EFBV.configure(quad, parse_spec(spec), step_rule=rule)
    assert rec["theory"]["formula"].startswith(
        "1 / (L + L_tilde sqrt(r_av / r)" if rule == "authors" else "min("
    )
    states, _, _ = trajectory(algo, quad, T)
    assert float(quad.loss(states[-1].x)) - quad.consts.f_star <= 1e-8


@pytest.mark.parametrize("spec", ["topk:k=2", "randk:k=3"])
def test_nonconvex_gradient_drops_a_hundredfold(spec, nonconvex):
    algo, rec = EFBV.configure(nonconvex, parse_spec(spec))
    assert rec["theory"]["formula"].startswith("1 / (L + L_tilde sqrt(r_av / r) / s*)")
    assert "authors' code" in rec["theory"]["source"]
    states, _, _ = trajectory(algo, nonconvex, 500)
    g = [float((nonconvex.full_grad(s.x) ** 2).sum()) for s in (states[0], states[-1])]
    assert g[1] <= g[0] / 100


def test_bits(quad):
    c, d, T = parse_spec("randk:k=3"), quad.d, 14
    for mode, init_bits in (("full", 32 * d), ("compressed", c.bits(d)), ("zero", 0)):
        algo, _ = EFBV.configure(quad, c, init_mode=mode)
        _, _, comm = trajectory(algo, quad, T)
        assert comm.bits_totals()["bits_up"] == init_bits + T * c.bits(d)
        assert comm.bits_totals()["bits_down"] == T * 32 * d


def test_same_seed_same_iterates(quad):
    algo, _ = EFBV.configure(quad, parse_spec("randk:k=3"))
    a = trajectory(algo, quad, 25, seed=1)[0][-1].x
    b = trajectory(algo, quad, 25, seed=1)[0][-1].x
    c = trajectory(algo, quad, 25, seed=2)[0][-1].x
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_refusals(quad):
    with pytest.raises(ValueError, match="sign"):
        EFBV.configure(quad, parse_spec("sign"))
    algo, _ = EFBV.configure(quad, parse_spec("sign"), step=0.01, force=True, lam=1.0, nu=1.0)
    assert algo.gamma == 0.01
    with pytest.raises(ValueError, match="r < 1"):
        EFBV.configure(quad, parse_spec("randk:k=2"), lam=1.0)  # r = omega >= 1
    for kw in ({"lam": 0.0}, {"nu": 1.5}, {"init_mode": "half"}):
        with pytest.raises(ValueError, match=next(iter(kw)).replace("_mode", "")):
            EFBV(compressor=parse_spec("topk:k=1"), gamma=0.1, **kw)


def test_runner(tmp_path):
    out = tmp_path / "r"
    argv = ["ef-bv", "--compressor", "randk:k=2", "--ef-lambda", "0.1", "--ef-nu", "0.5"]
    assert run([*argv, "--nodes", "4", "--out", str(out), "--quiet", "--iters", "50"]) == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 51 and float(rows[-1]["G"]) >= 0
    out2 = tmp_path / "d"
    assert run([*argv, "--ef-step", "derived", "--out", str(out2), "--quiet", "--iters", "5"]) == 0
    import json

    cfg = json.loads((out2 / "config.json").read_text())
    assert "derived" in cfg["step"]["theory"]["source"]
    # argparse's refusal, naming the allowed choices, is exit 2 like every bad input
    assert run([*argv, "--ef-step", "bogus", "--out", str(tmp_path / "b"), "--quiet"]) == 2
