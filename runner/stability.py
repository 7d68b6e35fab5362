"""The ``unstable`` verdict on a finished run: shared by the runner and sweep selection.

A run is *unstable* when the quantity it minimises ends above where it started, or ends more
than ``factor`` (10) times above the best value it logged. The quantity is ``f - f_inf``:
``f - f_star`` where the problem knows ``f_star``; otherwise ``f`` itself. When ``f_star`` is
unknown and ``f`` took a negative value, ``f`` is no gap (a ratio of a negative best means
nothing), so only the start test is applied there (:func:`objective_verdict`).

Rounding: both tests allow a ``floor`` (absolute) below which differences are noise, so a run
that converged to machine precision and then wobbles by an ulp is not called unstable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

FACTOR = 10.0


def verdict(
    values: Sequence[float], floor: float = 0.0, factor: float = FACTOR, ratio: bool = True
) -> str | None:
    """Why a logged series of a nonnegative minimised quantity counts as unstable, or ``None``.

    Args:
        values: the logged values in order (the first is the start); non-finite values are the
            business of the ``diverged`` rule and are ignored here.
        floor: absolute noise level: the end must exceed the start by more than ``floor``, and
            the best is taken as at least ``floor`` in the ratio test.
        factor: how far above its best a run may end.
        ratio: apply the ratio test (off where the values are not a gap, see the module).

    Returns:
        A one-line reason (``ends above its start ...`` or ``ends ...x above its best ...``).
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(vals) < 2:
        return None
    start, final, best = vals[0], vals[-1], min(vals)
    if final > start + floor:
        return f"ends above its start ({final:.6g} > {start:.6g})"
    ref = max(best, floor)
    if ratio and ref > 0 and final > factor * ref:
        return f"ends {final / ref:.3g}x above its best ({final:.6g} vs best {best:.6g})"
    return None


def objective_verdict(
    f_values: Sequence[float], f_star: float | None, eps: float, factor: float = FACTOR
) -> str | None:
    """:func:`verdict` on a run's logged objective values ``f``.

    Uses ``f - f_star`` when ``f_star`` is known, else ``f`` (the ratio test only while every
    logged ``f >= 0``). The floor is ``1000 eps max(1, |f_0|, |f_star|)``, with ``eps`` the
    machine epsilon of the run's dtype: differences below it are rounding in ``f``.
    """
    fs = [float(v) for v in f_values if v is not None and math.isfinite(float(v))]
    if len(fs) < 2:
        return None
    scale = max(1.0, abs(fs[0]), abs(f_star) if f_star is not None else 0.0)
    floor = 1000.0 * eps * scale
    if f_star is not None:
        return verdict([f - f_star for f in fs], floor, factor)
    return verdict(fs, floor, factor, ratio=min(fs) >= 0)


# ------------------------------------------------------------------------------ stalled runs
STALL_FRACTION = 0.5
STALL_MIN_ITERS = 100


def stall_verdict(
    f_values: Sequence[float],
    g_values: Sequence[float],
    f_star: float | None,
    eps: float,
    iters: int,
) -> str | None:
    """Why a run that used all its iterations counts as *stalled*, or ``None``.

    A run of at least :data:`STALL_MIN_ITERS` iterations is stalled when neither the gap
    ``f - f_inf`` nor the squared gradient norm ``||grad f||^2`` ever fell to
    :data:`STALL_FRACTION` (half) of its value at the start: the best logged value of each is
    compared with the first. ``f_inf`` is ``f_star`` where the problem knows it, else 0 while
    every logged ``f >= 0`` (a loss: ``f`` halving is movement); with ``f_star`` unknown and a
    negative ``f``, only the gradient norm is tested. A quantity that starts at rounding level
    (``1000 eps max(1, |f_0|)``, or 0 for the gradient) cannot stall. A stalled run's results
    are kept and the exit status is 0: the verdict says that its step is too small for its
    iteration budget (raise ``--step-mult`` or give ``--step``), not that anything failed.
    """
    if iters < STALL_MIN_ITERS:
        return None
    fs = [float(v) for v in f_values if v is not None and math.isfinite(float(v))]
    gs = [float(v) for v in g_values if v is not None and math.isfinite(float(v))]
    if len(fs) < 2 or len(gs) < 2:
        return None
    floor = 1000.0 * eps * max(1.0, abs(fs[0]), abs(f_star) if f_star is not None else 0.0)
    parts = []
    if f_star is not None or min(fs) >= 0:
        f_inf, name = (f_star, "f - f*") if f_star is not None else (0.0, "f")
        gaps = [f - f_inf for f in fs]
        if gaps[0] <= floor or min(gaps) <= STALL_FRACTION * gaps[0]:
            return None
        parts.append(f"{name} {gaps[0]:.4g} -> best {min(gaps):.4g}")
    if gs[0] <= 0 or min(gs) <= STALL_FRACTION * gs[0]:
        return None
    parts.append(f"||grad f||^2 {gs[0]:.4g} -> best {min(gs):.4g}")
    return f"{' and '.join(parts)} in {iters} iterations: neither halved"
