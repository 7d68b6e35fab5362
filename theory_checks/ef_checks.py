"""Main theorems of the error-feedback family, checked along runs at the theoretical step.

* EF21 (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203): Theorem 1 (nonconvex
  average-gradient bound), Theorem 2 (PL: ``Psi^t <= (1 - gamma mu)^t Psi^0``), and the
  descent of its Lyapunov function ``Phi = f - f_inf + (gamma/(2 theta)) G`` used in the proof.
* 3PC (Richtárik et al. 2022, arXiv 2202.00998): the three-point inequality of every mechanism
  along a run (Definition 3.1), the nonconvex bound ``2 Delta0/(gamma T) + G0/(A T)`` and the
  Lyapunov descent with weight ``gamma/(2A)``.
* EF14 (Seide et al. 2014; Karimireddy et al. 2019, arXiv 1901.09847): exact convergence when
  the gradients agree at the optimum, a plateau scaling like ``gamma^2`` otherwise (theory
  sheet §2.2, P7).
* EF-BV (Condat, Yi & Richtárik 2022, arXiv 2205.04180): convergence at the documented step and
  the identity with EF21 at ``lambda = nu = 1``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from algorithms.comm import SimulatedComm
from algorithms.ef14 import EF14
from algorithms.ef21 import EF21
from algorithms.ef_bv import EFBV
from algorithms.three_pc import ThreePC
from compressors import parse_spec
from problems.registry import make_problem
from theory_checks.base import Check, Outcome
from theory_checks.ef_instances import G_of, f_gap, heterogeneous_ridge, run, single_thread

__all__ = ["CHECKS", "descent_violations", "nonconvex_bound", "pl_ratio"]

ROUND = 1e-12  # relative rounding allowance of a deterministic inequality
DET_MECHS = ("ef21", "lag", "clag", "v1", "v3", "v4")
RAND_MECHS = ("v2", "v5")


# ---- the bounds, as pure functions (the tests feed them wrong constants) ---------------------
def nonconvex_bound(
    gn2: list[float], f0: float, f_inf: float, gamma: float, G0: float, A: float
) -> tuple[float, float]:
    """EF21 Thm 1 / 3PC nonconvex theorem: ``(1/T) sum_{t<T} ||grad f(x^t)||^2`` (lhs) and
    ``2 (f(x^0) - f_inf)/(gamma T) + G^0/(A T)`` (rhs), with ``A = theta`` for EF21."""
    T = len(gn2)
    return float(np.mean(gn2)), 2.0 * (f0 - f_inf) / (gamma * T) + G0 / (A * T)  # fmt: skip


def pl_ratio(psi: list[float], gamma: float, mu: float, floor: float = 1e-12) -> float:
    """``max_{t >= 1} Psi^t / ((1 - gamma mu)^t Psi^0)`` over the ``t`` with ``Psi^t > floor``
    (EF21 Thm 2 / 3PC PL theorem: at most 1)."""
    q = 1.0 - gamma * mu
    return max(p / (q**t * psi[0]) for t, p in enumerate(psi) if t >= 1 and p > floor)


def descent_violations(
    f: list[float], gn2: list[float], G: list[float], f_inf: float, gamma: float, A: float
) -> tuple[int, float]:
    """Steps where ``Phi^{t+1} > Phi^t - (gamma/2)||grad f(x^t)||^2 + ROUND Phi^t`` with
    ``Phi = f - f_inf + (gamma/(2A)) G`` (the EF21 Thm 1 / 3PC proof's one-step inequality);
    returns the count and the largest excess relative to ``Phi^t``."""
    phi = [fi - f_inf + gamma / (2.0 * A) * g for fi, g in zip(f, G, strict=True)]
    bad, worst = 0, -math.inf
    for t in range(len(phi) - 1):
        excess = (phi[t + 1] - phi[t] + 0.5 * gamma * gn2[t]) / phi[t]
        worst = max(worst, excess)
        bad += excess > ROUND
    return bad, worst  # fmt: skip


# ---- problems and trajectories ------------------------------------------------------------
@lru_cache(maxsize=2)
def _nonconvex(fast: bool):
    """Logistic regression + nonconvex regulariser (theory sheet §3.2; f >= 0, so f_inf = 0)."""
    if fast:
        return make_problem("logreg-nonconvex", nodes=8, lam=0.1, samples=160, features=10,
                            seed=3, x0="randn")  # fmt: skip
    return make_problem("logreg-nonconvex", nodes=20, lam=0.1, samples=1000, features=30,
                        seed=3, x0="randn")  # fmt: skip


def _observe(problem):
    def obs(s) -> tuple[float, float, float, torch.Tensor]:
        gf = problem.full_grad(s.x)
        return float(problem.loss(s.x)), float(gf @ gf), G_of(s, problem), problem.grad(s.x)

    return obs


@lru_cache(maxsize=32)
def _trajectory(method: str, K: int, init: str, fast: bool, seed: int = 0) -> dict[str, Any]:
    """A run at the nonconvex theory step; ``method`` is ``EF21`` or a 3PC mechanism."""
    P = _nonconvex(fast)
    T = 300 if fast else 2000
    if method == "EF21":
        algo, rec = EF21.configure(P, parse_spec(f"topk:k={K}"), init_mode=init)
        A = rec["theory"]["inputs"]["theta"]
    else:
        algo, rec = ThreePC.configure(P, parse_spec(f"topk:k={K}"), mechanism=method,
                                      init_mode=init)  # fmt: skip
        A = rec["theory"]["inputs"]["A"]
    _, obs = run(algo, P, T, seed=seed, observe=_observe(P))
    f, gn2, G, gi = (list(v) for v in zip(*obs, strict=True))
    return {"f": f, "gn2": gn2, "G": G, "gi": gi, "gamma": algo.gamma, "A": A,
            "B": rec["theory"]["inputs"].get("B", rec["theory"]["inputs"].get("beta")),
            "algo": algo, "T": T}  # fmt: skip


# ---- EF21 ---------------------------------------------------------------------------------
def _ef21_nonconvex(fast: bool) -> list[Outcome]:
    out = []
    for K, init in ((1, "full"), (3, "compressed")) + (() if fast else ((10, "full"),)):
        r = _trajectory("EF21", K, init, fast)
        lhs, rhs = nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], r["G"][0], r["A"])
        out.append(
            Outcome(
                f"logreg-nonconvex TopK K={K} g0={init} T={r['T']}",
                f"(1/T) sum ||grad f||^2 <= 2 f(x0)/(gamma T) + G0/(theta T) = {rhs:.4g}",
                f"{lhs:.4g}",
                lhs <= rhs * (1 + ROUND),
                "1e-12 relative (deterministic; f_inf replaced by 0 <= inf f)",
            )
        )
    return out  # fmt: skip


def _ef21_pl(fast: bool) -> list[Outcome]:
    R = heterogeneous_ridge(x0="ones")
    out = []
    for K in (1, 2):
        algo, rec = EF21.configure(R, parse_spec(f"topk:k={K}"), init_mode="compressed")
        th = rec["theory"]["inputs"]["theta"]
        T = 600 if fast else 3000

        def psi(s, th=th, g=algo.gamma) -> float:
            return f_gap(R, s.x) + g / th * G_of(s, R)

        _, ps = run(algo, R, T, observe=psi)
        ratio = pl_ratio(ps, algo.gamma, R.consts.mu)
        live = sum(p > 1e-12 for p in ps)
        out.append(
            Outcome(
                f"§3.6 ridge TopK K={K}, x0=1, g0=C(grad), T={T}",
                "Psi^t/((1-gamma mu)^t Psi^0) <= 1 at every t with Psi^t > 1e-12",
                f"max ratio {ratio:.4f} over {live - 1} steps, final Psi {ps[-1]:.2e}",
                ratio <= 1 + 1e-9,
                "1e-9 relative (rounding of Psi near the floor)",
            )
        )
    return out  # fmt: skip


def _ef21_lyapunov(fast: bool) -> list[Outcome]:
    out = []
    for K in (1, 3):
        r = _trajectory("EF21", K, "compressed", fast)
        bad, worst = descent_violations(r["f"], r["gn2"], r["G"], 0.0, r["gamma"], r["A"])
        out.append(
            Outcome(
                f"EF21 TopK K={K}, full gradients, T={r['T']}",
                "Phi^{t+1} <= Phi^t - (gamma/2)||grad f(x^t)||^2 at every t, "
                "Phi = f + gamma G/(2 theta)",
                f"{bad} violations; max (Phi^{{t+1}} - Phi^t + gamma/2 ||grad||^2)/"
                f"Phi^t = {worst:.2e}",
                bad == 0,
                "1e-12 relative (rounding only)",
            )
        )
    return out  # fmt: skip


# ---- 3PC ----------------------------------------------------------------------------------
def _three_point(fast: bool) -> list[Outcome]:
    """Def. 3.1 of arXiv 2202.00998 with h = g_i^t, y = grad f_i(x^t), x = grad f_i(x^{t+1})."""
    out = []
    for m in DET_MECHS:
        r = _trajectory(m, 2, "compressed", fast)
        A, B, gi, G = r["A"], r["B"], r["gi"], r["G"]
        worst, bad = -math.inf, 0
        for t in range(r["T"]):
            D = float(((gi[t + 1] - gi[t]) ** 2).sum(dim=1).mean())
            rhs = (1 - A) * G[t] + B * D
            ex = (G[t + 1] - rhs) / max(rhs, 1e-300)
            worst, bad = max(worst, ex), bad + (ex > ROUND)
        out.append(
            Outcome(
                f"3pc {m} TopK K=2 (A={A:.3g}, B={B:.3g}), every step",
                "G^{t+1} <= (1-A) G^t + B mean||grad f_i(x^{t+1}) - grad f_i(x^t)||^2",
                f"{bad} violations; max relative excess {worst:.2e}",
                bad == 0,
                "1e-12 relative (deterministic mechanism)",
            )
        )
    # random mechanisms: the conditional expectation over fresh randomness at fixed states
    S = 100 if fast else 400
    P = _nonconvex(fast)
    for m in RAND_MECHS:
        algo, rec = ThreePC.configure(P, parse_spec("topk:k=2"), mechanism=m,
                                      init_mode="compressed")  # fmt: skip
        A, B = rec["theory"]["inputs"]["A"], rec["theory"]["inputs"]["B"]
        comm = SimulatedComm(P.n, seed=0)
        state = algo.init(P.x0, P, comm)
        fails, worst = 0, -math.inf
        checked = 0
        for t in range(31):
            if t % 10 == 0:
                x1 = state.x - algo.gamma * state.g
                G0 = G_of(state, P)
                D = float(((P.grad(x1) - P.grad(state.x)) ** 2).sum(dim=1).mean())
                rhs = (1 - A) * G0 + B * D
                vals = []
                for s in range(S):
                    nxt, _ = algo.step(state, P, SimulatedComm(P.n, seed=1000 + s))
                    vals.append(G_of(nxt, P))
                mean, se = float(np.mean(vals)), float(np.std(vals, ddof=1) / math.sqrt(S))
                worst = max(worst, (mean - rhs) / rhs)
                fails += mean - 3 * se > rhs
                checked += 1
            state, _ = algo.step(state, P, comm)
        out.append(
            Outcome(
                f"3pc {m} (A={A:.3g}, B={B:.3g}), {checked} states x {S} draws",
                "E G^{t+1} <= (1-A) G^t + B mean||grad f_i(x^{t+1})-grad f_i(x^t)||^2",
                f"{fails} violations; max (mean - rhs)/rhs = {worst:.3g}",
                fails == 0,
                "mean over draws minus 3 standard errors must not exceed the bound",
            )
        )
    return out  # fmt: skip


def _three_pc_bound(fast: bool) -> list[Outcome]:
    out = []
    for m in DET_MECHS:
        r = _trajectory(m, 2, "compressed", fast)
        lhs, rhs = nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], r["G"][0], r["A"])
        out.append(
            Outcome(
                f"3pc {m} TopK K=2, T={r['T']}",
                f"(1/T) sum ||grad f||^2 <= 2 f(x0)/(gamma T) + G0/(A T) = {rhs:.4g}",
                f"{lhs:.4g}",
                lhs <= rhs * (1 + ROUND),
                "1e-12 relative",
            )
        )
    seeds = 3 if fast else 8
    for m in RAND_MECHS:
        lhs_s, rhs = [], 0.0
        for s in range(seeds):
            r = _trajectory(m, 2, "compressed", fast, seed=s)
            lhs, rhs = nonconvex_bound(r["gn2"][:-1], r["f"][0], 0.0, r["gamma"], r["G"][0],
                                       r["A"])  # fmt: skip
            lhs_s.append(lhs)
        mean, se = float(np.mean(lhs_s)), float(np.std(lhs_s, ddof=1) / math.sqrt(seeds))
        out.append(
            Outcome(
                f"3pc {m} TopK K=2, {seeds} seeds",
                f"E (1/T) sum ||grad f||^2 <= {rhs:.4g} (G0 deterministic: TopK init)",
                f"mean {mean:.4g} (se {se:.2g})",
                mean - 3 * se <= rhs,
                "mean over seeds minus 3 standard errors",
            )
        )
    return out  # fmt: skip


def _three_pc_lyapunov(fast: bool) -> list[Outcome]:
    out = []
    for m in DET_MECHS:
        r = _trajectory(m, 2, "compressed", fast)
        bad, worst = descent_violations(r["f"], r["gn2"], r["G"], 0.0, r["gamma"], r["A"])
        out.append(
            Outcome(
                f"3pc {m} TopK K=2, full gradients, T={r['T']}",
                "Phi^{t+1} <= Phi^t - (gamma/2)||grad f||^2, Phi = f + gamma G/(2A)",
                f"{bad} violations; max relative excess {worst:.2e}",
                bad == 0,
                "1e-12 relative (rounding only)",
            )
        )
    return out  # fmt: skip


# ---- EF14 ---------------------------------------------------------------------------------
def _ef14_exact(fast: bool) -> list[Outcome]:
    Q = make_problem("quadratic", nodes=10, lam=0.5, dim=20, L=1.0, zeta2=0.0, L_pm=0.1, seed=0)
    algo, _ = EF14.configure(Q, parse_spec("topk:k=2"))
    T = 1000 if fast else 3000
    _, d = run(algo, Q, T, observe=lambda s: float(((s.x - Q.x_star) ** 2).sum()))
    target = 1e-10 if fast else 1e-24
    rel = d[-1] / d[0]
    return [Outcome(f"random quadratic zeta2=0 (n=10, d=20, mu=0.5), TopK K=2, T={T}",
                    f"linear convergence to x*: ||x^T - x*||^2/||x^0 - x*||^2 <= {target:g}",
                    f"{rel:.2e}", rel <= target,
                    "threshold well above the float floor, below any plateau")]  # fmt: skip


def _ef14_plateau(fast: bool) -> list[Outcome]:
    R = heterogeneous_ridge(x0="ones")
    g0 = EF21.configure(R, parse_spec("topk:k=2"), regime="nonconvex")[0].gamma
    burn, win = (1000, 1000) if fast else (2000, 3000)
    levels = {}
    for div in (1, 4):
        algo, _ = EF14.configure(R, parse_spec("topk:k=2"), step=g0 / div)
        T = burn * div + win
        _, d = run(algo, R, T, observe=lambda s: float(((s.x - R.x_star) ** 2).sum()))
        levels[div] = float(np.mean(d[-win:]))
    ratio = levels[1] / levels[4]
    algo, _ = EF21.configure(R, parse_spec("topk:k=2"), step=g0)
    T21 = 1500 if fast else 3000
    _, d21 = run(algo, R, T21, observe=lambda s: float(((s.x - R.x_star) ** 2).sum()))
    return [
        Outcome(f"§3.6 ridge TopK K=2, gamma0 = EF21 step {g0:.4g} vs gamma0/4",
                "plateau of ||x - x*||^2 scales like gamma^2: ratio 16",
                f"tail means {levels[1]:.3g} / {levels[4]:.3g} = {ratio:.2f}",
                8 <= ratio <= 32, "factor 2 either way (gamma^2 is the leading order)"),
        Outcome("§3.6 ridge, EF14 at gamma0 does not converge", "plateau > 0 (zeta2 = 59.3 > 0)",
                f"tail mean {levels[1]:.3g}", levels[1] > 1e-6, "plateau > 1e-6"),
        Outcome(f"§3.6 ridge, EF21 at gamma0, T={T21}", "exact linear convergence (no plateau)",
                f"||x - x*||^2 = {d21[-1]:.2e}", d21[-1] < 1e-16, "< 1e-16"),
    ]  # fmt: skip


# ---- EF-BV --------------------------------------------------------------------------------
def _ef_bv_conv(fast: bool) -> list[Outcome]:
    R = heterogeneous_ridge(x0="ones")
    T = 1500 if fast else 3000
    target = 1e-10 if fast else 1e-24
    out = []
    for spec in ("topk:k=2", "randk:k=2"):
        algo, rec = EFBV.configure(R, parse_spec(spec))
        _, d = run(algo, R, T, observe=lambda s: float(((s.x - R.x_star) ** 2).sum()))
        rel = d[-1] / d[0]
        out.append(
            Outcome(
                f"§3.6 ridge {spec}, lambda={algo.lam:.3g}, nu={algo.nu:.3g}, "
                f"gamma={algo.gamma:.4g}, T={T}",
                f"linear convergence to x*: ||x^T-x*||^2/||x^0-x*||^2 <= {target:g}",
                f"{rel:.2e}",
                rel <= target,
                "threshold above the float floor",
            )
        )
    return out  # fmt: skip


def _ef_bv_ef21(fast: bool) -> list[Outcome]:
    P = _nonconvex(fast)
    out = []
    for K in (1, 3):
        e21, _ = EF21.configure(P, parse_spec(f"topk:k={K}"), init_mode="full")
        ebv, _ = EFBV.configure(P, parse_spec(f"topk:k={K}"), step=e21.gamma, lam=1.0, nu=1.0,
                                init_mode="full")  # fmt: skip
        T = 200
        _, xa = run(e21, P, T, observe=lambda s: s.x)
        _, xb = run(ebv, P, T, observe=lambda s: s.x)
        err = max(float((a - b).abs().max()) for a, b in zip(xa, xb, strict=True))
        out.append(
            Outcome(
                f"logreg-nonconvex TopK K={K}, T={T}, h_i^0 = g_i^0 = grad f_i(x^0)",
                "EF-BV(lambda = nu = 1) iterates = EF21 iterates",
                f"max |x_EFBV - x_EF21| = {err:.1e}",
                err <= 1e-12,
                "1e-12 absolute",
            )
        )
    return out  # fmt: skip


def _check(name: str, paper: str, fn) -> Check:
    return Check(name, paper, single_thread(fn))


CHECKS: list[Check] = [
    _check("ef21.nonconvex-bound", "EF21, arXiv 2106.05203, Theorem 1", _ef21_nonconvex),
    _check("ef21.pl-rate", "EF21, arXiv 2106.05203, Theorem 2 (theory sheet P5)", _ef21_pl),
    _check("ef21.lyapunov-descent", "EF21, arXiv 2106.05203, proof of Theorem 1", _ef21_lyapunov),
    _check(
        "3pc.three-point-inequality",
        "3PC, arXiv 2202.00998, Definition 3.1 and Sec. 3",
        _three_point,
    ),
    _check(
        "3pc.nonconvex-bound",
        "3PC, arXiv 2202.00998, nonconvex theorem (G0/(A T))",
        _three_pc_bound,
    ),
    _check(
        "3pc.lyapunov-descent",
        "3PC, arXiv 2202.00998, proof of the nonconvex theorem",
        _three_pc_lyapunov,
    ),
    _check(
        "ef14.exact-when-homogeneous",
        "EF14 (Karimireddy et al. 2019, arXiv 1901.09847); theory sheet §2.2",
        _ef14_exact,
    ),
    _check(
        "ef14.plateau-gamma2",
        "theory sheet §2.2 / P7 (EF14 vs EF21, arXiv 2106.05203)",
        _ef14_plateau,
    ),
    _check("ef-bv.convergence", "EF-BV, arXiv 2205.04180 (step as documented [U])", _ef_bv_conv),
    _check(
        "ef-bv.reduces-to-ef21",
        "EF-BV, arXiv 2205.04180, special case lambda = nu = 1",
        _ef_bv_ef21,
    ),
]
