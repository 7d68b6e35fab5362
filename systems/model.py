"""A performance model of one data-parallel iteration: optimized synchronous SGD against a
compressed method (Agarwal, Wang, Venkataraman & Papailiopoulos, "On the Utility of Gradient
Compression in Distributed Training Systems", MLSys 2022, arXiv 2103.00543).

The paper's argument (its abstract and introduction, which is what could be read of it here)
is that optimized synchronous SGD overlaps bucketed ring all-reduce with the backward pass, so
its communication is largely hidden, while a compressed method adds encode/decode time on the
critical path, and a payload that cannot be summed needs all-gather, whose cost grows with the
number of workers. Its performance model (Sec. 4 of the paper) is built from these parts. The
exact equations of that section could not be read for this implementation; the formulas below
are the standard cost models of the parts the paper names, each stated where it is defined:

- ring all-reduce of ``M`` bytes on ``p`` workers, bandwidth ``B`` bytes/s per link, latency
  ``alpha`` per message (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
  communication operations in MPICH", Sec. 4): ``2 (p-1)/p * M/B + 2 (p-1) alpha``;
- ring all-gather of ``M_c`` bytes from each worker (same source): ``(p-1)/p * p M_c / B +
  (p-1) alpha``;
- parameter server on one server link: ``p (M_up + M_down) / B + 2 alpha``;
- buckets: DDP's own assignment (``torch.distributed._compute_bucket_assignment_by_size``, the
  function DDP calls when it rebuilds its buckets after the first iteration) on the parameters
  in the order their gradients become ready (the reverse definition order), with DDP's caps: a
  first bucket of 1 MiB then 25 MiB when ``bucket_cap_mb`` is left at its default, the given cap
  for every bucket otherwise (torch 2.13 ``_BucketCapacityConfig``). Buckets are formed on the
  parameters' bytes (float32), whatever the bytes a hook then puts on the wire;
- overlap, as a per-bucket pipeline on one link (:func:`pipeline_time`): bucket ``j`` is ready
  at ``ready_j``; its hook encodes on the device (delaying the rest of the backward pass by the
  encode time), then issues its collectives one after another on the link, each paying its own
  latency, once the link is free; its decode runs on the device once they are done. The
  iteration ends when the device has done compute, every encode and every decode, and every
  bucket's collectives and the decodes that follow them are done (PyTorch DDP, Li et al. 2020,
  arXiv 2006.15704, Sec. 3.2.3, for the bucketed overlap). Sync SGD is the same pipeline with
  one all-reduce per bucket and no codec;
- compression without a per-bucket plan (:func:`compressed_time`): ``compute + encode + decode
  + communication`` with no overlap, one latency per collective (``collectives`` of them per
  iteration); with all-gather every worker decodes all ``p`` messages; the compute speed-up
  factor divides the compute time only (faster accelerators, the paper's "what if compute gets
  faster" question), not the measured codec;
- a leader-based hook (ScaleCom: one rank picks the indices, the others wait for its broadcast)
  has on its critical path the leader's encode, not a worker's average: the encode given to
  the pipeline is the slowest rank's (:func:`leader_encode`).

All times are in seconds, sizes in bytes, bandwidths in Gbit/s at the public functions. The
functions accept numpy arrays of bandwidths so curves and break-even points are computed in one
pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "COLLECTIVES",
    "DEFAULT_BUCKET_BYTES",
    "DEFAULT_FIRST_BUCKET_BYTES",
    "Bucket",
    "Setting",
    "allgather_time",
    "break_even_bandwidth",
    "broadcast_time",
    "buckets",
    "collective_time",
    "compressed_time",
    "crossover",
    "ddp_buckets",
    "leader_encode",
    "pipeline_break_even",
    "pipeline_time",
    "modeled_run_seconds",
    "parameter_server_time",
    "ring_allreduce_time",
    "speedup",
    "sync_bucket_plan",
    "sync_sgd_time",
]

COLLECTIVES = ("allreduce", "allgather", "ps")
DEFAULT_BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb default
DEFAULT_FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def _bytes_per_s(gbps):
    bw = np.asarray(gbps, dtype=float)
    if np.any(~(bw > 0)):
        raise ValueError(f"bandwidth must be > 0 Gbit/s, got {gbps!r}")
    return bw * 1e9 / 8


def _check_p(p: int) -> int:
    if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or p < 1:
        raise ValueError(f"workers must be an integer >= 1, got {p!r}")
    return int(p)


def ring_allreduce_time(nbytes, p: int, gbps, alpha: float = 0.0):
    """Ring all-reduce of ``nbytes`` per worker: ``2 (p-1)/p * M/B + 2 (p-1) alpha``.

    Reduce-scatter then all-gather, each ``p-1`` steps moving ``M/p`` bytes (Thakur et al.
    2005, Sec. 4). Zero for one worker.
    """
    p = _check_p(p)
    return 2 * (p - 1) / p * np.asarray(nbytes, float) / _bytes_per_s(gbps) + 2 * (p - 1) * alpha


def allgather_time(nbytes, p: int, gbps, alpha: float = 0.0):
    """Ring all-gather of ``nbytes`` from each worker: ``(p-1)/p * p M_c/B + (p-1) alpha``.

    Every worker receives the other ``p-1`` messages, so the time grows linearly in ``p``
    where all-reduce's saturates: the scaling problem of non-summable payloads.
    """
    p = _check_p(p)
    return (p - 1) / p * p * np.asarray(nbytes, float) / _bytes_per_s(gbps) + (p - 1) * alpha


def broadcast_time(nbytes, p: int, gbps, alpha: float = 0.0):
    """Pipelined broadcast of ``nbytes`` from one root: ``M/B + (p-1) alpha`` (Thakur et al.
    2005, Sec. 4, for long messages: scatter then all-gather moves about ``M`` through each
    link; the latency term is a chain's, an upper bound on a tree's ``log p``)."""
    p = _check_p(p)
    if p == 1:
        return 0.0 * np.asarray(nbytes, float) / _bytes_per_s(gbps)
    return np.asarray(nbytes, float) / _bytes_per_s(gbps) + (p - 1) * alpha


KINDS = ("allreduce", "allgather", "broadcast")


def collective_time(kind: str, nbytes, p: int, gbps, alpha: float = 0.0):
    """Time of one collective of ``kind`` (``allreduce``, ``allgather``, ``broadcast``) handing
    ``nbytes`` per worker to it, with its own latency term."""
    if kind == "allreduce":
        return ring_allreduce_time(nbytes, p, gbps, alpha)
    if kind == "allgather":
        return allgather_time(nbytes, p, gbps, alpha)
    if kind == "broadcast":
        return broadcast_time(nbytes, p, gbps, alpha)
    raise ValueError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")


def parameter_server_time(up_bytes, down_bytes, p: int, gbps, alpha: float = 0.0):
    """One parameter server: ``p (M_up + M_down) / B + 2 alpha`` through the server's link."""
    p = _check_p(p)
    total = p * (np.asarray(up_bytes, float) + np.asarray(down_bytes, float))
    return total / _bytes_per_s(gbps) + 2 * alpha


