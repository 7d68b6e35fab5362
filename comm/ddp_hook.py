"""A ``DistributedDataParallel`` communication hook that sends compzoo-compressed gradients.

DDP hands a hook one *bucket* of flattened gradients at a time and writes back whatever tensor
the hook's future holds as the bucket's averaged gradient. This hook compresses the bucket
(or, with ``layerwise=True``, each parameter's gradient slice of it) with any compzoo
compressor, moves the compressed payload through :class:`TorchDistComm` (so the bits are
charged in its ledger exactly as in a simulated run), and optionally wraps the compressor in
error feedback:

* ``"none"``: ``avg = mean_i C(grad_i)``;
* ``"ef14"``: classical error feedback at gradient level (Seide et al. 2014; Stich &
  Karimireddy, arXiv 1909.05350; Karimireddy et al. 2019, arXiv 1901.09847), as in PyTorch's
  PowerSGD hook: ``p_i = e_i + grad_i``, ``c_i = C(p_i)``, ``e_i = p_i - c_i``,
  ``avg = mean_i c_i``;
* ``"ef21"``: EF21 (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Alg. 1) at gradient
  level: every node keeps ``g_i`` and every rank the same mean ``g``; the first step of a
  bucket sends the full gradient uncompressed (``g_i = grad_i``, ``g = mean_i grad_i``), later
  steps send ``c_i = C(grad_i - g_i)`` and set ``g_i += c_i``, ``g += mean_i c_i``,
  ``avg = g``.

Randomness: step ``t`` of bucket ``b`` draws from ``comm.rng_for(C, t, tag=stream_tag(b))``
(``stream_tag(b, j)`` for the ``j``-th parameter slice in layerwise mode), i.e. node ``i``'s
stream keyed by ``(seed, t, i)`` as everywhere in compzoo, so a single-process reference can
draw the same numbers.

Buckets: DDP rebuilds its buckets once, after the first iteration, and a bucket index may then
cover other parameters (in a small model, one bucket of everything becomes several). The
buffers are coordinate-wise, so they follow the parameters: each bucket remembers its layout
(which parameter sits at which offset, keyed by the parameter's storage address and size), and
a bucket that arrives with a new layout gathers each parameter's slice of ``e_i``, ``g_i`` and
``g`` from wherever that parameter lived before. Nothing is lost and no size is mixed. A
parameter never seen before starts from a zero EF14 error; an EF21 bucket holding one restarts
with an uncompressed round. The step counter of a bucket index keeps counting across a rebuild,
so no stream is ever reused. ``state.rebuilds`` counts the new layouts met after the first.

The hook communicates over the default process group. :func:`compression_hook` runs the exchange
(the comm layer's synchronous collectives) inside the call and returns a completed future;
:class:`CompressorHook` (what :func:`register` attaches) runs the same exchange on its own worker
thread, one bucket after the other in the order DDP hands them over (so every rank issues the
same collectives in the same order), and returns at once a future that the thread completes:
DDP goes on with the backward pass while a bucket is compressed and on the wire.

With gloo (torch 2.13, CPU), a process that has run any Python comm hook, PyTorch's own
``allreduce_hook`` included, now and then aborts during interpreter teardown ("terminate called
without an active exception") after all its work is done; a script that must exit cleanly can
end with ``os._exit(0)`` once its results are written.

Example (run with ``torchrun --standalone --nproc_per_node=2 example.py``)::

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from comm.ddp_hook import register

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)))
    state = register(model, "topk:ratio=0.05", error_feedback="ef21", seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(256, 20, generator=gen), torch.randn(256, 1, generator=gen)
    for step in range(100):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: {state.bits_up()} bits up, {state.wire_bytes()} bytes on the wire")
    dist.destroy_process_group()
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
import queue
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from comm.error_feedback import compensate_, residual_
from comm.hooks import Collective, CommHook, itemsize, numel_of
from comm.torch_dist import TorchDistComm
from compressors import Compressor
from compressors.registry import parse_spec
from streams import tags

__all__ = [
    "ERROR_FEEDBACK",
    "BucketState",
    "CompressionState",
    "CompressorHook",
    "split_spec",
    "compression_hook",
    "exchange_plan",
    "register",
    "stream_tag",
]

log = logging.getLogger("compzoo.ddp_hook")

ERROR_FEEDBACK = ("none", "ef14", "ef21")
# Layerwise tags (from tags.DDP_LAYER) live far above any bucket index, so the two modes never
# share a stream.
MAX_LAYERS = 1 << 20


def stream_tag(bucket: int, layer: int | None = None) -> int:
    """The stream tag of bucket ``bucket``'s message, or of its ``layer``-th parameter slice.

    Args:
        bucket: the bucket index (``GradBucket.index()``).
        layer: position of the parameter within the bucket (layerwise mode), or ``None``.
    """
    if layer is None:
        return int(bucket)
    if not 0 <= layer < MAX_LAYERS:
        raise ValueError(f"layer must be in [0, {MAX_LAYERS}), got {layer}")
    return tags.DDP_LAYER + int(bucket) * MAX_LAYERS + int(layer)


@dataclass(eq=False)
class BucketState:
    """What the hook keeps for one bucket index.

    Attributes:
        keys: per parameter of the bucket, its key ``(storage address, numel)``.
        starts: per parameter, its offset in the bucket's flat buffer.
        sizes: element counts of the compressed segments (one segment unless layerwise).
        t: how many times this bucket index has been communicated (the stream counter).
        e_i: EF14 error, ``(1, d)``.
        g_i: EF21 node estimate, ``(1, d)``.
        g: EF21 mean estimate ``(d,)``, identical on every rank.
    """

    keys: tuple[tuple[int, int], ...]
    starts: tuple[int, ...]
    sizes: tuple[int, ...]
    t: int = 0
    e_i: torch.Tensor | None = None
    g_i: torch.Tensor | None = None
    g: torch.Tensor | None = None


@dataclass(eq=False)
class CompressionState:
    """Hyperparameters and buffers of :func:`compression_hook` (one object per DDP model).

    Args:
        compressor: a :class:`Compressor` or a registry spec such as ``"topk:ratio=0.01"``.
        error_feedback: ``"none"``, ``"ef14"`` or ``"ef21"`` (see the module docstring).
        seed: the run's seed; node ``i``'s stream at step ``t`` is keyed by ``(seed, t, i)``.
        layerwise: compress each parameter's gradient slice of a bucket on its own (its own
            stream tag and its own bits) instead of the bucket's flat buffer as one vector.
            A compressor with a fixed ``k`` must then fit the smallest slice (a bias of one
            value); ``ratio=`` specs always do.
        float_bits: wire width charged for an uncompressed value (EF21's first round).

    Attributes:
        comm: the :class:`TorchDistComm`, built on the first call on the gradients' device.
        buckets: per bucket index, its :class:`BucketState`.
        rebuilds: how many new bucket layouts were met after a bucket index's first one.
    """

    compressor: Compressor | str
    error_feedback: str = "none"
    seed: int = 0
    layerwise: bool = False
    float_bits: int = 32
    comm: TorchDistComm | None = field(default=None, init=False)
    buckets: dict[int, BucketState] = field(default_factory=dict, init=False)
    rebuilds: int = field(default=0, init=False)
    # parameter key -> (the BucketState holding its buffers, its offset there)
    _home: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.compressor, str):
            self.compressor = parse_spec(self.compressor)
        if not isinstance(self.compressor, Compressor):
            raise ValueError(
                f"compressor must be a Compressor or a spec string, got {self.compressor!r}"
            )
        if self.error_feedback not in ERROR_FEEDBACK:
            raise ValueError(
                f"error_feedback must be one of {', '.join(ERROR_FEEDBACK)}; "
                f"got {self.error_feedback!r}"
            )
        if self.float_bits not in (16, 32, 64):
            raise ValueError(f"float_bits must be 16, 32 or 64, got {self.float_bits}")

    def comm_for(self, device: torch.device) -> TorchDistComm:
        """The comm layer, built on first use (the process group must exist by then)."""
        if self.comm is None:
            self.comm = TorchDistComm(self.seed, self.float_bits, device=device)
            self.compressor = self.compressor.bind(self.comm.n)
        return self.comm

    def bits_up(self) -> int:
        """Uplink bits this rank has been charged so far (payload bits, exact)."""
        return 0 if self.comm is None else int(self.comm.ledger.up.sum())

    def wire_bytes(self) -> int:
        """Bytes this rank has handed to collectives so far."""
        return 0 if self.comm is None else int(self.comm.ledger.extra.get("wire_bytes", 0))

    def steps(self) -> dict[int, int]:
        """How many times each bucket index has been communicated."""
        return {b: s.t for b, s in self.buckets.items()}

    def bucket_state(self, bucket) -> BucketState:
        """The buffers of ``bucket``; a new layout gathers them per parameter (module doc)."""
        params = bucket.parameters()
        numels = [p.numel() for p in params]
        d = bucket.buffer().numel()
        if sum(numels) != d:
            raise ValueError(
                f"bucket {bucket.index()}: parameters hold {sum(numels)} values, "
                f"its buffer {d}; only dense, unpadded buckets are supported"
            )
        keys = tuple((p.data_ptr(), n) for p, n in zip(params, numels, strict=True))
        old = self.buckets.get(bucket.index())
        if old is not None and old.keys == keys:
            return old
        starts = (0, *itertools.accumulate(numels[:-1]))
        sizes = tuple(numels) if self.layerwise else (d,)
        new = BucketState(keys, starts, sizes, t=0 if old is None else old.t)
        if old is not None:
            self.rebuilds += 1
            log.info("bucket %d: new layout, its buffers follow the parameters", bucket.index())
        self._gather(new, bucket.buffer())
        self.buckets[bucket.index()] = new
        return new

    def _gather(self, new: BucketState, like: torch.Tensor) -> None:
        """Fill ``new``'s buffers with each parameter's slice from where it lived before."""
        homes = [self._home.get(k) for k in new.keys]
        d = like.numel()
        for name, shape in (("e_i", (1, d)), ("g_i", (1, d)), ("g", (d,))):
            have = [h is not None and getattr(h[0], name) is not None for h in homes]
            if not any(have) or (name != "e_i" and not all(have)):
                continue  # EF21 restarts the whole bucket with an uncompressed round
            buf = torch.zeros(shape, dtype=like.dtype, device=like.device)
            for (_, n), start, home in zip(new.keys, new.starts, homes, strict=True):
                if home is not None and getattr(home[0], name) is not None:
                    src = getattr(home[0], name)
                    buf[..., start : start + n] = src[..., home[1] : home[1] + n]
            setattr(new, name, buf)
        for key, start in zip(new.keys, new.starts, strict=True):
            self._home[key] = (new, start)


def _send(state: CompressionState, x_i: torch.Tensor, b: int, bs: BucketState, local: bool):
    """Compress ``x_i`` ``(1, d)`` segment by segment; return the decoded rows ``(1, d)`` (when
    ``local``) and the mean over all nodes of the decoded messages ``(d,)``."""
    C, comm = state.compressor, state.comm
    rows, means, start = [], [], 0
    for j, n in enumerate(bs.sizes):
        seg = x_i[:, start : start + n]
        tag = stream_tag(b, j) if state.layerwise else stream_tag(b)
        try:
            packet = C.encode(seg, comm.rng_for(C, bs.t, tag=tag))
        except ValueError as err:
            raise ValueError(f"bucket {b}, segment {j} of {n} values: {err}") from err
        dec = C.decode(packet) if local else None
        means.append(comm.reduce(packet, C, decoded=dec))
        rows.append(dec)
        start += n
    mean = means[0] if len(means) == 1 else torch.cat(means)
    if not local:
        return None, mean
    return (rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)), mean


def _completed(value: torch.Tensor) -> torch.futures.Future:
    fut = torch.futures.Future(devices=[value.device] if value.is_cuda else None)
    fut.set_result(value)
    return fut


def compression_hook(state: CompressionState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the compressed (optionally error-fed) mean gradient of ``bucket``.

    The module does not use postponed annotations: DDP checks this function's return
    annotation at registration time and accepts only the evaluated ``Future[Tensor]``.

    Register it with ``model.register_comm_hook(state, compression_hook)`` or :func:`register`.

    Returns:
        A completed future holding the bucket's averaged gradient, shaped and typed as
        ``bucket.buffer()``.
    """
    grad = bucket.buffer()
    comm = state.comm_for(grad.device)
    b = bucket.index()
    bs = state.bucket_state(bucket)
    x_i = grad.detach().reshape(1, -1)
    mode = state.error_feedback
    if mode == "none":
        _, avg = _send(state, x_i, b, bs, local=False)
    elif mode == "ef14":
        p_i = compensate_(x_i.clone(), bs.e_i)
        c_i, avg = _send(state, p_i, b, bs, local=True)
        bs.e_i = residual_(p_i, c_i)
    elif bs.g is None:  # EF21's first round: the full gradient, uncompressed
        bs.g_i = x_i.clone()
        bs.g = comm.reduce_full(x_i)
        avg = bs.g.clone()
    else:
        c_i, mean = _send(state, x_i - bs.g_i, b, bs, local=True)
        bs.g_i += c_i
        bs.g += mean
        avg = bs.g.clone()  # DDP may modify the gradients it is handed; g must stay intact
    bs.t += 1
    return _completed(avg.reshape(grad.shape).to(grad.dtype))


def register(
    model,
    compressor: Compressor | str,
    *,
    error_feedback: str = "none",
    seed: int = 0,
    layerwise: bool = False,
    float_bits: int = 32,
) -> CompressorHook:
    """Register ``compressor`` (with ``error_feedback``) as ``model``'s comm hook: a
    :class:`CompressorHook`, the hook framework's (:mod:`comm.hooks`) compressor hook.

    Args:
        model: a ``torch.nn.parallel.DistributedDataParallel`` over the default process group.
        compressor, error_feedback, seed, layerwise, float_bits: see :class:`CompressionState`.

    Returns:
        The hook, whose ``bits_up()`` and ``wire_bytes()`` report what was sent.
    """
    if getattr(model, "process_group", None) is None or not hasattr(model, "register_comm_hook"):
        raise ValueError(f"model must be a DistributedDataParallel, got {type(model).__name__}")
    hook = CompressorHook(
        compressor=compressor, error_feedback=error_feedback, seed=seed, layerwise=layerwise,
        float_bits=float_bits,
    )  # fmt: skip
    return hook.register(model)


# ---------------------------------------------------------------- the hook class
DEFAULT_SPEC = "topk:ratio=0.01"
DEFAULT_EF = "ef14"
# torch.distributed functions the comm layer calls that move data between ranks, and the kind
# of collective (comm.hooks.KINDS) each is counted as in HookStats (a barrier carries no payload
# and is not counted there; an exchange never issues one)
_COLLECTIVES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "broadcast": "broadcast",
    "barrier": None,
    "all_gather_object": "allgather",
    "broadcast_object_list": "broadcast",
}
# the size and weight header of a variable-size payload: two float64 (TorchDistComm.reduce)
_HEADER_BYTES = 16


