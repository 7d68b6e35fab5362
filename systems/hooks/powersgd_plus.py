"""PowerSGD+ as a DDP comm hook: PowerSGD whose warm-started query is refreshed by an SVD.

Xie, Chen & Yuan, "From PowerSGD to PowerSGD+: Low-Rank Gradient Compression for Distributed
Optimization with Convergence Guarantees", arXiv 2509.11254 (abstract read only: PowerSGD may not
converge; PowerSGD+ periodically updates the projection subspace by SVD). The refresh round is a
labelled reconstruction, the same as the method's (:mod:`algorithms.lowrank.powersgd_plus`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from algorithms.lowrank.powersgd_plus import refresh_query
from comm.error_feedback import compensate_
from systems.hooks.powersgd import PowerSGD
from systems.hooks.registry import register

__all__ = ["PowerSGDPlus"]


class PowerSGDPlus(PowerSGD):
    """PowerSGD+ (arXiv 2509.11254): :class:`systems.hooks.powersgd.PowerSGD` with a refresh.

    Steps ``t < start_iter`` are plain all-reduces. At ``t >= start_iter`` with
    ``(t - start_iter) % period == 0`` (so the first compressed step is one) the bucket is a
    refresh: each compressed matrix gets its error added (``M = g + e``), the whole bucket is
    all-reduced uncompressed and averaged (the output), each compressed matrix's query ``Q`` is
    set to the top-``r`` right singular vectors of its mean ``M`` (the same on every rank, as the
    mean is), and the errors are cleared (all of ``M`` was sent). The other steps are PowerSGD's,
    warm-started from that ``Q``. ``period = 0`` never refreshes: PowerSGD itself.

    Not read from the paper, so options: ``period`` (default 100, a choice of this library; the
    GreedyLore hook of the same group refreshes every 200), and what a refresh does with the
    error (cleared here, as GreedyLore's EF14 branch does).

    Payload per bucket (float32): ``4 numel`` at plain and refresh steps, PowerSGD's otherwise.

    Args:
        period: steps between refreshes (0: never), ``>= 0``.
        (the others as :class:`systems.hooks.powersgd.PowerSGD`)
    """

    name = "powersgd-plus"

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        rank: int = 1,
        period: int = 100,
        start_iter: int = 2,
        min_compression_rate: float = 2.0,
        error_feedback: bool = True,
        orthogonalization_epsilon: float = 1e-8,
        seed: int = 0,
    ) -> None:
        super().__init__(
            process_group,
            rank=rank,
            start_iter=start_iter,
            min_compression_rate=min_compression_rate,
            warm_start=True,
            error_feedback=error_feedback,
            orthogonalization_epsilon=orthogonalization_epsilon,
            seed=seed,
        )
        if not isinstance(period, int) or isinstance(period, bool) or period < 0:
            raise ValueError(f"powersgd-plus: period must be an integer >= 0, got {period!r}")
        self.period = period

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"].pop("warm_start", None)
        return out

    def is_refresh(self, t: int) -> bool:
        """Whether step ``t`` (counted from 0) refreshes the queries."""
        return t >= self.start_iter and self.period > 0 and (t - self.start_iter) % self.period == 0

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """PowerSGD's plan, and one all-reduce of the whole bucket at a refresh step."""
        if step is not None and self.is_refresh(step):
            return self.plain_plan(shapes, dtype)
        return super().plan(shapes, world_size, dtype, step)

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        if not self.is_refresh(self.iter):
            return super().reduce(bucket)
        buf, idx = bucket.buffer(), bucket.index()
        with self.timer("encode"):
            comp = [g for g in bucket.gradients() if self._compress(g)]
            groups: dict[torch.Size, list[torch.Tensor]] = {}
            for g in comp:  # PowerSGD's order: grouped by shape, in order of first appearance
                groups.setdefault(g.shape, []).append(g)
            mats = [g.view(g.shape[0], -1) for group in groups.values() for g in group]
            memory = self._errors.get(idx)
            if self.error_feedback and memory is not None:
                for j, a in enumerate(mats):
                    compensate_(a, memory.get(j))
        self.tick(bucket)

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()
            with self.timer("decode"):
                buf.div_(self.world_size)
                self._qs[idx] = [
                    refresh_query(a, min(a.shape[0], a.shape[1], self.rank_r)) for a in mats
                ]
                self._errors.pop(idx, None)
            return buf

        return self.in_turn(lambda: self.allreduce_future(buf).then(decode), buf)


register(PowerSGDPlus)
