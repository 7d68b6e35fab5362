"""Perm-K: correlated sparsification, node i keeps block i of a shared random permutation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_perm
from compressors.base import Compressor, Packet, check_float_bits, scatter_sum
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows, poison_first, saturate
from streams import Streams, tags


@dataclass(frozen=True)
class PermK(Compressor):
    """Perm-K (Szlendak, Tyurin & Richtárik 2021, arXiv 2110.03300, Def. 2 and Sec. 5).

    All ``n`` nodes draw one random permutation ``pi`` of ``range(d)`` from the shared stream.
    For ``d >= n`` node ``i`` keeps the coordinates ``pi(j)`` of its block and sends
    ``n * x_pi(j)``; for ``d < n`` (``n`` a multiple of ``d``) node ``i`` keeps ``pi(i mod d)``
    and sends ``d * x_pi(i mod d)``. If ``n`` divides ``d`` the blocks are the paper's
    contiguous ``[i d/n, (i+1) d/n)``. Otherwise node ``i`` keeps the positions
    ``j = (i - r) mod n, +n, +2n, ...`` with ``r`` a shared uniform shift, so every coordinate
    belongs to node ``i`` with probability exactly ``1/n`` (a generalisation: without the shift
    the unequal blocks would break unbiasedness).

    Class: each ``C_i`` is unbiased with ``omega = n - 1`` (``d - 1`` when ``d < n``), exact for
    every ``x``. Jointly, with identical inputs, ``(1/n) sum_i C_i(x) = x`` and the messages are
    pairwise orthogonal (the AB-inequality with A = B = 1). This joint behaviour needs
    ``shared_randomness``: every node must be given the same key.

    Bits: ``float_bits * |block_i|`` (``ceil`` or ``floor`` of ``d/n``; 1 value for ``d < n``);
    the support is regenerated from the shared seed: the packet's ``meta["keys"]`` holds it, and
    ``from_bytes`` rebuilds node ``j``'s block from it and ``j``.

    Non-finite values (:mod:`compressors.nonfinite`): ``n x_j`` saturates at the dtype's max; a
    row with a NaN or inf entry sends NaN as the first value of its block, kept or not.

    Args:
        n: the number of nodes (bound by the runner; required before use).
        float_bits: wire width of one value.
    """

    unbiased: ClassVar[bool] = True
    scaled_projection: ClassVar[bool] = True
    shared_randomness: ClassVar[bool] = True
    needs_node_count: ClassVar[bool] = True
    linear: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    n: int | None = None
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if self.n is not None and (not isinstance(self.n, int) or self.n < 1):
            raise ValueError(f"n must be a positive integer (the node count), got n={self.n!r}")

    def bind(self, n: int) -> PermK:
        if self.n is not None and self.n != n:
            raise ValueError(f"permk was given n={self.n} but the run has n={n} nodes")
        return dataclasses.replace(self, n=n)

    def _n(self) -> int:
        if self.n is None:
            raise ValueError("permk needs the node count n: give permk:n=N or bind(n)")
        return self.n

    def _check_d(self, d: int) -> None:
        n = self._n()
        if d < n and n % d != 0:
            raise ValueError(f"permk with d < n needs n to be a multiple of d, got d={d}, n={n}")

    def omega(self, d: int) -> float:
        self._check_d(d)
        return float(min(self._n(), d) - 1)

    def support(self, d: int) -> int:
        return -(-d // self._n())

    def expected_bits(self, d: int) -> float:
        self._check_d(d)
        return self.float_bits * max(d / self._n(), 1.0)

    def max_bits(self, d: int) -> int:
        return self.float_bits * -(-d // self._n())

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(n=4), cls(n=3), cls(n=1)]

    def _indices(
        self, perm: torch.Tensor, rng: Streams
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each row's block of ``perm`` ``(m, b)``, and which of its entries are real (``None``:
        all are; the blocks are the paper's contiguous ones, cut from a shared row of ``perm``
        without an index tensor where they can be)."""
        n, d = self._n(), perm.shape[1]
        node = rng.nodes
        if node.numel() and (int(node.min()) < 0 or int(node.max()) >= n):
            raise ValueError(f"node ids must be in [0, {n}), got {node.tolist()}")
        if d < n:
            return torch.gather(perm, 1, (node % d)[:, None]), None
        b = -(-d // n)
        if d % n == 0:
            if node.numel() == 1:  # a view for n = 1, else a copy of b entries, not all d
                block = perm[:1, int(node[0]) * b : (int(node[0]) + 1) * b]
                return (block if n == 1 else block.clone()), None
            if perm.stride(0) == 0:
                return perm[0].view(n, b).index_select(0, node), None
            return torch.gather(
                perm, 1, node[:, None] * b + torch.arange(b, device=perm.device)
            ), None
        r = rng.split(tags.PERMK_SHIFT).integers(n)
        pos = ((node - r) % n)[:, None] + n * torch.arange(b, device=perm.device)
        return torch.gather(perm, 1, pos.clamp(max=d - 1)), pos < d

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        self._check_d(d)
        if m > 1 and bool((rng.keys == rng.keys[0]).all()):
            perm = _permutation(rng[:1], d).expand(m, d)  # one shared permutation, drawn once
        else:
            perm = _permutation(rng, d)
        idx, real = self._indices(perm, rng)
        values = torch.gather(x_i, 1, idx)
        values = poison_first(
            values if real is None else torch.where(real, values, 0.0), nonfinite_rows(x_i)
        )
        nbits = self.float_bits * (idx.shape[1] if real is None else real.sum(dim=1))
        scale = float(min(self._n(), d))
        # The keys are shared randomness (every node holds them): the receiver of node j's
        # message rebuilds its block from them and j, so they cost no bits.
        meta = {"scale": scale, "keys": rng.keys}
        return self._packet(x_i, nbits, {"values"}, meta, values=values, indices=idx)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        out = torch.zeros(packet.m, packet.d, dtype=f["values"].dtype, device=f["values"].device)
        # Padding entries carry value 0 at a clamped index: scatter_add leaves real ones intact.
        v = f["values"]
        return out.scatter_add_(
            1, f["indices"], saturate(v * packet.meta["scale"], v, packet.dtype)
        )

    def _decode_sum(self, packet: Packet, weight: torch.Tensor | None) -> torch.Tensor:
        return scatter_sum(packet, weight)  # padding entries add 0

    def _write(self, packet: Packet, w: BitWriter) -> None:
        # Only a block's real entries travel; they are its prefix, as many as nbits counts.
        w.floats(packet.fields["values"], count=packet.nbits // self.float_bits)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d = like.d
        self._check_d(d)
        keys = like.meta["keys"][:1].to(rd.device).expand(rd.r).clone()
        rng = Streams(keys, nodes)
        perm = _permutation(rng[:1], d).expand(rd.r, d)
        idx, real = self._indices(perm, rng)
        count = torch.full_like(nodes, idx.shape[1]) if real is None else real.sum(dim=1)
        values = rd.floats(idx.shape[1], like.fields["values"].dtype, count=count)
        meta = {"scale": like.meta["scale"], "keys": keys}
        return self._rebuilt(like, rd.r, self.float_bits * count, meta, values=values, indices=idx)


def _permutation(rng: Streams, d: int) -> torch.Tensor:
    """``rng.permutation(d)``, by the compiled bucket sort where it serves (the same rows)."""
    if compiled_perm.usable(rng.keys):
        return compiled_perm.permutation(rng.keys, d)
    return rng.permutation(d)
