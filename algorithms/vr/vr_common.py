"""Shared pieces of the variance-reduced family (DIANA, MARINA, DASHA, COMP-AMS): the
default synchronisation probabilities and the problem facts their theories read.

Two facts are read from a problem beyond :class:`problems.base.Consts`, where it has them:

* ``problem.counts``: the number of samples ``m_i`` of each node (finite sums such as the GLMs);
  VR-MARINA's and DASHA-PAGE's default ``p = B/(m + B)`` use ``m = max_i m_i``;
* ``problem.sample_smoothness()``: a mean-square per-sample smoothness ``calL`` with
  ``(1/m_i) sum_j ||grad f_ij(x) - grad f_ij(y)||^2 <= calL_i^2 ||x - y||^2`` and
  ``calL = sqrt(mean_i calL_i^2)`` (VR-MARINA's ``ℒ``, DASHA's per-sample ``L_max``/``L_sigma``).
  Without it the theory step of the minibatch methods is unavailable and ``--step`` is needed.
"""

from __future__ import annotations

from typing import Any

from compressors import Compressor

P_HELP = "probability p of the shared synchronisation coin (default: the method's theory)"


def need(problem, *names: str) -> dict[str, float]:
    """The constants ``names`` of ``problem.consts``, or a ValueError naming the missing ones."""
    c = problem.consts
    out = {k: getattr(c, k) for k in names}
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise ValueError(
            f"the theory step needs {', '.join(missing)}, which this problem does not know: "
            "give --step FLOAT"
        )
    return out


def need_unbiased(name: str, compressor: Compressor, d: int) -> float:
    """``omega`` of an unbiased compressor, or a ValueError for the theory step."""
    if not compressor.unbiased:
        raise ValueError(
            f"{name}'s step theory needs an unbiased compressor, got {compressor.spec()}: "
            "give --step FLOAT"
        )
    return compressor.omega(d)


def need_independent_unbiased(name: str, compressor: Compressor, d: int) -> float:
    """``omega`` of an unbiased compressor whose nodes draw independently (the theory of DIANA,
    ADIANA, VR-MARINA, PP-MARINA and DASHA assumes it), or a ValueError for the theory step."""
    omega = need_unbiased(name, compressor, d)
    if ab_kind(compressor) != "independent":
        raise ValueError(
            f"{name}'s theory assumes independent compressors, got {compressor.spec()} "
            "(shared randomness): give --step FLOAT"
        )
    return omega


def effective_omega(compressor: Compressor, d: int) -> float:
    """``omega`` of an unbiased compressor; for a contractive one (accepted only with
    ``--force-compressor``) the ``omega`` with ``1/(omega + 1) = delta``, so that the default
    parameters (DIANA's ``alpha``, DASHA's ``a``) stay defined."""
    if compressor.unbiased:
        return compressor.omega(d)
    return 1.0 / compressor.delta(d) - 1.0


def support_ratio(compressor: Compressor, d: int) -> float:
    """``zeta_C / d``: the fraction of coordinates a message carries (``K/d`` for RandK,
    ``ceil(d/n)/d`` for PermK, 1 for dense quantizers), MARINA's default ``p``."""
    return min(1.0, compressor.support(d) / d)


def samples_per_node(problem) -> int | None:
    """``max_i m_i`` for finite-sum problems (``problem.counts``), else None."""
    counts = getattr(problem, "counts", None)
    if counts is None:
        return None
    return int(max(int(c) for c in counts))


def sample_smoothness(problem, name: str) -> float:
    """The problem's mean-square per-sample smoothness ``calL`` (see the module docstring)."""
    fn = getattr(problem, "sample_smoothness", None)
    if fn is None:
        raise ValueError(
            f"{name}'s theory step needs the per-sample smoothness calL "
            f"(problem.sample_smoothness()), which {type(problem).__name__} does not provide: "
            "give --step FLOAT"
        )
    return float(fn())


def minibatch_p(compressor: Compressor, problem, batch: int) -> float:
    """``min(zeta_C/d, B/(m + B))`` (VR-MARINA, Gorbunov et al. 2021, arXiv 2102.07845,
    Cor. 3.1; DASHA-PAGE uses ``B/(m + B)``); ``zeta_C/d`` when ``m`` is unknown."""
    p = support_ratio(compressor, problem.d)
    m = samples_per_node(problem)
    return p if m is None else min(p, batch / (m + batch))


def ab_kind(compressor: Compressor) -> str:
    """How the nodes' compressors are correlated, for :func:`stepsizes.ab_constants`:
    ``independent`` (private streams), ``partition`` (a shared-randomness scaled projection
    that needs the node count, i.e. PermK: disjoint blocks of one shared permutation) or
    ``same`` (any other shared-randomness compressor: every node draws the same)."""
    if not compressor.shared_randomness:
        return "independent"
    if compressor.needs_node_count and compressor.scaled_projection:
        return "partition"
    return "same"


def resolved(value: Any, default) -> Any:
    """``value`` unless it is None, else ``default()`` (parameters whose theory default needs
    the problem, when ``configure`` could not compute them)."""
    return default() if value is None else value
