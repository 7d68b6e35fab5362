"""DCGD: distributed compressed gradient descent, the baseline."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from algorithms import stepsizes
from algorithms.base import Algorithm, Option, State, Theory
from algorithms.comm.base import Comm

TAG_BATCH = 0xBA7C


@dataclass(frozen=True)
class DCGD(Algorithm):
    """Distributed compressed gradient descent (Khirirat, Feyzmahdavian & Johansson 2018,
    arXiv 1806.06573, Alg. 1; QSGD, Alistarh et al. 2017, arXiv 1610.02132).

    Update: node ``i`` sends ``c_i = C(grad f_i(x^t))`` (or of a minibatch gradient); the server
    sets ``x^{t+1} = x^t - gamma (1/n) sum_i c_i`` and broadcasts it.

    Theory: with independent unbiased ``C`` (omega), ``gamma = 1/(L + 2 omega L_max/n)``
    (:func:`stepsizes.dcgd`); DCGD converges linearly only to a neighbourhood of size
    ``O(gamma omega zeta2 / (mu n))``. A biased ``C`` is accepted (no theory: give ``--step``),
    since it is the classic counterexample (Beznosikov et al. 2020, arXiv 2002.12410).
    """

    batch_size: int | None = None

    needs: ClassVar[str] = "any"
    stochastic: ClassVar[bool] = True
    options: ClassVar[dict[str, Option]] = {
        "batch_size": Option(int, None, "minibatch per node (default: full local gradients)"),
    }

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        if not compressor.unbiased:
            raise ValueError(
                f"DCGD's step theory needs an unbiased compressor, got "
                f"{compressor.spec()}: give --step FLOAT"
            )
        omega = compressor.omega(d)
        gamma = stepsizes.dcgd(c.L, c.L_max, omega, problem.n)
        return Theory(
            gamma=gamma,
            formula="1 / (L + 2 omega L_max / n)",
            inputs={"L": c.L, "L_max": c.L_max, "omega": omega, "n": problem.n},
            source="Gorbunov, Hanzely & Richtárik 2020 (arXiv 1905.11261); theory sheet §2.1",
        )

    def init(self, x0, problem, comm: Comm) -> State:
        return State(x=x0.clone(), t=0)

    def _step(self, state: State, problem, comm: Comm):
        C, t = self.compressor, state.t
        comm.broadcast_full(problem.d)
        batch = None
        if self.batch_size is not None:
            batch = problem.sample(comm.rng(t, tag=TAG_BATCH), self.batch_size)
        g_i = problem.grad(state.x, batch)
        g = comm.reduce(C.encode(g_i, comm.rng_for(C, t)), C)
        return dataclasses.replace(state, x=state.x - self.gamma * g, t=t + 1), {}
