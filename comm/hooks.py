"""The DDP comm-hook interface shared by every hook of :mod:`systems.hooks`.

PyTorch calls ``hook(state, bucket)`` once per gradient bucket during the backward pass, and
expects a ``torch.futures.Future`` whose value is the bucket's flat buffer holding the gradient
averaged over the workers (``torch.distributed.GradBucket``: ``buffer()``, ``gradients()``,
``parameters()``, ``index()``, ``is_last()``). A :class:`CommHook` is its own state:
:meth:`register` passes ``self`` as the state and :meth:`CommHook.reduce` does the work.

Timing (:class:`HookStats`): ``encode_s`` is the wall time of the local work before the first
collective of a bucket is issued (compression, error feedback, packing), ``decode_s`` the local
work after the collectives complete (unpacking, decompression, the average), summed over buckets
and steps. Collectives are awaited inside the hook (``.wait()``) whenever a later stage needs their
result; the time spent waiting is communication and is not counted as encode/decode. The caller
(:mod:`systems.netstudy`) measures an iteration's compute alone and takes communication as the
remainder. ``sent_bytes`` is the number of payload bytes this worker hands to collectives
(``numel * element_size`` of each tensor all-reduced or all-gathered, indices and scales
included), per step: the payload the performance model charges, not the TCP traffic of the
collective's algorithm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["Collective", "CommHook", "HookStats", "Timer", "itemsize", "numel_of"]

KINDS = ("allreduce", "allgather")


@dataclass(frozen=True)
class Collective:
    """One collective a hook issues for a bucket: its kind and the payload bytes this worker
    hands to it (``numel * element_size``; for ``allgather`` the bytes of this worker's own
    message). ``data_dependent``: the size depends on the gradient's values (a threshold, an
    adaptive selection), so ``nbytes`` is the hook's nominal size, not an exact count."""

    kind: str
    nbytes: int
    data_dependent: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Collective: kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.nbytes, int) or self.nbytes < 0:
            raise ValueError(f"Collective: nbytes must be an integer >= 0, got {self.nbytes!r}")


def numel_of(shape: tuple[int, ...]) -> int:
    """The number of elements of a tensor of this ``shape``."""
    out = 1
    for k in shape:
        out *= int(k)
    return out


def itemsize(dtype: torch.dtype) -> int:
    """Bytes of one element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


@dataclass
class HookStats:
    """Totals since the last :meth:`reset`: seconds of local encode/decode work, payload bytes
    this worker handed to collectives, collectives issued and buckets reduced."""

    encode_s: float = 0.0
    decode_s: float = 0.0
    sent_bytes: int = 0
    collectives: int = 0
    buckets: int = 0

    def reset(self) -> None:
        self.encode_s = self.decode_s = 0.0
        self.sent_bytes = self.collectives = self.buckets = 0


class Timer:
    """``with timer("encode"): ...`` adds the block's wall time to ``stats.encode_s``."""

    def __init__(self, stats: HookStats) -> None:
        self.stats = stats
        self._what = ""
        self._t0 = 0.0

    def __call__(self, what: str) -> Timer:
        if what not in ("encode", "decode"):
            raise ValueError(f"Timer: what must be 'encode' or 'decode', got {what!r}")
        self._what = what
        return self

    def __enter__(self) -> Timer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        dt = time.perf_counter() - self._t0
        if self._what == "encode":
            self.stats.encode_s += dt
        else:
            self.stats.decode_s += dt


