"""AdaCGD's adaptive mechanism is a three point compressor (Makarenko et al. 2022, arXiv
2211.00188, in the 3PC framework of Richtárik et al. 2022, arXiv 2202.00998).

Claims:

1. ``C^AC`` is a 3PC(A, B) with the constants its step uses, ``A = 1 - sqrt(1 - delta_m)``,
   ``B = max(zeta, (1 - delta_m)/A)``: ``||C^AC_{h,y}(x) - x||^2 <= (1 - A)||h - y||^2 +
   B||x - y||^2`` (deterministic Top-K levels: for every triple), measured as the largest ratio
   of the two sides over triples built to be hard: ``y = x`` (only the ``h`` term), ``h = y``
   (only the ``x`` term), ``||x - h||^2`` just below and above ``zeta ||x - y||^2``, flat and
   spiky vectors, several scales.
2. At its PL step AdaCGD contracts ``f - f*`` at least as ``(1 - gamma mu)^T`` (3PC PL
   theorem; ``g_i^0 = grad f_i(x^0)``), on a strongly convex quadratic.

Power (``--power``): the mechanism without the finest-level fallback (the coarsest level sent
whenever nothing passes), without error feedback (compressing ``x`` itself instead of
``x - h``), and ``B`` computed without ``zeta`` (``zeta`` larger than EF21's ``beta``) must
violate claim 1. Claim 2 is a rate (``rate=True``): ``step/10``, AdaCGD at a tenth of its PL
step with the rate still ``(1 - gamma mu)^T`` at the PL step, must violate it (fast: the run at
``gamma/10`` keeps 0.068 of ``f - f*`` against the rate's 0.0037; the correct run keeps 1e-7).
"""

from __future__ import annotations

import math

import torch

from algorithms import stepsizes
from algorithms.ef.adacgd import AdaCGD, adaptive, parse_levels
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem
from theory_checks.base import Check, Outcome, Variant, single_threaded

PAPER = (
    "Makarenko, Gasanov, Islamov, Sadiev & Richtárik 2022, arXiv 2211.00188 (AdaCGD); 3PC "
    "constants derived as for CLAG (Richtárik et al. 2022, arXiv 2202.00998)"
)
FINEST, LEVELS, D = "topk:k=5", "topk:k=1|topk:k=2", 10


def triples(rows: int, zeta: float, seed: int = 0):
    """``(h, y, x)`` rows where the 3PC inequality is nearly tight for some branch."""
    gen = torch.Generator().manual_seed(seed)
    q = rows // 4

    def rnd(k):
        v = torch.randn(k, D, generator=gen, dtype=torch.float64)
        spiky = torch.rand(k, 1, generator=gen, dtype=torch.float64) < 0.5
        return torch.where(spiky, v**3, v) * 10.0 ** torch.randint(-2, 3, (k, 1), generator=gen)

    x = rnd(rows)
    h = x + rnd(rows)
    y = x + rnd(rows)
    y[:q] = x[:q]  # y = x: the bound is (1 - A)||h - y||^2 alone
    h[q : 2 * q] = y[q : 2 * q]  # h = y: the bound is B||x - y||^2 alone
    # ||x - h||^2 at 0.98 and 1.02 times zeta ||x - y||^2 (the skip's edge)
    e = x[2 * q :] - y[2 * q :]
    u = rnd(rows - 2 * q)
    u = u / u.norm(dim=1, keepdim=True) * e.norm(dim=1, keepdim=True) * math.sqrt(zeta)
    side = torch.where(torch.arange(rows - 2 * q) % 2 == 0, 0.98, 1.02).to(torch.float64)
    h[2 * q :] = x[2 * q :] - u * side.sqrt()[:, None]
    return h, y, x


