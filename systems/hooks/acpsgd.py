"""ACP-SGD: alternating compressed PowerSGD, one factor all-reduced per step.

Lin Zhang, Longteng Zhang, Shaohuai Shi, Xiaowen Chu & Bo Li, "Evaluation and Optimization of
Gradient Compression for Distributed Deep Learning", ICDCS 2023, arXiv 2306.08881. Authors'
code: lzhangbv/acpsgd ``acpsgd.py`` (``_DistributedOptimizer``, ``_alternative_compress``,
``_bp_barrier``), read for this hook.

Per layer with an at least 2-D gradient ``g`` viewed as ``M`` of shape ``(n, m)``
(``n = shape[0]``), ``r = min(rank, n, m)``, local error ``E`` (zero at first) and the shared
factors ``P (n, r)``, ``Q (m, r)`` of the previous step, the steps alternate:

- P-step: ``Q <- orth(Q)``; ``P = (M + E) Q``; ``E <- M + E - P Qᵀ``; all-reduce ``P``;
  output ``mean(P) Qᵀ``;
- Q-step: ``P <- orth(P)``; ``Q = (M + E)ᵀ P``; ``E <- M + E - P Qᵀ``; all-reduce ``Q``;
  output ``P mean(Q)ᵀ``.

``orth`` is ``torch.linalg.qr(.).Q`` as in the authors' code. The error uses the worker's own
factor before the all-reduce, as in ``_alternative_compress``. Each step thus runs half a
power iteration warm-started from the other factor, and all-reduces one factor instead of
PowerSGD's two. 1-D gradients (biases, norms) are all-reduced raw every step in the same flat
tensor as the factors (the authors' fused buffers hold them too). The first compressed step
is a P-step from a standard normal ``Q`` (the authors draw ``torch.randn`` unseeded, marked
"check: set seed"; here a private generator seeded with ``seed``, the same on every rank,
draws the ``Q`` of each bucket's compressed layers in bucket order as buckets first compress).

Defaults: ``rank=4`` (``_DistributedOptimizer(..., rank=4)`` and ``DistributedOptimizer``).
Every at least 2-D tensor is compressed, whatever its size, as in the authors' code.
``start_iter=2``: the authors compress from the first step; under DDP, whose buckets are
rebuilt after the first iteration and whose state here is keyed by bucket index, the steps
``t < start_iter`` are plain all-reduces (the rule of PyTorch's PowerSGD hook).

Payload per step and bucket (bytes, float32): P-step ``4 (sum n r + raw numel)``, Q-step
``4 (sum m r + raw numel)``; a plain step ``4 numel``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, itemsize, numel_of
from systems.hooks.registry import register

__all__ = ["ACPSGD"]


class ACPSGD(CommHook):
    """ACP-SGD (arXiv 2306.08881): alternate P/Q half power steps, one factor all-reduced, EF.

    Args:
        rank: the factor rank ``r`` (per layer ``min(r, n, m)``), ``>= 1``.
        start_iter: steps ``t < start_iter`` are plain all-reduces; ``>= 2``.
        seed: seeds the initial ``Q`` (the same on every rank).
    """

    name = "acp-sgd"
    allreducible = True
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        rank: int = 4,
        start_iter: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__(process_group)
        if not isinstance(rank, int) or rank < 1:
            raise ValueError(f"acp-sgd: rank must be an integer >= 1, got {rank!r}")
        self.rank_r = rank
        self.start_iter = self.check_start_iter(self.name, start_iter)
        self.seed = seed
        self.iter = 0
        self._gen = torch.Generator().manual_seed(seed)
        # bucket index -> per compressed layer [E, P, Q]
        self._state: dict[int, list[list[torch.Tensor]]] = {}

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"]["rank"] = out["params"].pop("rank_r")
        out["params"].pop("iter", None)
        return out

    def _init_state(self, mats: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        state = []
        for a in mats:
            n, m = a.shape
            r = min(n, m, self.rank_r)
            q = torch.randn(m, r, generator=self._gen, dtype=a.dtype).to(a.device)
            state.append([torch.zeros_like(a), a.new_zeros(n, r), q])
        return state

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        W = self.world_size
        if self.iter < self.start_iter:
            return self.plain_step(bucket)

        compute_p = (self.iter - self.start_iter) % 2 == 0
        with self.timer("encode"):
            grads = bucket.gradients()
            mats = [g.view(g.shape[0], -1) for g in grads if g.dim() > 1]
            raw = [g for g in grads if g.dim() <= 1]
            idx = bucket.index()
            if idx not in self._state:
                self._state[idx] = self._init_state(mats)
            parts = []
            for a, (e, p, q) in zip(mats, self._state[idx], strict=True):
                e.add_(a)  # e is now M + E
                if compute_p:
                    q.copy_(torch.linalg.qr(q).Q)
                    torch.matmul(e, q, out=p)
                    parts.append(p.reshape(-1))
                else:
                    p.copy_(torch.linalg.qr(p).Q)
                    torch.matmul(e.T, p, out=q)
                    parts.append(q.reshape(-1))
                e.sub_(p @ q.T)
            parts += [g.reshape(-1) for g in raw]
            flat = torch.cat(parts)
        self.tick(bucket)
        state = self._state[idx]

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()
            with self.timer("decode"):
                flat.div_(W)
                off = 0
                for a, (_, p, q) in zip(mats, state, strict=True):
                    f = p if compute_p else q
                    f.copy_(flat[off : off + f.numel()].view_as(f))
                    off += f.numel()
                    torch.matmul(p, q.T, out=a)
                for g in raw:
                    g.copy_(flat[off : off + g.numel()].view_as(g))
                    off += g.numel()
            return buf

        # one collective per bucket, issued at once: the buckets' order is DDP's on every rank
        return self.allreduce_future(flat).then(decode)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One all-reduce of the factors and the raw (1-D) gradients: ``sum n r + raw`` values
        at a P-step (``(step - start_iter)`` even; ``step=None`` is a P-step), ``sum m r +
        raw`` at a Q-step; the whole bucket before ``start_iter``."""
        if step is not None and step < self.start_iter:
            return self.plain_plan(shapes, dtype)
        p_step = step is None or (step - self.start_iter) % 2 == 0
        total = 0
        for shape in shapes:
            if len(shape) < 2:
                total += numel_of(shape)
                continue
            n, m = int(shape[0]), numel_of(shape[1:])
            total += (n if p_step else m) * min(n, m, self.rank_r)
        return [Collective("allreduce", total * itemsize(dtype))]


register(ACPSGD)
