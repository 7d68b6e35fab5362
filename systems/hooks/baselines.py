"""The uncompressed baselines: fp32 all-reduce, and fp16/bf16 all-reduce (the honest baseline
of Han, Vargaftik, Mitzenmacher, Karp & Ben Basat, HotNets 2024, arXiv 2407.01378).

``allreduce``: DDP's default, the bucket summed in its own dtype and divided by the world size
(``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook``). ``fp16`` and
``bf16``: the bucket cast to 16 bits, divided by the world size first (so the sum cannot
overflow where the mean does not), all-reduced, and cast back into the bucket
(``fp16_compress_hook``/``bf16_compress_hook``). All three are asynchronous: DDP overlaps them
with the rest of the backward pass.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, itemsize, numel_of

__all__ = ["AllReduce", "HalfAllReduce", "FP16", "BF16"]


class AllReduce(CommHook):
    """Plain all-reduce of the bucket in its dtype (DDP's default)."""

    name = "allreduce"

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        with self.timer("encode"):
            buf = bucket.buffer()
            buf.div_(self.world_size)
        return self.allreduce_future(buf).then(lambda fut: fut.value()[0])

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        return self.plain_plan(shapes, dtype)


class HalfAllReduce(CommHook):
    """All-reduce in a 16-bit float type, written back into the bucket's dtype."""

    name = "half"
    wire_dtype = torch.float16

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        with self.timer("encode"):
            buf = bucket.buffer()
            half = buf.to(self.wire_dtype).div_(self.world_size)
        fut = self.allreduce_future(half)

        def back(f: torch.futures.Future) -> torch.Tensor:
            with self.timer("decode"):
                buf.copy_(f.value()[0])
            return buf

        return fut.then(back)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        numel = sum(numel_of(s) for s in shapes)
        return [Collective("allreduce", numel * itemsize(self.wire_dtype))]


class FP16(HalfAllReduce):
    """fp16 all-reduce (IEEE half: 5 exponent bits; overflows above 65504)."""

    name = "fp16"
    wire_dtype = torch.float16


class BF16(HalfAllReduce):
    """bf16 all-reduce (8 exponent bits, float32's range, 8 significant bits)."""

    name = "bf16"
    wire_dtype = torch.bfloat16
