"""PyTorch's own DDP comm hooks, as comparators of the library's: ``torch-powersgd``,
``torch-fp16``, ``torch-bf16``.

``torch.distributed.algorithms.ddp_comm_hooks``: ``powerSGD_hook.PowerSGDState`` with
``powerSGD_hook`` (Vogels, Karimireddy & Jaggi, arXiv 1905.13727, the DDP form the library's
:mod:`systems.hooks.powersgd` follows step for step), and ``default_hooks.fp16_compress_hook``
/ ``bf16_compress_hook`` (the bucket divided by the world size, cast to 16 bits, all-reduced and
cast back). Made by name like the library's hooks (``make_hook("torch-powersgd:rank=4")``) and
usable wherever they are; PyTorch's code does the work, unchanged.

What the statistics hold. PyTorch's hooks issue their collectives and run their callbacks inside
PyTorch's code, which cannot be split into encode and decode: ``encode_s`` is the wall time of
the hook call itself (for PowerSGD: error feedback, the ``P = M Q`` products and issuing the
first all-reduce; for fp16/bf16: the cast and the division), and the callbacks (PowerSGD's
orthogonalization, ``Q = Mᵀ P``, the decompression; the casts back) are not timed, so they fall
in what :mod:`systems.netstudy` takes as communication. ``decode_s`` stays 0. The collectives
and their bytes are counted from :meth:`plan` at each bucket, declared rather than observed
(``stats.counted == "declared"``); the tests hold the plans to what PyTorch issues.

Order of the collectives. PyTorch's PowerSGD issues ``P``'s all-reduce from the callback of the
uncompressed tensors' all-reduce and ``Q``'s from the next one, each waited for in its callback.
With several buckets in flight the ranks could issue those in different orders (and with gloo,
deadlock), so, as the library's multi-stage hooks do (:meth:`comm.hooks.CommHook.in_turn`), a
bucket's ``powerSGD_hook`` call is made once the previous bucket's future has completed. The
fp16/bf16 hooks issue one collective per bucket, at once.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

from comm.hooks import Collective, CommHook, itemsize, numel_of
from systems.hooks.powersgd import check_powersgd_args
from systems.hooks.registry import register

__all__ = ["TorchBF16", "TorchFP16", "TorchPowerSGD"]


class _TorchHook(CommHook):
    """Times the call of a PyTorch hook as encode and counts its plan (module docstring)."""

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        super().__init__(process_group)
        self.stats.counted = "declared"

    def _call(self, bucket: dist.GradBucket, step: int | None) -> torch.futures.Future:
        shapes = [tuple(g.shape) for g in bucket.gradients()]
        dtype = bucket.buffer().dtype
        t0 = time.perf_counter()
        fut = self._torch_hook(bucket)
        self.timer.add("encode", time.perf_counter() - t0)
        for c in self.plan(shapes, self.world_size, dtype, step):
            self.stats.add(c.kind, c.nbytes)
        return fut

    def _torch_hook(self, bucket: dist.GradBucket) -> torch.futures.Future:
        raise NotImplementedError


class TorchPowerSGD(_TorchHook):
    """PyTorch's ``powerSGD_hook`` (arXiv 1905.13727) with its ``PowerSGDState``.

    Args (``PowerSGDState``'s names in brackets; defaults the library ``powersgd`` hook's):
        rank: ``matrix_approximation_rank``, ``>= 1`` (1).
        start_iter: ``start_powerSGD_iter``: steps before it are plain all-reduces; ``>= 2``
            (2; PyTorch's default is 1000).
        min_compression_rate: compress a tensor viewed as ``(n, m)`` only if ``(n + m) r *
            rate < n m`` (2.0). PyTorch tests every tensor, 1-D ones as ``(n, 1)``, so a
            ``rate < 1`` compresses biases too, where the library hook sends them raw.
        warm_start: reuse the previous step's ``P`` and ``Q`` (True).
        use_error_feedback: add the previous residual to the gradient (True).
        orthogonalization_epsilon: added to the column norms in Gram-Schmidt, ``>= 0`` (1e-8;
            PyTorch's default is 0).
        seed: ``random_seed`` of the initial ``Q`` (0).
    """

    name = "torch-powersgd"
    allreducible = True
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        rank: int = 1,
        start_iter: int = 2,
        min_compression_rate: float = 2.0,
        warm_start: bool = True,
        use_error_feedback: bool = True,
        orthogonalization_epsilon: float = 1e-8,
        seed: int = 0,
    ) -> None:
        super().__init__(process_group)
        check_powersgd_args(self.name, rank, min_compression_rate, orthogonalization_epsilon)
        self.rank_r = rank
        self.start_iter = self.check_start_iter(self.name, start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.warm_start = bool(warm_start)
        self.use_error_feedback = bool(use_error_feedback)
        self.orthogonalization_epsilon = float(orthogonalization_epsilon)
        self.seed = seed
        self._state = ps.PowerSGDState(
            process_group,
            matrix_approximation_rank=rank,
            start_powerSGD_iter=start_iter,
            min_compression_rate=self.min_compression_rate,
            use_error_feedback=self.use_error_feedback,
            warm_start=self.warm_start,
            orthogonalization_epsilon=self.orthogonalization_epsilon,
            random_seed=seed,
        )

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"]["rank"] = out["params"].pop("rank_r")
        return out

    @property
    def iter(self) -> int:
        """PyTorch's step counter (``PowerSGDState.iter``)."""
        return self._state.iter

    def _torch_hook(self, bucket: dist.GradBucket) -> torch.futures.Future:
        return ps.powerSGD_hook(self._state, bucket)

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        # the step is read when the call is made: PyTorch advances it in a callback
        return self.in_turn(lambda: self._call(bucket, self._state.iter), bucket.buffer())

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """PyTorch's three all-reduces, issued even when empty: the uncompressed tensors, then
        ``P`` (``n r`` per compressed tensor), then ``Q`` (``m r``); one all-reduce of the
        whole bucket before ``start_iter``."""
        if step is not None and step < self.start_iter:
            return self.plain_plan(shapes, dtype)
        size = itemsize(dtype)
        raw = p_len = q_len = 0
        for shape in shapes:
            n = int(shape[0]) if len(shape) else 1
            m = numel_of(shape) // n if n else 0
            r = min(n, m, self.rank_r)
            if (n + m) * r * self.min_compression_rate < n * m:
                p_len, q_len = p_len + n * r, q_len + m * r
            else:
                raw += numel_of(shape)
        return [Collective("allreduce", n * size) for n in (raw, p_len, q_len)]


class _TorchHalf(_TorchHook):
    wire_dtype = torch.float16

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        return self._call(bucket, None)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One all-reduce of the bucket in 16 bits."""
        return [Collective("allreduce", sum(numel_of(s) for s in shapes) * 2)]


class TorchFP16(_TorchHalf):
    """PyTorch's ``fp16_compress_hook``: the bucket / world size in fp16, all-reduced."""

    name = "torch-fp16"

    def _torch_hook(self, bucket: dist.GradBucket) -> torch.futures.Future:
        return default_hooks.fp16_compress_hook(self.group, bucket)


class TorchBF16(_TorchHalf):
    """PyTorch's ``bf16_compress_hook``: the bucket / world size in bf16, all-reduced."""

    name = "torch-bf16"

    def _torch_hook(self, bucket: dist.GradBucket) -> torch.futures.Future:
        return default_hooks.bf16_compress_hook(self.group, bucket)


register(TorchPowerSGD)
register(TorchFP16)
register(TorchBF16)
