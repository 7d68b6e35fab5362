"""Layer-wise compression: one compressor applied to each block (layer) of a row separately."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors.base import Compressor, Packet
from streams import Streams, tags

HEADER_BYTES = 4  # one little-endian uint32 byte length per block, at the front of a row


def _follow(name: str) -> property:
    """A declaration of the blockwise compressor that is the inner compressor's."""
    return property(lambda self: getattr(self.inner, name), doc=f"``inner.{name}``.")


@dataclass(frozen=True)
class Blockwise(Compressor):
    """Apply ``inner`` to consecutive blocks of each row (one block per parameter tensor), as
    deep-learning implementations do, instead of to the whole flattened vector. Dutta et al.
    2020, "On the discrepancy between the theoretical analysis and practical implementations
    of compressed communication for distributed deep learning" (AAAI, arXiv 1911.08250)
    analyse layer-wise against whole-model compression.

    Encoding: the row splits into blocks of ``sizes`` (summing to ``d``); block ``b`` is
    compressed by ``inner`` at dimension ``d_b`` with its own streams (:func:`block_streams`),
    and decoding concatenates the decoded blocks.

    Class: the blocks are disjoint, so ``||C(x) - x||^2 = sum_b ||C_b(x_b) - x_b||^2`` exactly.
    Unbiased iff ``inner`` is, ``omega = max_b omega(d_b)`` since ``sum_b omega_b ||x_b||^2 <=
    max_b omega_b ||x||^2``; contractive iff ``inner`` is, ``delta = min_b delta(d_b)`` since
    ``sum_b (1 - delta_b) ||x_b||^2 <= (1 - min_b delta_b) ||x||^2``. Both are attained by a
    vector supported on the worst block (``worst_case``). A direct sum of orthogonal projections
    is one, so ``projection`` follows ``inner``; ``scaled_projection`` holds only when all
    blocks share one ``omega``. The payload is a list of blocks, not one sparse payload, so
    ``sparsifier`` is False.

    Bits: ``sum_b`` of the inner packets' bits (``sum_b inner.bits(d_b)`` for fixed-size
    inners). Bytes (``to_bytes``): per row, the blocks' bytes in order, each padded to whole
    bytes (at most 7 bits per block beyond ``nbits``). A variable-size inner's blocks are
    preceded by a header of ``HEADER_BYTES`` per block (each block's byte length,
    little-endian uint32, counted in ``nbytes``, not in ``nbits``); a fixed-size inner needs
    none, since every node's block ``b`` has the length of this process's own.

    Not in the registry: built by :meth:`for_sizes` (the runner's ``--layerwise``), not from a
    spec string; :meth:`spec` describes it but does not parse back.

    Args:
        inner: the compressor applied to every block.
        sizes: the block sizes, in row order (e.g. ``p.numel()`` of each parameter tensor).
    """

    inner: Compressor
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.inner, Compressor):
            raise ValueError(f"inner must be a compressor, got {self.inner!r}")
        object.__setattr__(self, "sizes", _check_sizes(self.sizes))

    @classmethod
    def for_sizes(cls, inner: Compressor, sizes: Iterable[int | Sequence[int]]) -> Blockwise:
        """Blocks from sizes or tensor shapes (``[p.shape for p in model.parameters()]``)."""
        items = list(sizes)
        flat = [math.prod(s) if isinstance(s, Sequence) else s for s in items]
        return cls(inner, tuple(flat))

    # ------------------------------------------------------------ declarations
    # Built by for_sizes (the runner's --layerwise), never from a spec string.
    in_registry: ClassVar[bool] = False
    unbiased = _follow("unbiased")
    contractive = _follow("contractive")
    deterministic = _follow("deterministic")
    shared_randomness = _follow("shared_randomness")
    needs_node_count = _follow("needs_node_count")
    linear = _follow("linear")
    preserves_zero = _follow("preserves_zero")
    fixed_size = _follow("fixed_size")
    projection = _follow("projection")
    nonfinite_on_wire = _follow("nonfinite_on_wire")

    @property
    def scaled_projection(self) -> bool:  # type: ignore[override]
        if not self.inner.scaled_projection:
            return False
        try:
            return len({self.inner.omega(s) for s in self.sizes}) == 1
        except ValueError:
            return False

    def bind(self, n: int) -> Blockwise:
        return Blockwise(self.inner.bind(n), self.sizes)

    def spec(self) -> str:
        return f"blockwise[{len(self.sizes)} blocks]:{self.inner.spec()}"

    @classmethod
    def examples(cls) -> list[Compressor]:
        from compressors.dithering import QSGD
        from compressors.rand_k import RandK
        from compressors.top_k import TopK

        return [
            cls(TopK(k=2), (12, 20, 8)),
            cls(RandK(ratio=0.25), (8, 12, 20)),
            cls(QSGD(levels=2, coding="elias"), (30, 10)),
        ]

    # ------------------------------------------------------------ constants
    def _check_d(self, d: int) -> None:
        if d != sum(self.sizes):
            raise ValueError(
                f"d={d} does not match the blocks: sum(sizes)={sum(self.sizes)} "
                f"(sizes={self.sizes})"
            )

    def omega(self, d: int) -> float:
        self._check_d(d)
        if not self.unbiased:
            return super().omega(d)
        return max(self.inner.omega(s) for s in self.sizes)

    def delta(self, d: int) -> float:
        self._check_d(d)
        if self.unbiased or not self.contractive:
            return super().delta(d)
        return min(self.inner.delta(s) for s in self.sizes)

    def bias_variance(self, d: int) -> tuple[float, float]:
        """Blocks are compressed independently: the bias and the variance add up over blocks,
        so ``(max_b eta_b, max_b omega_b)``."""
        self._check_d(d)
        pairs = [self.inner.bias_variance(s) for s in self.sizes]
        return max(p[0] for p in pairs), max(p[1] for p in pairs)

    def bias_variance_exact(self, d: int) -> bool:
        # each max is attained by a vector supported on the worst block alone
        return all(self.inner.bias_variance_exact(s) for s in self.sizes)

    def support(self, d: int) -> int:
        self._check_d(d)
        return sum(self.inner.support(s) for s in self.sizes)

    def bits(self, d: int) -> int:
        self._check_d(d)
        return sum(self.inner.bits(s) for s in self.sizes)

    def expected_bits(self, d: int) -> float | None:
        self._check_d(d)
        each = [self.inner.expected_bits(s) for s in self.sizes]
        return None if any(e is None for e in each) else float(sum(each))

    def max_bits(self, d: int) -> int:
        self._check_d(d)
        return sum(self.inner.max_bits(s) for s in self.sizes)

    def worst_case(self, d: int) -> torch.Tensor | None:
        """The inner worst case on the block with the largest ``omega`` (smallest ``delta``),
        zero elsewhere: there the ratio is that block's constant, which is the declared one."""
        self._check_d(d)
        if self.unbiased:
            b = max(range(len(self.sizes)), key=lambda i: self.inner.omega(self.sizes[i]))
        elif self.contractive:
            b = min(range(len(self.sizes)), key=lambda i: self.inner.delta(self.sizes[i]))
        else:
            return None
        w = self.inner.worst_case(self.sizes[b])
        if w is None:
            return None
        x = torch.zeros(d, dtype=w.dtype)
        start = sum(self.sizes[:b])
        x[start : start + self.sizes[b]] = w
        return x

    # ------------------------------------------------------------ the operator
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        self._check_d(x_i.shape[1])
        blocks = tuple(
            self.inner._encode(x_b, block_streams(rng, b))
            for b, x_b in enumerate(x_i.split(self.sizes, dim=1))
        )
        return _assemble(blocks, x_i.shape[1], x_i.dtype)

    def _decode(self, packet: Packet) -> torch.Tensor:
        parts = [self.inner._decode(p).to(packet.dtype) for p in packet.meta["blocks"]]
        return torch.cat(parts, dim=1)

    # ------------------------------------------------------------ the wire form
    def _head(self) -> int:
        """Header bytes per row: block lengths are sent only when they can vary."""
        return 0 if self.inner.fixed_size else HEADER_BYTES * len(self.sizes)

    def to_bytes(self, packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: the header of block byte lengths, then each block's bytes, in order."""
        parts = [self.inner.to_bytes(p) for p in packet.meta["blocks"]]
        lens = torch.stack([nb.to(torch.int64) for _, nb in parts], dim=1)  # (m, blocks)
        if lens.numel() and int(lens.max()) >= 1 << 32:
            raise ValueError(f"a block takes {int(lens.max())} bytes; at most 2**32 - 1 allowed")
        m, head = lens.shape[0], self._head()
        nbytes = head + lens.sum(dim=1)
        width = int(nbytes.max()) if m else head
        out = torch.zeros(m, width, dtype=torch.uint8, device=lens.device)
        shifts = 8 * torch.arange(HEADER_BYTES, device=lens.device)
        if head:
            header = ((lens[:, :, None] >> shifts) & 255).reshape(m, head)
            out[:, :head] = header.to(torch.uint8)
        starts = head + torch.cumsum(lens, dim=1) - lens
        rows = torch.arange(m, device=lens.device)[:, None]
        for b, (data_b, _) in enumerate(parts):
            j = torch.arange(data_b.shape[1], device=lens.device)[None, :]
            keep = j < lens[:, b : b + 1]
            cols = starts[:, b : b + 1] + j
            out[rows.expand_as(cols)[keep], cols[keep]] = data_b.to(out.device)[keep]
        return out, nbytes

    def from_bytes(
        self, data: torch.Tensor, nbytes: torch.Tensor, like: Packet, nodes: torch.Tensor
    ) -> Packet:
        """Rebuild the rows of ``data`` (as :meth:`to_bytes` wrote them); ``like`` is a packet
        of this process from the same round, whose blocks the inner ``from_bytes`` needs."""
        if data.dtype != torch.uint8 or data.dim() != 2 or nbytes.shape != data.shape[:1]:
            raise ValueError(
                f"data must be uint8 (r, B) with nbytes (r,), got {data.dtype} "
                f"{tuple(data.shape)} and nbytes {tuple(nbytes.shape)}"
            )
        r, nb = data.shape[0], len(self.sizes)
        head = self._head()
        nbytes = nbytes.to(torch.int64)
        if r and (data.shape[1] < head or int(nbytes.min()) < head):
            raise ValueError(f"rows of {nbytes.tolist()} bytes cannot hold the {head}-byte header")
        if head:
            shifts = 8 * torch.arange(HEADER_BYTES, device=data.device)
            lens = (data[:, :head].to(torch.int64).reshape(r, nb, HEADER_BYTES) << shifts).sum(-1)
        else:  # fixed-size blocks: every node's block b is as long as this process's
            own = [self.inner.to_bytes(p)[1][:1] for p in like.meta["blocks"]]
            lens = torch.cat(own).to(data.device, torch.int64).expand(r, nb)
        if not torch.equal(head + lens.sum(dim=1), nbytes):
            raise ValueError(
                f"block lengths {lens.tolist()} plus the header do not add up to nbytes "
                f"{nbytes.tolist()}"
            )
        starts = head + torch.cumsum(lens, dim=1) - lens
        blocks = []
        for b in range(nb):
            j = torch.arange(int(lens[:, b].max()) if r else 0, device=data.device)[None, :]
            cols = (starts[:, b : b + 1] + j).clamp(max=max(data.shape[1] - 1, 0))
            chunk = torch.where(j < lens[:, b : b + 1], torch.gather(data, 1, cols), 0)
            chunk = chunk.to(torch.uint8)
            like_b = like.meta["blocks"][b]
            blocks.append(self.inner.from_bytes(chunk, lens[:, b].contiguous(), like_b, nodes))
        return _assemble(tuple(blocks), like.d, like.dtype)


def block_streams(rng: Streams, b: int) -> Streams:
    """The streams block ``b`` is compressed with: the rows' own for block 0 (so one block is
    exactly the inner compressor), a child stream per row for the others, independent of it."""
    return rng if b == 0 else rng.split(tags.BLOCK + b)


def _assemble(blocks: tuple[Packet, ...], d: int, dtype: torch.dtype) -> Packet:
    """One packet over the blocks: their fields under ``"b.name"``, bits summed per row."""
    fields = {f"{b}.{k}": v for b, p in enumerate(blocks) for k, v in p.fields.items()}
    wire = frozenset(f"{b}.{k}" for b, p in enumerate(blocks) for k in p.wire)
    nbits = torch.stack([p.nbits for p in blocks]).sum(dim=0)
    return Packet(fields, nbits, d, dtype, wire, {"blocks": blocks})


def _check_sizes(sizes) -> tuple[int, ...]:
    bad = ValueError(f"sizes must be a non-empty sequence of positive integers, got {sizes!r}")
    try:
        out = tuple(operator.index(s) for s in sizes)
    except TypeError:
        raise bad from None
    if not out or any(isinstance(s, bool) for s in sizes) or min(out) <= 0:
        raise bad
    return out
