"""The DDP comm-hook interface shared by every hook of :mod:`systems.hooks`.

PyTorch calls ``hook(state, bucket)`` once per gradient bucket during the backward pass, and
expects a ``torch.futures.Future`` whose value is the bucket's flat buffer holding the gradient
averaged over the workers (``torch.distributed.GradBucket``: ``buffer()``, ``gradients()``,
``parameters()``, ``index()``, ``is_last()``). A :class:`CommHook` is its own state:
:meth:`register` passes ``self`` as the state and :meth:`CommHook.reduce` does the work.

Overlap. :meth:`CommHook.reduce` never waits for a collective: it does the bucket's local
encode work, issues the first collective asynchronously (``dist.all_reduce(...,
async_op=True).get_future()``) and returns a future chained on it with ``then``; each later
stage (PowerSGD's ``Q`` after ``P``, the padded payloads of a variable-length all-gather after
the lengths) is issued from the callback of the stage before, the way PyTorch's own
``powerSGD_hook`` chains ``P`` then ``Q``, and the decode work runs in the last callback. DDP
thus keeps computing the backward pass of the next layers while a bucket is on the wire.

Order of the collectives. Every rank must issue the same collectives in the same order, and a
stage issued from a callback runs whenever the previous stage completes, which differs between
ranks. So a hook with more than one stage (:meth:`CommHook.in_turn`) starts a bucket's
collectives only once its previous bucket's future has completed: the buckets' collectives go
out one bucket after the other in bucket order, on every rank, while the backward pass goes on
(one bucket of a hook on the wire at a time). A bucket's local encode work is still done at
once, when DDP hands the bucket over. The one-collective baselines issue at once.

Timing (:class:`HookStats`): ``encode_s`` is the wall time of the local work before a bucket's
collectives are issued (compression, error feedback, packing; for a multi-stage hook also the
local work between two of its collectives, which the next collective waits for), ``decode_s``
the local work after the last collective completes (unpacking, decompression, the average),
summed over buckets and steps, whatever thread runs it. The time a collective spends on the
wire is neither; the caller (:mod:`systems.netstudy`) measures an iteration's compute alone and
takes communication as the remainder. ``sent_bytes`` is the number of payload bytes this worker
hands to collectives (``numel * element_size`` of each tensor all-reduced, all-gathered or
broadcast, indices and scales included), per step: the payload the performance model charges,
not the TCP traffic of the collective's algorithm. The same count is kept per kind of
collective (``allreduce_count``/``allreduce_bytes``, ``allgather_*``, ``broadcast_*``).
``counted`` says where the counts come from: ``"observed"`` (each collective counted as the hook
issues it) or ``"declared"`` (hooks whose collectives are issued inside code that cannot be
instrumented, PyTorch's own hooks, count their :meth:`CommHook.plan` at each bucket).

Plans (:class:`Collective`, :meth:`CommHook.plan`): every hook declares, from its parameters and
a bucket's gradient shapes, the collectives it issues for that bucket at a compressed step; the
tests hold the declaration to what the hook issues.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = [
    "KINDS",
    "Collective",
    "CommHook",
    "HookStats",
    "Timer",
    "chain",
    "itemsize",
    "numel_of",
    "settle",
]

KINDS = ("allreduce", "allgather", "broadcast")

# Callbacks run on the process group's threads while DDP's thread runs the next bucket's encode:
# the statistics are updated under this lock.
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Collective:
    """One collective a hook issues for a bucket: its kind and the payload bytes this worker
    hands to it (``numel * element_size``; for ``allgather`` the bytes of this worker's own
    message, for ``broadcast`` the broadcast tensor's, counted on every rank).
    ``data_dependent``: the size depends on the gradient's values (a threshold, an adaptive
    selection, an entropy code), so ``nbytes`` is the hook's nominal size, not an exact count."""

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
    this worker handed to collectives (all and per kind), collectives issued (all and per
    kind) and buckets reduced. ``counted``: ``"observed"`` or ``"declared"`` (module doc)."""

    encode_s: float = 0.0
    decode_s: float = 0.0
    sent_bytes: int = 0
    collectives: int = 0
    buckets: int = 0
    allreduce_count: int = 0
    allreduce_bytes: int = 0
    allgather_count: int = 0
    allgather_bytes: int = 0
    broadcast_count: int = 0
    broadcast_bytes: int = 0
    counted: str = "observed"

    def reset(self) -> None:
        with _LOCK:
            self.encode_s = self.decode_s = 0.0
            self.sent_bytes = self.collectives = self.buckets = 0
            for kind in KINDS:
                setattr(self, f"{kind}_count", 0)
                setattr(self, f"{kind}_bytes", 0)

    def add(self, kind: str, nbytes: int) -> None:
        """Count one collective of ``kind`` handed ``nbytes`` payload bytes."""
        if kind not in KINDS:
            raise ValueError(f"HookStats: kind must be one of {KINDS}, got {kind!r}")
        with _LOCK:
            self.collectives += 1
            self.sent_bytes += nbytes
            setattr(self, f"{kind}_count", getattr(self, f"{kind}_count") + 1)
            setattr(self, f"{kind}_bytes", getattr(self, f"{kind}_bytes") + nbytes)

    def by_kind(self) -> dict[str, dict[str, int]]:
        """``{kind: {"count": ..., "bytes": ...}}`` for each kind of collective."""
        return {
            k: {"count": getattr(self, f"{k}_count"), "bytes": getattr(self, f"{k}_bytes")}
            for k in KINDS
        }


class _Span:
    def __init__(self, stats: HookStats, what: str) -> None:
        self.stats, self.what, self.t0 = stats, what, 0.0

    def __enter__(self) -> _Span:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        dt = time.perf_counter() - self.t0
        with _LOCK:
            if self.what == "encode":
                self.stats.encode_s += dt
            else:
                self.stats.decode_s += dt


class Timer:
    """``with timer("encode"): ...`` adds the block's wall time to ``stats.encode_s``. Each call
    makes its own span, so blocks may run at once on several threads (callbacks)."""

    def __init__(self, stats: HookStats) -> None:
        self.stats = stats

    def __call__(self, what: str) -> _Span:
        if what not in ("encode", "decode"):
            raise ValueError(f"Timer: what must be 'encode' or 'decode', got {what!r}")
        return _Span(self.stats, what)

    def add(self, what: str, seconds: float) -> None:
        """Add ``seconds`` measured elsewhere to ``encode_s`` or ``decode_s``."""
        span = self(what)
        span.t0 = time.perf_counter() - seconds
        span.__exit__()


def _future_like(tensor: torch.Tensor | None) -> torch.futures.Future:
    if tensor is not None and tensor.is_cuda:
        return torch.futures.Future(devices=[tensor.device])
    return torch.futures.Future()


def chain(
    fut: torch.futures.Future,
    fn: Callable[[torch.futures.Future], torch.futures.Future],
    like: torch.Tensor | None = None,
) -> torch.futures.Future:
    """A future of the value of the future that ``fn(fut)`` returns once ``fut`` completes
    (``then`` for a callback that issues a collective: ``then`` alone would hold a future of a
    future). An exception in ``fut``, ``fn`` or the inner future is set on the result. ``like``:
    a tensor of the result's device (CUDA futures record their streams)."""
    out = _future_like(like)

    def inner_done(inner: torch.futures.Future) -> None:
        try:
            value = inner.value()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            out.set_exception(exc)
            return
        out.set_result(value)

    def outer_done(f: torch.futures.Future) -> None:
        try:
            inner = fn(f)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            out.set_exception(exc)
            return
        inner.add_done_callback(inner_done)

    fut.add_done_callback(outer_done)
    return out


