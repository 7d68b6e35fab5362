"""Smoothness-aware sparsification, shared by DCGD+ and DIANA+ (arXiv 2106.03524).

Each ``f_i`` is ``L_i``-matrix-smooth, ``f_i(x) <= f_i(y) + <grad f_i(y), x - y> +
(1/2)||x - y||^2_{L_i}`` (Safaryan, Hanzely & Richtárik 2021, arXiv 2106.03524), and node ``i``
sparsifies with probabilities ``p_i`` built from its own ``L_i``: coordinate ``j`` is kept
independently with probability ``p_ij`` and sent as ``v_j / p_ij`` (unbiased). With
``P_i = diag(p_i)`` the variance is ``E||S_i(v) - v||^2 = v^T (P_i^{-1} - I) v``, and for
``v = grad f_i(x) - grad f_i(y) = L_i^{1/2} w`` (convex ``f_i``: ``||w||^2 <= 2 D_{f_i}(x, y)``)
it is at most ``calL_i ||w||^2`` with the expected-smoothness constant

    ``calL_i = lambda_max(L_i^{1/2} (P_i^{-1} - I) L_i^{1/2})``,

which replaces ``omega L_i`` of uniform sparsification (``p_ij = tau/d``: ``calL_i = (d/tau - 1)
lambda_max(L_i)``). It is computed here exactly, as the top eigenvalue of
``D_i^{1/2} L_i D_i^{1/2}`` with ``D_i = P_i^{-1} - I`` (same spectrum).

Probabilities (``sampling``), for an expected ``tau`` coordinates per node and round:

* ``diag``: ``p_ij = min(1, s_i sqrt((L_i)_jj))`` with ``s_i`` such that ``sum_j p_ij = tau``
  (water-filling). It minimises the trace bound ``calL_i <= tr(D_i L_i) = sum_j (L_i)_jj
  (1/p_ij - 1)`` over ``sum_j p_ij = tau``: derived here from the paper's constant, [U] whether
  the paper's own probabilities are these (its text could not be read).
* ``uniform``: ``p_ij = tau/d`` (independent Bernoulli Rand-K: the baseline).

Coordinates with ``(L_i)_jj = 0`` get ``p_ij = 0`` and are never sent; for a GLM their gradient
entry is zero (the feature is absent at node ``i``).

Wire format of one node's message: the number of kept coordinates (``ceil(log2(d + 1))`` bits),
their indices (``ceil(log2 d)`` bits each) and values (``float_bits`` each), so that
``nbits_i = ceil(log2(d + 1)) + nnz_i (float_bits + ceil(log2 d))``; ``E nnz_i = tau``.
"""

from __future__ import annotations

import math

import torch

from compressors import Compressor
from streams.tags import SMOOTHNESS_SAMPLE as TAG_SAMPLE

__all__ = [
    "SAMPLINGS",
    "TAG_SAMPLE",
    "budget",
    "expected_smoothness",
    "message_bits",
    "probabilities",
    "psd_matrices",
    "sparsify",
]

SAMPLINGS = ("diag", "uniform")


def budget(name: str, compressor: Compressor, d: int) -> tuple[float, int]:
    """``(tau, float_bits)``: the expected coordinates per message and the value width, read
    from the sparsifier the run names (``randk:k=K`` gives ``tau = K``)."""
    if not compressor.sparsifier or compressor.shared_randomness:
        raise ValueError(
            f"{name} sparsifies with its own smoothness-aware probabilities and takes the "
            f"expected size tau from an independent sparsifier, e.g. randk:k=TAU; got "
            f"{compressor.spec()}"
        )
    tau = float(compressor.support(d))
    if not 0 < tau <= d:
        raise ValueError(f"{name}: the expected size tau must be in (0, {d}], got {tau}")
    return tau, int(getattr(compressor, "float_bits", 32))


