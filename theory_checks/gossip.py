"""CHOCO-Gossip (Koloskova, Stich & Jaggi 2019, arXiv 1902.00340): compressed gossip averaging
with public copies converges linearly to exact consensus, the communication round of CHOCO-SGD.

* ``gossip.choco-linear-consensus``: ``n = 8`` nodes on the complete graph (Metropolis weights:
  ``W = 11^T / 8``, spectral gap ``rho = 1``, ``beta = 1``), ``d = 20``, rows ``x_i^0`` drawn
  N(0, 1), public copies ``xhat_i^0 = 0``, the round of
  :func:`algorithms.decentralized.choco_sgd.choco_gossip` itself at the consensus step of
  :func:`algorithms.decentralized.choco_sgd.choco_consensus_step` (``rho^2 delta / (16 rho +
  rho^2 + 4 beta^2 + 2 rho beta^2 - 8 rho delta)``, 0.0119 for ``delta = 1/4``). Claims, as the
  theorem was recalled (its body was not read here, so the constants are labelled as such):
  the potential ``Phi_t = sum_i ||x_i^t - x_bar||^2 + ||x_i^t - xhat_i^t||^2`` satisfies
  ``Phi_t <= (1 - rho^2 delta / 82)^t Phi_0`` at every ``t <= T``, for Top-5 (``delta = 1/4``,
  deterministic) and scaled Rand-5 (``delta = 1/4``, one seeded run: the theorem bounds the
  expectation, and the measured margin is far from the bound); and the average
  ``x_bar`` never moves (``W`` doubly stochastic: ``|x_bar^T - x_bar^0| <= 1e-12``). The margin
  is ``-max_t (log Phi_t/Phi_0 - t log(1 - rho^2 delta/82))``, in natural-log units.

Power (``--power``): gossiping the compressed iterates themselves (no public copies: ``xhat``
is replaced each round by ``C(x)``, the "direct compression" that CHOCO was built to fix) stops
short of consensus (its disagreement after ``T`` rounds is above the bound: ``e^{5.4}`` times
for Top-5, ``e^{0.16}`` for scaled Rand-5); the consensus step 1 (``step-too-large``: the
public copies lag and the iteration diverges); a tenth of the theory's consensus step
(``step/10``: a valid step, judged against the theory step's rate, which it misses by
``e^{1.3}``). This is a rate claim (``rate=True``).

* ``gossip.beer-exact-under-heterogeneity`` (Zhao, Li, Li, Richtárik & Chi 2022, arXiv
  2201.13320: BEER converges under arbitrary heterogeneity): the heterogeneous strongly convex
  quadratic (``zeta2 = 10``, ``n = 8`` on a ring, ``d = 12``, ``L = 1``, ``mu = 0.01``), Top-4,
  ``eta = 0.3``, consensus step 0.5 (no theory values could be read: these are given, the
  same for every variant), ``T`` rounds from ``x^0 = 0``. Claims: the averaged iterate reaches
  ``||x_bar - x*||^2 <= 1e-4 ||x^0 - x*||^2`` and the nodes agree,
  ``(1/n) sum_i ||x_i - x_bar||^2 <= 1e-8``. Not a rate claim (``rate=False``): without the
  theorem's constants there is no rate to hold a step to. Power: CHOCO-SGD at the same steps
  (``no-tracking``: the nodes follow their own gradients and stop at a distance set by the
  heterogeneity) and BEER with its iterates compressed directly (``direct-iterates``: ``C(x)``
  in place of the public copy's correction ``C(x - h)``) must fail. Not rejected, so not
  named: the trackers compressed directly (``C(v)``; the trackers converge, so their direct
  compression error vanishes with them: margin +0.92 decades).

* ``gossip.motef-exact-under-heterogeneity`` (Islamov, Gao & Stich 2024, arXiv 2405.20114:
  MoTEF converges under arbitrary heterogeneity): BEER's instance and steps with MoTEF's
  momentum 0.3, deterministic gradients; the same two claims as BEER's, and the same two
  broken variants (no tracking: CHOCO-SGD; the iterates compressed directly) must fail. What
  momentum buys, its averaging of sampling noise, is not checked: at a fixed step the noise
  floor of ``||x_bar - x*||^2`` hardly moves with the momentum (least squares, ring of 8,
  batch 1, 2000 rounds: 0.00997, 0.00979 and 0.00966 at momentum 1, 0.3 and 0.1 with Top-5
  of 50; 0.0124, 0.0101 and 0.00967 with Top-2), too small an effect to hold a variant to.

* ``gossip.gt-exact-under-heterogeneity``: the same instance uncompressed, gradient tracking
  at ``eta = 0.2`` (measured: stable up to 0.2, divergent at 0.25): the same two claims.
  Power: D-SGD at the same step (``no-tracking``) and 1.5 times the step (``step-x1.5``, which
  diverges here; without the theorem's bound this is named ``other``, not
  ``step-too-large``) must fail. Not a rate claim.

* ``gossip.dsgd-neighbourhood-in-step`` (Yuan, Ling & Yin 2016, arXiv 1310.7063): D-SGD at a
  constant step ``gamma`` settles at a neighbourhood whose distance to consensus is
  ``O(gamma / (1 - beta))``. On the heterogeneous quadratic with ``mu = 0.2`` (``zeta2 = 10``,
  ring of 8, ``d = 12``): at the default step the run is bounded and settles (the consensus
  error moves by at most 1e-6, relative, over the last 100 rounds), and the settled consensus
  error, a squared distance, scales as ``gamma^2``: the log-log slope over ``gamma/2 ..
  gamma/16`` is ``2 +- 0.35`` (measured: 1.58, 1.74 and 1.85 between neighbouring steps, a
  fit of 1.73; it tends to 2 as the step shrinks). Power: no gossip at all (``no-gossip``: the
  nodes' disagreement is the spread of their own minimisers, slope near 0) and 2.2 times the
  default step (1.1 times the theorem's bound: it diverges) must fail. Not a rate claim.

* ``gossip.cold-exact-at-uncompressed-rate`` (Zhang, You & Xie, arXiv 2105.06697: COLD
  converges linearly for delta-contracted compressors and matches the rate of its uncompressed
  version; abstract only, and the update is a reconstruction, :class:`COLD`): the
  heterogeneous quadratic (``zeta2 = 10``, ring of 8, ``d = 12``, ``mu = 0.01``), Top-4
  (``delta = 1/3``), COLD's default step ``1/L_max`` and consensus step 1, ``T`` rounds
  from ``x^0 = 0``. Claims: the averaged iterate reaches ``||x_bar - x*||^2 <= 1e-12
  ||x^0 - x*||^2`` and the nodes agree to ``1e-12``; and the measured linear rate over the
  second half of the run, ``log(e_T/e_{T/2})/(T/2)``, is at least 0.9 times that of the
  uncompressed iteration (NIDS: COLD with the identity) at the same default steps (measured:
  the two rates agree to 1%). A rate claim (``rate=True``). Power: the decision vectors
  compressed directly (``direct``: ``yhat = C(y)``, no estimate whose error the next
  innovation corrects) and no dual variable (``no-dual``: ``d = 0``, each node descends its
  own ``f_i`` between CHOCO-type gossip steps: heterogeneity keeps it away) must fail, and a
  tenth of the step (``step/10``, judged against the uncompressed rate at the default step).

* ``gossip.dyna-cold-binary-linear`` (the same paper: Dyna-COLD's dynamical scaling gives
  linear convergence with the binary quantizer): the same instance with ``sign`` (one bit per
  coordinate, no scale of its own), initial scale 1 and decay 0.99 per round, consensus step
  1, ``T`` rounds. Claims: ``||x_bar - x*||^2 <= 1e-12 ||x^0 - x*||^2`` and consensus
  ``<= 1e-10`` (measured ``4e-15`` and ``2e-13`` at ``T = 1500``). Not a rate claim (the decay
  is given, not from a theorem). Power: no scaling (``decay = 1``: the binary quantizer's
  error never shrinks, the run hovers near ``1e-3``) and a decay faster than the iteration can
  follow (``decay = 0.95``: the estimates fall behind and the run diverges) must fail.

Not used: the torus and the ring, where the recalled step is so small (0.0055 on a 3 x 3
torus, 8e-5 on a ring of 16) that the bound is loose and the direct compression also meets it
within a practical horizon.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from algorithms.decentralized.base import averaged, graph
from algorithms.decentralized.choco_sgd import ChocoSGD, choco_consensus_step, choco_gossip
from algorithms.decentralized.cold import COLD, ColdState, DynaCOLD, innovation_round
from algorithms.decentralized.d_sgd import DSGD
from algorithms.decentralized.tracking import BEER, MoTEF, TrackState
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from streams import tags
from theory_checks.base import Check, Outcome, Variant, single_threaded

__all__ = ["CHECKS", "DirectIterates", "NoGossip"]

PAPER = (
    "Koloskova, Stich & Jaggi 2019, arXiv 1902.00340: CHOCO-Gossip's linear rate (its theorem "
    "as recalled: consensus step and rate 1 - rho^2 delta/82; the paper's body not read here)"
)
N, D, DELTA = 8, 20, 0.25
COMPRESSORS = ("topk:k=5", "scaled:randk:k=5")
ROUND = 1e-12

VARIANTS = (
    Variant("direct", "no-error-feedback", "gossip of the compressed iterates themselves (no "
            "public copies): the compression error is never corrected"),
    Variant("consensus=1", "step-too-large", "the consensus step 1 (the theory's is 0.0119): "
            "the public copies lag behind and the iteration diverges"),
    Variant("step/10", "step-too-small", "a tenth of the theory's consensus step: valid, "
            "but ten times slower than the rate claimed at the theory step"),
)  # fmt: skip


def _run(spec: str, T: int, variant: str | None) -> tuple[float, float, float, float]:
    top = graph("complete", N, "metropolis", 0)
    C = parse_spec(spec).bind(N)
    gamma = choco_consensus_step(top.rho, top.beta, DELTA)
    c = {"consensus=1": 1.0, "step/10": gamma / 10}.get(variant, gamma)
    rate = 1.0 - top.rho**2 * DELTA / 82.0
    comm = SimulatedComm(N, seed=0)
    x = torch.randn(N, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    avg0 = x.mean(dim=0)
    xhat, s = torch.zeros_like(x), torch.zeros_like(x)

    def potential(x, xhat):
        return float(((x - x.mean(dim=0)) ** 2).sum() + ((x - xhat) ** 2).sum())

    phi0, worst = potential(x, xhat), -math.inf
    for t in range(T):
        if variant == "direct":
            x = x + c * (s - xhat)
            packet = C.encode(x, comm.rng_for(C, t))
            xhat, s = C.decode(packet), comm.gossip(packet, C, top)
            phi = float(((x - x.mean(dim=0)) ** 2).sum())  # its copies are not a lag
        else:
            x, xhat, s = choco_gossip(x, xhat, s, c, C, comm, top, t)
            phi = potential(x, xhat)
        if not math.isfinite(phi):
            return gamma, rate, math.inf, math.inf
        worst = max(worst, math.log(max(phi / phi0, 1e-300)) - (t + 1) * math.log(rate))
    drift = float((x.mean(dim=0) - avg0).abs().max())
    return gamma, rate, worst, drift


def _choco_linear(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 3000 if fast else 6000
    out = []
    for spec in COMPRESSORS:
        gamma, rate, worst, drift = _run(spec, T, variant)
        out.append(
            Outcome(
                setting=f"complete graph n={N}, d={D}, {spec} (delta={DELTA}), consensus "
                f"{gamma:.4g}, T={T}",
                predicted=f"Phi_t <= (1 - rho^2 delta/82)^t Phi_0 = {rate:.6f}^t Phi_0, t <= T",
                measured=f"max_t log(Phi_t/Phi_0 / bound_t) = {worst:.3g}",
                passed=worst <= ROUND,
                tolerance=f"{ROUND:g} (rounding)",
                margin=-worst,
            )
        )
        out.append(
            Outcome(
                setting=f"{spec}: the average",
                predicted="x_bar^T = x_bar^0 (W doubly stochastic)",
                measured=f"max |x_bar^T - x_bar^0| = {drift:.3g}",
                passed=drift <= ROUND,
                tolerance=f"{ROUND:g}",
                margin=1.0 - drift / ROUND if math.isfinite(drift) else -math.inf,
            )
        )
    return out


BEER_VARIANTS = (
    Variant("no-tracking", "no-variance-reduction", "CHOCO-SGD at the same steps: no gradient "
            "tracking, so heterogeneity keeps the nodes apart"),
    Variant("direct-iterates", "no-error-feedback", "the iterates compressed directly, "
            "C(x) in place of the public copy's correction C(x - h)"),
)  # fmt: skip


@dataclass(frozen=True)
class DirectIterates(BEER):
    """BEER whose iterates are compressed directly (a broken variant): each round node ``i``
    sends ``C(x_i)`` and its neighbours replace their copy by it (``h = C(x)``, ``sh = W
    C(x)``), with no public copy whose error the next message corrects."""

    def _step(self, state: TrackState, problem, comm):
        C, t, top = self.compressor, state.t, self.graph(comm.n)
        c = self._c()
        x_i = state.x_i + c * (state.sh_i - state.h_i) - self.gamma * state.v_i
        direct = C.encode(x_i, comm.rng_for(C, t, tag=tags.GOSSIP_X))
        h_i, sh_i = C.decode(direct), comm.gossip(direct, C, top)
        m_i, lam = problem.grad(x_i), self._momentum()
        if lam != 1.0:
            m_i = (1 - lam) * state.m_i + lam * m_i
        v_i = state.v_i + c * (state.sg_i - state.g_i) + m_i - state.m_i
        packet = C.encode(v_i - state.g_i, comm.rng_for(C, t, tag=tags.GOSSIP_V))
        g_i, sg_i = state.g_i + C.decode(packet), state.sg_i + comm.gossip(packet, C, top)
        x_bar, consensus = averaged(comm, x_i)
        new = dataclasses.replace(state, x=x_bar, x_i=x_i, v_i=v_i, m_i=m_i, h_i=h_i, sh_i=sh_i,
                                  g_i=g_i, sg_i=sg_i, t=t + 1)  # fmt: skip
        return new, {"consensus": consensus}


@dataclass(frozen=True)
class MoTEFDirectIterates(DirectIterates, MoTEF):
    """MoTEF whose iterates are compressed directly (a broken variant), as
    :class:`DirectIterates`, with MoTEF's momentum estimate."""


