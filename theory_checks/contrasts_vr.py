"""Contrasts within the unbiased-compression family: DCGD stalls on heterogeneous data where
DIANA converges (THEORY §3.6, P3/P4); DASHA against MARINA in uplink bits (Tyurin & Richtárik
2022); the linear speedup in ``n`` of stochastic DIANA's noise floor.

Power (``--power``): DCGD in DIANA's place, DIANA's shift step doubled and the DCGD baseline
given shifts must fail the plateau contrast; MARINA always synchronising and DASHA with a
vanishing momentum the bits contrast (the sync rate is compared with the claimed ``p = K/d``);
nodes sharing one random stream, and DIANA's shift step taken as 1 (the shifts' error does not
contract), the speedup.

None of the three is a rate check (``rate=False``): the plateau contrast judges a level (DCGD's
neighbourhood ``2 gamma omega zeta2/(mu n)`` and its proportionality to ``gamma``) and DIANA
reaching ``x*`` to the float floor, not a contraction factor; the bits contrast compares two
methods' bits to a tolerance (a ratio in which each method's ``1/gamma`` constant is the
prediction); the speedup judges the ratio of two noise floors at one fixed step. None is a
tight-instance check: the smallest correct margins are statistical (about 0.1 or more)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from algorithms.shifts.dcgd import DCGD
from algorithms.shifts.diana import DIANA
from algorithms.vr.dasha import DASHA
from algorithms.vr.marina import MARINA
from comm import SimulatedComm
from compressors import parse_spec
from streams import tags
from theory_checks.base import Check, Outcome, Variant
from theory_checks.vr_problems import (
    MeanSE,
    Z,
    logreg_nonconvex,
    mean_se,
    ridge,
    run,
    single_threaded,
    sq_dist,
)

DCGD_PAPER = (
    "DCGD: Khirirat, Feyzmahdavian & Johansson 2018, arXiv 1806.06573, neighbourhood "
    "2 gamma omega zeta2/(mu n) in the form of Gorbunov, Hanzely & Richtárik 2020, arXiv "
    "1905.11261; DIANA: Mishchenko et al. 2019, arXiv 1901.09269 (THEORY §2.1, §2.8, P3, P4)"
)
DASHA_MARINA_PAPER = (
    "Tyurin & Richtárik 2022, 'DASHA', arXiv 2202.01268 (ICLR 2023): abstract and Table 1 "
    "(gradient setting: MARINA's O(d/(eps sqrt(n))) communication for RandK kept, compressed "
    "vectors only), Thm 6.1 vs MARINA Thm 2.1 (arXiv 2102.07845); experiments, 2^j x theory step"
)
DIANA_SPEEDUP_PAPER = (
    "DIANA with stochastic gradients: Horváth, Kovalev, Mishchenko, Stich & Richtárik 2019, "
    "arXiv 1904.05115; neighbourhood gamma^2 (sigma^2/n + M alpha sigma^2)/min(gamma mu, "
    "alpha/2), M = 4 omega/(n alpha) (THEORY §2.8)"
)


# ------------------------------------------------------------------------ DCGD vs DIANA
def plateau_outcomes(
    plateaus: dict[float, MeanSE], bounds: dict[float, float], diana_err: MeanSE, setting: str
) -> list[Outcome]:
    """DCGD's tail mean below its bound and roughly proportional to the step (step ratio 4,
    measured ratio in [2, 8]); DIANA at the float floor (<= 1e-20)."""
    (g1, p1), (g2, p2) = sorted(plateaus.items(), reverse=True)
    out = []
    for g, est in ((g1, p1), (g2, p2)):
        b, lo = bounds[g], est.mean - Z * est.se
        out.append(
            Outcome(
                f"{setting}, DCGD gamma={g:.4g}",
                f"stalls: 1e-3 < tail mean ||x-x*||^2 <= 2 gamma omega zeta2/(mu n) = {b:.4g}",
                f"tail mean {est}",
                lo > 1e-3 and lo <= b,
                f"mean over seeds, {Z:g} s.e.; 1e-3 = far above the float floor",
                _finite(min(1.0 - lo / b, lo / 1e-3 - 1.0)),
            )
        )
    ratio = p1.mean / p2.mean
    out.append(
        Outcome(
            f"{setting}, DCGD gamma vs gamma/4",
            "plateau roughly proportional to gamma: ratio ~ 4 (P3: 3.5 vs 0.78)",
            f"{p1.mean:.4g} / {p2.mean:.4g} = {ratio:.3g}",
            2.0 <= ratio <= 8.0,
            "ratio in [2, 8]: the bound is linear in gamma, the plateau only roughly",
            _finite(min(ratio / 2.0 - 1.0, 1.0 - ratio / 8.0)),
        )
    )
    hi = diana_err.mean + Z * diana_err.se
    out.append(
        Outcome(
            f"{setting}, DIANA at its theory step",
            "linear convergence to the exact x* (P4: ~1e-29): ||x^T - x*||^2 <= 1e-20",
            f"{diana_err}",
            hi <= 1e-20,
            f"mean + {Z:g} s.e.",
            _finite(1.0 - hi / 1e-20),
        )
    )
    return out


def _finite(m: float) -> float:
    """A margin, ``-inf`` where the measurement was not a number (a diverged run)."""
    return m if math.isfinite(m) else -math.inf


PLATEAU_VARIANTS = (
    Variant("diana=dcgd", "no-variance-reduction", "DCGD + RandK at DIANA's step in DIANA's "
            "place: no shifts, it stalls instead of reaching x*"),
    Variant("diana-alpha=2/(omega+1)", "wrong-shift", "DIANA with shift step 2/(omega+1): the "
            "shifts' error does not contract"),
    Variant("dcgd=diana", "other", "the DCGD baseline given DIANA's shifts (at DCGD's steps): "
            "no plateau"),
)  # fmt: skip


def _dcgd_vs_diana(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = ridge()
    c, xs, omega = p.consts, p.x_star, 9.0
    spec = parse_spec("randk:k=2")
    seeds, T = (2, 1200) if fast else (8, 4000)
    d2 = lambda state, info, prob: sq_dist(state.x, xs)  # noqa: E731
    plateaus, bounds = {}, {}
    for mult in (1.0, 0.25):
        algo, _ = DCGD.configure(p, spec, step_mult=mult)
        # The transient (1 - gamma mu)^k must be negligible: the tail starts at 12/(gamma mu).
        T_m = max(T, int(24 / (algo.gamma * c.mu)))
        gamma = algo.gamma
        if variant == "dcgd=diana":
            algo, _ = DIANA.configure(p, spec, step=gamma)
        with np.errstate(all="ignore"):
            tails = [run(algo, p, T_m, s, d2)[1][T_m // 2 :].mean() for s in range(seeds)]
        plateaus[gamma] = mean_se(tails)
        bounds[gamma] = 2 * gamma * omega * c.zeta2 / (c.mu * p.n)
    algo, _ = DIANA.configure(p, spec)
    if variant == "diana=dcgd":
        algo, _ = DCGD.configure(p, spec, step=algo.gamma)
    elif variant == "diana-alpha=2/(omega+1)":
        algo = dataclasses.replace(algo, alpha=2.0 / (omega + 1.0))
    T_d = 2000 if fast else 4000
    with np.errstate(all="ignore"):
        diana = mean_se([sq_dist(run(algo, p, T_d, s)[0].x, xs) for s in range(seeds)])
    setting = f"ridge §3.6, RandK K=2, x0=0, {seeds} seeds, DIANA T={T_d}"
    return plateau_outcomes(plateaus, bounds, diana, setting)


# ------------------------------------------------------------------------ DASHA vs MARINA
def bits_to_tolerance(algo, p, tol: float, seed: int, T_max: int) -> tuple[float, dict]:
    """Mean uplink bits per node until ``||grad f(x)||^2 <= tol`` (inf if not within
    ``T_max`` rounds or on divergence), with the per-round uplink statistics."""
    comm = SimulatedComm(p.n, seed=seed)
    state = algo.init(p.x0, p, comm)
    g0 = float((p.full_grad(p.x0) ** 2).sum())
    per_round, syncs = [], 0
    for _ in range(T_max):
        g = float((p.full_grad(state.x) ** 2).sum())
        if g <= tol:
            return comm.bits_totals()["bits_up"], {"rounds": per_round, "syncs": syncs}
        if not math.isfinite(g) or g > 1e2 * g0:  # diverged
            break
        state, info = algo.step(state, p, comm)
        per_round.append(info.bits_up)
        syncs += int(info.extras.get("sync", 0.0))
    return math.inf, {"rounds": per_round, "syncs": syncs}


DASHA_MARINA_VARIANTS = (
    Variant("marina-p=1", "no-variance-reduction", "MARINA always synchronising (p = 1, "
            "gradient descent at 1/L): 32 d bits every round"),
    Variant("dasha-a=0.001", "wrong-shift", "DASHA with momentum a ~ 0: its estimator's error "
            "accumulates and it does not reach the tolerance"),
)  # fmt: skip


def _dasha_vs_marina(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = logreg_nonconvex(nodes=5, samples=200, features=20)
    d, K = p.d, 2
    spec = parse_spec(f"randk:k={K}")
    tol = 1e-4 * float((p.full_grad(p.x0) ** 2).sum())
    seeds = 1 if fast else 6
    mults = (1, 2, 16) if fast else (1, 2, 4, 8, 16)
    T_max = 3000
    bits: dict[str, dict[int, float]] = {"MARINA": {}, "DASHA": {}}
    stats: dict[str, dict] = {}
    gammas: dict[str, float] = {}
    # The claim is about MARINA with p = K/d: the sync rate is compared with that p.
    claimed_p = MARINA.configure(p, spec)[0]._p(d)
    claim_kw = {"MARINA": {}, "DASHA": {"init_mode": "zero"}}
    for name, cls, kw in (("MARINA", MARINA, {}), ("DASHA", DASHA, {"init_mode": "zero"})):
        for mult in mults:
            if variant == "marina-p=1" and name == "MARINA":
                kw = {"p": 1.0}
            elif variant == "dasha-a=0.001" and name == "DASHA":
                kw = {"init_mode": "zero", "momentum": 1e-3}
            algo, _ = cls.configure(p, spec, step_mult=mult, **kw)
            with np.errstate(all="ignore"):
                res = [bits_to_tolerance(algo, p, tol, s, T_max) for s in range(seeds)]
            bits[name][mult] = float(np.mean([b for b, _ in res]))
            if mult == 1:
                gammas[name] = cls.configure(p, spec, **claim_kw[name])[0].gamma
                stats[name] = {
                    "rounds": [r for _, st in res for r in st["rounds"]],
                    "syncs": sum(st["syncs"] for _, st in res),
                    "p": claimed_p if name == "MARINA" else None,
                }
    out = []
    # (1) what is sent: DASHA only compressed vectors; MARINA 32 d on a sync (probability p).
    q_bits = float(np.min(stats["DASHA"]["rounds"]))
    dasha_max = float(np.max(stats["DASHA"]["rounds"]))
    out.append(
        Outcome(
            f"logreg-nonconvex n={p.n}, d={d}, RandK K={K}, DASHA init zero (authors' code)",
            f"DASHA never sends an uncompressed vector: every round's uplink = bits(RandK) < "
            f"32 d = {32 * d}",
            f"per-round uplink min {q_bits:g}, max {dasha_max:g} bits; init sent nothing",
            dasha_max == q_bits < 32 * d,
            "exact (bit ledger)",
            (32 * d - dasha_max) / (32 * d) if dasha_max == q_bits else -1.0,
        )
    )
    m_rounds = np.asarray(stats["MARINA"]["rounds"], dtype=float)
    pm = float(stats["MARINA"]["p"])
    n_r = m_rounds.size
    frac = float(np.mean(m_rounds == 32 * d))
    se = math.sqrt(pm * (1 - pm) / n_r)
    out.append(
        Outcome(
            f"same, MARINA p = K/d = {pm:g}",
            f"MARINA sends 32 d = {32 * d} bits on the sync rounds (probability p = {pm:g}), "
            "bits(Q) otherwise",
            f"{frac:.3f} of {n_r} rounds sent 32 d; counted syncs {stats['MARINA']['syncs']}",
            abs(frac - pm) <= Z * se + 1e-12
            and int(np.sum(m_rounds == 32 * d)) == stats["MARINA"]["syncs"],
            f"binomial, {Z:g} s.e.",
            1.0 - abs(frac - pm) / (Z * se + 1e-12),
        )
    )
    # (2) theory: the same order of communication complexity O(d/(eps sqrt(n))). Bits to a
    # tolerance scale like (1/gamma) x bits per round, so the predicted ratio is
    # (gamma_M/gamma_D) bits(Q) / (p 32 d + (1 - p) bits(Q)).
    per_round_m = pm * 32 * d + (1 - pm) * q_bits
    r_th = gammas["MARINA"] / gammas["DASHA"] * q_bits / per_round_m
    r = bits["DASHA"][1] / bits["MARINA"][1]
    out.append(
        Outcome(
            f"same, both at their theory steps (MARINA {gammas['MARINA']:.4g}, DASHA published "
            f"{gammas['DASHA']:.4g}), ||grad f||^2 <= 1e-4 ||grad f(x0)||^2",
            "same order O(d/(eps sqrt(n))): bits ratio DASHA/MARINA ~ (gamma_M/gamma_D) "
            f"bits(Q)/(p 32d + (1-p) bits(Q)) = {r_th:.3g} (not <= 1: the published step is "
            "smaller by about sqrt(16(2w+1)/w), ~5.7 for large w)",
            f"{bits['DASHA'][1]:.4g} / {bits['MARINA'][1]:.4g} = {r:.3g}",
            r_th / 2 <= r <= 2 * r_th,
            "within a factor 2 of the ratio of the theorems' constants",
            _finite(min(2.0 * r / r_th - 1.0, 1.0 - r / (2.0 * r_th))),
        )
    )
    # (3) the paper's experiments: steps tuned over 2^j multiples of the theory step.
    best = {k: min(v.items(), key=lambda kv: kv[1]) for k, v in bits.items()}
    out.append(
        Outcome(
            f"same, steps tuned over {list(mults)} x theory (the paper's experimental protocol)",
            "experiments: DASHA needs no more bits than MARINA (best multiple each)",
            f"DASHA {best['DASHA'][1]:.4g} bits (x{best['DASHA'][0]}), MARINA "
            f"{best['MARINA'][1]:.4g} bits (x{best['MARINA'][0]})",
            best["DASHA"][1] <= best["MARINA"][1],
            f"mean over {seeds} seeds; divergence or {T_max} rounds = inf",
            _finite(1.0 - best["DASHA"][1] / best["MARINA"][1]),
        )
    )
    return out


# ------------------------------------------------------------------------ DIANA linear speedup
def speedup_outcome(f1: MeanSE, f4: MeanSE, setting: str, tol: float = 1.0 / 3.0) -> Outcome:
    """The floor at ``n`` over the floor at ``4n``: about 4 (within ``[4/(1+tol), 4(1+tol)]``
    with the ratio's confidence interval inside the wider ``[4/(1+2tol), 4(1+2tol)]``)."""
    r = f1.mean / f4.mean
    rel = math.hypot(f1.se / f1.mean, f4.se / f4.mean)
    lo, hi = r * (1 - Z * rel), r * (1 + Z * rel)
    ok = 4 / (1 + tol) <= r <= 4 * (1 + tol) and 4 / (1 + 2 * tol) <= lo and hi <= 4 * (1 + 2 * tol)
    return Outcome(
        setting,
        f"floor(n)/floor(4n) = 4 at a fixed step (variance term prop. to 1/n), within "
        f"[{4 / (1 + tol):.3g}, {4 * (1 + tol):.3g}]",
        f"floor(n) {f1}; floor(4n) {f4}; ratio {r:.3g} (CI [{lo:.3g}, {hi:.3g}])",
        ok,
        f"tol {tol:.3g}: x-dependent noise (minibatch and compression of g_i - h_i away from x*) "
        "raises the small-n floor a little",
        _finite(
            min(
                r * (1 + tol) / 4 - 1,
                1 - r / (4 * (1 + tol)),
                lo * (1 + 2 * tol) / 4 - 1,
                1 - hi / (4 * (1 + 2 * tol)),
            )
        ),
    )


class SharedNoiseComm(SimulatedComm):
    """A broken comm for the checks: every node draws from the same stream (the minibatch
    indices and the compressors' draws are common to all nodes), so the noise of identical
    nodes does not average out."""

    def rng(self, t: int, shared: bool = False, tag: int = tags.DEFAULT):
        return super().rng(t, shared=True, tag=tag)


SPEEDUP_VARIANTS = (
    Variant("shared-noise", "other", "the nodes' randomness not independent (one stream for "
            "all): the floor does not fall with n"),
    Variant("alpha=1", "wrong-shift", "h_i <- h_i + Q(g_i - h_i): the shift takes the full "
            "compressed difference, so the shifts' error does not contract (variance omega "
            "||g_i - h_i||^2 a step)"),
)  # fmt: skip


def _run_tail(algo, q, T: int, burn: int, seed: int, comm_cls) -> float:
    xs = q.x_star
    comm = comm_cls(q.n, seed=seed)
    state = algo.init(q.x0, q, comm)
    vals = []
    for k in range(T):
        state, _ = algo.step(state, q, comm)
        if k + 1 >= burn:
            vals.append(sq_dist(state.x, xs))
    return float(np.mean(vals))


def _diana_speedup(fast: bool, variant: str | None = None) -> list[Outcome]:
    p10 = ridge()
    base, _ = DIANA.configure(p10, parse_spec("randk:k=2"), batch_size=5)
    gamma = base.gamma / 4
    seeds, T, burn = (3, 1500, 700) if fast else (8, 3000, 1000)
    floors = []
    for copies in (1, 4):
        q = ridge(copies=copies)
        algo, _ = DIANA.configure(q, parse_spec("randk:k=2"), batch_size=5, step=gamma)
        if variant == "alpha=1":
            algo = dataclasses.replace(algo, alpha=1.0)
        comm_cls = SharedNoiseComm if variant == "shared-noise" else SimulatedComm
        floors.append(mean_se([_run_tail(algo, q, T, burn, s, comm_cls) for s in range(seeds)]))
    setting = (
        f"ridge §3.6 with n=10 and its nodes x4 (n=40, same per-node data), RandK K=2, "
        f"minibatch 5 of 30, gamma = theory(n=10)/4 = {gamma:.4g} for both, tail {burn}..{T}"
    )
    return [speedup_outcome(floors[0], floors[1], setting)]


CHECKS = [
    Check("contrast.dcgd-vs-diana-plateau", DCGD_PAPER, single_threaded(_dcgd_vs_diana),
          fast=True, variants=PLATEAU_VARIANTS),
    Check("contrast.dasha-vs-marina-bits", DASHA_MARINA_PAPER, single_threaded(_dasha_vs_marina),
          fast=True, variants=DASHA_MARINA_VARIANTS),
    Check("contrast.diana-linear-speedup", DIANA_SPEEDUP_PAPER, single_threaded(_diana_speedup),
          fast=False, variants=SPEEDUP_VARIANTS),
]  # fmt: skip