def settle(pause_s: float = 0.02) -> None:
    """Let the process group's threads finish the callbacks of the last bucket before a DDP
    model (or its group) is let go.

    A hook's future (:func:`chain`) is completed on the group's thread, and a waiter wakes as
    soon as it is marked done, before that thread has run the callbacks DDP chained onto it;
    the last of those takes the GIL again. If the main thread drops the model in that window,
    the group's destructor joins the thread while holding the GIL, and neither moves: the
    process hangs for good (seen once in the test suite, in ``systems.pays``'s hook timing).
    The barrier returns once every earlier operation of the default group is marked done, and
    the pause, with the GIL released, gives the thread time to take the GIL back for its last
    callbacks. This narrows the window to a thread held off the CPU for the whole pause; it
    cannot close it (torch exposes no way to see that a future's callbacks have returned)."""
    if dist.is_initialized():
        dist.barrier()
    time.sleep(pause_s)


class CommHook:
    """Base of the hooks: parameters, the process group, statistics and the collectives.

    Subclasses set the class attributes and implement :meth:`reduce` (which must not wait for a
    collective: module doc) and :meth:`plan`.

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
        self._tail: torch.futures.Future | None = None

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
        step: int | None = None,
    ) -> list[Collective]:
        """The collectives this hook issues, in order, for one bucket holding gradients of these
        ``shapes`` and ``dtype`` on ``world_size`` workers. ``step`` (counted from 0, as the
        hook counts its steps): that step's collectives, for hooks whose steps differ (plain
        all-reduces before ``start_iter``, periodic refreshes, alternating factors); ``None``:
        a steady compressed step, after any warm-up, outside any periodic refresh. The hook's
        own declaration, read by the performance model (:mod:`systems.model`); the tests hold
        it to what the hook actually issues."""
        raise NotImplementedError(f"hook {self.name!r} does not declare its collectives")

    @staticmethod
    def plain_plan(shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[Collective]:
        """The plan of an uncompressed step: one all-reduce of the whole bucket."""
        return [Collective("allreduce", sum(numel_of(s) for s in shapes) * itemsize(dtype))]

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
        """Count a step once its last bucket is handed over (``self.iter``). Called from
        :meth:`reduce`, never from a callback: callbacks read the step they were given."""
        if bucket.is_last():
            self.iter += 1

    def in_turn(
        self, start: Callable[[], torch.futures.Future], like: torch.Tensor | None = None
    ) -> torch.futures.Future:
        """``start()`` (which issues a bucket's collectives and returns its result future) once
        this hook's previous bucket's future has completed, at once if it has; returns the
        future of ``start()``'s result. Keeps the multi-stage hooks' collectives in one order on
        every rank (module doc). Call it from :meth:`reduce` only."""
        prev = self._tail
        if prev is None or prev.done():
            fut = start()
        else:
            fut = chain(prev, lambda _: start(), like)
        self._tail = fut
        return fut

    def plain_step(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """An uncompressed step (before ``start_iter``): the bucket's mean by all-reduce."""
        self.tick(bucket)
        with self.timer("encode"):
            buf = bucket.buffer()
            buf.div_(self.world_size)
        return self.in_turn(
            lambda: self.allreduce_future(buf).then(lambda fut: fut.value()[0]), buf
        )

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    def _count(self, kind: str, *tensors: torch.Tensor) -> None:
        self.stats.add(kind, sum(t.numel() * t.element_size() for t in tensors))

    def allreduce_future(self, tensor: torch.Tensor) -> torch.futures.Future:
        """All-reduce ``tensor`` (sum, in place; counted); the work's future (value
        ``[tensor]``)."""
        self._count("allreduce", tensor)
        return dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

    def allgather_future(self, tensor: torch.Tensor) -> torch.futures.Future:
        """All-gather ``tensor`` (the same shape on every worker; counted): a future of the
        list of every worker's tensor, in rank order."""
        self._count("allgather", tensor)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        work = dist.all_gather(out, tensor, group=self.group, async_op=True)
        return work.get_future().then(lambda _: out)

    def allgather_varlen_future(self, tensor: torch.Tensor) -> torch.futures.Future:
        """All-gather a 1-D ``tensor`` whose length may differ between workers, in two stages:
        the lengths (one int64 each, counted), then, from the lengths' callback, the payloads
        padded to the longest (counted without the padding, which is not data). A future of
        the list of every worker's tensor, unpadded, in rank order."""
        n = torch.tensor([tensor.numel()], dtype=torch.int64, device=tensor.device)

        def payloads(f: torch.futures.Future) -> torch.futures.Future:
            sizes = [int(s) for s in f.value()]
            padded = torch.zeros(max(sizes), dtype=tensor.dtype, device=tensor.device)
            padded[: tensor.numel()] = tensor
            self._count("allgather", tensor)
            out = [torch.empty_like(padded) for _ in range(self.world_size)]
            work = dist.all_gather(out, padded, group=self.group, async_op=True)
            return work.get_future().then(
                lambda _: [o[:s] for o, s in zip(out, sizes, strict=True)]
            )

        return chain(self.allgather_future(n), payloads, tensor)

    def broadcast_future(self, tensor: torch.Tensor, src: int) -> torch.futures.Future:
        """Broadcast ``tensor`` in place from group rank ``src`` (counted on every rank): the
        work's future."""
        self._count("broadcast", tensor)
        root = src if self.group is None else dist.get_global_rank(self.group, src)
        return dist.broadcast(tensor, src=root, group=self.group, async_op=True).get_future()

    @staticmethod
    def done(tensor: torch.Tensor) -> torch.futures.Future:
        """A completed future holding ``tensor`` (for wrappers that already hold the result)."""
        fut = _future_like(tensor)
        fut.set_result(tensor)
        return fut

    def describe(self) -> dict[str, object]:
        """Name, collective and parameters, for reports and ``config.json``-like records."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_") and _plain(v)}
        return {"name": self.name, "allreducible": self.allreducible, "params": params}


def _dispatch(state, bucket):
    """What DDP calls for each bucket: ``state`` is the :class:`CommHook`."""
    with _LOCK:
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