MOTEF_VARIANTS = (
    Variant("no-tracking", "no-variance-reduction", "CHOCO-SGD at the same steps: no gradient "
            "tracking, so heterogeneity keeps the nodes apart"),
    Variant("direct-iterates", "no-error-feedback", "the iterates compressed directly, "
            "C(x) in place of the public copy's correction C(x - h)"),
)  # fmt: skip


def _motef_exact(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 1500 if fast else 3000
    problem = make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0)
    kw = {"step": 0.3, "topology": "ring", "consensus": 0.5}
    if variant == "no-tracking":
        algo, _ = ChocoSGD.configure(problem, parse_spec("topk:k=4"), **kw)
    else:
        cls = MoTEFDirectIterates if variant == "direct-iterates" else MoTEF
        algo, _ = cls.configure(problem, parse_spec("topk:k=4"), momentum=0.3, **kw)
    return _exactness(algo, problem, T, "eta=0.3, consensus 0.5, momentum 0.3")


def _beer_exact(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 1500 if fast else 3000
    problem = make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0)
    cls = {"no-tracking": ChocoSGD, "direct-iterates": DirectIterates}.get(variant, BEER)
    algo, _ = cls.configure(problem, parse_spec("topk:k=4"), step=0.3, topology="ring",
                            consensus=0.5)  # fmt: skip
    return _exactness(algo, problem, T, "eta=0.3, consensus 0.5")