@dataclass(frozen=True)
class Setting:
    """The system a prediction is for.

    Attributes:
        sizes: element counts of the parameter tensors in forward order (one entry for a flat
            vector); gradients become ready in reverse order.
        workers: ``p``, the number of data-parallel workers.
        compute_s: forward plus backward time of one iteration at speed-up 1, seconds.
        speedup: compute speed-up factor; compute takes ``compute_s / speedup``.
        alpha: latency per collective, seconds.
        backward_fraction: share of compute spent in the backward pass (the overlap window).
        bucket_bytes: DDP's bucket cap (``bucket_cap_mb``, default 25 MiB).
        float_bytes: bytes of one gradient entry in the buckets (the parameters' dtype).
        first_bucket_bytes: the cap of the first bucket formed (the last gradients of the
            backward pass); DDP uses 1 MiB when ``bucket_cap_mb`` is left at its default and
            the cap itself when it is given, so ``None`` means ``bucket_bytes``.
        wire_bytes: bytes of one entry on the wire for sync SGD (2 for the fp16/bf16 hooks);
            ``None`` means ``float_bytes``.
        ready: per parameter tensor (forward order), the fraction of the backward pass after
            which its gradient is ready (a measured profile); ``None`` takes the share of the
            gradient bytes produced so far, in reverse order.
    """

    sizes: tuple[int, ...]
    workers: int
    compute_s: float
    speedup: float = 1.0
    alpha: float = 10e-6
    backward_fraction: float = 2.0 / 3.0
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    float_bytes: int = 4
    first_bucket_bytes: int | None = DEFAULT_FIRST_BUCKET_BYTES
    wire_bytes: int | None = None
    ready: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        sizes = tuple(int(s) for s in np.atleast_1d(self.sizes))
        if not sizes or min(sizes) < 1:
            raise ValueError(f"sizes must be positive element counts, got {self.sizes!r}")
        object.__setattr__(self, "sizes", sizes)
        _check_p(self.workers)
        if not self.compute_s >= 0:
            raise ValueError(f"compute_s must be >= 0 seconds, got {self.compute_s!r}")
        if not self.speedup > 0:
            raise ValueError(f"speedup must be > 0, got {self.speedup!r}")
        if not self.alpha >= 0:
            raise ValueError(f"alpha (latency) must be >= 0 seconds, got {self.alpha!r}")
        if not 0 <= self.backward_fraction <= 1:
            raise ValueError(f"backward_fraction must be in [0, 1], got {self.backward_fraction!r}")
        if not self.bucket_bytes > 0:
            raise ValueError(f"bucket_bytes must be > 0, got {self.bucket_bytes!r}")
        if self.first_bucket_bytes is not None and not self.first_bucket_bytes > 0:
            raise ValueError(f"first_bucket_bytes must be > 0, got {self.first_bucket_bytes!r}")
        if self.wire_bytes is not None and not self.wire_bytes > 0:
            raise ValueError(f"wire_bytes must be > 0, got {self.wire_bytes!r}")
        if self.ready is not None:
            ready = tuple(float(r) for r in self.ready)
            if len(ready) != len(sizes) or not all(0 <= r <= 1 for r in ready):
                raise ValueError(
                    f"ready must hold one fraction in [0, 1] per tensor ({len(sizes)}), "
                    f"got {len(ready)} values"
                )
            object.__setattr__(self, "ready", ready)

    @property
    def d(self) -> int:
        return sum(self.sizes)

    @property
    def compute(self) -> float:
        """Compute time of one iteration after the speed-up factor."""
        return self.compute_s / self.speedup


