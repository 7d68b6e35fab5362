"""NEOLITHIC (Huang, Chen, Yin & Yuan 2022, arXiv 2206.03665): the multi-step compression's
geometric contraction, and the method tracking minibatch SGD at its parameters.

* ``neolithic.msc-geometric``: ``R`` stages of a ``delta``-contractive compressor applied to the
  successive residuals leave ``E||x - MSC_R(x)||^2 <= (1 - delta)^R ||x||^2`` (the module's
  defining property; the bound follows stage by stage from the tower rule). Measured on
  ``S`` Gaussian vectors in ``d = 50`` through :func:`algorithms.multistage.neolithic.msc` itself:
  with scaled Rand-K (``k = 5``, ``delta = 0.1``), where the bound is attained in expectation, the
  mean ratio at every ``R = 1..20`` is below ``(1 - delta)^R`` (one-sided, ``Z`` standard
  errors) and the least-squares slope of ``log(mean ratio)`` against ``R`` is
  ``log(1 - delta)`` within 10%; with Top-K (deterministic) every vector's ratio is below the
  bound at every ``R`` until the residual vanishes (``R = d/k``).
* ``neolithic.tracks-sgd``: with ``R`` such that ``(1 - delta)^R <= 0.01`` (the default), the
  composite message is nearly exact, so NEOLITHIC (scaled Rand-K, ``k = 4`` of ``d = 20``:
  ``R = 21``) behaves as uncompressed minibatch SGD with the same ``R`` samples per node and
  the same step: on a heterogeneous strongly convex quadratic (``zeta2 = 10``, gradient noise
  1) its tail mean of ``||x - x*||^2`` is at most 1.5x that of SGD (mean over seeds, ``Z``
  standard errors). This is the mechanism behind the paper's "nearly optimal" claim (rounds of
  an outer loop, each costing ``R ~ log/delta`` compressions and ``R`` samples), not its rate
  constant, which could not be read here.

* ``neolithic.acc-sqrt-kappa`` (the accelerated version of He, Huang, Chen, Yin & Yuan 2023,
  arXiv 2305.07612; the class is a labelled reconstruction,
  :mod:`algorithms.multistage.neolithic_acc`): on ADIANA's instance
  (:func:`theory_checks.accelerated.adiana_problem`: ``n = 100``, ``d = 10``, ``L = 1``, ``mu =
  1/kappa``, heterogeneous, from the extreme eigenvectors), Top-5 (``delta = 1/2``, ``R = 7``
  stages), both methods at their theory steps and full local gradients (deterministic: one run
  each), rounds to ``||x - x*||^2 <= 0.01 ||x^0 - x*||^2``. Claims, stated before measuring:
  accelerated NEOLITHIC's rounds grow like ``sqrt(kappa)`` (slope of ``log rounds`` on ``log
  kappa`` ``0.5 +- 0.2``), NEOLITHIC's like ``kappa`` (``1 +- 0.2``), at the largest ``kappa``
  the accelerated method needs fewer rounds and uplink bits, and at every ``kappa`` its rounds
  are within Nesterov's bound at the theory step ``gamma``: the reconstruction is Nesterov's
  method with the constant momentum at ``gamma <= 1/L``, for which ``f(x^k) - f* <= (1 -
  sqrt(gamma mu))^k (f(x^0) - f* + (mu/2)||x^0 - x*||^2)`` (Nesterov 2004, Thm 2.2.3, with ``L``
  read as ``1/gamma``), hence with ``||x - x*||^2 <= (2/mu)(f(x) - f*)`` at most ``ln((2 (f(x^0)
  - f*)/mu + ||x^0 - x*||^2)/(0.01 ||x^0 - x*||^2)) / -ln(1 - sqrt(gamma mu))`` rounds (85, 353
  and 1368 at ``kappa = 10^2, 10^3, 10^4``; measured 34, 113, 360). This is the rate claim
  proper (``rate=True``): the slope and the comparison with NEOLITHIC hold at any step small
  enough, the bound only at the theory step's rate. Its runs stop at NEOLITHIC's rounds.

Power (``--power``): a module that compresses the input itself at every stage (no residual:
the stages pile up instead of correcting each other) and one that stops after the first stage
must fail the first check; NEOLITHIC with one stage (``R = 1`` compression of the accumulated
gradient, still with error feedback: EF-SGD at the same step and samples) and with the
residual not subtracted must fail the second; accelerated NEOLITHIC without its momentum
(``beta = 0``: NEOLITHIC itself), at twice its step (Nesterov's method is guaranteed up to
``1/L``; ``2 gamma ~ 1.8/L``) and at a tenth of its step (``step/10``: ``gamma/10`` with
Nesterov's momentum at that step, a valid method ``sqrt(10)`` times slower; 113 rounds at
``kappa = 10^2`` against the theory step's bound 85) must fail the third. Not rejected, so not
named: NEOLITHIC without its error memory; at this ``R`` the scaled Rand-K module's bias is the
uniform shrink ``(1 - delta)^R`` of every node's message, harmless at this accuracy.

Rates: only ``neolithic.acc-sqrt-kappa`` is a rate claim (``rate=True``, with its ``step/10``
variant). ``neolithic.msc-geometric`` is a constant of an operator (the composite compressor's
``1 - delta_R = (1 - delta)^R``), with no step to shrink; its slope outcome is two-sided, so a
module contracting more slowly fails it anyway. ``neolithic.tracks-sgd`` compares two plateau
levels at one shared step (NEOLITHIC's tail error against minibatch SGD's), not a rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from algorithms.multistage.neolithic import NEOLITHIC, msc
from algorithms.multistage.neolithic_acc import NEOLITHICAcc
from algorithms.shifts.dcgd import DCGD
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from theory_checks.accelerated import adiana_problem, rounds_to_distance
from theory_checks.base import Check, Outcome, Variant, single_threaded
from theory_checks.scaling import slope_outcome
from theory_checks.vr_problems import Z, mean_se, run, sq_dist

__all__ = ["CHECKS", "instance", "msc_no_residual", "msc_single_stage"]

PAPER = (
    "Huang, Chen, Yin & Yuan 2022, arXiv 2206.03665 (NeurIPS 2022): NEOLITHIC's multi-step "
    "compression and gradient accumulation (abstract; algorithm box not read)"
)


# ------------------------------------------------------------------ broken modules
def msc_no_residual(C, x_i, R, streams):
    """Broken: every stage compresses ``x`` itself and the ``R`` messages are summed."""
    v = torch.zeros_like(x_i)
    nbits = torch.zeros(x_i.shape[0], dtype=torch.int64)
    for r in range(R):
        packet = C.encode(x_i, streams(r))
        v = v + C.decode(packet)
        nbits = nbits + packet.nbits.to(torch.int64).cpu()
    return v, nbits


def msc_single_stage(C, x_i, R, streams):
    """Broken: one stage, whatever ``R`` (the accumulated gradient compressed once)."""
    return msc(C, x_i, 1, streams)


MODULES = {None: msc, "no-residual": msc_no_residual, "single-stage": msc_single_stage}


@dataclass(frozen=True)
class _Broken(NEOLITHIC):
    """NEOLITHIC with another multi-step module (the checks' broken variants)."""

    module: str = "no-residual"

    def _msc(self, C, x_i, R, streams):
        return MODULES[self.module](C, x_i, R, streams)


def _finite(m: float) -> float:
    return m if math.isfinite(m) else -math.inf


# ------------------------------------------------------------------ the module's contraction
MSC_VARIANTS = (
    Variant("no-residual", "other", "each stage compresses the input itself and the messages "
            "are summed: the stages pile up instead of correcting the residual"),
    Variant("single-stage", "other", "the module stops after its first stage: the error stays "
            "at (1 - delta), no geometric decay in R"),
)  # fmt: skip


def _ratios(module, spec: str, X: torch.Tensor, Rs, seed: int) -> np.ndarray:
    """``||x - MSC_R(x)||^2 / ||x||^2`` per row of ``X`` and per ``R``: ``(len(Rs), S)``."""
    C = parse_spec(spec)
    comm = SimulatedComm(X.shape[0], seed=seed)
    norm = (X**2).sum(1)
    out = []
    for R in map(int, Rs):
        v, _ = module(C, X, R, lambda r, R=R: comm.rng_for(C, R, tag=r))
        out.append((((X - v) ** 2).sum(1) / norm).numpy())
    return np.asarray(out)


def _msc_geometric(fast: bool, variant: str | None = None) -> list[Outcome]:
    module = MODULES[variant]
    S, d, k = (400, 50, 5) if fast else (4000, 50, 5)
    delta = k / d
    X = torch.randn(S, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = []
    # scaled Rand-K: the bound attained in expectation
    Rs = np.arange(1, 21)
    r = _ratios(module, f"scaled:randk:k={k}", X, Rs, seed=1)
    est = [mean_se(row) for row in r]
    bound = (1 - delta) ** Rs
    lo_margin = min(1.0 - (e.mean - Z * e.se) / b for e, b in zip(est, bound, strict=True))
    worst = int(np.argmin([b - (e.mean - Z * e.se) for e, b in zip(est, bound, strict=True)]))
    out.append(
        Outcome(
            f"scaled:randk:k={k}, d={d}, R=1..20",
            "E||x - MSC_R(x)||^2/||x||^2 <= (1 - delta)^R at every R",
            f"worst R={Rs[worst]}: {est[worst]} vs {bound[worst]:.4g}",
            lo_margin >= 0,
            f"mean over {S} vectors - {Z:g} s.e.",
            _finite(lo_margin),
        )
    )
    means = np.array([e.mean for e in est])
    with np.errstate(all="ignore"):
        slope = float(np.polyfit(Rs, np.log(means), 1)[0]) if (means > 0).all() else math.nan
    target = math.log(1 - delta)
    rel = abs(slope - target) / abs(target) if math.isfinite(slope) else math.inf
    out.append(
        Outcome(
            f"scaled:randk:k={k}, d={d}, slope",
            f"log(mean ratio) vs R has slope log(1 - delta) = {target:.4f} (attained bound)",
            f"fitted slope {slope:.4f} (relative difference {rel:.3g})",
            rel <= 0.1,
            "within 10%",
            _finite(1.0 - rel / 0.1),
        )
    )
    # Top-K: deterministic, bound at every vector until the residual vanishes at R = d/k
    Rs = np.arange(1, d // k)
    r = _ratios(module, f"topk:k={k}", X, Rs, seed=1)
    bound = (1 - delta) ** Rs
    ratio = (r.max(1) / bound).max()
    out.append(
        Outcome(
            f"topk:k={k}, d={d}, R=1..{d // k - 1}",
            "||x - MSC_R(x)||^2/||x||^2 <= (1 - delta)^R for every vector and R",
            f"max ratio / bound {ratio:.4g}",
            ratio <= 1.0 + 1e-12,
            "exact (deterministic)",
            _finite(1.0 - ratio),
        )
    )
    return out


# ------------------------------------------------------------------ NEOLITHIC tracks SGD
SGD_VARIANTS = (
    Variant("one-stage", "other", "NEOLITHIC with a single compression of the accumulated "
            "gradient (R = 1 stage, error feedback kept): EF-SGD at the same step and samples"),
    Variant("no-residual", "other", "the module's stages compress the input itself and are "
            "summed: the composite message overshoots"),
)  # fmt: skip

SPEC = "scaled:randk:k=4"


def instance():
    """The heterogeneous strongly convex quadratic of the module docstring."""
    return make_problem(
        "quadratic", nodes=10, dim=20, L=1.0, lam=0.2, zeta2=10.0, L_pm=0.1, grad_noise=1.0,
        x0="randn:3", seed=0,
    )  # fmt: skip


def _tracks_sgd(fast: bool, variant: str | None = None) -> list[Outcome]:
    p = instance()
    seeds, T = (3, 200) if fast else (10, 400)
    algo, _ = NEOLITHIC.configure(p, parse_spec(SPEC), batch_size=1)
    R, gamma = algo.rounds, algo.gamma
    if variant == "one-stage":
        algo = _Broken(compressor=algo.compressor, gamma=gamma, rounds=R, batch_size=1,
                       module="single-stage")  # fmt: skip
    elif variant == "no-residual":
        algo = _Broken(compressor=algo.compressor, gamma=gamma, rounds=R, batch_size=1,
                       module="no-residual")  # fmt: skip
    sgd, _ = DCGD.configure(p, parse_spec("identity"), step=gamma, batch_size=R)
    xs = p.x_star
    d2 = lambda state, info, prob: sq_dist(state.x, xs)  # noqa: E731
    with np.errstate(all="ignore"):
        mine = mean_se([run(algo, p, T, s, d2)[1][T // 2 :].mean() for s in range(seeds)])
        ref = mean_se([run(sgd, p, T, s, d2)[1][T // 2 :].mean() for s in range(seeds)])
    hi = mine.mean + Z * math.hypot(mine.se, 1.5 * ref.se)
    bound = 1.5 * ref.mean
    return [
        Outcome(
            f"{SPEC}, R={R}, gamma={gamma:.4g}, T={T}",
            f"tail mean ||x - x*||^2 <= 1.5 x minibatch SGD's (batch R, same step) = {bound:.4g}",
            f"NEOLITHIC {mine}; SGD {ref}",
            math.isfinite(hi) and hi <= bound,
            f"mean + {Z:g} combined s.e.",
            _finite(1.0 - hi / bound),
        )
    ]


ACC_SPEC, ACC_TOL = "topk:k=5", 1e-2
ACC_PAPER = (
    "He, Huang, Chen, Yin & Yuan 2023, arXiv 2305.07612: accelerated NEOLITHIC (abstract; the "
    "class is a labelled reconstruction, Nesterov's momentum on NEOLITHIC's round); Nesterov's "
    "sqrt(L/mu) rate against gradient descent's L/mu"
)
ACC_VARIANTS = (
    Variant("beta=0", "other", "momentum removed: NEOLITHIC itself, rounds grow like kappa"),
    Variant(
        "step x2", "step-too-large", "twice the step (about 1.8/L): beyond Nesterov's 1/L, diverges"
    ),
    Variant("step/10", "step-too-small", "a tenth of the step (momentum at that step): valid, "
            "sqrt(10)x slower; beyond Nesterov's bound at the theory step"),
)  # fmt: skip


def nesterov_rounds(gamma: float, mu: float, gap0: float, dist0: float, tol: float) -> float:
    """Rounds after which Nesterov's constant-momentum method at step ``gamma <= 1/L`` is
    guaranteed ``||x - x*||^2 <= tol ||x^0 - x*||^2``: ``f(x^k) - f* <= (1 - sqrt(gamma mu))^k
    (gap0 + (mu/2) dist0)`` (Nesterov 2004, Thm 2.2.3, ``L`` read as ``1/gamma``) and ``||x -
    x*||^2 <= (2/mu)(f(x) - f*)``; ``gap0 = f(x^0) - f*``, ``dist0 = ||x^0 - x*||^2``."""
    q = math.sqrt(gamma * mu)
    return math.log((2.0 * gap0 / mu + dist0) / (tol * dist0)) / -math.log1p(-q)


def _acc_sqrt_kappa(fast: bool, variant: str | None = None) -> list[Outcome]:
    kappas = (1e2, 1e3) if fast else (1e2, 1e3, 1e4)
    T_max = 50_000
    rows = {"acc": [], "plain": []}
    bits = {"acc": [], "plain": []}
    bounds = []
    for kappa in kappas:
        p, x0 = adiana_problem(kappa)
        plain, _ = NEOLITHIC.configure(p, parse_spec(ACC_SPEC))
        acc, _ = NEOLITHICAcc.configure(p, parse_spec(ACC_SPEC))
        gap0 = float(p.loss(x0)) - p.consts.f_star
        bounds.append(nesterov_rounds(acc.gamma, p.consts.mu, gap0, sq_dist(x0, p.x_star),
                                      ACC_TOL))  # fmt: skip
        if variant == "beta=0":
            acc = dataclasses.replace(acc, beta=0.0)
        elif variant == "step x2":
            acc = dataclasses.replace(acc, gamma=2.0 * acc.gamma)
        elif variant == "step/10":
            acc = dataclasses.replace(acc, gamma=0.1 * acc.gamma)
        r_p, b_p = rounds_to_distance(plain, p, x0, ACC_TOL, 0, T_max)
        cap = int(r_p) if math.isfinite(r_p) else T_max
        r_a, b_a = rounds_to_distance(acc, p, x0, ACC_TOL, 0, cap)
        rows["acc"].append(r_a), bits["acc"].append(b_a)
        rows["plain"].append(r_p), bits["plain"].append(b_p)
    setting = (
        f"ADIANA's quadratic (n=100, d=10, L=1, mu=1/kappa), kappa in "
        f"{[f'{k:g}' for k in kappas]}, {ACC_SPEC} (R from msc_tol 0.01), theory steps, "
        f"||x-x*||^2 <= {ACC_TOL:g} ||x0-x*||^2, deterministic"
    )
    out = [
        slope_outcome(setting + ", accelerated NEOLITHIC", "rounds ~ sqrt(L/mu)", kappas,
                      rows["acc"], 0.5, 0.2),
        slope_outcome(setting + ", NEOLITHIC", "rounds ~ L/mu", kappas, rows["plain"], 1.0, 0.2),
    ]  # fmt: skip
    for what, vals in (("rounds", rows), ("uplink bits per node", bits)):
        a, b = vals["acc"][-1], vals["plain"][-1]
        out.append(
            Outcome(
                f"{setting}, kappa={kappas[-1]:g}",
                f"accelerated NEOLITHIC needs fewer {what} than NEOLITHIC",
                f"accelerated {a:.4g}, NEOLITHIC {b:.4g}",
                math.isfinite(a) and a < b,
                "strict",
                (1.0 - a / b) if math.isfinite(a) else -1.0,
            )
        )
    for kappa, r, K in zip(kappas, rows["acc"], bounds, strict=True):
        out.append(
            Outcome(
                f"{setting}, kappa={kappa:g}",
                "accelerated NEOLITHIC's rounds within Nesterov's bound at the theory step: "
                f"<= {K:.4g} (ln(start ratio)/-ln(1 - sqrt(gamma mu)))",
                f"{r:.4g} rounds",
                math.isfinite(r) and r <= K,
                "exact (deterministic)",
                (1.0 - r / K) if math.isfinite(r) else -1.0,
            )
        )
    return out


CHECKS = (
    Check("neolithic.msc-geometric", PAPER + "; the module's contraction (tower rule)",
          single_threaded(_msc_geometric), variants=MSC_VARIANTS),
    Check("neolithic.tracks-sgd", PAPER + "; R ~ ln(100)/delta stages (library's R)",
          single_threaded(_tracks_sgd), variants=SGD_VARIANTS),
    Check("neolithic.acc-sqrt-kappa", ACC_PAPER, single_threaded(_acc_sqrt_kappa),
          variants=ACC_VARIANTS, rate=True),
)  # fmt: skip