GT_VARIANTS = (
    Variant("no-tracking", "no-variance-reduction", "D-SGD at the same step: no tracker, so "
            "heterogeneity keeps the nodes apart"),
    Variant("step-x1.5", "other", "1.5 times the step (0.3): beyond gradient tracking's "
            "stability on this instance (no theory bound could be read to name a factor)"),
)  # fmt: skip


def _gt_exact(fast: bool, variant: str | None = None) -> list[Outcome]:
    from algorithms.decentralized.tracking import GradientTracking

    T = 1500 if fast else 3000
    problem = make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0)
    cls = DSGD if variant == "no-tracking" else GradientTracking
    step = 0.3 if variant == "step-x1.5" else 0.2
    algo, _ = cls.configure(problem, parse_spec("identity"), step=step, topology="ring")
    return _exactness(algo, problem, T, f"eta={step}")


def _exactness(algo, problem, T: int, what: str) -> list[Outcome]:
    """Run ``T`` rounds from ``x^0``; the outcomes: ``||x_bar - x*||^2 <= 1e-4 ||x^0 - x*||^2``
    (gradient tracking's exactness) and the consensus error ``<= 1e-8``."""
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    x_star = problem.x_star
    d0 = float(((problem.x0 - x_star) ** 2).sum())
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
    dist = float(((state.x - x_star) ** 2).sum()) / d0
    cons = info.extras["consensus"]
    ok = math.isfinite(dist) and math.isfinite(cons)
    setting = f"quadratic zeta2=10, ring n=8, d=12, {algo.compressor.spec()}, {what}, T={T}"
    return [
        Outcome(setting, "||x_bar - x*||^2 <= 1e-4 ||x^0 - x*||^2",
                f"{dist:.3g} ||x^0 - x*||^2", ok and dist <= 1e-4, "1e-4",
                _log_margin(dist, 1e-4) if ok else -math.inf),
        Outcome(setting + ": the nodes agree", "(1/n) sum_i ||x_i - x_bar||^2 <= 1e-8",
                f"{cons:.3g}", ok and cons <= 1e-8, "1e-8",
                _log_margin(cons, 1e-8) if ok else -math.inf),
    ]  # fmt: skip


