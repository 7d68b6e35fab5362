"""Multilevel Monte Carlo debiasing of Top-K: an unbiased compressor from a biased one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors.base import Compressor, Packet, ceil_log2, check_float_bits
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows, poison_first, saturate
from streams import Streams


@dataclass(frozen=True)
class MLMCTopK(Compressor):
    """Multilevel Monte Carlo (MLMC) compression: Top-K made unbiased by a randomized
    telescoping sum (Zukerman, Hamoud & Levy, ICML 2025, arXiv 2507.05508, "Beyond
    Communication Overhead: A Multilevel Monte Carlo Approach for Mitigating Compression Bias
    in Distributed Learning"; the construction is the classic MLMC debiasing, Rhee & Glynn
    2015, arXiv 1409.4302, applied to the levels of a biased compressor). Only the abstract
    could be read (it names Top-K and bit-wise levels and an adaptive version); the level
    schedule and the adaptive probabilities below are this library's, stated as such.

    Levels ``k_0 = k < k_1 < ... < k_L = d`` with ``k_l = min(d, k 2^l)``; ``T_l`` is Top-``k_l``
    (ties to the lower index) and ``D_l = T_l(x) - T_{l-1}(x)`` its increment (the coordinates
    ranked ``k_{l-1} .. k_l - 1`` by magnitude). One level ``l`` is drawn per row with
    probability ``p_l = ||D_l|| / sum_j ||D_j||`` (the variance-optimal choice; uniform when
    every increment is zero) and the node sends ``C(x) = T_0(x) + D_l / p_l``.

    Class: unbiased (``E D_l / p_l`` telescopes to ``x - T_0(x)``), with
    ``E||C(x) - x||^2 = (sum_l ||D_l||)^2 - sum_l ||D_l||^2 <= (L - 1) ||x - T_0(x)||^2
    <= (L - 1)(1 - k/d) ||x||^2`` (Cauchy–Schwarz, and Top-K keeping at least ``k/d`` of the
    energy): ``omega = (L - 1)(1 - k/d)``, an upper bound (equality needs equal increments and
    an equal-magnitude residual at once, which the ranking forbids, so no worst case is
    declared).

    Bits: the level (``ceil(log2 L)`` bits), then the ``k + (k_l - k_{l-1})`` coordinates sent,
    each an index of ``ceil(log2 d)`` bits and a value of ``float_bits``: variable, up to the
    largest level; no mean is declared (the level probabilities depend on ``x``).

    Args:
        k: the base level's size ``k_0`` (``k >= d``: the whole vector, exactly).
        float_bits: wire width of one value.
    """

    unbiased: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    k: int = 8
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive integer, got k={self.k!r}")

    def levels(self, d: int) -> list[int]:
        """``[k_0, k_1, ..., k_L]``, ``k_0 = min(k, d)``, ``k_L = d`` (``L = 0`` when ``k >= d``:
        the whole vector is sent, exactly)."""
        out = [min(self.k, d)]
        while out[-1] < d:
            out.append(min(d, out[-1] * 2))
        return out

    def omega(self, d: int) -> float:
        L = len(self.levels(d)) - 1
        return max(L - 1, 0) * (1.0 - min(self.k, d) / d)

    def expected_bits(self, d: int) -> float | None:
        return None

    def _sizes(self, d: int) -> torch.Tensor:
        """The increments' sizes ``k_l - k_{l-1}`` (one zero-size level when ``L = 0``)."""
        ks = self.levels(d)
        sizes = [b - a for a, b in zip(ks, ks[1:], strict=False)] or [0]
        return torch.tensor(sizes, dtype=torch.int64)

    def _level_bits(self, d: int) -> int:
        return ceil_log2(len(self._sizes(d)))

    def row_bits(self, level: torch.Tensor, d: int) -> torch.Tensor:
        """Bits of rows that drew ``level`` (0-based index into the increments)."""
        sent = min(self.k, d) + self._sizes(d).to(level.device)[level]
        return self._level_bits(d) + sent * (ceil_log2(d) + self.float_bits)

    def max_bits(self, d: int) -> int:
        return int(self.row_bits(torch.tensor([int(self._sizes(d).argmax())]), d)[0])

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(k=1), cls(k=3, float_bits=16)]

    # ---------------------------------------------------------------- the operator
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        ks = self.levels(d)
        k0 = ks[0]
        if len(ks) == 1:
            ks = [k0, k0]  # L = 0: one empty increment, drawn with probability 1
        L = len(ks) - 1
        a = x_i.abs().to(torch.float64)
        a = torch.where(torch.isfinite(a), a, torch.inf)  # non-finite entries rank first
        order = torch.sort(-a, dim=1, stable=True).indices  # by magnitude, ties to lower index
        sq = torch.gather(torch.nan_to_num(a, posinf=0.0) ** 2, 1, order)
        csum = torch.cat([torch.zeros(m, 1, dtype=torch.float64, device=a.device),
                          sq.cumsum(dim=1)], dim=1)  # fmt: skip
        bounds = torch.tensor(ks, device=a.device)
        norms = (csum[:, bounds[1:]] - csum[:, bounds[:-1]]).clamp(min=0).sqrt()  # (m, L)
        total = norms.sum(dim=1, keepdim=True)
        p = torch.where(total > 0, norms / torch.where(total > 0, total, 1.0), 1.0 / L)
        u = rng.uniform(1, dtype=torch.float64)[:, 0].to(a.device)
        level = (p.cumsum(dim=1) <= u[:, None]).sum(dim=1).clamp(max=L - 1)
        p_l = p.gather(1, level[:, None])[:, 0]
        width = k0 + int(self._sizes(d).max())
        lo = bounds[:-1][level]
        n_l = (bounds[1:] - bounds[:-1])[level]
        slot = torch.arange(width, device=a.device)[None, :]
        pos = torch.where(slot < k0, slot, lo[:, None] + slot - k0)
        real = slot < (k0 + n_l)[:, None]
        idx = torch.gather(order, 1, pos.clamp(max=d - 1))
        vals = torch.gather(x_i, 1, idx)
        scale = torch.where(slot < k0, 1.0, 1.0 / p_l[:, None]).to(x_i.dtype)
        values = torch.where(real, saturate(vals * scale, vals, x_i.dtype), 0.0)
        values = poison_first(values, nonfinite_rows(x_i))
        nbits = self.row_bits(level, d)
        fields = {"level": level, "indices": torch.where(real, idx, 0), "values": values}
        return self._packet(x_i, nbits, {"level", "indices", "values"}, **fields)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        out = torch.zeros(packet.m, packet.d, dtype=f["values"].dtype, device=f["values"].device)
        return out.scatter_add_(1, f["indices"], f["values"])  # padding adds 0 at index 0

    def _count(self, level: torch.Tensor, d: int) -> torch.Tensor:
        return min(self.k, d) + self._sizes(d).to(level.device)[level]

    def _write(self, packet: Packet, w: BitWriter) -> None:
        d, f = packet.d, packet.fields
        lw = self._level_bits(d)
        if lw:
            w.uint(f["level"][:, None], lw)
        count = self._count(f["level"], d)
        w.uint(f["indices"], ceil_log2(d), count=count)
        w.floats(f["values"], count=count)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r = like.d, rd.r
        L = len(self._sizes(d))
        lw = self._level_bits(d)
        if lw:
            level = rd.uint(1, lw)[:, 0]
        else:
            level = torch.zeros(r, dtype=torch.int64, device=rd.device)
        if r and bool((level >= L).any()):
            raise ValueError(f"a row names level >= {L}: corrupt data")
        width = like.fields["indices"].shape[1]
        count = self._count(level, d)
        idx = rd.uint(width, ceil_log2(d), count=count)
        if r and bool((idx >= d).any()):
            raise ValueError(f"an index is out of range for d={d}: corrupt data")
        values = rd.floats(width, like.fields["values"].dtype, count=count)
        nbits = self.row_bits(level, d)
        return self._rebuilt(like, r, nbits, level=level, indices=idx, values=values)