def split_spec(spec: str) -> tuple[str, str]:
    """``"topk:ratio=0.01@ef21"`` -> ``("topk:ratio=0.01", "ef21")``; no suffix means ef14."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"comp: expected a compressor spec such as 'topk:ratio=0.01', got {spec!r}"
        )
    head, at, tail = spec.strip().rpartition("@")
    if not at:
        return spec.strip(), DEFAULT_EF
    if tail not in ERROR_FEEDBACK:
        allowed = ", ".join(f"@{e}" for e in ERROR_FEEDBACK)
        raise ValueError(f"comp: error feedback suffix must be one of {allowed}, got @{tail}")
    if not head:
        raise ValueError(f"comp: no compressor spec before @{tail} in {spec!r}")
    return head, tail


def sums_by_allreduce(compressor: Compressor, packet) -> bool:
    """Whether :meth:`TorchDistComm.reduce` (one node per rank) all-reduces ``packet``."""
    if compressor.sparsifier and compressor.shared_randomness and "indices" not in packet.wire:
        return True
    values = packet.fields.get("values")
    return bool(
        compressor.linear
        and packet.wire == {"values"}
        and values is not None
        and values.shape[-1] == packet.d
    )


def _probe(compressor: Compressor, n: int) -> bool:
    """:func:`sums_by_allreduce` on one packet of a 1024-value row."""
    C = compressor.bind(n)
    x = torch.linspace(-1.0, 1.0, 1024).reshape(1, -1)
    try:
        packet = C.encode(x, torch.Generator().manual_seed(0))
    except ValueError:  # a fixed k larger than the probe: decide from the declarations
        return bool(C.linear and C.sparsifier and C.shared_randomness)
    return sums_by_allreduce(C, packet)


def exchange_plan(compressor: Compressor, d: int, dtype: torch.dtype) -> list[Collective]:
    """The collectives :meth:`TorchDistComm.reduce` (one node per rank) issues for one payload
    of ``compressor`` (bound to the world size) compressing ``d`` values of ``dtype``.

    The comm layer picks the collective from the compressor's declarations and the packet's wire
    fields, so the rule is applied to the packet of one probe row (``linspace(-1, 1, d)``): the
    ``k`` values of a support shared by every node, a dense linear payload (the identity) or a
    shared-randomness sketch's table are all-reduced (their bytes in the packet's dtype); any
    other payload is all-gathered in its wire form (:meth:`Compressor.to_bytes`), the probe's
    bytes when the compressor is ``fixed_size``; a variable-size payload first all-gathers its
    size and weight (two float64), then its bytes, marked data-dependent, with the nominal size
    ``ceil(expected_bits(d) / 8)`` (``max_bits`` where the mean is not declared, the probe's
    size where neither is).

    Raises:
        ValueError: the compressor cannot compress ``d`` values (a fixed ``k`` above ``d``).
    """
    x = torch.linspace(-1.0, 1.0, d, dtype=dtype).reshape(1, -1)
    packet = compressor.encode(x, torch.Generator().manual_seed(0))
    values = packet.fields.get("values")
    if compressor.sparsifier and compressor.shared_randomness and "indices" not in packet.wire:
        return [Collective("allreduce", values[0].numel() * values.element_size())]
    if compressor.linear and packet.wire == {"values"} and values.shape[-1] == packet.d:
        return [Collective("allreduce", packet.d * itemsize(packet.dtype))]
    if compressor.linear and compressor.shared_randomness and packet.wire == {"values"}:
        return [Collective("allreduce", values[0].numel() * values.element_size())]
    _, nbytes = compressor.to_bytes(packet)
    if compressor.fixed_size:
        return [Collective("allgather", int(nbytes[0]))]
    bits: float | None = None
    for declared in (compressor.expected_bits, compressor.max_bits):
        with contextlib.suppress(ValueError):
            bits = declared(d)
        if bits is not None:
            break
    nominal = int(nbytes[0]) if bits is None else math.ceil(bits / 8)
    return [
        Collective("allgather", _HEADER_BYTES),
        Collective("allgather", nominal, data_dependent=True),
    ]


class _Bucket:
    """What the exchange reads of a ``GradBucket``, taken when DDP hands the bucket over."""

    def __init__(self, bucket) -> None:
        self._buffer = bucket.buffer()
        self._index = bucket.index()
        self._parameters = list(bucket.parameters())
        self._last = bucket.is_last()

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def parameters(self) -> list[torch.Tensor]:
        return self._parameters

    def is_last(self) -> bool:
        return self._last


def _serve(jobs: queue.SimpleQueue) -> None:
    """The worker thread: run the jobs (:func:`_complete`) in the order they came until
    ``None`` arrives. It holds the queue only, never the hook, so the hook can be collected
    (which stops the thread)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        try:
            _complete(job)
        except BaseException:  # noqa: BLE001 - a job sets its own future; keep serving
            log.exception("comp: a bucket's exchange failed outside its future")