DSGD_VARIANTS = (
    Variant("no-gossip", "other", "the nodes never average (W = I): each runs gradient descent "
            "on its own f_i, and their disagreement does not shrink with the step"),
    Variant("step-x2.2", "step-too-large", "2.2 times the default step, 1.1 times the bound "
            "(1 + lambda_n(W))/L_h under which DGD's iterates stay bounded: it diverges"),
)  # fmt: skip
DSGD_DIVS = (2, 4, 8, 16)
DSGD_SLOPE = (2.0, 0.35)  # the consensus error scales as the step squared, within 0.35


@dataclass(frozen=True)
class NoGossip(DSGD):
    """D-SGD without its gossip (a broken variant): ``x_i <- x_i - gamma grad f_i(x_i)``."""

    def _step(self, state, problem, comm):
        x_i = state.x_i - self.gamma * problem.grad(state.x_i)
        x_bar, consensus = averaged(comm, x_i)
        return dataclasses.replace(state, x=x_bar, x_i=x_i, t=state.t + 1), {"consensus": consensus}


def _dsgd_neighbourhood(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 800 if fast else 1600
    problem = make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0, lam=0.2)
    cls = NoGossip if variant == "no-gossip" else DSGD
    default, _ = DSGD.configure(problem, parse_spec("identity"), topology="ring")
    mult = 2.2 if variant == "step-x2.2" else 1.0
    plateaus = []
    for div in DSGD_DIVS:
        algo, _ = cls.configure(problem, parse_spec("identity"), topology="ring",
                                step=default.gamma * mult / div)  # fmt: skip
        comm = SimulatedComm(problem.n, seed=0)
        state = algo.init(problem.x0, problem, comm)
        for _ in range(T * div):
            state, info = algo.step(state, problem, comm)
        plateaus.append(info.extras["consensus"])
    finite = all(math.isfinite(p) and p > 0 for p in plateaus)
    slope = (
        float(np.polyfit(np.log([1 / k for k in DSGD_DIVS]), np.log(plateaus), 1)[0])
        if finite else math.nan
    )  # fmt: skip
    want, tol = DSGD_SLOPE
    ok = finite and abs(slope - want) <= tol
    # the base step itself: DGD's iterates stay bounded and settle (Yuan, Ling & Yin's condition)
    algo, _ = cls.configure(problem, parse_spec("identity"), topology="ring",
                            step=default.gamma * mult)  # fmt: skip
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    trace = []
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        trace.append(info.extras["consensus"])
    last, before = trace[-1], trace[-101]
    change = abs(last - before) / max(abs(last), 1e-300) if math.isfinite(last) else math.inf
    settled = math.isfinite(last) and change <= 1e-6
    return [
        Outcome(
            setting=f"the same at gamma = {default.gamma * mult:.4g}, {T} rounds",
            predicted="bounded and settled: the consensus error moves by <= 1e-6 (relative) "
            "over the last 100 rounds",
            measured=f"consensus error {last:.3g}, relative change {change:.3g}",
            passed=settled,
            tolerance="1e-6",
            margin=_log_margin(change, 1e-6) if math.isfinite(change) else -math.inf,
        ),
        Outcome(
            setting=f"quadratic zeta2=10, mu=0.2, ring n=8, d=12, steps gamma/{list(DSGD_DIVS)}"
            f" (gamma = {default.gamma * mult:.4g}), {T} x div rounds",
            predicted=f"consensus plateau ~ step^2: slope {want} +- {tol} (log-log)",
            measured=f"plateaus {', '.join(f'{p:.3g}' for p in plateaus)}; slope {slope:.3g}",
            passed=ok,
            tolerance=f"+- {tol}",
            margin=1.0 - abs(slope - want) / tol if finite else -math.inf,
        ),
    ]


