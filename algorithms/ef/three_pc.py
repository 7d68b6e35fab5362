"""3PC: three point compressors (Richtárik, Sokolov, Gasanov, Fatkhullin, Li & Gorbunov 2022)."""

from __future__ import annotations

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
    check_unit,
    initial_estimator,
    option,
    regime_option,
)
from algorithms.ef import three_pc_mechanisms as mech
from algorithms.ef.ef21 import ef21_init_option
from algorithms.provenance import Provenance
from comm.base import Comm
from compressors import Compressor, parse_spec
from compressors.rand_k import RandK
from compressors.top_k import TopK

V3_PROVENANCE = pv.derived(
    "algorithms.stepsizes.ef:three_pc_AB",
    "the 3PC theorems' step (arXiv 2202.00998) with (A, B) derived here for 3PCv3 taken as "
    "b + C(x - b), b an inner 3PC mechanism: the paper's 3PCv3 definition is unverified [U]",
)


@dataclass(frozen=True)
class ThreePCState(State):
    g_i: torch.Tensor  # (m, d) node estimators g_i^t
    g: torch.Tensor  # (d,) server estimator, mean of g_i
    y_i: torch.Tensor  # (m, d) grad f_i(x^t), kept by each node (never sent as such)


@lru_cache(maxsize=64)
def _parse(spec: str, n: int) -> Compressor:
    return parse_spec(spec).bind(n)


def second_compressor(algo: ThreePC, d: int, n: int) -> Compressor | None:
    """3PCv2's ``Q``, 3PCv3's inner and 3PCv4's ``C2``: ``mechanism_compressor`` if given,
    else RandK (v2) or TopK (v3, v4) keeping as many coordinates as the main compressor."""
    if algo.mechanism not in ("v2", "v3", "v4"):
        return None
    if algo.mechanism_compressor is not None:
        return _parse(algo.mechanism_compressor, n)
    k = algo.compressor.support(d)
    return RandK(k=k) if algo.mechanism == "v2" else TopK(k=k)


