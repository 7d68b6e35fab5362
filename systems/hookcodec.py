"""A hook's encode and decode time per DDP bucket, measured on this machine at a model's shapes.

One process, a process group of world size 1 over an in-memory ``HashStore`` (as
:mod:`systems.hooks.bench`: gloo on the CPU, NCCL on a CUDA device), so the hook runs its real
code on DDP's real buckets while its collectives cost next to nothing. The module DDP wraps has
the model's parameter tensors (:func:`systems.layers.model_shapes`) and a backward pass that
costs almost nothing: its loss is ``sum_i <p_i, c_i>`` over fixed standard-normal ``c_i``,
chained so that autograd produces the gradients in reverse parameter order, as a feed-forward
model does; each gradient is its ``c_i``, so a top-k or a threshold sees Gaussian values. DDP
rebuilds its buckets after the first iteration, in that order, under the cap given; the buckets
seen are returned so the caller can check them against :func:`systems.model.ddp_buckets`.

Per bucket, the hook's own :class:`comm.hooks.HookStats` give the encode (local work before its
first collective; for PowerSGD also the work between its two all-reduces) and decode seconds;
the hook's future is waited for inside the timed call, so its decode is attributed to its
bucket. A hook that reports no encode/decode of its own (both zero) is charged its whole call
time as encode. On CUDA the device runs asynchronously, so the host clock around a block of
kernel launches says little: the hook's timer is replaced by one that synchronises the device at
both ends of each span, every bucket's call is timed with the device synchronised at both ends,
and the call time (encode, a world-size-1 collective's copy, decode) is split between encode and
decode in the proportion of the synchronised spans (all encode if there are none). Steps before
the hook compresses (``start_iter``) are run and dropped, then the median over ``repeats`` timed
iterations is kept per bucket. With world size 1 a leader-based hook (ScaleCom) is always the
leader, so its encode is the leader's, the one every rank waits for.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from comm.hooks import Timer, settle
from systems.hooks.bench import resolve_device

__all__ = ["ShapeModule", "SyncTimer", "resolve_device", "time_hook"]


class ShapeModule(nn.Module):
    """Parameters of the given shapes and a near-free backward pass (see the module docstring)."""

    def __init__(
        self, shapes: list[tuple[int, ...]], seed: int = 0, device: torch.device | str = "cpu"
    ) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.params = nn.ParameterList(nn.Parameter(torch.zeros(s, device=device)) for s in shapes)
        self.coef = [torch.randn(s, generator=gen).to(device) for s in shapes]

    def forward(self) -> torch.Tensor:
        x = torch.zeros((), device=self.coef[0].device if self.coef else "cpu")
        for p, c in zip(self.params, self.coef, strict=True):  # a loop over tensors
            x = x + (p * c).sum()
        return x


class _SyncSpan:
    def __init__(self, span, device: torch.device) -> None:
        self.span, self.device = span, device

    def __enter__(self):
        torch.cuda.synchronize(self.device)
        return self.span.__enter__()

    def __exit__(self, *exc: object) -> None:
        torch.cuda.synchronize(self.device)
        self.span.__exit__(*exc)


class SyncTimer(Timer):
    """A hook's :class:`comm.hooks.Timer` whose spans synchronise ``device`` at both ends."""

    def __init__(self, stats, device: torch.device) -> None:
        super().__init__(stats)
        self.device = device

    def __call__(self, what: str) -> _SyncSpan:
        return _SyncSpan(super().__call__(what), self.device)

    def add(self, what: str, seconds: float) -> None:
        span = super().__call__(what)  # measured elsewhere: no synchronisation to add
        span.t0 = time.perf_counter() - seconds
        span.__exit__()


def time_hook(
    spec: str,
    shapes: list[tuple[int, ...]],
    bucket_cap_mb: float | None = None,
    repeats: int = 2,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> dict:
    """Encode/decode seconds per bucket of the hook ``spec`` at ``shapes`` on ``device`` (module
    docstring).

    Returns:
        ``{"encode_s": [...], "decode_s": [...], "call_s": [...], "buckets": [[tensor indices
        of each bucket, forward numbering], ...], "iterations": timed iterations, "device":
        str(device)}``, lists in the order DDP reduced the buckets.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from systems.hooks.registry import make_hook

    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    hook = make_hook(spec)
    own = not dist.is_initialized()
    if own:
        if cuda:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)  # fmt: skip
    elif dist.get_world_size() != 1:
        raise ValueError(f"time_hook runs in one process; the group has {dist.get_world_size()}")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    try:
        net = ShapeModule(shapes, seed, dev)
        kw = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
        if cuda:
            kw["device_ids"] = [dev.index]
        ddp = DDP(net, **kw)
        hook.register(ddp)
        if cuda:
            hook.timer = SyncTimer(hook.stats, dev)
        index = {p.data_ptr(): i for i, p in enumerate(net.parameters())}
        calls: list[tuple[int, list[int], float, float, float]] = []
        orig = hook.reduce

        def timed(bucket):
            e0, d0 = hook.stats.encode_s, hook.stats.decode_s
            sync()
            t0 = time.perf_counter()
            fut = orig(bucket)
            fut.wait()
            sync()
            dt = time.perf_counter() - t0
            members = sorted(index.get(p.data_ptr(), -1) for p in bucket.parameters())
            calls.append((bucket.index(), members, hook.stats.encode_s - e0,
                          hook.stats.decode_s - d0, dt))  # fmt: skip
            return fut

        hook.reduce = timed
        warmup = max(2, int(getattr(hook, "start_iter", 0) or 0))
        per_iter = []
        for it in range(warmup + repeats):
            calls.clear()
            ddp.zero_grad(set_to_none=True)
            ddp().backward()
            sync()
            if it >= warmup:
                per_iter.append(sorted(calls, key=lambda c: c[0]))
        settle()  # the group's thread done with the last bucket before the model goes
        del ddp, net
        gc.collect()
    finally:
        if own:
            dist.destroy_process_group()
    enc = [
        statistics.median(col) for col in zip(*[[c[2] for c in it] for it in per_iter], strict=True)
    ]
    dec = [
        statistics.median(col) for col in zip(*[[c[3] for c in it] for it in per_iter], strict=True)
    ]
    call = [
        statistics.median(col) for col in zip(*[[c[4] for c in it] for it in per_iter], strict=True)
    ]
    if cuda:  # the synchronised call is the device's time; the spans give the split
        parts = [(e / (e + d), d / (e + d)) if e + d > 0 else (1.0, 0.0)
                 for e, d in zip(enc, dec, strict=True)]  # fmt: skip
        enc = [c * pe for c, (pe, _) in zip(call, parts, strict=True)]
        dec = [c * pd for c, (_, pd) in zip(call, parts, strict=True)]
    elif sum(enc) + sum(dec) == 0.0:
        enc = list(call)
    members = [sorted(c[1], reverse=True) for c in per_iter[-1]]
    return {"encode_s": enc, "decode_s": dec, "call_s": call, "buckets": members,
            "iterations": repeats, "device": str(dev)}  # fmt: skip
