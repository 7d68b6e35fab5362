"""GreedyLore as a DDP comm hook: greedy low-rank projections, lazily refreshed, error feedback.

Chen, He, Li, Jia & Yuan, "Greedy Low-Rank Gradient Compression for Distributed Learning with
Convergence Guarantees", arXiv 2507.08784; code yiran529/GreedyLore, ``comm_hooks/lore_hook.py``
(``LoreState``, ``lore_hook_ef14``, ``lore_hook_ef21``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, itemsize, numel_of
from systems.hooks.registry import register

__all__ = ["GreedyLore", "compressible"]

EF_KINDS = ("ef14", "ef21")


def compressible(shape: torch.Size, rank: int, min_compression_rate: float) -> int:
    """The rank a gradient of ``shape`` is compressed with, 0 if it is sent whole: a tensor of
    two or more axes, read as ``shape[0] x rest`` (``n x m``), with ``r = min(n, m, rank)``, is
    compressed when ``(n + m) r min_compression_rate < n m`` (``lore_hook._should_compress``)."""
    if len(shape) < 2:
        return 0
    n = shape[0]
    m = shape.numel() // n if n else 0
    r = min(n, m, rank)
    return r if r > 0 and (n + m) * r * min_compression_rate < n * m else 0


class GreedyLore(CommHook):
    """GreedyLore (Chen, He, Li, Jia & Yuan 2025, arXiv 2507.08784), the authors' DDP hook.

    Per matrix-shaped gradient ``G`` (``n x m``, the parameter's gradient read as
    ``shape[0] x rest``; compressed only when :func:`compressible` says so), step ``t``:

    * ``t < start_iter``: plain all-reduce of the bucket (warm-up).
    * ``(t - start_iter) % update_proj_gap == 0`` (a refresh): all-reduce the bucket
      uncompressed and output its mean; set ``P`` (``n x r``) to the top-``r`` left singular
      vectors of each mean gradient (the same on every rank, as the mean is). EF14 clears its
      errors; EF21 sets its trackers at the first refresh only (``E_i = G_i`` local,
      ``E = mean G``), as ``lore_hook_ef21`` does with ``update_tracker_every_gap`` off.
    * otherwise, EF14 (``ef="ef14"``): ``M_i = G_i + E_i``, send ``R_i = P^T M_i`` (``r x m``),
      ``E_i = M_i - P R_i``, output ``P mean_i R_i``. EF21 (``ef="ef21"``): send
      ``R_i = P^T (G_i - E_i)``, ``E_i += P R_i``, ``E += P mean_i R_i``, output ``E``.

    ``P`` is shared, so ``mean_i P R_i = P mean_i R_i``: the ``R_i`` are summed by all-reduce, in
    one flat tensor with the gradients that are not compressed (biases, small matrices), which are
    averaged whole (for EF21 that is the tracker's update, exactly: its ``E_i`` would equal the
    last ``G_i``).

    Defaults from ``LoreState``: ``rank=8``, ``update_proj_gap=200``, ``start_iter=10``
    (``start_compress_iter``), ``min_compression_rate=2.0``, ``ef="ef14"``. Deviations from the
    authors' hook: there the EF14 and no-EF branches output ``P sum_i R_i`` (the sum, not the
    mean, of the compressed parts, their comment taking it for PowerSGD's ``P`` that is
    orthogonalized later); here every part is the mean, as a comm hook must return. Their
    exclusion of parameters by name (classifier, embedding) needs names that a bucket does not
    carry and is not done; batching of same-shape matrices is an optimization only. Their
    no-EF variant is not offered.

    Payload per bucket and step: ``4 d`` bytes (float32) at warm-up and refresh steps; otherwise
    ``4 (u + sum r m)`` for ``u`` uncompressed entries and the compressed ``r x m`` factors.
    State (``P``, errors) is kept per parameter, so it survives DDP's rebuilding of buckets.

    Args:
        rank: the projection rank ``r >= 1``.
        update_proj_gap: steps between refreshes of ``P``, ``>= 1``.
        start_iter: steps of plain all-reduce before the first refresh, ``>= 0``.
        min_compression_rate: compress only where it shrinks the message by more, ``> 0``.
        ef: ``ef14`` or ``ef21``.
    """

    name = "greedylore"
    allreducible = True
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        rank: int = 8,
        update_proj_gap: int = 200,
        start_iter: int = 10,
        min_compression_rate: float = 2.0,
        ef: str = "ef14",
    ) -> None:
        super().__init__(process_group)
        for key, val, low in (("rank", rank, 1), ("update_proj_gap", update_proj_gap, 1)):
            if not isinstance(val, int) or isinstance(val, bool) or val < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {key}={val!r}")
        if not isinstance(start_iter, int) or isinstance(start_iter, bool) or start_iter < 0:
            raise ValueError(f"start_iter must be an integer >= 0, got start_iter={start_iter!r}")
        if not min_compression_rate > 0:
            raise ValueError(f"min_compression_rate must be > 0, got {min_compression_rate!r}")
        if ef not in EF_KINDS:
            raise ValueError(f"ef must be one of {', '.join(EF_KINDS)}, got ef={ef!r}")
        self.rank_r, self.update_proj_gap, self.start_iter = rank, update_proj_gap, start_iter
        self.min_compression_rate, self.ef = float(min_compression_rate), ef
        self._iter = 0
        self.P: dict[int, torch.Tensor] = {}
        self.E: dict[int, torch.Tensor] = {}  # EF14's error, EF21's local tracker E_i
        self.E_mean: dict[int, torch.Tensor] = {}  # EF21's tracker of the mean, E

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        t = self._iter
        if bucket.is_last():
            self._iter += 1
        if t < self.start_iter:

            def mean(fut: torch.futures.Future) -> torch.Tensor:
                fut.value()
                with self.timer("decode"):
                    buf.div_(self.world_size)
                return buf

            return self.allreduce_future(buf).then(mean)
        mats = []  # (key, matrix view of the gradient, r) of the compressed gradients
        plain = []
        for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
            r = compressible(g.shape, self.rank_r, self.min_compression_rate)
            if r:
                mats.append((id(p), g.view(g.shape[0], -1), r))
            else:
                plain.append(g)
        if (t - self.start_iter) % self.update_proj_gap == 0:
            return self._refresh(buf, mats, first=t == self.start_iter)
        with self.timer("encode"):
            rs = []
            for key, g, _ in mats:
                P = self.P[key]
                if self.ef == "ef14":
                    m = g + self.E[key]
                    R = P.T @ m
                    self.E[key] = m - P @ R
                else:
                    R = P.T @ (g - self.E[key])
                    self.E[key] = self.E[key] + P @ R
                rs.append(R.reshape(-1))
            payload = torch.cat([x.reshape(-1) for x in plain] + rs)

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()
            with self.timer("decode"):
                payload.div_(self.world_size)
                parts = payload.split([x.numel() for x in plain] + [x.numel() for x in rs])
                for g, part in zip(plain, parts[: len(plain)], strict=True):
                    g.copy_(part.view_as(g))
                for (key, g, r), part in zip(mats, parts[len(plain) :], strict=True):
                    d = self.P[key] @ part.view(r, -1)
                    if self.ef == "ef21":
                        d = self.E_mean[key] = self.E_mean[key] + d
                    g.copy_(d)
            return buf

        # one collective per bucket, issued at once: the buckets' order is DDP's on every rank
        return self.allreduce_future(payload).then(decode)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One all-reduce: the whole bucket before ``start_iter`` and at a refresh step, else
        the uncompressed gradients and the ``r x m`` projections of the compressed ones."""
        if step is not None and (
            step < self.start_iter or (step - self.start_iter) % self.update_proj_gap == 0
        ):
            return self.plain_plan(shapes, dtype)
        total = 0
        for shape in shapes:
            r = compressible(torch.Size(shape), self.rank_r, self.min_compression_rate)
            total += r * numel_of(shape[1:]) if r else numel_of(shape)
        return [Collective("allreduce", total * itemsize(dtype))]

    def _refresh(self, buf: torch.Tensor, mats, first: bool) -> torch.futures.Future:
        local = {}
        if self.ef == "ef21":
            local = {key: g.clone() for key, g, _ in mats if first or key not in self.E}

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()
            with self.timer("decode"):
                buf.div_(self.world_size)
                for key, g, r in mats:
                    work = g if g.dtype == torch.float64 else g.float()
                    self.P[key] = torch.linalg.svd(work, full_matrices=False)[0][:, :r].to(g.dtype)
                    if self.ef == "ef14":
                        self.E[key] = torch.zeros_like(g)
                    elif key in local:
                        self.E[key], self.E_mean[key] = local[key], g.clone()
            return buf

        return self.allreduce_future(buf).then(decode)


register(GreedyLore)
