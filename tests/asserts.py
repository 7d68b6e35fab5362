"""Assertion helpers for Monte-Carlo claims, with tolerances set by the sample size."""

from __future__ import annotations

import torch

from compressors.montecarlo import Z, estimate


def assert_mc_mean(
    samples: torch.Tensor, target: torch.Tensor, var_bound: float | None = None, z: float = Z
) -> None:
    """The sample mean over dim 0 matches ``target`` within tolerances set by the sample size.

    * Per coordinate that varied in the sample: within ``z`` standard errors.
    * As a whole, with ``var_bound`` an upper bound on ``E||sample - target||^2`` (``omega
      ||x||^2`` for an unbiased compressor): ``n ||mean - target||^2 <= z^2 var_bound``. This
      covers rare events: a coordinate whose non-zero outcome has probability below ``1/n`` may
      never vary in the sample, and its sample variance then says nothing.
    """
    n = samples.shape[0]
    mean = samples.mean(dim=0)
    sd = samples.std(dim=0)
    scale = float(target.abs().max()) or 1.0
    tol = z * sd / n**0.5 + 1e-12 * scale
    bad = ((mean - target).abs() > tol) & (sd > 0)
    assert not bad.any(), (
        f"mean off at {bad.nonzero().flatten().tolist()[:5]}: mean={mean[bad][:5].tolist()} "
        f"target={target[bad][:5].tolist()} tol={tol[bad][:5].tolist()} (n={n})"
    )
    if var_bound is not None:
        dev = n * float(((mean - target) ** 2).sum())
        assert dev <= z * z * var_bound + 1e-24 * scale**2 * n, (
            f"n ||mean - x||^2 = {dev:.4g} exceeds {z}^2 x the variance bound {var_bound:.4g}"
        )


def assert_mc_at_most(ratios: torch.Tensor, bound: float, z: float = Z) -> None:
    """The mean of ``ratios`` is at most ``bound`` up to ``z`` standard errors:
    ``mean <= bound (1 + tol)`` with ``tol = z se / bound`` set by the sample size."""
    e = estimate(ratios)
    assert e.at_most(bound, z), f"E ratio = {e} (n={e.n}) exceeds the declared {bound:.6g}"


def assert_mc_at_least(ratios: torch.Tensor, bound: float, z: float = Z) -> None:
    """The mean of ``ratios`` is at least ``bound`` up to ``z`` standard errors."""
    e = estimate(ratios)
    assert e.at_least(bound, z), f"E ratio = {e} (n={e.n}) is below {bound:.6g}"