COLD_VARIANTS = (
    Variant("direct", "no-error-feedback", "the decision vectors compressed directly, yhat = "
            "C(y), in place of the estimate's correction h + C(y - h)"),
    Variant("no-dual", "no-variance-reduction", "no dual variable (d = 0): each node follows "
            "its own gradient between gossip steps, so heterogeneity keeps the nodes apart"),
    Variant("step/10", "step-too-small", "a tenth of the default step: valid, but far slower "
            "than the uncompressed rate at the default step"),
)  # fmt: skip


@dataclass(frozen=True)
class ColdDirect(COLD):
    """COLD whose decision vectors are compressed directly (a broken variant): node ``i``
    sends ``C(y_i)`` and the dual step mixes ``C(y)`` (no estimate, no innovation)."""

    def _step(self, state: ColdState, problem, comm):
        C, t, top, eta = self.compressor, state.t, self.graph(comm.n), self.gamma
        descent = state.x_i - eta * problem.grad(state.x_i)
        y_i = descent - eta * state.d_i
        zeros = torch.zeros_like(y_i)
        yhat_i, wyhat_i = innovation_round(y_i, zeros, zeros, 1.0, C, comm, top, t)
        d_i = state.d_i + (self.consensus / (2.0 * eta)) * (yhat_i - wyhat_i)
        x_i = descent - eta * d_i
        x_bar, consensus = averaged(comm, x_i)
        return dataclasses.replace(state, x=x_bar, x_i=x_i, d_i=d_i, t=t + 1), {
            "consensus": consensus
        }


