"""Per-node random streams, batched over rows.

A node is a row, and node ``i``'s randomness must come from its own stream. Holding one
``torch.Generator`` per node would force a Python loop over nodes at every draw, so a
:class:`Streams` object holds one 64-bit *key* per row instead, and every draw is a pure
function of (key, position): SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014) applied to a per-row counter, vectorised over all rows and
coordinates. Consequences:

* row ``i`` of a batched draw depends on row ``i``'s key alone, so a simulated run holding all
  ``n`` nodes and a distributed run holding node ``i`` on its own rank draw identical numbers;
* a draw does not advance any state: the same ``Streams`` gives the same numbers, and
  independent draws are taken from :meth:`Streams.split` with distinct tags;
* shared randomness (PermK, RandK with a shared seed) is a ``Streams`` whose rows share a key.

``torch.Generator`` objects are still accepted where a ``Streams`` is expected
(:meth:`Streams.coerce`): one 62-bit key is drawn from each generator, so explicit per-node
generators give reproducible, independent rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

# OpenMP threads that finish a parallel region spin for GOMP_SPINCOUNT iterations before they
# sleep. The default (300,000) makes a 2-thread kernel wait for a descheduled peer when the cores
# are shared: EF21 on mushrooms measured 1.4-5.5 ms per step with other processes on both cores,
# 0.72 ms with 10,000, and the same 0.34 ms on idle cores. It must be set before torch loads its
# OpenMP runtime, so every package of the project imports this one first; a value the user set
# is kept.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# A fresh tensor's memory is mapped page by page when first written: with 4 KiB pages that costs
# more than the writing (a 10^8-byte clone measured 107-121 ms, 24-33 ms in 2 MiB pages, 20 ms
# into an existing tensor). torch's CPU allocator asks the kernel for transparent huge pages for
# allocations of 2 MiB and more when THP_MEM_ALLOC_ENABLE=1 (read at the first allocation, so it
# is set here, before any); a value the user set is kept (0 turns it off).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def _reuse_freed_memory() -> None:
    """Keep freed heap memory for the next tensor instead of returning it to the kernel.

    glibc maps an allocation above its mmap threshold afresh and unmaps it when freed, and
    returns the heap's free top above its trim threshold; both thresholds start small and grow
    only with what has been freed, so a step's temporaries of a few MB (a batch's ``R``
    margins, say) can be mapped and faulted in again at every step, 2 MiB huge pages included.
    Measured on w8a, 12 points, with torch's huge-page allocations (above): the margins'
    product 5.9 ms and the loss derivative 4.1 ms per call with glibc's defaults, 1.1 and
    0.7 ms with these thresholds fixed (the batch's step 9.4-11.6 ms against 4.3-4.5 ms); a
    64 MiB tensor freed and made again, step after step, faulted about 545 pages in each time,
    and with them none in most steps once the heap had reached its size (not in every step:
    see the test). Results are unchanged; a process keeps its peak heap.
    Linux with glibc only; thresholds the user set through ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` are kept."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 28)  # M_MMAP_THRESHOLD: 256 MiB
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: 1 GiB
    except (OSError, AttributeError):  # not glibc: its allocator's own policy stands
        pass


_reuse_freed_memory()

# The vector width recorded for this machine (streams.vector_width), set before numba loads.
from streams import vector_width  # noqa: E402

vector_width.apply()

# A command started with ``python -m`` stops cleanly on SIGINT/SIGTERM from here on, while the
# imports below take their second or two (streams.interrupts).
from streams import interrupts  # noqa: E402

interrupts.guard()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from streams import compiled  # noqa: E402
from streams.tags import NORMAL_ANGLE, NORMAL_RADIUS  # noqa: E402

__all__ = ["NodeKeys", "Streams", "shared_uniform"]

# SplitMix64 constants, written as signed int64 (torch has no uint64 arithmetic).
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser; int64 multiplication wraps modulo 2**64 as uint64 would."""
    z = (z ^ _srl(z, 30)) * _MIX1
    z = (z ^ _srl(z, 27)) * _MIX2
    return z ^ _srl(z, 31)


def _as_int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


_MASK = (1 << 64) - 1


def _mix_int(z: int) -> int:
    """:func:`_mix` on one Python integer (uint64 arithmetic, the same bits): deriving a key
    from a seed and tags costs a few integer operations instead of dozens of tiny kernels."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * (_MIX1 & _MASK)) & _MASK
    z = ((z ^ (z >> 27)) * (_MIX2 & _MASK)) & _MASK
    return z ^ (z >> 31)


def _key_int(seed: int, tags: Sequence[int]) -> int:
    """The key of ``(seed, *tags)`` as a signed 64-bit integer (see :meth:`Streams.shared`)."""
    key = _mix_int(seed + (_GOLDEN & _MASK))
    for tag in tags:
        key = _join_int(key, tag)
    return _as_int64(key)


def _join_int(key: int, tag: int) -> int:
    """The key (unsigned) once ``tag`` joins ``key``: one step of :func:`_key_int`."""
    g = _GOLDEN & _MASK
    return _mix_int(key ^ _mix_int(_as_int64(tag) * g + g))


def shared_uniform(seed: int, *tags: int) -> float:
    """``Streams.shared(seed, 1, *tags).uniform(1)[0, 0]`` as a Python float, computed on
    Python integers (the same bits): a shared coin per step (MARINA's) costs a few integer
    operations instead of building streams and launching a draw."""
    z = (_key_int(seed, tags) + _GOLDEN) & _MASK
    return (_mix_int(z) >> 11) * 2.0**-53


def _derive(keys: torch.Tensor, tag: torch.Tensor | int) -> torch.Tensor:
    """A child key per row: a different, independent-looking stream for each (key, tag)."""
    if isinstance(tag, int):
        tag = torch.tensor(_as_int64(tag), dtype=torch.int64, device=keys.device)
    if compiled.ENABLED and keys.device.type == "cpu":
        return compiled.derive(keys, tag)
    return _mix(keys ^ _mix(tag * _GOLDEN + _GOLDEN))


class NodeKeys:
    """``Streams.for_nodes(seed, nodes, *tags, t)`` for step after step ``t``: the parts that do
    not depend on ``t`` (the key of ``(seed, *tags)`` before ``t`` joins it, and each node's
    mix) are computed once, so a step's streams cost two integer mixes and one compiled pass
    (20 nodes: 20 -> 9 us). The same keys, bit for bit."""

    def __init__(self, seed: int, nodes: torch.Tensor, *tags: int) -> None:
        self.nodes = torch.as_tensor(nodes, dtype=torch.int64).reshape(-1)
        self._prefix = _key_int(seed, tags) & _MASK
        # each node's mix(node golden + golden), the tag that _derive gives every row
        self._mixed = _mix(self.nodes * _GOLDEN + _GOLDEN)
        self._compiled = compiled.ENABLED and self.nodes.device.type == "cpu"
        if self._compiled:
            self._mixed_u64 = self._mixed.contiguous().numpy().view(np.uint64)

    def at(self, t: int) -> Streams:
        """The streams of step ``t``."""
        base = _join_int(self._prefix, t)  # _key_int(seed, (*tags, t)), unsigned
        if self._compiled:
            keys = compiled.mix_each(base, self._mixed_u64)
        else:
            keys = _mix(torch.full_like(self._mixed, _as_int64(base)) ^ self._mixed)
        return Streams(keys, self.nodes)


@dataclass(frozen=True, eq=False)
class Streams:
    """One independent random stream per row.

    Attributes:
        keys: int64 tensor ``(m,)``, one key per row; rows with equal keys draw equal numbers.
        nodes: int64 tensor ``(m,)``, which node each row is (used by compressors such as PermK
            whose output depends on the node's index).
    """

    keys: torch.Tensor
    nodes: torch.Tensor

    def __post_init__(self) -> None:
        if self.keys.dtype != torch.int64 or self.keys.dim() != 1:
            raise ValueError(
                f"keys must be a 1-D int64 tensor, got {self.keys.dtype} "
                f"of shape {tuple(self.keys.shape)}"
            )
        if self.nodes.shape != self.keys.shape:
            raise ValueError(
                f"nodes must have the shape of keys {tuple(self.keys.shape)}, "
                f"got {tuple(self.nodes.shape)}"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_nodes(
        cls, seed: int, nodes: Sequence[int] | torch.Tensor, *tags: int, device=None
    ) -> Streams:
        """Private streams: row ``j`` is node ``nodes[j]``, keyed by ``(seed, *tags, node)``."""
        nodes_t = torch.as_tensor(nodes, dtype=torch.int64, device=device).reshape(-1)
        base = torch.full_like(nodes_t, _key_int(seed, tags))
        return cls(_derive(base, nodes_t), nodes_t)

    @classmethod
    def shared(
        cls,
        seed: int,
        m: int,
        *tags: int,
        nodes: Sequence[int] | torch.Tensor | None = None,
        device=None,
    ) -> Streams:
        """Shared randomness: ``m`` rows with one key from ``(seed, *tags)``.

        ``nodes`` defaults to ``0..m-1``.
        """
        key = _key_int(seed, tags)
        if nodes is None:
            nodes_t = torch.arange(m, dtype=torch.int64, device=device)
        else:
            nodes_t = torch.as_tensor(nodes, dtype=torch.int64, device=device).reshape(-1)
            if nodes_t.numel() != m:
                raise ValueError(f"nodes must name {m} rows, got {nodes_t.numel()}")
        return cls(torch.full((m,), key, dtype=torch.int64, device=device), nodes_t)

    @classmethod
    def coerce(
        cls,
        rng: Streams | torch.Generator | Sequence[torch.Generator] | int,
        m: int,
        device=None,
    ) -> Streams:
        """Accept what callers pass as ``rng`` and return a ``Streams`` of ``m`` rows.

        * a ``Streams`` of ``m`` rows is returned as is (moved to ``device``);
        * a sequence of ``m`` ``torch.Generator``: row ``j`` is keyed by one draw from the
          ``j``-th generator (which advances it, as any use of a generator does);
        * one ``torch.Generator``: one draw, then ``m`` independent rows derived from it;
        * an ``int``: a seed, giving ``m`` independent rows (nodes ``0..m-1``).
        """
        if isinstance(rng, Streams):
            if rng.keys.numel() != m:
                raise ValueError(f"rng has {rng.keys.numel()} rows but the input has {m}")
            return rng.to(device) if device is not None else rng
        if isinstance(rng, int):
            return cls.for_nodes(rng, range(m), device=device)
        if isinstance(rng, torch.Generator):
            return cls.for_nodes(_draw_key(rng), range(m), device=device)
        gens = list(rng)
        if len(gens) != m or not all(isinstance(g, torch.Generator) for g in gens):
            raise ValueError(
                f"rng must be Streams, a torch.Generator, a seed, or a sequence "
                f"of {m} torch.Generator (one per row), got {type(rng).__name__}"
            )
        keys = torch.tensor([_draw_key(g) for g in gens], dtype=torch.int64, device=device)
        return cls(_mix(keys + _GOLDEN), torch.arange(m, dtype=torch.int64, device=device))

    # ------------------------------------------------------------------ derived streams
    @property
    def m(self) -> int:
        return self.keys.numel()

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def to(self, device) -> Streams:
        if self.keys.device == torch.device(device):
            return self  # already there (the common case): no new tensors, no checks
        return Streams(self.keys.to(device), self.nodes.to(device))

    def split(self, tag: int) -> Streams:
        """An independent child stream per row (same node ids); distinct tags, distinct draws."""
        return Streams(_derive(self.keys, tag), self.nodes)

    def __getitem__(self, rows) -> Streams:
        return Streams(self.keys[rows].reshape(-1), self.nodes[rows].reshape(-1))

    # ------------------------------------------------------------------ draws
    def bits64(self, *shape: int) -> torch.Tensor:
        """Raw 64-bit words, int64 of shape ``(m, *shape)``: element ``c`` of row ``j`` is
        SplitMix64's ``c``-th output for key ``keys[j]``."""
        count = 1
        for s in shape:
            count *= s
        if compiled.ENABLED and self.device.type == "cpu":
            return compiled.bits64(self.keys, count).reshape(self.m, *shape)
        ctr = torch.arange(1, count + 1, dtype=torch.int64, device=self.device)
        z = self.keys[:, None] + ctr[None, :] * _GOLDEN
        return _mix(z).reshape(self.m, *shape)

    def uniform(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Uniform on [0, 1), shape ``(m, *shape)``; 53 random bits for float64, 24 otherwise."""
        if compiled.ENABLED and self.device.type == "cpu":
            count = 1
            for s in shape:
                count *= s
            work = torch.float64 if dtype == torch.float64 else torch.float32
            u = compiled.uniform(self.keys, count, work).reshape(self.m, *shape)
            return u if work == dtype else u.to(dtype)
        z = self.bits64(*shape)
        if dtype == torch.float64:
            return _srl(z, 11).to(torch.float64) * (2.0**-53)
        u = _srl(z, 40).to(torch.float32) * (2.0**-24)
        return u.to(dtype) if dtype != torch.float32 else u

    def normal(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Standard normal, shape ``(m, *shape)`` (Box-Muller on two split streams)."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        u1 = self.split(NORMAL_RADIUS).uniform(*shape, dtype=work)
        u2 = self.split(NORMAL_ANGLE).uniform(*shape, dtype=work)
        r = torch.sqrt(-2.0 * torch.log1p(-u1))  # 1 - u1 in (0, 1]: no log(0)
        return (r * torch.cos((2.0 * torch.pi) * u2)).to(dtype)

    def integers(self, high: int | torch.Tensor, *shape: int) -> torch.Tensor:
        """Uniform integers in ``[0, high)``, int64 of shape ``(m, *shape)``.

        ``high`` is an int or a tensor broadcastable to ``(m, *shape)`` (e.g. per-row sizes).
        Uses the top 53 bits: the bias is below ``high / 2**53``.
        """
        u = self.uniform(*shape, dtype=torch.float64)
        hi = torch.as_tensor(high, dtype=torch.float64, device=self.device)
        return torch.minimum((u * hi).floor(), hi - 1).to(torch.int64)

    def permutation(self, d: int) -> torch.Tensor:
        """A uniformly random permutation of ``range(d)`` per row, int64 ``(m, d)``.

        Sorting 64-bit random keys: ties have probability below ``d**2 / 2**64``.
        """
        return torch.argsort(self.bits64(d), dim=1)

    def subset(self, d: int, k: int) -> torch.Tensor:
        """A uniformly random ``k``-subset of ``range(d)`` per row, sorted, int64 ``(m, k)``."""
        if compiled.ENABLED and self.device.type == "cpu" and compiled.heap_subset(self.m, d):
            return compiled.subset(self.keys, d, k)
        if k == 1:  # the largest of the d words: topk's answer without its selection machinery
            return torch.argmax(self.bits64(d), dim=1, keepdim=True)
        idx = torch.topk(self.bits64(d), k, dim=1, sorted=False).indices
        return torch.sort(idx, dim=1).values


def _draw_key(g: torch.Generator) -> int:
    return int(torch.randint(0, 1 << 62, (1,), generator=g, device=g.device).item())
