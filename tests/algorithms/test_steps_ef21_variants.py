"""Default steps of EF21-HB, EF21-BC, EF21-SGD and EF21-PP (PL): each against its defining
inequality, computed here from the definitions (numpy), and against worked numbers.

The lemma behind every ``1/(L + sqrt(A))`` step: then ``1 - gamma L - gamma^2 A >= 0``
(theory sheet §0). Each test computes ``A`` from the definitions and checks both."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from algorithms import stepsizes
from algorithms.ef.ef21_sgd import EF21SGD
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem


def ef21_theta_beta(alpha):
    """theta(s), beta(s) at the Young parameter minimising beta/theta, found numerically."""
    s_max = alpha / (1 - alpha)  # theta(s) > 0 below it

    def ratio(log_s):
        s = math.exp(log_s)
        return (1 - alpha) * (1 + 1 / s) / (1 - (1 - alpha) * (1 + s))

    res = minimize_scalar(
        ratio, bounds=(math.log(s_max) - 30, math.log(s_max) - 1e-12), method="bounded",
        options={"xatol": 1e-13},
    )  # fmt: skip
    s = math.exp(res.x)
    return 1 - (1 - alpha) * (1 + s), (1 - alpha) * (1 + 1 / s), s


def lemma_slack(gamma, L, A):
    return 1 - gamma * L - gamma**2 * A


def assert_lemma_step(gamma, L, A, rel=1e-6):
    """``gamma`` satisfies the descent condition for ``A`` and is the lemma's step for it."""
    assert lemma_slack(gamma, L, A) >= 0
    assert gamma == pytest.approx(1 / (L + math.sqrt(A)), rel=rel)


@pytest.mark.parametrize("eta", [0.0, 0.5, 0.9, 0.99])
def test_hb_effective_step_is_ef21s_largest(eta):
    L, Lt, alpha = 1.3, 2.0, 0.1
    theta, beta, _ = ef21_theta_beta(alpha)
    g = stepsizes.ef21_hb(L, Lt, alpha, eta)
    eff = g / (1 - eta)  # heavy ball's effective step
    assert_lemma_step(eff, L, Lt**2 * beta / theta)


def test_hb_worked_number():
    # alpha = 0.75: theta = 1/2, beta = 1/2, EF21's step 1/(L + L_tilde) = 1/3 at L = 1, Lt = 2
    assert stepsizes.ef21_hb(1.0, 2.0, 0.75, 0.9) == pytest.approx(0.1 / 3)


def bc_K(u, L, Lt, aw, aM):
    """K(u) of the EF21-BC Lyapunov argument, from the definitions."""
    tw, bw, _ = ef21_theta_beta(aw)
    if aM == 1:
        tM, bM = 1.0, 0.0
    else:
        tM, bM, _ = ef21_theta_beta(aM)
    a_over_gamma = ((1 + 1 / u) / 2 + 3 * (1 + u) / (2 * tM) * bM * (2 - tw)) / tw
    b_over_gamma = (1 + u) / (2 * tM)
    return a_over_gamma * bw * Lt**2 + 3 * b_over_gamma * bM * (bw * Lt**2 + L**2)


@pytest.mark.parametrize(("aw", "aM"), [(0.1, 0.3), (0.5, 0.05), (0.2, 0.9)])
def test_bc_step_is_the_largest_the_lyapunov_argument_allows(aw, aM):
    L, Lt = 1.2, 1.7
    u = np.geomspace(1e-9, 1e9, 400001)
    K = min(bc_K(u, L, Lt, aw, aM))
    g = stepsizes.ef21_bc(L, Lt, aw, aM)
    # descent needs 1/gamma - L - 2 gamma K >= 0, i.e. the lemma with A = 2K
    assert_lemma_step(g, L, 2 * K)
    # PL: doubled weights (A = 4K) and gamma mu <= min(theta_w, theta_M)/2
    mu = 1e-3
    gp = stepsizes.ef21_bc(L, Lt, aw, aM, mu)
    cap = min(ef21_theta_beta(aw)[0], ef21_theta_beta(aM)[0]) / (2 * mu)
    assert lemma_slack(gp, L, 4 * K) >= 0
    assert gp == pytest.approx(min(1 / (L + math.sqrt(4 * K)), cap), rel=1e-6)