class CommHook:
    """Base of the hooks: parameters, the process group, statistics and the collectives.

    Subclasses set the class attributes and implement :meth:`reduce`.

    Class attributes:
        name: the registry name (``"powersgd"``).
        allreducible: the payload is summed by all-reduce (else all-gathered); the performance
            model picks the collective from this.
        stateful: the hook keeps per-bucket state between steps (error feedback, warm starts).
        momentum_in_hook: the hook applies the optimizer's momentum itself (DGC's momentum
            correction), so the optimizer must be plain SGD; :mod:`systems.netstudy` drops the
            optimizer's momentum for such hooks.
    """

    name = "base"
    allreducible = True
    stateful = False
    momentum_in_hook = False

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        self.group = process_group
        self.stats = HookStats()
        self.timer = Timer(self.stats)

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> CommHook:
        """Attach this hook to ``ddp_model`` (``register_comm_hook(self, ...)``); returns self."""
        ddp_model.register_comm_hook(self, _dispatch)
        return self

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """The bucket's flat gradient averaged over the workers, as a future."""
        raise NotImplementedError

    def plan(
        self,
        shapes: list[tuple[int, ...]],
        world_size: int,
        dtype: torch.dtype = torch.float32,
    ) -> list[Collective]:
        """The collectives this hook issues, in order, for one bucket holding gradients of these
        ``shapes`` and ``dtype`` on ``world_size`` workers, at a compressed step (after any
        warm-up of plain all-reduces). The hook's own declaration, read by the performance
        model (:mod:`systems.model`); the tests hold it to what the hook actually issues."""
        raise NotImplementedError(f"hook {self.name!r} does not declare its collectives")

    # --- helpers for subclasses -------------------------------------------------------------
    @staticmethod
    def check_start_iter(name: str, start_iter: object) -> int:
        """``start_iter``, which must be an integer ``>= 2``: DDP rebuilds its buckets after the
        first iteration, so state keyed by bucket index starts at the second at the earliest
        (PyTorch's PowerSGD hook has the same rule)."""
        if not isinstance(start_iter, int) or isinstance(start_iter, bool) or start_iter < 2:
            raise ValueError(
                f"{name}: start_iter must be an integer >= 2 (DDP rebuilds its buckets after "
                f"the first iteration), got {start_iter!r}"
            )
        return start_iter

    def tick(self, bucket: dist.GradBucket) -> None:
        """Count a step once its last bucket is reduced (``self.iter``)."""
        if bucket.is_last():
            self.iter += 1

    def plain_step(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """An uncompressed step (before ``start_iter``): the bucket's mean by all-reduce."""
        self.tick(bucket)
        with self.timer("encode"):
            buf = bucket.buffer()
            buf.div_(self.world_size)
        return self.allreduce_future(buf).then(lambda fut: fut.value()[0])

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    def _count(self, *tensors: torch.Tensor) -> None:
        self.stats.collectives += 1
        self.stats.sent_bytes += sum(t.numel() * t.element_size() for t in tensors)

    def allreduce(self, tensor: torch.Tensor, async_op: bool = False):
        """Sum ``tensor`` in place across the group (counted); a work handle if ``async_op``."""
        self._count(tensor)
        return dist.all_reduce(tensor, group=self.group, async_op=async_op)

    def allreduce_future(self, tensor: torch.Tensor) -> torch.futures.Future:
        """All-reduce ``tensor`` (sum, in place; counted) and return the work's future."""
        self._count(tensor)
        return dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

    def allgather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every worker's ``tensor`` (same shape on all), in rank order (counted, blocking)."""
        self._count(tensor)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor, group=self.group)
        return out

    def allgather_varlen(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every worker's 1-D ``tensor``, whose length may differ between workers: the lengths
        are all-gathered first (one int64 each, counted), then the padded payloads."""
        n = torch.tensor([tensor.numel()], dtype=torch.int64, device=tensor.device)
        sizes = [int(s) for s in self.allgather(n)]
        padded = torch.zeros(max(sizes), dtype=tensor.dtype, device=tensor.device)
        padded[: tensor.numel()] = tensor
        self.stats.collectives += 1
        self.stats.sent_bytes += tensor.numel() * tensor.element_size()  # the padding is not data
        out = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(out, padded, group=self.group)
        return [o[:s] for o, s in zip(out, sizes, strict=False)]

    @staticmethod
    def done(tensor: torch.Tensor) -> torch.futures.Future:
        """A completed future holding ``tensor`` (for hooks that waited on their collectives)."""
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(tensor)
        return fut

    def describe(self) -> dict[str, object]:
        """Name, collective and parameters, for reports and ``config.json``-like records."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_") and _plain(v)}
        return {"name": self.name, "allreducible": self.allreducible, "params": params}


def _dispatch(state, bucket):
    """What DDP calls for each bucket: ``state`` is the :class:`CommHook`."""
    state.stats.buckets += 1
    return state.reduce(bucket)


# DDP checks the annotations themselves (not their text): set them as objects.
_dispatch.__annotations__ = {
    "state": object,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


def _plain(v: object) -> bool:
    return isinstance(v, (int, float, str, bool, type(None)))
