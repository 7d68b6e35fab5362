"""The compressors' policy on non-finite and extreme values, and the helpers that enforce it.

Every compressor in the registry (and their compositions, blockwise and compiled forms) obeys:

1. **Finite in, finite out.** A row whose entries are all finite, whatever their magnitude
   (``±finfo.max``, ``finfo.tiny``, subnormals, mixtures of these), decodes to a finite row.
   Intermediates are scaled so they cannot overflow or underflow: norms are computed from the
   row divided by its largest magnitude when the plain computation leaves the safe range
   (:func:`safe_norm`), power-iteration factors likewise. Where the exact output is beyond the
   largest finite value of the row's dtype (Rand-K's ``(d/k) x_j``, a norm above the range) it
   *saturates* at ``±finfo(dtype).max``; near the top of the range the declared ``omega`` or
   ``delta`` then holds only for the saturated operator (natural compression rounds the top
   binade down to ``2^emax``).
2. **Non-finite in, non-finite out.** A row with a NaN or ``±inf`` entry decodes to a row with at
   least one NaN or ``±inf`` entry, so the runner's divergence check stops the run instead of
   silently training on a zeroed or clipped vector. Values that pass through (Top-K, identity)
   keep their NaN or inf; scaled or rounded values become NaN; a compressor that may drop the
   bad entry (Rand-K, Perm-K) writes NaN into the first value it sends for that row.
   The reduction ``decode_sum`` carries them as well (a sum with a non-finite term is not
   finite); a sum of finite rows at the very top of the range may overflow, as the runner's
   mean of such rows would.
3. **Bits are unchanged.** The policy never changes a payload's size: a fixed-size payload has
   ``bits(d)`` bits for every row, finite or not.

On the wire (``to_bytes``/``from_bytes``) the non-finite value travels inside the payload's
floats. Two payloads can hold none: Sign's one bit per entry, and an unsent Bernoulli row. Their
packets mark such rows in a field that does not travel (``nonfinite``), so the sender's own
decode is NaN; the class declares ``nonfinite_on_wire = False`` and rows rebuilt from bytes
decode to what the bits say.

The checks cost one row sum on the hot path (:func:`nonfinite_rows`) or a test of a per-row
quantity already computed; the slow paths run only for the rows that need them.
"""

from __future__ import annotations

import torch

from streams import compiled

__all__ = ["nonfinite_rows", "poison_first", "safe_norm", "saturate", "mark_rows"]

NONFINITE = "nonfinite"  # the field name of the per-row flag that does not travel


def nonfinite_rows(x_i: torch.Tensor) -> torch.Tensor | None:
    """``(m,)`` bool, the rows of ``x_i`` with a NaN or ``±inf`` entry; ``None`` when no row
    has one. One row sum decides (a non-finite entry makes it non-finite); only if some sum is
    non-finite (also when finite entries overflow it) are the entries tested one by one. A
    small CPU block is tested entry by entry in one compiled loop instead (fewer than
    ``streams.compiled.SERIAL_BELOW`` entries, where three torch calls cost more)."""
    finite = compiled.all_finite(x_i)
    if finite is None:
        finite = bool(torch.isfinite(x_i.sum(dim=1)).all())
    if finite:
        return None
    bad = ~torch.isfinite(x_i).all(dim=1)
    return bad if bool(bad.any()) else None


def poison_first(values: torch.Tensor, bad: torch.Tensor | None) -> torch.Tensor:
    """``values`` (``(m, k)``, a fresh tensor) with NaN as the first value of the ``bad`` rows."""
    if bad is not None and values.shape[1]:
        values[:, 0] = torch.where(bad, torch.nan, values[:, 0])
    return values


def saturate(y: torch.Tensor, source: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``y`` (computed from ``source`` by scaling) with the entries that overflowed from finite
    ``source`` entries clamped to ``±finfo(dtype).max``; NaN and the infinities of non-finite
    ``source`` entries are kept. Free unless some row of ``y`` is not finite."""
    finite = compiled.all_finite(y)
    if finite or (finite is None and bool(torch.isfinite(y.sum(dim=-1)).all())):
        return y
    big = torch.finfo(dtype).max
    return torch.where(torch.isfinite(source), y.clamp(-big, big), y)


def mark_rows(y: torch.Tensor, fields) -> torch.Tensor:
    """``y`` with the rows flagged in ``fields["nonfinite"]`` (if any) set to NaN."""
    flag = fields.get(NONFINITE)
    if flag is not None and bool(flag.any()):
        y = torch.where(flag[:, None], torch.nan, y)
    return y


def safe_norm(x: torch.Tensor, a: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """``||x||_2`` per row of ``x`` (``a = |x|``, or ``None``: taken where needed), without
    overflow or underflow, saturated at ``finfo(dtype).max``; NaN for a row with a non-finite entry.

    The plain norm is kept where it is in ``[sqrt(d tiny), finfo(dtype).max]`` (no square of an
    entry that matters was subnormal, nothing overflowed); the other rows are recomputed as
    ``max|x_j| * ||x / max|x_j|||``.
    """
    norm = torch.linalg.vector_norm(x, dim=1)
    info = torch.finfo(x.dtype)
    lo = (x.shape[1] * info.tiny) ** 0.5
    ok = (norm >= lo) & (norm <= torch.finfo(dtype).max)
    if bool(ok.all()):
        return norm
    rows = ~ok
    sub = x[rows].abs() if a is None else a[rows]
    top = sub.amax(dim=1)
    den = torch.where(top > 0, top, 1.0)
    again = top * torch.linalg.vector_norm(sub / den[:, None], dim=1)
    # a NaN or inf entry: inf / inf makes the norm NaN, so the row stays non-finite
    again = torch.where(torch.isfinite(top), again, torch.nan)
    norm = norm.clone()
    norm[rows] = again.clamp(max=torch.finfo(dtype).max)
    return norm
