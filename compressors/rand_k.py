"""Rand-K: keep K coordinates chosen uniformly at random, scaled to be unbiased."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled
from compressors.base import (
    Compressor,
    Packet,
    SparseWire,
    ceil_log2,
    check_float_bits,
    check_k_ratio,
    resolve_k,
    scatter_rows,
)
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows, poison_first, saturate
from streams import Streams

INDEX_CODES = ("list", "bitmap", "seed")
SEED_BITS = 64


def index_bits(index: str, k: int, d: int) -> int:
    """Bits of a support of size ``k`` in ``range(d)`` under the named index code."""
    if index == "list":
        return k * ceil_log2(d)
    if index == "bitmap":
        return d
    if index == "seed":
        return SEED_BITS
    return min(k * ceil_log2(d), d)  # "auto"


def support_code(index: str, k: int, d: int) -> str:
    """The index code actually used: ``auto`` is the cheaper of list and bitmap (list on ties)."""
    if index != "auto":
        return index
    return "list" if k * ceil_log2(d) <= d else "bitmap"


def write_support(w: BitWriter, idx: torch.Tensor, index: str, d: int, keys=None) -> None:
    """The support ``idx`` (m, k), sorted, under the named index code (``seed``: the row keys)."""
    code = support_code(index, idx.shape[1], d)
    if code == "list":
        w.uint(idx, ceil_log2(d))
    elif code == "bitmap":
        w.bools(
            torch.zeros(idx.shape[0], d, dtype=torch.bool, device=idx.device).scatter_(1, idx, True)
        )
    else:
        w.uint(keys[:, None], SEED_BITS)


def read_support(rd: BitReader, index: str, k: int, d: int, nodes: torch.Tensor):
    """Inverse of :func:`write_support`: ``(indices (r, k), keys (r,) or None)``."""
    code = support_code(index, k, d)
    if code == "list":
        return rd.uint(k, ceil_log2(d)), None
    if code == "bitmap":
        mask = rd.bools(d)
        if rd.r and bool((mask.sum(dim=1) != k).any()):
            raise ValueError(f"a bitmap row does not mark exactly k={k} of d={d} coordinates")
        return mask.nonzero()[:, 1].reshape(rd.r, k), None
    keys = rd.uint(1, SEED_BITS)[:, 0]
    return Streams(keys, nodes).subset(d, k), keys


@dataclass(frozen=True)
class RandK(SparseWire, Compressor):
    """Unbiased Rand-K sparsification.

    Pick a uniform ``k``-subset ``S`` of the coordinates (without replacement) from the row's
    stream and send ``x_S``; the receiver outputs ``(d/k) sum_{j in S} x_j e_j``.
    Stich et al. 2018 (arXiv 1809.07599); as used by DIANA, MARINA and DASHA
    (Tyurin & Richtárik 2022, arXiv 2202.01268, Def. 1.1).

    Class: unbiased, ``omega = d/k - 1``, attained by every ``x`` (tight everywhere).

    Bits: ``k`` values of ``float_bits`` each, plus the support:
    ``index="list"``: ``k * ceil(log2 d)`` bits; ``"bitmap"``: ``d`` bits; ``"seed"``: the
    row's 64-bit seed, sent once, from which the receiver regenerates ``S`` (the packet's
    ``meta["keys"]``).
    With ``shared=True`` every node uses the same subset, drawn from the shared stream of the
    step, and sends no index bits: ``float_bits * k``. The nodes' compressors are then
    correlated (not independent), which methods whose rate has ``omega/n`` must not assume.

    Non-finite values (:mod:`compressors.nonfinite`): ``(d/k) x_j`` saturates at the dtype's
    max; a row with a NaN or inf entry sends NaN as its first value, kept or not.

    Args:
        k: coordinates kept (``1 <= k <= d``); or give ``ratio`` (``k = round(ratio*d)``, at
            least 1). Default ``ratio = 0.01``.
        shared: the same subset on every node (a shared seed).
        index: ``list`` | ``bitmap`` | ``seed`` | ``auto`` (the cheaper of list and bitmap).
        float_bits: wire width of one value.
    """

    unbiased: ClassVar[bool] = True
    linear: ClassVar[bool] = True
    scaled_projection: ClassVar[bool] = True
    sparsifier: ClassVar[bool] = True

    k: int | None = None
    ratio: float | None = None
    shared: bool = False
    index: str = "list"
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_k_ratio(self.k, self.ratio)
        check_float_bits(self.float_bits)
        if self.index not in (*INDEX_CODES, "auto"):
            raise ValueError(f"index must be one of list, bitmap, seed, auto; got {self.index!r}")

    @property
    def shared_randomness(self) -> bool:  # type: ignore[override]
        return self.shared

    def k_of(self, d: int) -> int:
        return resolve_k(self.k, self.ratio, d, default_ratio=0.01)

    def omega(self, d: int) -> float:
        return d / self.k_of(d) - 1.0

    def support(self, d: int) -> int:
        return self.k_of(d)

    def bits(self, d: int) -> int:
        k = self.k_of(d)
        return self.float_bits * k + (0 if self.shared else index_bits(self.index, k, d))

    def index_bits(self, d: int) -> int:
        return self.bits(d) - self.float_bits * self.k_of(d)

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(k=1), cls(ratio=0.3, index="bitmap"), cls(k=2, shared=True)]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        k = self.k_of(d)
        idx = rng.subset(d, k)
        rows = None
        if compiled.small(x_i):  # the decoded rows on the way
            values, rows = compiled.rand_k_rows(x_i, idx, d / k)
        else:
            values = poison_first(torch.gather(x_i, 1, idx), nonfinite_rows(x_i))
        fields = {"values": values, "indices": idx}
        wire = {"values"} if self.shared or self.index == "seed" else {"values", "indices"}
        meta = {"scale": d / k}
        if self.index == "seed" and not self.shared:
            meta["keys"] = rng.keys  # the per-row seed the index code sends
        packet = self._packet(x_i, self.bits(d), wire, meta, **fields)
        return packet if rows is None else self._keep_rows(packet, rows)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        v = f["values"]
        return scatter_rows(
            packet, f["indices"], saturate(v * packet.meta["scale"], v, packet.dtype)
        )

    def _write_support(self, packet: Packet, w: BitWriter) -> None:
        if not self.shared:
            write_support(
                w, packet.fields["indices"], self.index, packet.d, packet.meta.get("keys")
            )

    def _read_support(self, rd: BitReader, like: Packet, nodes: torch.Tensor):
        """The support of the received rows and the meta their packet carries."""
        d = like.d
        k = self.k_of(d)
        if self.shared:
            return like.fields["indices"][:1].expand(rd.r, k).clone(), {"scale": d / k}
        idx, keys = read_support(rd, self.index, k, d, nodes)
        return idx, {"scale": d / k} if keys is None else {"scale": d / k, "keys": keys}
