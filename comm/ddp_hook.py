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

The hook communicates over the default process group and returns an already completed future
(the exchange is synchronous). With gloo (torch 2.13, CPU), a process that has run any Python
comm hook, PyTorch's own ``allreduce_hook`` included, now and then aborts during interpreter
teardown ("terminate called without an active exception") after all its work is done; a
script that must exit cleanly can end with ``os._exit(0)`` once its results are written.

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

import itertools
import logging
from dataclasses import dataclass, field

import torch

from comm.error_feedback import compensate_, residual_
from comm.torch_dist import TorchDistComm
from compressors import Compressor
from compressors.registry import parse_spec
from streams import tags

__all__ = [
    "ERROR_FEEDBACK",
    "BucketState",
    "CompressionState",
    "compression_hook",
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
) -> CompressionState:
    """Build a :class:`CompressionState` and register :func:`compression_hook` on ``model``.

    Args:
        model: a ``torch.nn.parallel.DistributedDataParallel`` over the default process group.
        compressor, error_feedback, seed, layerwise, float_bits: see :class:`CompressionState`.

    Returns:
        The state, whose ``bits_up()`` and ``wire_bytes()`` report what was sent.
    """
    state = CompressionState(compressor, error_feedback, seed, layerwise, float_bits)
    pg = getattr(model, "process_group", None)
    if pg is None or not hasattr(model, "register_comm_hook"):
        raise ValueError(f"model must be a DistributedDataParallel, got {type(model).__name__}")
    device = next(model.parameters()).device
    comm = state.comm_for(device)
    if pg.size() != comm.n:
        raise ValueError(
            f"the hook communicates over the default process group ({comm.n} ranks); "
            f"the model's process group has {pg.size()}"
        )
    model.register_comm_hook(state, compression_hook)
    return state
