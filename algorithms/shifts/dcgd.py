"""DCGD: distributed compressed gradient descent, the baseline."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_choice,
    check_count,
    minibatch,
    minibatch_option,
    option,
)
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags

REGIMES = ("auto", "nonconvex", "strongly-convex")


@dataclass(frozen=True)
class DCGD(Algorithm):
    """Distributed compressed gradient descent (Khirirat, Feyzmahdavian & Johansson 2018,
    arXiv 1806.06573, Alg. 1; QSGD, Alistarh et al. 2017, arXiv 1610.02132).

    Update: node ``i`` sends ``c_i = C(grad f_i(x^t))`` (or of a minibatch gradient); the server
    sets ``x^{t+1} = x^t - gamma (1/n) sum_i c_i`` and broadcasts it.

    Theory, with independent unbiased ``C`` (omega); ``convexity`` ``auto`` takes the strongly
    convex step when the problem knows ``mu``, else the nonconvex one:

    - strongly convex: ``gamma = 1/(L + 2 omega L_max/n)`` (:func:`stepsizes.dcgd`); DCGD then
      converges linearly only to a neighbourhood of size ``O(gamma omega zeta2 / (mu n))``;
    - nonconvex (Khaled & Richtárik 2020, arXiv 2002.03329, Thm 2; theory sheet §2.1):
      ``gamma = min(1/L, 1/sqrt(L A' T))`` with ``A' = omega L_max/n`` and the horizon ``T``
      (:func:`stepsizes.dcgd_nonconvex`): ``horizon`` (``--horizon``), which the runner fills
      from ``--iters`` when it is not given; without it the nonconvex step is unavailable.

    A biased ``C`` is accepted (no theory: give ``--step``), since it is the classic
    counterexample (Beznosikov et al. 2020, arXiv 2002.12410).
    """

    batch_size: int | None = minibatch_option()
    convexity: str = option(
        "auto", "DCGD theory step: auto | nonconvex | strongly-convex", choices=REGIMES
    )
    horizon: int | None = option(
        None,
        "horizon T of the nonconvex step 1/sqrt(L A' T) (default: --iters)",
        from_run="iters",
        check=check_count,
    )

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "any"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.theorem(
        "Khaled & Richtárik 2020, arXiv 2002.03329, Theorem 2 (nonconvex, DCGD's ABC "
        "constants A' = omega L_max/n, B' = 1; needs the horizon T); strongly convex: the "
        "unified SGD theorem of Gorbunov, Hanzely & Richtárik 2020, arXiv 1905.11261, gamma = "
        "1/A with DCGD's A = L + 2 omega L_max/n (theorem number not given here)"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        if not compressor.unbiased:
            raise ValueError(
                f"DCGD's step theory needs an unbiased compressor, got "
                f"{compressor.spec()}: give --step FLOAT"
            )
        omega = compressor.omega(d)
        inputs = {"L": c.L, "L_max": c.L_max, "omega": omega, "n": problem.n}
        regime = opts.get("convexity", "auto")
        check_choice("convexity", regime, REGIMES)
        if regime == "strongly-convex" or (regime == "auto" and c.mu is not None):
            return Theory(
                gamma=stepsizes.dcgd(c.L, c.L_max, omega, problem.n),
                formula="1 / (L + 2 omega L_max / n)",
                inputs=inputs,
                source="Gorbunov, Hanzely & Richtárik 2020 (arXiv 1905.11261); theory sheet §2.1",
            )
        T = opts.get("horizon")
        if T is None and omega == 0:
            T = 1  # A' = 0: the step is 1/L whatever the horizon
        if T is None:
            raise ValueError(
                "DCGD's nonconvex step needs the horizon T (gamma <= 1/sqrt(L A' T)): give "
                "horizon (--horizon; the runner uses --iters)"
            )
        check_count("horizon", T)
        A = omega * c.L_max / problem.n
        return Theory(
            gamma=stepsizes.dcgd_nonconvex(c.L, c.L_max, omega, problem.n, T),
            formula="min(1 / L, 1 / sqrt(L A' T)), A' = omega L_max / n",
            inputs={**inputs, "A_prime": A, "T": T},
            source="Khaled & Richtárik 2020, arXiv 2002.03329, Theorem 2 (theory sheet §2.1)",
        )

    def init(self, x0, problem, comm: Comm) -> State:
        return State(x=x0.clone(), t=0)

    def _step(self, state: State, problem, comm: Comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        batch = minibatch(problem, comm, t, tags.BATCH, self.batch_size)
        g_i = problem.grad(state.x, batch)
        g = comm.reduce(C.encode(g_i, comm.rng_for(C, t)), C)
        return dataclasses.replace(state, x=state.x - self.gamma * g, t=t + 1), {}
