"""Shared pieces of the variance-reduction checks: the heterogeneous ridge of the theory sheet
§3.6 built from arrays, the instances on which a theorem's inequality is nearly tight (so that a
broken variant can fail it), run loops that record what the bounds need (for ``T`` rounds, for a
bit budget, one step from a given state), and the one-sided statistics used to compare a mean
over seeds with a bound."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from comm import SimulatedComm
from problems.instances import heterogeneous_ridge, ridge_arrays
from problems.least_squares import LeastSquares
from problems.registry import make_problem
from theory_checks.base import single_threaded

__all__ = [
    "RIDGE_SHEET",
    "Z",
    "MeanSE",
    "disjoint_quadratic",
    "logreg_nonconvex",
    "mean_se",
    "one_step",
    "one_thread",
    "ridge",
    "ridge_arrays",
    "ridge_top_start",
    "run",
    "run_budget",
    "scaled_ridge",
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


def disjoint_quadratic(n: int = 10, d: int = 20, ell: float = 1.0, seed: int = 3) -> LeastSquares:
    """A quadratic on which DIANA's one-step Lyapunov inequality is nearly tight: node ``i``
    has curvature ``ell`` on the coordinates ``j = i mod n`` only (``H_i = ell diag(mask_i)``,
    one row ``sqrt(m ell) e_j`` per coordinate, ``lam = 0``), so ``H = (ell/n) I``:
    ``L = mu = ell/n``, ``L_i = L_max = ell`` and ``||grad f_i(x) - grad f_i(x*)||^2 =
    L_max <x - x*, H_i (x - x*)>`` exactly (the inequality the proof uses). Targets
    ``3 N(0, 1)`` from ``default_rng(seed)``; the nodes' data are disjoint, so ``zeta2 = 0``."""
    if d % n:
        raise ValueError(f"d must be a multiple of n, got d={d}, n={n}")
    per = d // n
    rows = np.zeros((n * per, d))
    for i in range(n):
        for k, j in enumerate(range(i, d, n)):
            rows[i * per + k, j] = math.sqrt(per * ell)
    y = 3.0 * np.random.default_rng(seed).standard_normal(n * per)
    return LeastSquares(rows, y, np.full(n, per), lam=0.0, x0="zeros")


def ridge_top_start(copies: int = 1, t: float = 1.0) -> tuple[LeastSquares, torch.Tensor]:
    """The §3.6 ridge (``copies`` x its ten nodes) and ``x^0 = x* + t u`` with ``u`` the top
    eigenvector of the mean Hessian: there gradient descent's descent lemma is an equality
    (``f(x - gamma grad f) = f(x) - gamma (1 - gamma L/2)||grad f||^2``), so GD's
    ``2 Delta0/(gamma T)`` bound is nearly tight at ``gamma = 1/L``."""
    p = ridge(copies=copies)
    A, _ = ridge_arrays()
    m, lam = A[0].shape[0], 0.1
    H = sum(a.T @ a / m + lam * np.eye(a.shape[1]) for a in A) / len(A)
    u = torch.from_numpy(np.linalg.eigh(H)[1][:, -1])
    return p, p.x_star + t * u


def scaled_ridge(s: float) -> LeastSquares:
    """The §3.6 ridge times ``s^2`` (data and targets times ``s``, ``lam`` times ``s^2``):
    same ``x*``, gradients times ``s^2``, ``L`` times ``s^2``; from ``x^0 = 0``."""
    A, y = ridge_arrays()
    n, m, d = A.shape
    return LeastSquares(
        s * A.reshape(n * m, d), s * y.reshape(-1), np.full(n, m), lam=0.1 * s * s, x0="zeros"
    )


def one_step(algo, problem, state, seeds: int, record: Callable[[object], float]) -> np.ndarray:
    """``record(state')`` after one step of ``algo`` from ``state``, for ``seeds`` independent
    draws of the compressors' (and minibatches') randomness."""
    out = np.empty(seeds)
    for s in range(seeds):
        new, _ = algo.step(state, problem, SimulatedComm(problem.n, seed=s))
        out[s] = record(new)
    return out


def run_budget(
    algo, problem, x0: torch.Tensor, bits: float, seed: int, max_rounds: int = 100_000
) -> tuple[float, int]:
    """Run ``algo`` from ``x0`` while the uplink bits per node (mean over nodes, as the comm
    layer counts them, the initialisation included) are below ``bits``; returns the average of
    ``||grad f(x^t)||^2`` over the rounds run (``inf`` on overflow) and their number."""
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(x0, problem, comm)
    total, rounds = 0.0, 0
    while comm.bits_totals()["bits_up"] < bits and rounds < max_rounds:
        g = float((problem.full_grad(state.x) ** 2).sum())
        if not math.isfinite(g):
            return math.inf, rounds + 1
        total, rounds = total + g, rounds + 1
        state, _ = algo.step(state, problem, comm)
    return total / max(rounds, 1), rounds


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
    with np.errstate(all="ignore"):  # a diverged seed gives inf/nan, which the verdicts fail
        se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return MeanSE(float(v.mean()), se, int(v.size))
