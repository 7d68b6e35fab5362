"""Top-K: keep the K largest-magnitude coordinates (deterministic, biased)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled, timing
from compressors.base import (
    Compressor,
    Packet,
    SparseWire,
    check_float_bits,
    check_k_ratio,
    resolve_k,
    scatter_rows,
)
from compressors.bitpack import BitReader, BitWriter
from compressors.rand_k import index_bits, read_support, write_support
from streams import Streams


def top_k_indices(a: torch.Tensor, k: int) -> torch.Tensor:
    """Column indices of the ``k`` largest entries of each row of ``a >= 0``, sorted ascending.

    Ties at the threshold go to the lower index, on every device: ``torch.topk`` alone leaves
    the order of equal values unspecified, and binary data (mushrooms) produces exact ties.
    NaN ranks as inf, so a row's NaN and inf entries are kept (:mod:`compressors.nonfinite`).
    """
    m, d = a.shape
    tau = torch.topk(a, k, dim=1, sorted=False).values.min(dim=1, keepdim=True).values
    if bool(tau.isnan().any()):  # NaN ranks above everything, as inf (and as the kernel ranks it)
        a = torch.nan_to_num(a, nan=torch.inf, posinf=torch.inf)
        tau = torch.topk(a, k, dim=1, sorted=False).values.min(dim=1, keepdim=True).values
    above = a > tau
    at = a == tau
    room = k - above.sum(dim=1, keepdim=True)
    keep = above | (at & (torch.cumsum(at, dim=1) <= room))
    return keep.nonzero()[:, 1].reshape(m, k)


@dataclass(frozen=True)
class TopK(SparseWire, Compressor):
    """Top-K sparsification (greedy), ties broken toward the lower index.

    Keep the ``k`` coordinates of largest ``|x_j|``, send their values and indices.
    Alistarh et al. 2018 (arXiv 1809.10505); Stich et al. 2018 (arXiv 1809.07599); the
    compressor of the EF21 experiments (Richtárik et al. 2021, arXiv 2106.05203).

    Class: contractive, ``delta = k/d``, deterministic: ``||C(x) - x||^2 <= (1 - k/d)||x||^2``,
    with equality when all ``|x_j|`` are equal.

    Bits: ``float_bits * k`` plus the support, ``k * ceil(log2 d)`` (``index="list"``),
    ``d`` (``"bitmap"``) or the smaller of the two (``"auto"``).

    Args:
        k: coordinates kept (``1 <= k <= d``); or ``ratio`` (default ``0.01``).
        index: ``list`` | ``bitmap`` | ``auto``.
        float_bits: wire width of one value.
    """

    contractive: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True
    projection: ClassVar[bool] = True
    sparsifier: ClassVar[bool] = True

    k: int | None = None
    ratio: float | None = None
    index: str = "list"
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_k_ratio(self.k, self.ratio)
        check_float_bits(self.float_bits)
        if self.index not in ("list", "bitmap", "auto"):
            raise ValueError(f"index must be one of list, bitmap, auto; got {self.index!r}")

    def k_of(self, d: int) -> int:
        return resolve_k(self.k, self.ratio, d, default_ratio=0.01)

    def delta(self, d: int) -> float:
        return self.k_of(d) / d

    def bias_variance_exact(self, d: int) -> bool:
        # deterministic, and delta is attained (at worst_case): (sqrt(1 - delta), 0) is exact
        return True

    def support(self, d: int) -> int:
        return self.k_of(d)

    def bits(self, d: int) -> int:
        k = self.k_of(d)
        return self.float_bits * k + index_bits(self.index, k, d)

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(k=1), cls(ratio=0.25, index="auto")]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        d = x_i.shape[1]
        rows = None
        if compiled.small(x_i):
            idx, values, rows = compiled.top_k_rows(x_i, self.k_of(d))
        elif compiled.usable(x_i):
            idx, values = compiled.top_k(x_i, self.k_of(d))
        else:
            idx = top_k_indices(x_i.abs(), self.k_of(d))
            values = torch.gather(x_i, 1, idx)
        packet = self._packet(
            x_i, self.bits(d), {"values", "indices"}, {"scale": 1.0}, values=values, indices=idx
        )
        return packet if rows is None else self._keep_rows(packet, rows)

    def encode_shifted(self, x_i, h_i, rng):
        """One compiled pass on a CPU (:func:`compressors.compiled.top_k_shifted`): the
        difference, its Top-K, the decoded rows, the errors and the new shift, where the
        generic form makes seven calls (EF21 + Top-1 on mushrooms' 20 x 112 float32 rows, on a
        2-core AMD EPYC: the step besides the gradient 65 -> 55 us)."""
        if not (compiled.usable(x_i) and x_i.is_contiguous() and h_i.dtype == x_i.dtype
                and h_i.shape == x_i.shape and h_i.device == x_i.device):  # fmt: skip
            return super().encode_shifted(x_i, h_i, rng)
        d = x_i.shape[1]
        with timing.section("encode"):
            idx, values, rows, sq = compiled.top_k_shifted(x_i, h_i, self.k_of(d))
            packet = self._packet(
                x_i, self.bits(d), {"values", "indices"}, {"scale": 1.0}, values=values,
                indices=idx,
            )  # fmt: skip
        return packet, rows, sq

    def _decode(self, packet: Packet) -> torch.Tensor:
        return scatter_rows(packet, packet.fields["indices"], packet.fields["values"])

    def index_bits(self, d: int) -> int:
        return self.bits(d) - self.float_bits * self.k_of(d)

    def _write_support(self, packet: Packet, w: BitWriter) -> None:
        write_support(w, packet.fields["indices"], self.index, packet.d)

    def _read_support(self, rd: BitReader, like: Packet, nodes: torch.Tensor):
        """The support of the received rows and the meta their packet carries."""
        idx, _ = read_support(rd, self.index, self.k_of(like.d), like.d, nodes)
        return idx, {"scale": 1.0}