def ddp_buckets(
    sizes, bucket_bytes: int = DEFAULT_BUCKET_BYTES, first_bucket_bytes: int | None = None,
    float_bytes: int = 4,
) -> list[list[int]]:  # fmt: skip
    """DDP's buckets after its rebuild: lists of tensor indices (forward order numbering), in
    the order DDP reduces them.

    The tensors are taken in reverse forward order (the order their gradients become ready in
    a feed-forward model) and handed to ``torch.distributed._compute_bucket_assignment_by_size``
    with the caps ``[first_bucket_bytes, bucket_bytes]`` (as DDP's ``Reducer`` rebuilds them),
    as meta tensors of ``float_bytes`` per entry, so no memory is touched. A bucket closes once
    its bytes reach its cap. Where torch lacks the function, the same rule is applied here.
    """
    sizes = [int(x) for x in sizes]
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    order = list(range(len(sizes)))[::-1]
    limits = [int(first), int(bucket_bytes)]
    try:
        import torch
        import torch.distributed as dist

        assign = dist._compute_bucket_assignment_by_size
    except (ImportError, AttributeError):  # pragma: no cover - torch without distributed
        assign = None
    if assign is not None:
        dtype = {2: torch.float16, 4: torch.float32, 8: torch.float64}.get(float_bytes)
        if dtype is not None:
            ts = [torch.empty(sizes[i], dtype=dtype, device="meta") for i in order]
            out, _ = assign(ts, limits, [False] * len(ts), order)
            return [list(b) for b in out]
    out, cur, filled, k = [], [], 0, 0
    for i in order:
        cur.append(i)
        filled += sizes[i] * float_bytes
        if filled >= limits[min(k, 1)]:
            out.append(cur)
            cur, filled, k = [], 0, k + 1
    return out + ([cur] if cur else [])