@dataclass(frozen=True)
class ColdNoDual(COLD):
    """COLD without its dual variable (a broken variant): ``x_i^+ = yhat_i - (c/2)(yhat_i -
    sum_j W_ij yhat_j)`` with ``y_i = x_i - eta grad f_i(x_i)``, a CHOCO-type compressed gossip
    after a local gradient step."""

    def _step(self, state: ColdState, problem, comm):
        C, t, top, eta = self.compressor, state.t, self.graph(comm.n), self.gamma
        y_i = state.x_i - eta * problem.grad(state.x_i)
        q_i, wq_i = innovation_round(y_i, state.h_i, state.s_i, 1.0, C, comm, top, t)
        h_i, s_i = state.h_i + q_i, state.s_i + wq_i
        x_i = y_i - (self.consensus / 2.0) * (h_i - s_i)
        x_bar, consensus = averaged(comm, x_i)
        return dataclasses.replace(state, x=x_bar, x_i=x_i, h_i=h_i, s_i=s_i, t=t + 1), {
            "consensus": consensus
        }


def _cold_trace(algo, problem, T: int) -> tuple[list[float], float]:
    """``||x_bar^t - x*||^2 / ||x^0 - x*||^2`` for ``t = 1..T`` and the final consensus
    error."""
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    x_star = problem.x_star
    d0 = float(((problem.x0 - x_star) ** 2).sum())
    trace = []
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        trace.append(float(((state.x - x_star) ** 2).sum()) / d0)
    return trace, info.extras["consensus"]