def psd_matrices(L: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``(|L_i|, indefinite)``: each symmetric ``L_i`` with its eigenvalues replaced by their
    absolute values (``L_i`` itself when it is positive semidefinite, up to rounding), and
    whether any was indefinite. ``|L_i| >= L_i``, so it is again a smoothness matrix."""
    ev, U = torch.linalg.eigh(L)
    tol = 1e-12 * ev.abs().amax(dim=1, keepdim=True).clamp_min(1e-300)
    indefinite = bool((ev < -tol).any())
    if not indefinite:
        return L, False
    return (U * ev.abs()[:, None, :]) @ U.transpose(1, 2), True


def probabilities(L_diag: torch.Tensor, tau: float, sampling: str) -> torch.Tensor:
    """``(m, d)`` probabilities with ``sum_j p_ij = tau`` (see the module docstring)."""
    m, d = L_diag.shape
    if sampling == "uniform":
        return torch.full((m, d), tau / d, dtype=torch.float64)
    if sampling != "diag":
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    w = L_diag.to(torch.float64).clamp_min(0.0).sqrt()
    # Water-filling: with the k largest weights capped at 1, s = (tau - k) / (sum of the rest);
    # the right k is the smallest one whose (k+1)-th largest weight stays below 1/s.
    ws, order = torch.sort(w, dim=1, descending=True)
    tail = ws.flip(1).cumsum(1).flip(1)  # tail[:, k] = sum of ws[:, k:]
    k = torch.arange(d, dtype=torch.float64)
    s = (tau - k) / tail.clamp_min(1e-300)
    ok = (s * ws <= 1.0 + 1e-12) & (k < tau) & (tail > 0)
    first = ok.to(torch.int8).argmax(1)
    s_i = s.gather(1, first[:, None])
    p_sorted = torch.where(k[None] < first[:, None], 1.0, (s_i * ws).clamp(max=1.0))
    # Fewer positive weights than tau: every one of them is sent, always.
    p_sorted = torch.where(ok.any(1, keepdim=True), p_sorted, (ws > 0).to(torch.float64))
    p = torch.empty_like(p_sorted).scatter_(1, order, p_sorted)
    # A node whose L_i has no positive diagonal entry samples uniformly.
    flat = ~(w > 0).any(1)
    return torch.where(flat[:, None], torch.full_like(p, tau / d), p)


def expected_smoothness(L: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``calL_i = lambda_max(L_i^{1/2} (P_i^{-1} - I) L_i^{1/2})`` for PSD ``L`` ``(m, d, d)``
    and probabilities ``p`` ``(m, d)``, float64 ``(m,)``. Coordinates with ``p_ij = 0`` must
    have ``(L_i)_jj = 0`` (they are never sent; their row of ``L_i`` is zero)."""
    p = p.to(torch.float64)
    D = torch.where(p > 0, 1.0 / p.clamp_min(1e-300) - 1.0, 0.0).sqrt()
    M = D[:, :, None] * L.to(torch.float64) * D[:, None, :]
    return torch.linalg.eigvalsh(M)[:, -1].clamp_min(0.0)


def message_bits(nnz: torch.Tensor, d: int, float_bits: int) -> torch.Tensor:
    """Bits of each node's message with ``nnz`` kept coordinates (module docstring), int64."""
    header = math.ceil(math.log2(d + 1))
    index = math.ceil(math.log2(d)) if d > 1 else 0
    return header + nnz.to(torch.int64) * (float_bits + index)


def sparsify(v_i: torch.Tensor, p_i: torch.Tensor, rng, float_bits: int):
    """``(S_i(v_i), kept, nbits)``: the unbiased sparsification of each row with its own
    probabilities, drawn from the row's stream ``rng`` (:class:`streams.Streams`), the mask of
    kept coordinates and each message's bits."""
    m, d = v_i.shape
    kept = rng.uniform(d).to(p_i.device) < p_i
    scaled = v_i / p_i.to(v_i.dtype).clamp_min(torch.finfo(v_i.dtype).tiny)
    out = torch.where(kept, scaled, torch.zeros((), dtype=v_i.dtype, device=v_i.device))
    return out, kept, message_bits(kept.sum(1).cpu(), d, float_bits)
