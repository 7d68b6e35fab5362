"""Shared pieces of the variance-reduction checks: the heterogeneous ridge of the theory sheet
§3.6 built from arrays, a run loop that records what the bounds need, and the one-sided
statistics used to compare a mean over seeds with a bound."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from algorithms.comm import SimulatedComm
from problems.least_squares import LeastSquares
from problems.registry import make_problem

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
    """Run with one torch thread (the vectors are tiny: threads only add overhead), restoring
    the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(fn: Callable[[bool], list]) -> Callable[[bool], list]:
    """``fn`` run under :func:`one_thread`."""

    @functools.wraps(fn)
    def wrapped(fast: bool) -> list:
        with one_thread():
            return fn(fast)

    return wrapped


def ridge_arrays(
    n: int = 10, d: int = 20, m: int = 30
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The §3.6 data: ``rng = np.random.default_rng(1)``, all ``A_i ~ N(0,1)^{m x d}`` first,
    then all ``y_i = 3 N(0, 1) + 2 i``, ``i = 0..n-1``."""
    rng = np.random.default_rng(1)
    A = [rng.standard_normal((m, d)) for _ in range(n)]
    y = [3.0 * rng.standard_normal(m) + 2.0 * i for i in range(n)]
    return A, y


def ridge(copies: int = 1, lam: float = 0.1) -> LeastSquares:
    """The heterogeneous ridge of the theory sheet §3.6 (``n = 10, d = 20, m = 30``):
    ``f_i(x) = (1/(2m))||A_i x - y_i||^2 + (lam/2)||x||^2``, start ``x^0 = 0``.

    ``copies > 1`` repeats the ten nodes ``copies`` times: ``f``, ``x*``, ``L``, ``L_max``,
    ``mu`` and ``zeta2`` are unchanged and every node keeps its data distribution, only ``n``
    grows (used for DIANA's linear speedup).
    """
    A, y = ridge_arrays()
    A_all = np.concatenate(A * copies)
    y_all = np.concatenate(y * copies)
    counts = np.full(len(A) * copies, A[0].shape[0])
    return LeastSquares(A_all, y_all, counts, lam=lam, x0="zeros")


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