def _cold_problem():
    return make_problem("quadratic", nodes=8, seed=1, dim=12, zeta2=10.0)


def _half_rate(trace: list[float]) -> float:
    """The linear rate over the second half, ``log(e_T / e_{T/2}) / (T/2)`` (negative)."""
    T = len(trace)
    a, b = trace[T // 2 - 1], trace[-1]
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0 or b <= 0:
        return math.inf
    return math.log(b / a) / (T - T // 2)


def _cold_exact(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 1500 if fast else 3000
    problem = _cold_problem()
    cls = {"direct": ColdDirect, "no-dual": ColdNoDual}.get(variant, COLD)
    default, _ = COLD.configure(problem, parse_spec("identity"), topology="ring")
    step = default.gamma / (10 if variant == "step/10" else 1)
    algo, _ = cls.configure(problem, parse_spec("topk:k=4"), topology="ring", step=step)
    trace, cons = _cold_trace(algo, problem, T)
    ref, _ = _cold_trace(default, problem, T)
    dist, rate, ref_rate = trace[-1], _half_rate(trace), _half_rate(ref)
    ok = math.isfinite(dist) and math.isfinite(cons)
    setting = f"quadratic zeta2=10, ring n=8, d=12, topk:k=4, eta={step:.4g}, c=1, T={T}"
    ratio = rate / ref_rate if math.isfinite(rate) else -math.inf
    return [
        Outcome(setting, "||x_bar - x*||^2 <= 1e-12 ||x^0 - x*||^2", f"{dist:.3g}",
                ok and dist <= 1e-12, "1e-12", _log_margin(dist, 1e-12) if ok else -math.inf),
        Outcome(setting + ": the nodes agree", "(1/n) sum_i ||x_i - x_bar||^2 <= 1e-12",
                f"{cons:.3g}", ok and cons <= 1e-12, "1e-12",
                _log_margin(cons, 1e-12) if ok else -math.inf),
        Outcome(setting + ": rate over the second half",
                ">= 0.9 x the uncompressed rate at the default step",
                f"{rate:.4g} per round against {ref_rate:.4g} (ratio {ratio:.3g})",
                ratio >= 0.9, "0.9", ratio - 0.9 if math.isfinite(ratio) else -math.inf),
    ]  # fmt: skip


DYNA_VARIANTS = (
    Variant("no-scaling", "other", "decay 1: the innovations are never rescaled, so the binary "
            "quantizer's error never shrinks"),
    Variant("decay=0.95", "other", "a decay faster than the iteration can follow: the "
            "estimates fall behind"),
)  # fmt: skip


def _dyna_cold(fast: bool, variant: str | None = None) -> list[Outcome]:
    T = 1500 if fast else 3000
    problem = _cold_problem()
    decay = {"no-scaling": 1.0, "decay=0.95": 0.95}.get(variant, 0.99)
    algo, _ = DynaCOLD.configure(problem, parse_spec("sign"), topology="ring", scale=1.0,
                                 decay=decay)  # fmt: skip
    trace, cons = _cold_trace(algo, problem, T)
    dist = trace[-1]
    ok = math.isfinite(dist) and math.isfinite(cons)
    setting = f"quadratic zeta2=10, ring n=8, d=12, sign, s_0=1, decay={decay}, c=1, T={T}"
    return [
        Outcome(setting, "||x_bar - x*||^2 <= 1e-12 ||x^0 - x*||^2", f"{dist:.3g}",
                ok and dist <= 1e-12, "1e-12", _log_margin(dist, 1e-12) if ok else -math.inf),
        Outcome(setting + ": the nodes agree", "(1/n) sum_i ||x_i - x_bar||^2 <= 1e-10",
                f"{cons:.3g}", ok and cons <= 1e-10, "1e-10",
                _log_margin(cons, 1e-10) if ok else -math.inf),
    ]  # fmt: skip


def _log_margin(value: float, bound: float) -> float:
    """``log10(bound / value)``: positive when ``value <= bound``, in decades."""
    return math.log10(bound / max(value, 1e-300))


CHECKS = (
    Check("gossip.choco-linear-consensus", PAPER, single_threaded(_choco_linear),
          variants=VARIANTS, rate=True),
    Check("gossip.beer-exact-under-heterogeneity",
          "Zhao, Li, Li, Richtárik & Chi 2022, arXiv 2201.13320: BEER's convergence under "
          "arbitrary heterogeneity (abstract; steps given, not from the theorem)",
          single_threaded(_beer_exact), variants=BEER_VARIANTS),
    Check("gossip.gt-exact-under-heterogeneity",
          "Nedić, Olshevsky & Shi 2017, arXiv 1607.03218 (DIGing): gradient tracking's "
          "convergence to the exact optimum under heterogeneity (step given, not a theorem's)",
          single_threaded(_gt_exact), variants=GT_VARIANTS),
    Check("gossip.dsgd-neighbourhood-in-step",
          "Yuan, Ling & Yin 2016, arXiv 1310.7063: DGD at a constant step reaches a "
          "neighbourhood whose distance to consensus is O(step)",
          single_threaded(_dsgd_neighbourhood), variants=DSGD_VARIANTS),
    Check("gossip.cold-exact-at-uncompressed-rate",
          "Zhang, You & Xie, arXiv 2105.06697 (abstract): COLD converges linearly for "
          "delta-contracted compressors at the rate of its uncompressed version (update "
          "reconstructed)",
          single_threaded(_cold_exact), variants=COLD_VARIANTS, rate=True),
    Check("gossip.dyna-cold-binary-linear",
          "Zhang, You & Xie, arXiv 2105.06697 (abstract): Dyna-COLD's dynamical scaling gives "
          "linear convergence with the binary quantizer (scaling reconstructed)",
          single_threaded(_dyna_cold), variants=DYNA_VARIANTS),
    Check("gossip.motef-exact-under-heterogeneity",
          "Islamov, Gao & Stich 2024, arXiv 2405.20114: MoTEF converges under arbitrary "
          "heterogeneity (abstract; steps and momentum given, not from the theorem)",
          single_threaded(_motef_exact), variants=MOTEF_VARIANTS),
)  # fmt: skip