def test_bc_identity_downlink_is_ef21():
    for aw in (0.05, 0.3, 1.0):
        assert stepsizes.ef21_bc(1.1, 1.9, aw, 1.0) == pytest.approx(stepsizes.ef21(1.1, 1.9, aw))
        assert stepsizes.ef21_bc(1.1, 1.9, aw, 1.0, 0.01) == pytest.approx(
            stepsizes.ef21_pl(1.1, 1.9, aw, 0.01)
        )


def test_bc_step_shrinks_like_alpha_w_alpha_m():
    # the paper's complexity O(1/(alpha_w alpha_M)): halving both alphas (small) about
    # quarters the step
    g1 = stepsizes.ef21_bc(1.0, 1.0, 0.02, 0.02)
    g2 = stepsizes.ef21_bc(1.0, 1.0, 0.01, 0.01)
    assert 3.0 < g1 / g2 < 5.0


def test_sgd_constants_from_their_definitions():
    for alpha in (0.05, 0.3, 0.8):
        th, b, k = stepsizes.ef21_sgd_constants(alpha)
        s = 1 / math.sqrt(1 - alpha) - 1  # EF21's optimal Young parameter
        theta = 1 - (1 - alpha) * (1 + s)
        nu = theta / (2 * (1 - theta))
        assert th == pytest.approx(1 - (1 + nu) * (1 - alpha) * (1 + s))
        assert th == pytest.approx(theta / 2)
        assert b == pytest.approx((1 + nu) * (1 - alpha) * (1 + 1 / s))
        assert k == pytest.approx((1 + nu) * (1 - alpha) + 1 + 1 / nu)
        g = stepsizes.ef21_sgd(1.0, 2.0, alpha)
        assert_lemma_step(g, 1.0, 4.0 * b / th, rel=1e-12)


def test_pp_pl_step_inequalities():
    L, Lt, alpha, mu = 1.0, 1.5, 0.2, 1e-3
    theta, beta, _ = ef21_theta_beta(alpha)
    for p in (0.2, 0.5, 0.9):
        rho = theta * p / (2 * (1 - p))
        theta_p = theta * p - rho * (1 - p)
        B = (beta * p + (1 + 1 / rho) * (1 - p)) * Lt**2
        g = stepsizes.ef21_pp_pl(L, Lt, alpha, p, mu)
        assert lemma_slack(g, L, 2 * B / theta_p) >= 0 and g <= theta_p / (2 * mu)
        assert g == pytest.approx(
            min(1 / (L + math.sqrt(2 * B / theta_p)), theta_p / (2 * mu)), rel=1e-6
        )
    assert stepsizes.ef21_pp_pl(L, Lt, alpha, 1.0, mu) == stepsizes.ef21_pl(L, Lt, alpha, mu)


def test_sgd_bound_holds_with_sigma_from_the_data():
    """The derived EF21-SGD bound, with the ABC constants from the data: logistic regression's
    per-sample data gradients have norm <= ||a_j||, so A_i = 0, B_i = 1 and
    sigma_i^2 <= (1/m_i) sum_j ||a_ij||^2; tau draws with replacement divide it by tau. Then
    mean_t ||grad f(x^t)||^2 <= 2 (f(x^0) - f*)/(gamma T) + kappa sigma^2/(theta^ tau)."""
    p = make_problem("logreg", nodes=4, lam=0.1, samples=120, features=8, seed=3)
    A = p._A64
    row_sq = np.asarray(A.multiply(A).sum(axis=1)).ravel()
    bounds = np.cumsum(np.r_[0, p.counts.cpu().numpy()])
    sigma2 = np.mean([row_sq[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    tau, T = 4, 600
    c = parse_spec("topk:k=2")
    algo, rec = EF21SGD.configure(p, c, batch_size=tau, regime="nonconvex")
    th, _, kappa = stepsizes.ef21_sgd_constants(c.delta(p.d))
    comm = SimulatedComm(p.n, seed=0)
    state = algo.init(p.x0, p, comm)  # g_i^0 = grad f_i(x^0): G^0 = 0
    norms = []
    for _ in range(T):
        norms.append(float((p.full_grad(state.x) ** 2).sum()))
        state, _ = algo.step(state, p, comm)
    delta0 = float(p.loss(p.x0)) - p.consts.f_star
    bound = 2 * delta0 / (algo.gamma * T) + kappa * sigma2 / (th * tau)
    assert float(np.mean(norms)) <= bound
    assert norms[-1] < norms[0]  # and it does descend
    assert torch.isfinite(state.x).all()