def _complete(job: list) -> None:
    """On the worker thread, for ``job = [fut, stream, fn, bucket]``: ``fut`` completed with
    ``fn(bucket)`` (run on ``stream`` on CUDA), or with the exception it raised.

    No reference to the hook outlives the call: ``job`` is emptied first and ``fn`` dropped
    before ``fut`` is completed (a waiter woken by it may drop the hook at once), and the
    exception keeps its traceback's lines but not the locals of its finished frames (a failed
    torch future that was waited for stays alive, its exception and the future referring to
    each other through C++, and those locals would keep the hook, and its thread, alive)."""
    fut, stream, fn, *args = job
    job.clear()
    try:
        with contextlib.ExitStack() as ctx:
            if stream is not None:
                ctx.enter_context(torch.cuda.device(stream.device))
                ctx.enter_context(torch.cuda.stream(stream))
            value = fn(*args)
            fn = args = None
            fut.set_result(value)
    except BaseException as exc:  # noqa: BLE001 - handed to the waiter
        fn = args = None
        if fut.done():
            raise
        seen, cur = set(), exc
        while cur is not None and id(cur) not in seen:
            seen.add(id(cur))
            traceback.clear_frames(cur.__traceback__)
            cur = cur.__cause__ or cur.__context__
        fut.set_exception(exc)