@dataclass(frozen=True)
class ThreePC(Algorithm):
    """3PC: three point compressors, EF21/LAG/CLAG/3PCv1-v5 (arXiv 2202.00998, Algorithm 1).

    Richtárik, Sokolov, Gasanov, Fatkhullin, Li & Gorbunov 2022, with the mechanisms of its
    Section 3.

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` sets
    ``g_i^{t+1} = C_{g_i^t, grad f_i(x^t)}(grad f_i(x^{t+1}))`` and sends what the server needs
    to rebuild it; ``g^{t+1} = mean_i g_i^{t+1}``. ``mechanism`` (``h = g_i^t``,
    ``y = grad f_i(x^t)``, ``x = grad f_i(x^{t+1})``; :mod:`algorithms.ef.three_pc_mechanisms`):

    * ``ef21``: ``h + C(x - h)`` (EF21 exactly); ``A, B`` = EF21's ``theta, beta``.
    * ``lag``: ``x`` if ``||x - h||^2 > zeta ||x - y||^2`` else ``h`` (Chen et al. 2018,
      arXiv 1805.09965): the full vector or a 1-bit skip; ``A = 1, B = zeta``. The compressor
      is unused (any contractive one is accepted). ``zeta`` defaults to 1.
    * ``clag``: ``h + C(x - h)`` if the rule fires else ``h``: ``C(x - h)`` or a 1-bit skip;
      ``A = theta``, ``B = max(beta, zeta)``.
    * ``v1``: ``y + C(x - y)``, ``A = 1, B = 1 - alpha``. The server must know ``y``; as in
      the paper this variant is illustrative and only ``C(x - y)`` is charged.
    * ``v2``: ``b + C(x - b)``, ``b = h + Q(x - y)``, ``Q`` unbiased: both messages;
      ``A = alpha``, ``B = (1 - alpha) omega``.
    * ``v3``: ``b + C(x - b)`` with ``b`` the output of an inner 3PC (``inner_mechanism``:
      ``ef21`` or ``clag`` with the second compressor, or ``lag``). The theory sheet marks
      3PCv3's definition unverified [U]; this composition is an assumption, with constants
      ``1 - A = (1 - alpha)(1 - A_inner)``, ``B = (1 - alpha) B_inner`` (derived:
      ``E||b + C(x-b) - x||^2 <= (1 - alpha) E||b - x||^2``). With the default inner ``ef21``
      it coincides with ``v4``.
    * ``v4``: ``b + C1(x - b)``, ``b = h + C2(x - h)`` (``C1`` = the compressor, ``C2`` = the
      second); EF21's constants at ``alpha_bar = 1 - (1 - alpha1)(1 - alpha2)``.
    * ``v5``: with probability ``p`` (a shared coin, free) ``x``, sent in full; otherwise
      ``h + C(x - y)``; EF21-type constants with ``p``: ``A = 1 - sqrt(1-p)``,
      ``B = (1-p)(1-alpha)/(1 - sqrt(1-p))``. ``p`` defaults to ``delta`` of ``C`` (``K/d``
      for TopK, as the authors' code).

    The second compressor (``mechanism_compressor``, a spec string) defaults to RandK (v2)
    or TopK (v3, v4) keeping as many coordinates as the main compressor.

    Theory: ``gamma = 1/(L + L_tilde sqrt(B/A))`` (nonconvex) or
    ``min(1/(L + L_tilde sqrt(2B/A)), A/(2 mu))`` (PL, when ``mu`` is known and ``regime`` is
    ``auto``), :func:`stepsizes.three_pc_AB`. Reports ``G = mean_i ||g_i - grad f_i(x)||^2``.
    """

    mechanism: str = option("ef21", "3PC mechanism", choices=mech.MECHANISMS)
    zeta: float = option(1.0, "LAG/CLAG trigger zeta >= 0")
    p: float | None = option(
        None, "3PCv5: probability of a full send (default: delta of C)", check=check_unit
    )
    mechanism_compressor: str | None = option(
        None, "3PCv2's Q / 3PCv3-v4's C2 as a SPEC (default: randk / topk, same k)"
    )
    inner_mechanism: str = option("ef21", "3PCv3's inner 3PC", choices=mech.INNER)
    init_mode: str = ef21_init_option()
    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    reports: ClassVar[tuple[str, ...]] = ("G",)
    provenance: ClassVar[Provenance] = pv.theorem(
        "Richtárik, Sokolov, Gasanov, Fatkhullin, Li & Gorbunov 2022, arXiv 2202.00998, the "
        "3PC nonconvex and PL theorems with the mechanism's (A, B) of its Section 3 (theorem "
        "numbers not given here); 3PCv3's constants are derived here (see the run's record)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mechanism not in mech.MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {', '.join(mech.MECHANISMS)}, got {self.mechanism!r}"
            )
        if self.inner_mechanism not in mech.INNER:
            raise ValueError(
                f"inner_mechanism must be one of {', '.join(mech.INNER)}, "
                f"got {self.inner_mechanism!r}"
            )
        if not self.zeta >= 0:
            raise ValueError(f"zeta must be >= 0, got {self.zeta}")
        if self.mechanism == "v5" and self.p is None:
            raise ValueError("3PCv5 needs p (configure() sets it to delta of the compressor)")
        if self.mechanism_compressor is not None:
            C2 = _parse(self.mechanism_compressor, 1)
            if self.mechanism == "v2" and not C2.unbiased:
                raise ValueError(f"3PCv2 needs an unbiased mechanism compressor Q, got {C2.spec()}")
            if self.mechanism in ("v3", "v4") and not C2.contractive:
                raise ValueError(
                    f"3PC{self.mechanism} needs a contractive mechanism compressor, got {C2.spec()}"
                )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        m = opts.get("mechanism", "ef21")
        alpha = 1.0 if m == "lag" else compressor.delta(d)
        probe = cls(compressor=compressor, gamma=1.0, **{**opts, "p": opts.get("p") or alpha})
        C2 = second_compressor(probe, d, problem.n)
        omega = C2.omega(d) if m == "v2" else 0.0
        alpha2 = C2.delta(d) if m in ("v3", "v4") else 1.0
        A, B = stepsizes.three_pc_AB(
            m,
            alpha,
            zeta=probe.zeta,
            omega=omega,
            p=probe.p,
            alpha2=alpha2,
            inner=probe.inner_mechanism,
        )
        inputs = {"L": c.L, "L_tilde": c.L_tilde, "mechanism": m, "alpha": alpha, "A": A, "B": B}
        if C2 is not None:
            inputs["second_compressor"] = C2.spec()
        params = {"p": alpha} if m == "v5" else {}
        source = "Richtárik et al. 2022, arXiv 2202.00998 (3PC); theory sheet §2.12"
        prov = V3_PROVENANCE if m == "v3" else None
        regime = opts.get("regime", "auto")
        if regime == "pl" or (regime == "auto" and c.mu is not None):
            if c.mu is None:
                raise ValueError("the PL step needs mu, which this problem does not know")
            inputs["mu"] = c.mu
            return Theory(
                gamma=stepsizes.three_pc_pl(c.L, c.L_tilde, A, B, c.mu),
                formula="min(1 / (L + L_tilde sqrt(2 B / A)), A / (2 mu))",
                inputs=inputs,
                params=params,
                source=source + ", PL theorem",
                provenance=prov,
            )
        return Theory(
            gamma=stepsizes.three_pc(c.L, c.L_tilde, A, B),
            formula="1 / (L + L_tilde sqrt(B / A))",
            inputs=inputs,
            params=params,
            source=source + ", nonconvex theorem",
            provenance=prov,
        )

    def init(self, x0, problem, comm: Comm) -> ThreePCState:
        y_i = problem.grad(x0)
        g_i, g = initial_estimator(self.init_mode, y_i, self.compressor, comm)
        return ThreePCState(x=x0.clone(), t=0, g_i=g_i, g=g, y_i=y_i)

    def _step(self, state: ThreePCState, problem, comm: Comm):
        t = state.t
        x = state.x - self.gamma * state.g
        comm.broadcast_full(problem.d)
        grad_i = problem.grad(x)
        C2 = second_compressor(self, problem.d, comm.n)
        ctx = mech.Ctx(self.compressor, C2, self.zeta, self.p, self.inner_mechanism, comm, t)
        sent = mech.APPLY[self.mechanism](state.g_i, state.y_i, grad_i, ctx)
        if sent.full:
            g = comm.reduce_rows(sent.delta_i, sent.nbits)
        else:
            g = state.g + comm.reduce_rows(sent.delta_i, sent.nbits)
        G = comm.monitor_mean(((sent.g_i - grad_i) ** 2).sum(dim=1))
        return ThreePCState(x=x, t=t + 1, g_i=sent.g_i, g=g, y_i=grad_i), {"G": G}