def worst_ratio(zeta: float, variant: str | None, rows: int) -> tuple[float, float, float]:
    """``(max err / bound, A, B)`` over :func:`triples`."""
    C, coarse = parse_spec(FINEST), parse_levels(LEVELS, rows)
    delta = C.delta(D)
    A, B = stepsizes.three_pc_AB("clag", delta, zeta=0.0 if variant == "zeta-dropped" else zeta)
    h, y, x = triples(rows, zeta)
    comm = SimulatedComm(rows, seed=0)
    if variant == "no-fallback":
        C, coarse = coarse[0], coarse[1:]
    h_in = torch.zeros_like(h) if variant == "no-error-feedback" else h
    delta_i, _, _ = adaptive(h_in, y, x, coarse, C, zeta, comm, 0)
    err = ((h_in + delta_i - x) ** 2).sum(1)
    bound = (1 - A) * ((h - y) ** 2).sum(1) + B * ((x - y) ** 2).sum(1)
    return float((err / bound).max()), A, B


def _pl_rate(fast: bool, variant: str | None = None) -> tuple[float, float]:
    """``(measured (f(x^T) - f*)/(f(x^0) - f*), (1 - gamma mu)^T)`` at the PL step ``gamma``;
    the ``step/10`` variant runs at ``gamma/10``, the rate staying at ``gamma``."""
    p = make_problem("quadratic", nodes=5, lam=0.2, dim=D, seed=0, L_pm=0.5, zeta2=5.0,
                     dtype=torch.float64)  # fmt: skip
    algo, _ = AdaCGD.configure(p, parse_spec(FINEST), levels=LEVELS)
    gamma = algo.gamma
    if variant == "step/10":
        algo = AdaCGD.configure(p, parse_spec(FINEST), levels=LEVELS, step=gamma / 10.0)[0]
    T = 150 if fast else 500
    comm = SimulatedComm(p.n, seed=0)
    s = algo.init(p.x0, p, comm)
    f0 = float(p.loss(s.x)) - p.consts.f_star
    for _ in range(T):
        s, _ = algo.step(s, p, comm)
    gap = max(float(p.loss(s.x)) - p.consts.f_star, 0.0)
    return gap / f0, (1 - gamma * p.consts.mu) ** T


VARIANTS = (
    Variant("no-fallback", "other", "no finest-level fallback: the coarsest level is sent when "
            "nothing passes, so its error is not bounded by the finest level's delta"),
    Variant("no-error-feedback", "no-error-feedback", "the levels compress x itself, not x - h "
            "(no error feedback): the error does not shrink with ||h - y||"),
    Variant("zeta-dropped", "wrong-constant", "B = (1 - delta_m)/A without max(zeta, .): a "
            "skip with zeta > beta leaves an error above B||x - y||^2"),
    Variant("step/10", "step-too-small", "AdaCGD at a tenth of its PL step, judged against "
            "the rate (1 - gamma mu)^T at the PL step (claim 2)"),
)  # fmt: skip


def _adaptive_3pc(fast: bool, variant: str | None = None) -> list[Outcome]:
    rows = 4000 if fast else 40000
    out = []
    for zeta in (0.5, 4.0):
        r, A, B = worst_ratio(zeta, variant, rows)
        out.append(
            Outcome(
                f"Top-K levels k=1,2 + finest k=5, d={D}, zeta={zeta:g}, {rows} hard triples",
                f"||C^AC(x) - x||^2 <= (1 - A)||h - y||^2 + B||x - y||^2, A={A:.4f}, B={B:.4f}",
                f"max ratio {r:.4f}",
                r <= 1 + 1e-12,
                "exact (deterministic levels)",
                1 - r,
            )
        )
    ratio, bound = _pl_rate(fast, variant)
    out.append(
        Outcome(
            "quadratic n=5, d=10, mu=0.2, L_pm=0.5, PL step",
            f"(f(x^T) - f*)/(f(x^0) - f*) <= (1 - gamma mu)^T = {bound:.3g}",
            f"{ratio:.3g}",
            ratio <= bound,
            "exact (deterministic levels)",
            1 - ratio / bound if bound > 0 else 0.0,
        )
    )
    return out


CHECKS = [
    Check("adacgd.adaptive-is-3pc", PAPER, single_threaded(_adaptive_3pc), fast=True,
          variants=VARIANTS, rate=True),
]  # fmt: skip
