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
- overlap: gradients become ready during the backward pass in reverse layer order and are
  all-reduced bucket by bucket, one bucket at a time (PyTorch DDP, Li et al. 2020, arXiv
  2006.15704, Sec. 3.2.3), so sync SGD takes ``max(compute, finish of the last bucket)``;
- compression: ``compute + encode + decode + communication`` with no overlap, as the paper
  observes that encode/decode sits on the critical path; with all-gather every worker decodes
  all ``p`` messages; the compute speed-up factor divides the compute time only (faster
  accelerators, the paper's "what if compute gets faster" question), not the measured codec.

All times are in seconds, sizes in bytes, bandwidths in Gbit/s at the public functions. The
functions accept numpy arrays of bandwidths so curves and break-even points are computed in one
pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "COLLECTIVES",
    "Setting",
    "allgather_time",
    "break_even_bandwidth",
    "buckets",
    "compressed_time",
    "modeled_run_seconds",
    "parameter_server_time",
    "ring_allreduce_time",
    "speedup",
    "sync_sgd_time",
]

COLLECTIVES = ("allreduce", "allgather", "ps")


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
        alpha: latency per message, seconds.
        backward_fraction: share of compute spent in the backward pass (the overlap window).
        bucket_bytes: gradient bucket size of the all-reduce (DDP's default 25 MiB).
        float_bytes: bytes of one uncompressed gradient entry.
    """

    sizes: tuple[int, ...]
    workers: int
    compute_s: float
    speedup: float = 1.0
    alpha: float = 10e-6
    backward_fraction: float = 2.0 / 3.0
    bucket_bytes: int = 25 * 2**20
    float_bytes: int = 4

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

    @property
    def d(self) -> int:
        return sum(self.sizes)

    @property
    def compute(self) -> float:
        """Compute time of one iteration after the speed-up factor."""
        return self.compute_s / self.speedup


def buckets(sizes, bucket_bytes: int, float_bytes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Group gradients into all-reduce buckets in the order they become ready.

    Tensors are taken in reverse forward order and a bucket is closed once it holds at least
    ``bucket_bytes`` (DDP's rule; Li et al. 2020, Sec. 3.2.3). A single flat vector is cut into
    equal ``bucket_bytes`` pieces instead, as a flat gradient has no layer boundaries.

    Returns:
        ``(nbytes, ready)``: bytes of each bucket, and the fraction of the backward pass after
        which it is complete (the share of gradient bytes produced so far).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum()) * float_bytes
    if sizes.size == 1:
        n = max(1, -(-total // bucket_bytes))
        edges = np.minimum(np.arange(1, n + 1) * bucket_bytes, total)
    else:
        ends, filled, done = [], 0, 0
        for size in sizes[::-1].tolist():  # a loop over layers
            filled += size * float_bytes
            done += size * float_bytes
            if filled >= bucket_bytes:
                ends.append(done)
                filled = 0
        edges = np.asarray(ends if filled == 0 else [*ends, total], dtype=np.int64)
    nbytes = np.diff(edges, prepend=0).astype(float)
    return nbytes, edges / total


def sync_sgd_time(s: Setting, gbps):
    """Iteration time of optimized synchronous SGD: bucketed ring all-reduce overlapped with
    the backward pass.

    Bucket ``j`` is ready at ``forward + backward * ready_j`` and the buckets are reduced one
    after another, so the last one finishes at ``max_j (ready_j + sum_{i >= j} c_i)`` with
    ``c_i`` bucket ``i``'s all-reduce time; the iteration takes ``max(compute, that)``.
    """
    nbytes, ready = buckets(s.sizes, s.bucket_bytes, s.float_bytes)
    bw = np.asarray(gbps, dtype=float)
    c = ring_allreduce_time(nbytes.reshape((-1,) + (1,) * bw.ndim), s.workers, bw, s.alpha)
    t_ready = s.compute * (1 - s.backward_fraction + s.backward_fraction * ready)
    tail = np.cumsum(c[::-1], axis=0)[::-1]
    finish = np.max(t_ready.reshape((-1,) + (1,) * bw.ndim) + tail, axis=0)
    return np.maximum(s.compute, finish)


def compressed_time(
    s: Setting,
    gbps,
    bits: float,
    encode_s: float,
    decode_s: float,
    collective: str,
    extra_s: float = 0.0,
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
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}")
    if not bits >= 0:
        raise ValueError(f"bits must be >= 0, got {bits!r}")
    nbytes = bits / 8
    p = s.workers
    if collective == "allreduce":
        comm, decodes = ring_allreduce_time(nbytes, p, gbps, s.alpha), 1
    elif collective == "allgather":
        comm, decodes = allgather_time(nbytes, p, gbps, s.alpha), p
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
    grid = np.geomspace(lo, hi, points)
    wins = sync_sgd_time(s, grid) > compressed_time(s, grid, **compressed)
    if not wins.any():
        return 0.0
    last = int(np.flatnonzero(wins)[-1])
    if last == points - 1:
        return float("inf")
    a, b = np.log(grid[last]), np.log(grid[last + 1])
    for _ in range(60):
        mid = 0.5 * (a + b)
        bw = float(np.exp(mid))
        if sync_sgd_time(s, bw) > compressed_time(s, bw, **compressed):
            a = mid
        else:
            b = mid
    return float(np.exp(0.5 * (a + b)))


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
):
    """Wall-clock of a logged run on ``workers`` workers at ``gbps``, from its cumulative counts.

    The run's measured compute, encode and decode are kept, and its uplink bits are moved by
    the modeled collective, with no overlap (the compressed-method formula of
    :func:`compressed_time`, summed over iterations): ``compute + encode + decodes * decode +
    comm(bits)``, where ``comm`` is linear in the bytes plus one latency term per iteration.

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
        comm = ring_allreduce_time(nbytes, p, gbps, 0.0) + 2 * (p - 1) * alpha * it
        decodes = 1
    else:
        comm = allgather_time(nbytes, p, gbps, 0.0) + (p - 1) * alpha * it
        decodes = p
    enc = np.asarray(t_encode, float) / held
    dec = np.asarray(t_decode, float) / held
    return np.asarray(t_compute, float) + enc + decodes * dec + comm