def buckets(
    sizes, bucket_bytes: int, float_bytes: int = 4, first_bucket_bytes: int | None = None,
    ready=None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Group gradients into DDP's buckets (:func:`ddp_buckets`) in the order they are reduced.

    A single flat vector is cut into equal ``bucket_bytes`` pieces instead, as a flat gradient
    has no layer boundaries.

    Args:
        ready: per tensor (forward order) the fraction of the backward pass after which its
            gradient is ready; ``None`` takes the share of gradient bytes produced so far.

    Returns:
        ``(nbytes, ready)``: bytes of each bucket (at ``float_bytes`` per entry), and the
        fraction of the backward pass after which it is complete (its last tensor's; never
        earlier than the bucket before, as DDP reduces buckets in order).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum()) * float_bytes
    if sizes.size == 1:
        n = max(1, -(-total // bucket_bytes))
        edges = np.minimum(np.arange(1, n + 1) * bucket_bytes, total)
        return np.diff(edges, prepend=0).astype(float), edges / total
    groups = ddp_buckets(sizes, bucket_bytes, first_bucket_bytes, float_bytes)
    nbytes = np.array([float(sizes[g].sum()) * float_bytes for g in groups])
    if ready is None:
        done = np.cumsum(sizes[::-1])[::-1]  # done[i]: entries of tensors i.. (ready before i)
        frac = done / done[0]
    else:
        frac = np.asarray(ready, dtype=float)
    at = np.maximum.accumulate(np.array([frac[g].max() for g in groups]))
    return nbytes, at


@dataclass(frozen=True)
class Bucket:
    """One bucket of the per-bucket pipeline.

    Attributes:
        ready_s: when its gradients are all ready, seconds from the start of the iteration
            (compute only, before any encode delays the backward pass).
        collectives: ``(kind, nbytes)`` pairs issued one after another (kinds of
            :func:`collective_time`), each paying its own latency.
        encode_s: device time before the first collective (the slowest rank's).
        decode_s: device time after the last collective.
    """

    ready_s: float
    collectives: tuple[tuple[str, float], ...]
    encode_s: float = 0.0
    decode_s: float = 0.0


def pipeline_time(buckets_: list[Bucket], compute_s: float, p: int, gbps, alpha: float = 0.0):
    """Iteration time of a per-bucket pipeline on one link (see the module docstring).

    Bucket ``j`` (in reduction order) starts its collectives at ``s_j = max(ready_j + E_j,
    f_{j-1})`` with ``E_j`` the encodes of buckets ``<= j`` (they ran on the device before it was
    ready, delaying the backward pass), and its link is busy until ``f_j = s_j + sum of its
    collectives' times``. The iteration takes ``max(compute + sum encode + sum decode,
    max_j (f_j + sum_{i >= j} decode_i))``: the device does all its work, and the decodes of
    the buckets from ``j`` on all run after bucket ``j``'s collectives end. Decodes that run
    during the backward pass are assumed not to delay later buckets (a lower bound there).
    """
    bw = np.asarray(gbps, dtype=float)
    _bytes_per_s(bw)
    p = _check_p(p)
    enc = np.array([b.encode_s for b in buckets_], dtype=float)
    dec = np.array([b.decode_s for b in buckets_], dtype=float)
    enc_cum = np.cumsum(enc)
    dec_tail = np.cumsum(dec[::-1])[::-1]
    free = np.zeros(bw.shape)
    end = np.full(bw.shape, compute_s + enc.sum() + dec.sum())
    ready_prev = -np.inf
    for j, b in enumerate(buckets_):  # a loop over buckets
        ready_prev = max(ready_prev, b.ready_s)
        comm = sum((collective_time(k, n, p, bw, alpha) for k, n in b.collectives), 0.0)
        free = np.maximum(ready_prev + enc_cum[j], free) + comm
        end = np.maximum(end, free + dec_tail[j])
    return end if bw.ndim else float(end)


def sync_bucket_plan(s: Setting, wire_bytes: int | None = None) -> list[Bucket]:
    """Sync SGD's pipeline: one all-reduce per DDP bucket of the bucket's entries at
    ``wire_bytes`` each (``s.wire_bytes``, else ``s.float_bytes``), ready as the backward
    profile says."""
    wire = wire_bytes or s.wire_bytes or s.float_bytes
    nbytes, ready = buckets(s.sizes, s.bucket_bytes, s.float_bytes, s.first_bucket_bytes, s.ready)
    fwd = s.compute * (1 - s.backward_fraction)
    return [
        Bucket(
            fwd + s.compute * s.backward_fraction * r, (("allreduce", n / s.float_bytes * wire),)
        )
        for n, r in zip(nbytes, ready, strict=True)
    ]


def sync_sgd_time(s: Setting, gbps):
    """Iteration time of optimized synchronous SGD: DDP's buckets all-reduced one after another
    as they become ready, overlapped with the backward pass (:func:`pipeline_time` with one
    all-reduce per bucket and no codec), each all-reduce paying its own latency.

    Bucket ``j`` is ready at ``forward + backward * ready_j`` and the buckets are reduced one
    after another, so the last one finishes at ``max_j (ready_j + sum_{i >= j} c_i)`` with
    ``c_i`` bucket ``i``'s all-reduce time; the iteration takes ``max(compute, that)``.
    """
    return pipeline_time(sync_bucket_plan(s), s.compute, s.workers, gbps, s.alpha)


def leader_encode(per_rank_encode_s: float, workers: int, leader_s: float | None = None) -> float:
    """The encode on the critical path of a leader-based hook (ScaleCom): every rank waits for
    the leader's selection before its collective, so the step's encode is the leader's.

    With ``leader_s`` (the leader's encode, measured where one rank is always the leader) that
    is returned; otherwise, from a rank's encode averaged over steps in which the leader rotates
    (it leads one step in ``workers``), the leader's is at most ``workers`` times that average,
    the bound returned.
    """
    workers = _check_p(workers)
    return float(leader_s) if leader_s is not None else workers * float(per_rank_encode_s)


def compressed_time(
    s: Setting,
    gbps,
    bits: float,
    encode_s: float,
    decode_s: float,
    collective: str,
    extra_s: float = 0.0,
    collectives: int = 1,
):
    """Iteration time of a compressed method: ``compute + encode + decodes + extra + comm``.

    Args:
        s: the system.
        gbps: bandwidth, Gbit/s (scalar or array).
        bits: payload bits per worker per iteration.
        encode_s: time to encode one worker's gradient.
        decode_s: time to decode one message; all-gather decodes ``p`` messages, all-reduce
            and the parameter server's reply one.
        collective: ``allreduce`` (summable payloads), ``allgather`` or ``ps`` (the server
            decodes, sums and sends back the dense mean).
        extra_s: the method's other per-step work (error-feedback buffers, shifts).
        collectives: how many collectives carry the payload per iteration (a hook issues one
            to four per bucket); each pays the latency term once.
    """
    if not isinstance(collectives, (int, np.integer)) or collectives < 1:
        raise ValueError(f"collectives must be an integer >= 1, got {collectives!r}")
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")
    if not bits >= 0:
        raise ValueError(f"bits must be >= 0, got {bits!r}")
    nbytes = bits / 8
    p = s.workers
    if collective == "allreduce":
        comm, decodes = ring_allreduce_time(nbytes, p, gbps, 0.0), 1
        comm = comm + collectives * 2 * (p - 1) * s.alpha
    elif collective == "allgather":
        comm, decodes = allgather_time(nbytes, p, gbps, 0.0), p
        comm = comm + collectives * (p - 1) * s.alpha
    else:
        dense = s.d * s.float_bytes
        comm, decodes = parameter_server_time(nbytes, dense, p, gbps, s.alpha), 1
    return s.compute + encode_s + decodes * decode_s + extra_s + comm


def speedup(s: Setting, gbps, **compressed) -> np.ndarray:
    """``sync_sgd_time / compressed_time``: above 1 compression pays."""
    return sync_sgd_time(s, gbps) / compressed_time(s, gbps, **compressed)


def break_even_bandwidth(
    s: Setting, lo: float = 1e-3, hi: float = 1e5, points: int = 801, **compressed
) -> float:
    """The bandwidth (Gbit/s) below which compression wins: the largest crossing of the two
    iteration times on ``[lo, hi]``, refined by bisection in log-bandwidth.

    Returns ``0.0`` when compression never wins on the range and ``inf`` when it wins on all
    of it.
    """
    return crossover(
        lambda bw: sync_sgd_time(s, bw), lambda bw: compressed_time(s, bw, **compressed),
        lo, hi, points,
    )  # fmt: skip


def crossover(base, method, lo: float = 1e-3, hi: float = 1e5, points: int = 801) -> float:
    """The largest bandwidth on ``[lo, hi]`` below which ``method(bw) < base(bw)`` (both
    iteration times as functions of Gbit/s, vectorised), refined by bisection in
    log-bandwidth; ``0.0`` when the method never wins on the range, ``inf`` when it always
    does."""
    grid = np.geomspace(lo, hi, points)
    wins = np.asarray(base(grid)) > np.asarray(method(grid))
    if not wins.any():
        return 0.0
    last = int(np.flatnonzero(wins)[-1])
    if last == points - 1:
        return float("inf")
    a, b = np.log(grid[last]), np.log(grid[last + 1])
    for _ in range(60):
        mid = 0.5 * (a + b)
        bw = float(np.exp(mid))
        if float(base(bw)) > float(method(bw)):
            a = mid
        else:
            b = mid
    return float(np.exp(0.5 * (a + b)))


def pipeline_break_even(
    base: list[Bucket], method: list[Bucket], compute_s: float, p: int, alpha: float = 0.0,
    lo: float = 1e-3, hi: float = 1e5,
) -> float:  # fmt: skip
    """:func:`crossover` of two per-bucket pipelines on the same link."""
    return crossover(
        lambda bw: pipeline_time(base, compute_s, p, bw, alpha),
        lambda bw: pipeline_time(method, compute_s, p, bw, alpha),
        lo, hi,
    )  # fmt: skip


def modeled_run_seconds(
    iters,
    bits_up,
    t_compute,
    t_encode,
    t_decode,
    gbps: float,
    workers: int,
    collective: str,
    alpha: float = 0.0,
    held: int = 1,
    collectives: int = 1,
):
    """Wall-clock of a logged run on ``workers`` workers at ``gbps``, from its cumulative counts.

    The run's measured compute, encode and decode are kept, and its uplink bits are moved by
    the modeled collective, with no overlap (the compressed-method formula of
    :func:`compressed_time`, summed over iterations): ``compute + encode + decodes * decode +
    comm(bits)``, where ``comm`` is linear in the bytes plus one latency term per collective
    (``collectives`` of them per iteration: the executors issue one).

    Args:
        iters, bits_up, t_compute, t_encode, t_decode: cumulative values per logged row (bits
            per node; seconds).
        gbps: bandwidth, Gbit/s.
        workers: ``p``.
        collective: ``allreduce`` or ``allgather``.
        alpha: latency per message, seconds.
        held: nodes the logging process held (a simulated run encodes and decodes all its
            ``n`` rows; a torch.distributed rank one), so one worker's share is ``1/held``.
    """
    p = _check_p(workers)
    if collective not in ("allreduce", "allgather"):
        raise ValueError(f"unknown collective {collective!r}; allowed: allreduce, allgather")
    nbytes = np.asarray(bits_up, float) / 8
    it = np.asarray(iters, float)
    if collective == "allreduce":
        comm = ring_allreduce_time(nbytes, p, gbps, 0.0) + 2 * (p - 1) * alpha * it * collectives
        decodes = 1
    else:
        comm = allgather_time(nbytes, p, gbps, 0.0) + (p - 1) * alpha * it * collectives
        decodes = p
    enc = np.asarray(t_encode, float) / held
    dec = np.asarray(t_decode, float) / held
    return np.asarray(t_compute, float) + enc + decodes * dec + comm
