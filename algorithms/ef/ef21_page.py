"""EF21-PAGE: EF21 with PAGE variance-reduced gradients (Fatkhullin et al., "EF21 with Bells &
Whistles")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Theory, check_count, check_unit, option, regime_option
from algorithms.ef.ef21 import EF21Base, EF21State, borrowed_ef21_theory, ef21_update
from algorithms.provenance import Provenance
from algorithms.vr.vr_common import (
    need,
    resolved,
    sample_smoothness,
    support_ratio,
)
from comm.base import Comm
from streams import tags

COINS = ("node", "shared")
PAGE_STEPS = ("authors", "derived")
DERIVED = pv.derived(
    "algorithms.ef.ef21_page:derived_step",
    "--page-step derived, a deviation: EF21's and PAGE's Lyapunov arguments combined for "
    "EF21-PAGE (nonconvex), accounting for the minibatch noise; not the paper's theorem",
)


def derived_step(L: float, L_tilde: float, calL: float, alpha: float, p: float, tau: int) -> float:
    """A nonconvex EF21-PAGE step derived here (``--page-step derived``; not the paper's):
    ``1/(L + sqrt(beta/theta) sqrt(L_tilde^2 + 2(1-p) calL^2/tau + 2 sqrt(p(1-p)/tau)
    L_tilde calL) + sqrt((1-p)/(p tau)) calL)``, with EF21's ``theta``, ``beta`` and ``calL``
    the mean-square per-sample smoothness (B&W Assumption 3 with ``calL_i``).

    Derivation: from the Lyapunov function ``f - f_inf + a G + b P``, ``G = mean_i ||g_i -
    v_i||^2``, ``P = mean_i ||v_i - grad f_i||^2`` (zero at the start, ``v_i^0 = grad
    f_i(x^0)``), ``R = ||x+ - x||^2``: EF21's descent lemma with ``||g_i - grad f_i||^2 <=
    (1+w) G_i + (1+1/w) P_i``, the contraction ``E G+ <= (1-theta) G + beta E||v_i+ -
    v_i||^2``, ``E P+ <= (1-p)(P + calL^2 R/tau)`` and ``E||v_i+ - v_i||^2 <= p((1+u) L_i^2 R
    + (1+1/u) P_i) + (1-p)(L_i^2 + calL_i^2/tau) R``. ``a = gamma (1+w)/(2 theta)`` cancels
    the ``G`` terms and ``b = (gamma (1+1/w)/2 + a beta p (1+1/u))/p`` the ``P`` terms; the
    ``R`` terms are then ``<= 0`` when ``1/gamma^2 - L/gamma >= (1+w) X(u) + (1+1/w) Y`` with
    ``X(u) = (beta/theta)(L_tilde^2 + p u L_tilde^2 + (1-p)(2 + 1/u) calL^2/tau)`` and
    ``Y = (1-p) calL^2/(p tau)``. The best ``u = sqrt((1-p)/(p tau)) calL/L_tilde`` makes
    ``X = (beta/theta)(L_tilde^2 + 2(1-p) calL^2/tau + 2 sqrt(p(1-p)/tau) L_tilde calL)``, the
    best ``w`` makes the right side ``(sqrt(X) + sqrt(Y))^2``, and ``gamma <= 1/(L + sqrt(X) +
    sqrt(Y))`` (the formula) gives ``1/gamma^2 - L/gamma >= (sqrt(X) + sqrt(Y))^2``. Then
    ``E||grad f(x^)||^2 <= 2 (Delta0 + a G^0)/(gamma T)``. ``p = 1`` gives EF21's Theorem 1
    step; no compression (``beta = 0``) gives PAGE's ``1/(L + calL sqrt((1-p)/(p tau)))`` (Li
    et al. 2021, arXiv 2008.10898)."""
    theta, beta = stepsizes.ef21_theta_beta(alpha)
    q = 1.0 - p
    inner = L_tilde**2 + 2.0 * q * calL**2 / tau + 2.0 * math.sqrt(p * q / tau) * L_tilde * calL
    return 1.0 / (L + math.sqrt(beta / theta * inner) + math.sqrt(q / (p * tau)) * calL)


def ef21_page_p(compressor, problem, batch: int) -> float:
    """``mean_i tau/(tau + m_i)`` with ``tau = batch`` and ``m_i`` the samples of node ``i``
    (the authors' code, ``Logistic regression/ef21_page.py`` of
    ``IgorSokoloff/ef21_b-w_experiements_source_code``: ``prob = mean(tau_ar/(tau_ar + n))``);
    for problems without sample counts ``zeta_C/d``, as DASHA-PAGE and MARINA."""
    counts = getattr(problem, "counts", None)
    if counts is None:
        return support_ratio(compressor, problem.d)
    m = torch.as_tensor(counts, dtype=torch.float64)
    return float((batch / (batch + m)).mean())


@dataclass(frozen=True)
class EF21PAGEState(EF21State):
    v_i: torch.Tensor  # (m, d) PAGE estimators of grad f_i(x^t)


@dataclass(frozen=True)
class EF21PAGE(EF21Base):
    """EF21-PAGE: EF21 on PAGE gradient estimators (arXiv 2110.03294, Algorithm 3).

    Fatkhullin, Sokolov, Gorbunov, Li & Richtárik 2021, "EF21 with Bells & Whistles", for
    finite sums ``f_i = (1/m_i) sum_j f_ij``.

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` flips its own coin ``b_i ~ Be(p)`` (from
    its own stream) and sets ``v_i^{t+1} = grad f_i(x^{t+1})`` if ``b_i = 1``, else
    ``v_i^{t+1} = v_i^t + (1/tau) sum_{j in I_i} (grad f_ij(x^{t+1}) - grad f_ij(x^t))`` on a
    minibatch ``I_i`` of ``tau = batch_size`` samples (drawn with replacement from the node's
    stream; the authors' code draws without replacement), the same samples at both points; then
    the EF21 step on ``v``: sends ``c_i = C(v_i^{t+1} - g_i^t)``, ``g_i^{t+1} = g_i^t + c_i``,
    ``g^{t+1} = g^t + (1/n) sum_i c_i``. ``v_i^0 = grad f_i(x^0)``; ``init`` sets ``g_i^0`` as
    in EF21. The coins change computation only: every round sends one compressed vector.
    ``coin = shared`` flips one coin for all nodes instead, as the authors' code does (the paper
    flips one per node). With ``p = 1`` the method is EF21 exactly.

    ``p`` defaults to ``mean_i tau/(tau + m_i)`` (the authors' code); ``tau`` defaults to 1
    (the paper's Corollary 1 takes ``tau_i = 1``; its experiments use 25%, 12.5% and 1.5% of
    each node's data).

    Theory: the paper's EF21-PAGE theorem (Appendix E) could not be read from the sources
    available here. The default step (``page_step = authors``) is EF21's (Theorem 1, or
    Theorem 2 under PL, of arXiv 2106.05203), as in the authors' code, which multiplies it by a
    tuned factor; it ignores the minibatch noise. ``page_step = derived`` is a deviation: the
    nonconvex step of :func:`derived_step`, derived here for this method (it reduces to EF21's
    at ``p = 1`` and to PAGE's without compression; needs ``problem.sample_smoothness()``).
    Reports
    ``G = mean_i ||g_i - v_i||^2`` and ``sync``, the fraction of nodes that took a full
    gradient.
    """

    batch_size: int = option(
        1, "minibatch tau per node for the PAGE differences", check=check_count, required=True
    )
    p: float | None = option(
        None, "probability p of a full gradient (default: mean tau/(tau + m_i))", check=check_unit
    )
    coin: str = option(
        "node", "PAGE coin: node (the paper) | shared (authors' code)", choices=COINS
    )
    regime: str = regime_option()
    page_step: str = option(
        "authors",
        "EF21-PAGE step: authors (EF21's, the authors' code) | derived (deviation, "
        "accounts for the minibatch noise)",
        choices=PAGE_STEPS,
    )

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("G", "sync")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF21",
        "Theorem 1's step (Theorem 2 under PL) of arXiv 2106.05203, as the authors' code uses "
        "it for EF21-PAGE (IgorSokoloff/ef21_b-w_experiements_source_code, Logistic "
        "regression/ef21_page.py, times a tuned factor; p as that code); it ignores the "
        "minibatch noise; the paper's EF21-PAGE theorem (arXiv 2110.03294, Appendix E) was "
        "not read",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        B = opts.get("batch_size") or 1
        p = resolved(opts.get("p"), lambda: ef21_page_p(compressor, problem, B))
        if opts.get("page_step", "authors") == "authors":
            th = borrowed_ef21_theory(problem, compressor, opts, "EF21-PAGE", ", the authors' code")
            return Theory(th.gamma, th.formula, th.inputs, {"p": p}, th.source)
        c = need(problem, "L", "L_tilde")
        calL = sample_smoothness(problem, "EF21-PAGE")
        alpha = compressor.delta(problem.d)
        gamma = derived_step(c["L"], c["L_tilde"], calL, alpha, p, B)
        return Theory(
            gamma=gamma,
            formula="1 / (L + sqrt(beta/theta) sqrt(L_tilde^2 + 2(1-p) calL^2/tau + "
            "2 sqrt(p(1-p)/tau) L_tilde calL) + sqrt((1-p)/(p tau)) calL) (derived; deviation)",
            inputs={**c, "calL": calL, "alpha": alpha, "p": p, "tau": B},
            params={"p": p},
            source="derived for EF21-PAGE (Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 3) "
            "from EF21's and PAGE's Lyapunov arguments; not the paper's theorem",
            provenance=DERIVED,
        )

    def init(self, x0, problem, comm: Comm) -> EF21PAGEState:
        s = super().init(x0, problem, comm)
        return EF21PAGEState(x=s.x, t=0, g_i=s.g_i, g=s.g, v_i=problem.grad(x0))

    def _sync(self, comm: Comm, t: int, p: float) -> torch.Tensor:
        """Bool ``(m,)``: which held nodes take a full gradient this round."""
        if p >= 1.0:
            return torch.ones(comm.m, dtype=torch.bool)
        if self.coin == "shared":
            return torch.full((comm.m,), comm.coin(t, p, tag=tags.COIN), dtype=torch.bool)
        return comm.rng(t, tag=tags.COIN).uniform(1)[:, 0].cpu() < p

    def _step(self, state: EF21PAGEState, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        p = resolved(self.p, lambda: ef21_page_p(C, problem, self.batch_size))
        sync = self._sync(comm, t, p)
        v_i = None
        if not bool(sync.all()):
            batch = problem.sample(comm.rng(t, tag=tags.BATCH), self.batch_size)
            v_i = problem.grad_diff(x, state.x, batch).add_(state.v_i)
        if bool(sync.any()):
            full = problem.grad(x)
            v_i = full if v_i is None else torch.where(sync.to(full.device)[:, None], full, v_i)
        # ef21_update overwrites its target: it gets a copy, v_i is kept for the next round.
        g_i, g, G = ef21_update(C, v_i.clone(), state.g_i, state.g, comm, t)
        sync_frac = comm.monitor_mean(sync.to(torch.float64))
        new = EF21PAGEState(x=x, t=t + 1, g_i=g_i, g=g, v_i=v_i)
        return new, {"G": G, "sync": sync_frac}
