"""``f_star`` of convex problems to ``||grad f|| <= 1e-10``, cached on disk.

The minimiser is found by scipy's L-BFGS-B with exact gradients, then polished by Newton steps
with the exact Hessian (a pseudo-inverse solve, so rank-deficient least squares works) until
the gradient norm stops decreasing. Results are cached in ``$COMPZOO_CACHE`` (default
``~/.cache/compzoo``) under the sha256 of the data bytes and the parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.linalg as sla
from scipy.optimize import minimize

from problems import cache

__all__ = ["solve", "cache_dir", "cache_key", "cached_solve", "GRAD_TOL", "ACCEPT_TOL"]

log = logging.getLogger(__name__)

GRAD_TOL = 1e-10
# A solve ending above this gradient norm found no minimiser (f unbounded below or the
# minimiser at infinity, e.g. logistic regression on separable data without a regulariser).
ACCEPT_TOL = 1e-8
_VERSION = b"compzoo-fstar-v1"

FunGrad = Callable[[np.ndarray], tuple[float, np.ndarray]]


def solve(
    fun_grad: FunGrad,
    hess: Callable[[np.ndarray], np.ndarray] | None,
    x0: np.ndarray,
    tol: float = GRAD_TOL,
) -> tuple[np.ndarray, float, float]:
    """Minimise a smooth convex function; returns ``(x, f(x), ||grad f(x)||)``."""
    res = minimize(
        fun_grad,
        x0,
        jac=True,
        method="L-BFGS-B",
        # With a Hessian, Newton finishes the job; L-BFGS-B only has to get close.
        options={
            "maxiter": 50_000 if hess is None else 1_000,
            "maxcor": 30,
            "ftol": 1e-16,
            "gtol": tol * 1e-2,
        },
    )
    x = np.asarray(res.x, dtype=np.float64)
    f, g = fun_grad(x)
    gn = float(np.linalg.norm(g))
    if hess is not None:
        for _ in range(100):
            if gn <= tol * 1e-3:
                break
            H = hess(x)
            step = sla.lstsq(H, g, cond=1e-14, lapack_driver="gelsd")[0]
            t, improved = 1.0, False
            for _ in range(40):
                xn = x - t * step
                fn, gnv = fun_grad(xn)
                gnn = float(np.linalg.norm(gnv))
                # Near the optimum f stops resolving progress; the gradient norm still does.
                if fn < f - 1e-4 * t * float(g @ step) or (fn <= f + 1e-15 * abs(f) and gnn < gn):
                    improved = True
                    break
                t *= 0.5
            if not improved:
                break
            x, f, g, gn = xn, fn, gnv, gnn
    if gn > tol:
        log.warning("f_star solve reached ||grad f|| = %.3g > %.1g", gn, tol)
    return x, float(f), gn


def cache_dir() -> Path:
    """``$COMPZOO_CACHE`` or ``~/.cache/compzoo`` (:func:`problems.cache.cache_dir`)."""
    return cache.cache_dir()


def cache_key(*parts: object) -> str:
    """sha256 over the given arrays (their dtype, shape and bytes) and plain values
    (:func:`problems.cache.key` under the f* entries' own version)."""
    return cache.key(*parts, version=_VERSION)


def cached_solve(key: str, compute: Callable[[], tuple[np.ndarray, float, float]]):
    """``compute()`` memoised on disk as ``<cache_dir>/fstar-<key>.npz`` (:mod:`problems.cache`)."""

    def arrays() -> dict[str, np.ndarray]:
        x, f, gn = compute()
        return {"x": np.asarray(x), "f": np.float64(f), "gn": np.float64(gn)}

    z = cache.memo("fstar", key, {"x": "f", "f": "f", "gn": "f"}, arrays)
    return np.array(z["x"]), float(z["f"]), float(z["gn"])