class _TimedDist:
    """``torch.distributed`` as the comm layer sees it, its collectives timed and counted by
    ``hook`` (the ledger's byte count at each call's start is kept in ``hook._marks``)."""

    def __init__(self, module, hook: CompressorHook) -> None:
        self._module = module
        self._hook = hook

    def __getattr__(self, name: str):
        attr = getattr(self._module, name)
        if name not in _COLLECTIVES:
            return attr
        hook = self._hook

        def timed(*args, **kwargs):
            hook._sync()
            hook._marks.append((name, hook._bytes()))
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                hook._sync()
                hook._spans.append((t0, time.perf_counter()))
                hook.ops[name] += 1

        return timed


class CompressorHook(CommHook):
    """Any library compressor with optional error feedback, as a DDP hook.

    The rounds of :func:`compression_hook` (module docstring) on the hook framework of
    :mod:`comm.hooks`. Made by :func:`register`, or by name in the study (``comp:SPEC[@EF]``,
    :mod:`systems.hooks.compressor_hook`).

    Collective: the comm layer (:class:`~comm.torch_dist.TorchDistComm`) all-reduces a payload
    only where the messages can be summed: a linear compressor sending dense values (the
    identity) or a sparsifier with a support shared by every node (``randk:shared=true``); every
    other payload is all-gathered in its bit-packed wire form and decoded by every rank
    (:func:`exchange_plan`; :meth:`plan` declares them per bucket). ``allreducible`` (an instance
    attribute) says which, read off one probe packet with the comm layer's own rule; it is
    ``False`` for ``randk`` with private supports although Rand-K is linear.

    Overlap: :meth:`reduce` takes the bucket's buffer and parameters, queues the bucket's
    exchange (compression, error feedback, the comm layer's collectives, decoding) on the hook's
    worker thread and returns a future at once; the thread runs the buckets one after the other
    in the order they came (so every rank issues the same collectives in the same order) and
    completes each future with the averaged gradient, or with the exception the exchange raised.
    The thread is a daemon, started with the first bucket and stopped by :meth:`close`, when the
    hook is garbage-collected, or at interpreter exit. On CUDA the thread runs on the stream
    that was current when DDP handed the bucket over.

    Statistics: ``sent_bytes`` is what the comm layer's ledger counts as handed to collectives
    (``wire_bytes``, plus the size/weight headers of variable-size payloads,
    ``wire_overhead_bytes``): ``ceil(nbits / 8)`` bytes per bit-packed message, ``4 d`` for a
    dense float32 all-reduce; each collective is counted by kind (``allreduce``/``allgather``)
    with the ledger bytes it added (``counted == "observed"``). The exchange's collectives are
    synchronous on the worker thread, so the hook times itself: every collective the comm layer
    issues is timed (CUDA synchronised at both ends), ``encode_s`` is the thread's local time up
    to the last collective (compression, error feedback, packing, and the short local work
    between two collectives of one bucket), ``decode_s`` the local time after it (unpacking,
    decoding every sender, the average, the error update), and :attr:`comm_s` the time inside
    collectives, so per bucket ``encode + comm + decode`` is the exchange's wall time (a bucket's
    wait in the queue is none of them).

    Args:
        process_group: must be the default group (or ``None``): the comm layer communicates
            over it.
        spec: a compressor spec with an optional ``@none``/``@ef14``/``@ef21`` suffix.
        compressor, error_feedback: instead of ``spec``, a compressor (or its spec) and the
            error feedback apart (``"none"`` by default), as :func:`register` takes them.
        seed: the run's seed (node ``i``'s stream at step ``t`` is keyed by ``(seed, t, i)``).
        layerwise: compress each parameter's slice of a bucket on its own.
        float_bits: bits the ledger charges an uncompressed value (EF21's first round).

    Attributes:
        state: the :class:`~comm.ddp_hook.CompressionState` doing the work.
        compressor: the compressor (bound to the world size once the first bucket arrives).
        error_feedback: ``"none"``, ``"ef14"`` or ``"ef21"``.
        allreducible: whether the comm layer all-reduces this compressor's payloads.
        comm_s: seconds spent inside collectives since construction.
        ops: how many times each ``torch.distributed`` collective was called.
    """

    name = "comp"
    takes_spec = True
    allreducible = False  # the class default; each instance sets it from its compressor
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        spec: str = f"{DEFAULT_SPEC}@{DEFAULT_EF}",
        seed: int = 0,
        layerwise: bool = False,
        float_bits: int = 32,
        compressor: Compressor | str | None = None,
        error_feedback: str | None = None,
    ) -> None:
        if process_group is not None and process_group is not dist.group.WORLD:
            raise ValueError(
                "comp: the compressor hook communicates over the default process group; "
                f"got another group ({process_group!r})"
            )
        super().__init__(process_group)
        if compressor is not None:  # a compressor (or its spec) and the error feedback apart
            self.spec, self.error_feedback = compressor, error_feedback or "none"
        else:
            self.spec, self.error_feedback = split_spec(spec)
        self.seed, self.layerwise, self.float_bits = seed, layerwise, float_bits
        self.state = CompressionState(self.spec, self.error_feedback, seed, layerwise, float_bits)
        self.compressor = self.state.compressor
        self._unbound = self.state.compressor
        n = dist.get_world_size() if dist.is_initialized() else 2
        self.allreducible = _probe(self.compressor, n)
        self.comm_s = 0.0
        self.ops: collections.Counter[str] = collections.Counter()
        self._spans: list[tuple[float, float]] = []
        self._marks: list[tuple[str, int]] = []
        self._cuda: torch.device | None = None
        self._jobs: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._stop: weakref.finalize | None = None

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> CompressorHook:
        """Attach to ``ddp_model``, which must communicate over the default process group."""
        pg = getattr(ddp_model, "process_group", None)
        if pg is None or not hasattr(ddp_model, "register_comm_hook"):
            raise ValueError(f"comp: expected a DistributedDataParallel, got {type(ddp_model)}")
        if pg.size() != dist.get_world_size():
            raise ValueError(
                f"comp: the model's process group has {pg.size()} ranks, the default group "
                f"{dist.get_world_size()}; the hook communicates over the default group"
            )
        self._attach(next(ddp_model.parameters()).device)
        return super().register(ddp_model)

    def _attach(self, device: torch.device) -> None:
        comm = self.state.comm_for(device)
        if not isinstance(comm._dist, _TimedDist):
            comm._dist = _TimedDist(comm._dist, self)
        self.compressor = self.state.compressor
        self._cuda = device if device.type == "cuda" else None

    def _sync(self) -> None:
        if self._cuda is not None:
            torch.cuda.synchronize(self._cuda)

    def _bytes(self) -> int:
        extra = self.state.comm.ledger.extra
        return int(extra.get("wire_bytes", 0)) + int(extra.get("wire_overhead_bytes", 0))

    def bits_up(self) -> int:
        """Uplink bits the ledger has charged this rank (the payloads' documented bits)."""
        return self.state.bits_up()

    def wire_bytes(self) -> int:
        """Bytes this rank has handed to collectives so far."""
        return self.state.wire_bytes()

    def steps(self) -> dict[int, int]:
        """How many times each bucket index has been communicated."""
        return self.state.steps()

    @property
    def rebuilds(self) -> int:
        """How many times DDP rebuilt a bucket's layout (the buffers followed)."""
        return self.state.rebuilds

    def plan(
        self,
        shapes: list[tuple[int, ...]],
        world_size: int,
        dtype: torch.dtype = torch.float32,
        step: int | None = None,
    ) -> list[Collective]:
        """The comm layer's collectives for one bucket (:func:`exchange_plan` per compressed
        segment: the bucket, or each parameter's slice in layerwise mode). ``step``: the bucket
        index's own count of exchanges; with ``@ef21`` step 0 is the uncompressed round, one
        all-reduce of the bucket (as is the round of a bucket holding a parameter never seen
        before, after DDP's rebuild)."""
        if self.error_feedback == "ef21" and step == 0:
            return self.plain_plan(shapes, dtype)
        C = self._unbound.bind(world_size)
        sizes = [numel_of(s) for s in shapes]
        segments = sizes if self.layerwise else [sum(sizes)]
        out: list[Collective] = []
        for j, d in enumerate(segments):
            try:
                out += exchange_plan(C, d, dtype)
            except ValueError as err:
                raise ValueError(f"comp: segment {j} of {d} values: {err}") from err
        return out

    # --- the worker thread -------------------------------------------------------------------
    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        grad = bucket.buffer()
        if self.state.comm is None:
            self._attach(grad.device)
        taken = _Bucket(bucket)
        stream = torch.cuda.current_stream(grad.device) if grad.is_cuda else None
        fut = torch.futures.Future(devices=[grad.device] if grad.is_cuda else None)
        self._submit([fut, stream, self._exchange, taken])
        return fut

    def _submit(self, job: list) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._jobs = queue.SimpleQueue()
            self._thread = threading.Thread(
                target=_serve, args=(self._jobs,), name=f"comp-hook-{id(self):x}", daemon=True
            )
            # puts the stop sign when the hook is collected or the interpreter exits
            self._stop = weakref.finalize(self, self._jobs.put, None)
            self._thread.start()
        self._jobs.put(job)

    def close(self) -> None:
        """Stop the worker thread once the buckets already handed over are done (a later
        bucket starts a new one)."""
        if self._stop is not None:
            self._stop()
        self._thread = self._stop = None

    def _exchange(self, bucket: _Bucket) -> torch.Tensor:
        """:func:`compression_hook`, timed, its collectives counted by kind."""
        before = self._bytes()
        self._spans, self._marks = [], []
        self._sync()
        t0 = time.perf_counter()
        try:
            avg = compression_hook(self.state, bucket).value()
            self._sync()
        finally:
            t1 = time.perf_counter()
            inside = sum(b - a for a, b in self._spans)
            last = self._spans[-1][1] if self._spans else t1
            self.timer.add("encode", (last - t0) - inside)
            self.timer.add("decode", t1 - last)
            self.comm_s += inside
            # collective k added the ledger bytes counted from its start to the next one's
            ends = [m for _, m in self._marks[1:]] + [self._bytes()] * bool(self._marks)
            start = before
            for (name, _), end in zip(self._marks, ends, strict=True):
                if _COLLECTIVES[name] is not None:
                    self.stats.add(_COLLECTIVES[name], end - start)
                start = end
        return avg

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"].pop("comm_s", None)  # a measurement, not a parameter
        return out
