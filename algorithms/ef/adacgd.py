"""AdaCGD: adaptive compression levels inside the 3PC framework (Makarenko et al. 2022)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    initial_estimator,
    option,
    regime_option,
)
from algorithms.ef.ef21 import ef21_init_option
from algorithms.provenance import Provenance
from comm.base import Comm
from compressors import Compressor, parse_spec
from streams import tags

SOURCE = (
    "Makarenko, Gasanov, Islamov, Sadiev & Richtárik 2022, arXiv 2211.00188 (AdaCGD, the "
    "adaptive 3PC mechanism); constants A = theta(delta_m), B = max(zeta, beta(delta_m)) derived "
    "as for CLAG in the 3PC framework (Richtárik et al. 2022, arXiv 2202.00998), [V-deriv]; the "
    "paper's own lemma [U]"
)


@lru_cache(maxsize=64)
def parse_levels(levels: str, n: int) -> tuple[Compressor, ...]:
    """The coarse levels, a ``|``-separated list of compressor specs, coarsest first."""
    if not isinstance(levels, str) or not levels.strip():
        raise ValueError(f"levels must be compressor specs separated by '|', got {levels!r}")
    out = tuple(parse_spec(s.strip()).bind(n) for s in levels.split("|"))
    bad = [c.spec() for c in out if not c.contractive]
    if bad:
        raise ValueError(f"every level must be a contractive compressor, got {', '.join(bad)}")
    return out


def level_flag_bits(levels: int) -> int:
    """Bits naming the outcome: a skip, one of the coarse levels, or the finest one."""
    return math.ceil(math.log2(levels + 2))


def adaptive(h, y, x, coarse, C: Compressor, zeta: float, comm: Comm, t: int):
    """The mechanism ``C^AC_{h,y}(x)`` over rows (see :class:`AdaCGD`): ``(delta_i, nbits,
    level)``, the increment ``C^AC(x) - h`` the server adds, each row's bits (payload and
    outcome flag) and its outcome (0 skip, ``j`` the coarse level ``j``, ``len(coarse) + 1``
    the finest level ``C``).

    Derivation (``C^AC`` is a 3PC(A, B) with CLAG's constants at the finest level, the
    constants :class:`AdaCGD`'s theory uses; the paper's own lemma was not read): a 3PC(A, B)
    needs ``E||C^AC_{h,y}(x) - x||^2 <= (1 - A)||h - y||^2 + B ||x - y||^2``. Which outcome
    is taken depends on the skip test and the coarse levels' draws only; the finest level
    draws from its own stream, independent of them. A skip or a coarse level is taken only
    when its error ``||h + C_j(x - h) - x||^2`` (``C_0 = 0``) is at most ``zeta ||x - y||^2``;
    otherwise the finest level's conditional error is EF21's, ``E||h + C(x - h) - x||^2 <=
    (1 - delta_m)||x - h||^2 <= (1 - delta_m)(1 + s)||h - y||^2 + (1 - delta_m)(1 + 1/s)
    ||x - y||^2``. The expectation is at most the larger of the two bounds, so at EF21's
    ``s = 1/sqrt(1 - delta_m) - 1``: ``A = theta = 1 - sqrt(1 - delta_m)``,
    ``B = max(zeta, beta)``, ``beta = (1 - delta_m)/theta``
    (:func:`algorithms.stepsizes.three_pc_AB` with ``clag``). The 3PC theorems of arXiv
    2202.00998 then give ``1/(L + L_tilde sqrt(B/A))`` (nonconvex) and
    ``min(1/(L + L_tilde sqrt(2B/A)), A/(2 mu))`` (PL)."""
    r = x - h
    threshold = zeta * ((x - y) ** 2).sum(dim=1)
    packet = C.encode(r, comm.rng_for(C, t))
    delta_i, nbits = C.decode(packet), packet.nbits.clone()
    level = torch.full_like(nbits, len(coarse) + 1)
    for j in range(len(coarse), -1, -1):  # the finest coarse level down to the skip
        if j == 0:
            cand, bits = torch.zeros_like(r), torch.zeros_like(nbits)
        else:
            pj = coarse[j - 1].encode(r, comm.rng_for(coarse[j - 1], t, tag=tags.ADACGD_LEVEL + j))
            cand, bits = coarse[j - 1].decode(pj), pj.nbits
        ok = ((r - cand) ** 2).sum(dim=1) <= threshold
        # Going from fine to coarse, a later pass overrides: the coarsest passing one wins.
        delta_i = torch.where(ok[:, None], cand, delta_i)
        nbits = torch.where(ok, bits, nbits)
        level = torch.where(ok, j, level)
    return delta_i, (nbits + level_flag_bits(len(coarse))).to(torch.int64), level


@dataclass(frozen=True)
class AdaCGDState(State):
    g_i: torch.Tensor  # (m, d) node estimators g_i^t
    g: torch.Tensor  # (d,) server estimator, mean of g_i
    y_i: torch.Tensor  # (m, d) grad f_i(x^t), kept by each node (never sent as such)


@dataclass(frozen=True)
class AdaCGD(Algorithm):
    """AdaCGD: 3PC with an adaptive choice among compression levels (arXiv 2211.00188).

    Makarenko, Gasanov, Islamov, Sadiev & Richtárik 2022: 3PC with an adaptive choice among
    several compression levels.

    Update (3PC, arXiv 2202.00998, Algorithm 1, with the adaptive mechanism ``C^AC``):
    ``x^{t+1} = x^t - gamma g^t``; node ``i`` with ``h = g_i^t``, ``y = grad f_i(x^t)``,
    ``x = grad f_i(x^{t+1})`` sets ``g_i^{t+1}`` to

    * ``h`` (a skip) if ``||x - h||^2 <= zeta ||x - y||^2``;
    * else ``h + C_j(x - h)`` for the coarsest level ``C_j`` (``levels``, coarsest first) with
      ``||x - h - C_j(x - h)||^2 <= zeta ||x - y||^2``;
    * else ``h + C_m(x - h)`` with the finest level ``C_m``, the run's compressor (EF21).

    The node sends the chosen ``C_j(x - h)`` and a flag of ``ceil(log2(len(levels) + 2))``
    bits naming the outcome; ``g^{t+1} = g^t + mean_i (g_i^{t+1} - g_i^t)``. Every level is
    evaluated, only the chosen one is sent. (The mechanism as described by secondary sources;
    the paper's algorithm box could not be read, [U].)

    Theory: ``C^AC`` is a 3PC with ``A = 1 - sqrt(1 - delta_m)``, ``B = max(zeta, (1 -
    delta_m)/A)`` (CLAG's constants with the finest level, derived: a skip or a coarse level
    leaves an error at most ``zeta ||x - y||^2``, the finest level EF21's), so ``gamma =
    1/(L + L_tilde sqrt(B/A))`` (nonconvex) or ``min(1/(L + L_tilde sqrt(2B/A)), A/(2 mu))``
    (PL, when ``mu`` is known), :func:`stepsizes.three_pc` / :func:`stepsizes.three_pc_pl`.
    ``needs = "contractive"`` (every level). Reports ``G = mean_i ||g_i - grad f_i(x)||^2`` and
    ``level``, the mean outcome index (0 skip, ``1..len(levels)`` coarse, ``len(levels)+1``
    finest).
    """

    levels: str = option("topk:k=1", "coarse levels, specs separated by '|', coarsest first")
    zeta: float = option(1.0, "trigger zeta >= 0")
    init_mode: str = ef21_init_option()
    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G", "level")
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.ef.adacgd:adaptive",
        "the 3PC theorems' step (Richtárik et al. 2022, arXiv 2202.00998) with (A, B) derived "
        "here for AdaCGD's adaptive mechanism: CLAG's constants at the finest level; the lemma "
        "and algorithm box of Makarenko et al. 2022, arXiv 2211.00188 were not read",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_levels(self.levels, 1)
        if not (isinstance(self.zeta, int | float) and self.zeta >= 0):
            raise ValueError(f"zeta must be >= 0, got {self.zeta!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        delta = compressor.delta(d)
        zeta = opts.get("zeta", 1.0)
        if not (isinstance(zeta, int | float) and zeta >= 0):
            raise ValueError(f"zeta must be >= 0, got {zeta!r}")
        A, B = stepsizes.three_pc_AB("clag", delta, zeta=zeta)
        inputs = {"L": c.L, "L_tilde": c.L_tilde, "delta_m": delta, "zeta": zeta, "A": A, "B": B}
        regime = opts.get("regime", "auto")
        if regime == "pl" or (regime == "auto" and c.mu is not None):
            if c.mu is None:
                raise ValueError("the PL step needs mu, which this problem does not know")
            return Theory(
                gamma=stepsizes.three_pc_pl(c.L, c.L_tilde, A, B, c.mu),
                formula="min(1 / (L + L_tilde sqrt(2 B / A)), A / (2 mu))",
                inputs={**inputs, "mu": c.mu},
                source=SOURCE + ", 3PC PL theorem",
            )
        return Theory(
            gamma=stepsizes.three_pc(c.L, c.L_tilde, A, B),
            formula="1 / (L + L_tilde sqrt(B / A))",
            inputs=inputs,
            source=SOURCE + ", 3PC nonconvex theorem",
        )

    def init(self, x0, problem, comm: Comm) -> AdaCGDState:
        y_i = problem.grad(x0)
        g_i, g = initial_estimator(self.init_mode, y_i, self.compressor, comm)
        return AdaCGDState(x=x0.clone(), t=0, g_i=g_i, g=g, y_i=y_i)

    def _step(self, state: AdaCGDState, problem, comm: Comm):
        t = state.t
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        grad_i = problem.grad(x)
        coarse = parse_levels(self.levels, comm.n)
        delta_i, nbits, level = adaptive(
            state.g_i, state.y_i, grad_i, coarse, self.compressor, self.zeta, comm, t
        )
        g_i = state.g_i + delta_i
        g = state.g + comm.reduce_rows(delta_i, nbits.to(torch.int64))
        extras = {
            "G": comm.monitor_mean(((g_i - grad_i) ** 2).sum(dim=1)),
            "level": comm.monitor_mean(level.to(torch.float64)),
        }
        return AdaCGDState(x=x, t=t + 1, g_i=g_i, g=g, y_i=grad_i), extras
