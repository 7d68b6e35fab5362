"""ScaleCom: cyclic local top-k (CLT-k) sparsification with low-pass filtered error feedback.

Chia-Yu Chen, Jiamin Ni, Songtao Lu, Xiaodong Cui, Pin-Yu Chen, Xiao Sun, Naigang Wang, Swagath
Venkataramani, Vijayalakshmi Srinivasan, Wei Zhang & Kailash Gopalakrishnan, "ScaleCom:
Scalable Sparsified Gradient Compression for Communication-Efficient Distributed Training",
NeurIPS 2020, arXiv 2104.11125. No authors' code was found. What could be read: the paper's
introduction and the NeurIPS reviews (one worker's sparsity pattern sparsifies every worker's
gradient, so the values can be all-reduced; error feedback with a low-pass filter). The
algorithm's detailed steps and the default ``beta`` could not be read; what follows is a
reconstruction, labelled as such, whose memory update agrees with a third-party TensorFlow
``ScaleCom.compress`` (``m <- (1 - discount) m + discount (m + g - C(m + g))``).

Reconstruction, per bucket (flat, ``d`` entries) at step ``t`` with ``k = max(1, round(ratio
d))`` and leader ``l = t mod W``:

1. every worker forms its error-compensated gradient ``v_i = m_i + g_i``;
2. the leader picks the indices ``I`` of the ``k`` largest ``|v_l|`` (ties toward the lower
   index, as :func:`compressors.top_k.top_k_indices`) and broadcasts them (int32);
3. every worker all-reduces its values ``v_i[I]``; the output is ``mean_i v_i[I]`` at ``I``, 0
   elsewhere;
4. low-pass filtered memory: ``m_i <- (1 - beta) m_i + beta (v_i - C_I(v_i))``, where
   ``C_I`` keeps the entries at ``I``. ``beta = 1`` is plain error feedback (the memory is the
   whole residual); smaller ``beta`` smooths the memory over steps.

Defaults: ``ratio=0.01`` (a 100x compression, of the order of those the paper reports),
``beta=0.1`` [reconstruction: not read from the paper]. ``start_iter=2``: plain all-reduces
for the steps ``t < start_iter``, because DDP rebuilds its buckets after the first iteration
and the memory is keyed by bucket index (the rule of PyTorch's PowerSGD hook); the leader
still rotates with ``t`` counted from the first step.

Payload per compressed step and bucket: the index broadcast ``4 k`` bytes (counted on every
rank: the payload of the collective, as for all-reduce) plus ``k * element_size`` bytes of
values; a plain step ``numel * element_size``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.error_feedback import Memory
from comm.hooks import Collective, CommHook, chain, itemsize, numel_of
from compressors.top_k import top_k_indices
from systems.hooks.registry import register

__all__ = ["ScaleCom"]


class ScaleCom(CommHook):
    """ScaleCom (arXiv 2104.11125): a rotating leader's top-k indices, low-pass filtered EF.

    Args:
        ratio: fraction of each bucket's entries sent, in ``(0, 1]``.
        beta: the low-pass filter's weight of the new residual, in ``(0, 1]``.
        start_iter: steps ``t < start_iter`` are plain all-reduces; ``>= 2``.
    """

    name = "scalecom"
    allreducible = True
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        ratio: float = 0.01,
        beta: float = 0.1,
        start_iter: int = 2,
    ) -> None:
        super().__init__(process_group)
        if not 0 < ratio <= 1:
            raise ValueError(f"scalecom: ratio must be in (0, 1], got {ratio!r}")
        if not 0 < beta <= 1:
            raise ValueError(f"scalecom: beta must be in (0, 1], got {beta!r}")
        self.ratio = float(ratio)
        self.beta = float(beta)
        self.start_iter = self.check_start_iter(self.name, start_iter)
        self.iter = 0
        self._memory = Memory(self.beta)  # low-pass error feedback, by bucket index

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"].pop("iter", None)
        return out

    def k_of(self, d: int) -> int:
        """Entries sent of a bucket of ``d`` entries."""
        return min(d, max(1, round(self.ratio * d)))

    def leader(self, t: int) -> int:
        """The rank (in the group) that picks the indices at step ``t``."""
        return t % self.world_size

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        W = self.world_size
        if self.iter < self.start_iter:
            return self.plain_step(bucket)

        leader = self.leader(self.iter)
        d = buf.numel()
        k = self.k_of(d)
        with self.timer("encode"):
            idx_b = bucket.index()
            m = self._memory.zeros(idx_b, buf)
            v = buf + m
            if self.rank == leader:
                sel = top_k_indices(v.abs().view(1, -1), k).view(-1).to(torch.int32)
            else:
                sel = torch.empty(k, dtype=torch.int32, device=buf.device)
        self.tick(bucket)
        kept: list[torch.Tensor] = []

        def send_values(fut: torch.futures.Future) -> torch.futures.Future:
            fut.value()
            with self.timer("encode"):
                kept.append(sel.long())
                vals = v[kept[0]]
                v[kept[0]] = 0  # v is now the residual v - C_I(v)
                self._memory.keep(idx_b, v)
            return self.allreduce_future(vals)

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            vals = fut.value()[0]
            with self.timer("decode"):
                buf.zero_()
                buf[kept[0]] = vals.div_(W)
            return buf

        return self.in_turn(
            lambda: chain(self.broadcast_future(sel, leader), send_values, buf).then(decode), buf
        )

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """The leader's ``k`` int32 indices broadcast, then the ``k`` values all-reduced
        (``k`` from the bucket's size); the whole bucket before ``start_iter``."""
        if step is not None and step < self.start_iter:
            return self.plain_plan(shapes, dtype)
        k = self.k_of(sum(numel_of(s) for s in shapes))
        return [Collective("broadcast", 4 * k), Collective("allreduce", k * itemsize(dtype))]


register(ScaleCom)
