"""Shared pieces of the variance-reduction checks: the heterogeneous ridge of the theory sheet
§3.6 built from arrays, a run loop that records what the bounds need, and the one-sided
statistics used to compare a mean over seeds with a bound."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from algorithms.comm import SimulatedComm
from problems.instances import heterogeneous_ridge, ridge_arrays
from problems.least_squares import LeastSquares
from problems.registry import make_problem
from theory_checks.base import single_threaded

__all__ = [
    "RIDGE_SHEET",
    "Z",
    "MeanSE",
    "logreg_nonconvex",
    "mean_se",
    "one_thread",
    "ridge",
    "ridge_arrays",
    "run",
    "single_threaded",
    "sq_dist",
]

#: The constants the theory sheet §3.6 prints for the ridge (3 or 4 significant digits).
RIDGE_SHEET = {"L": 1.611, "mu": 0.734, "L_tilde": 2.991, "L_max": 3.933, "zeta2": 59.3}

#: Standard errors of the one-sided margin: a mean over seeds ``Z`` standard errors above a
#: bound rejects it (about 0.1% false alarms for a Gaussian mean).
Z = 3.0


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """:func:`theory_checks.base.single_threaded` as a context manager."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def ridge(copies: int = 1, lam: float = 0.1) -> LeastSquares:
    """The §3.6 ridge from ``x^0 = 0`` (:func:`problems.instances.heterogeneous_ridge`)."""
    return heterogeneous_ridge(x0="zeros", lam=lam, copies=copies)


def logreg_nonconvex(nodes: int = 5, samples: int = 200, features: int = 10, seed: int = 2):
    """Logistic regression + the nonconvex regulariser (theory sheet §3.2, ``lam = 0.1``) on
    synthetic data, ``x^0 ~ N(0, I)``; ``f >= 0``, so ``Delta0 <= f(x^0)``."""
    return make_problem(
        "logreg-nonconvex",
        nodes=nodes,
        lam=0.1,
        samples=samples,
        features=features,
        seed=seed,
        x0="randn",
    )


def sq_dist(x: torch.Tensor, y: torch.Tensor) -> float:
    """``||x - y||^2`` as a float."""
    return float(((x - y) ** 2).sum())


def run(
    algo,
    problem,
    T: int,
    seed: int,
    record: Callable[[object, object, object], float] | None = None,
) -> tuple[object, np.ndarray, SimulatedComm]:
    """Run ``T`` steps of ``algo`` from ``problem.x0``; ``record(state, info, problem)`` is
    evaluated at ``x^0`` (``info = None``) and after every step (``T + 1`` values)."""
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    values = []
    if record is not None:
        values.append(record(state, None, problem))
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        if record is not None:
            values.append(record(state, info, problem))
    return state, np.asarray(values, dtype=np.float64), comm


@dataclass(frozen=True)
class MeanSE:
    """A mean over independent seeds and its standard error."""

    mean: float
    se: float
    k: int

    def __str__(self) -> str:
        return f"{self.mean:.4g} +- {self.se:.2g} (mean +- s.e., {self.k} seeds)"


def mean_se(values) -> MeanSE:
    """The mean of per-seed values and its standard error (sample std / sqrt(k))."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return MeanSE(float(v.mean()), se, int(v.size))
