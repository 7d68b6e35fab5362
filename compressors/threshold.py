"""Hard threshold: keep the coordinates with ``|x_j| >= lam`` (deterministic, absolute)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense
from compressors.base import Compressor, Packet, ceil_log2, check_float_bits
from compressors.bitpack import BitReader, BitWriter
from streams import Streams

INDEX_CODES = ("list", "bitmap", "auto")


def kept_first(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the column indices with ``mask`` set, ascending, then the others: ``(m, d)``."""
    return torch.argsort((~mask).to(torch.int8), dim=1, stable=True)


@dataclass(frozen=True)
class Threshold(Compressor):
    """Hard-threshold sparsifier: ``C(x)_j = x_j`` if ``|x_j| >= lam``, else ``0``.

    Sahu, Dutta, Abdelmoniem, Sharma, Canini & Kalnis 2021 (arXiv 2108.00951, "Rethinking
    gradient sparsification as total error minimization", Sec. 3: the hard-threshold
    sparsifier and the class of absolute compressors); Danilova & Gorbunov 2022 (arXiv
    2203.02383), the compressor of EC-SGD and EC-LSVRG with absolute compression. The number of
    coordinates kept depends on ``x``.

    Class: absolute, ``Delta^2 = d lam^2``: every dropped coordinate has ``|x_j| < lam`` and a
    kept one is sent exactly, so ``||C(x) - x||^2 < d lam^2`` for every ``x`` (deterministic,
    whatever ``||x||``). The supremum is ``d lam^2``, approached as every ``|x_j| -> lam`` from
    below (:meth:`abs_worst_case`: all entries ``lam (1 - 2^-20)``). Neither unbiased nor
    contractive with a useful ``delta`` (``C(x) = 0`` for ``||x||_inf < lam``).
    Non-finite entries compare as kept (``not |x_j| < lam``), so they travel as values.

    Bits (``nnz`` = coordinates kept, a variable-size payload; ``nnz`` is read off the row,
    never assumed): ``index="list"``: a count of ``ceil(log2(d + 1))`` bits, then
    ``nnz * (ceil(log2 d) + float_bits)`` (indices and values); ``"bitmap"``: ``d + nnz *
    float_bits``; ``"auto"``: one flag bit plus the cheaper of the two, row by row (list on
    ties). On the wire the values travel in the dtype they are stored in (float64 rows pay 64
    bits a value where the model counts ``float_bits``).

    Args:
        lam: the threshold ``lam > 0``, in the units of ``x``.
        index: ``list`` | ``bitmap`` | ``auto``.
        float_bits: wire width of one value.
    """

    absolute: ClassVar[bool] = True
    deterministic: ClassVar[bool] = True
    projection: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    lam: float = 1e-3
    index: str = "list"
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        lam = self.lam
        if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0 < lam < float("inf"):
            raise ValueError(f"lam must be a finite number > 0, got lam={lam!r}")
        if self.index not in INDEX_CODES:
            raise ValueError(f"index must be one of list, bitmap, auto; got {self.index!r}")

    # ---------------------------------------------------------------- theory and bits
    def abs_delta_sq(self, d: int) -> float:
        return d * float(self.lam) ** 2

    def abs_worst_case(self, d: int) -> torch.Tensor:
        return torch.full((d,), float(self.lam) * (1.0 - 2.0**-20), dtype=torch.float64)

    def row_bits(self, nnz: torch.Tensor, d: int) -> torch.Tensor:
        """Bits of rows keeping ``nnz`` coordinates (int64, any shape), under the index code."""
        nnz = nnz.to(torch.int64)
        listed = ceil_log2(d + 1) + nnz * (ceil_log2(d) + self.float_bits)
        bitmap = d + nnz * self.float_bits
        if self.index == "list":
            return listed
        if self.index == "bitmap":
            return bitmap
        return 1 + torch.minimum(listed, bitmap)

    def expected_bits(self, d: int) -> float | None:
        return None

    def max_bits(self, d: int) -> int:
        return int(self.row_bits(torch.tensor(d), d))

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(lam=0.05, index="auto")]

    # ---------------------------------------------------------------- the operator
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        if compiled_dense.serves(x_i):  # the same payload in one pass, and the decoded rows
            return self._kept_packet(x_i, *compiled_dense.threshold_encode(x_i, self.lam))
        keep = ~(x_i.abs() < self.lam)
        values = torch.where(keep, x_i, torch.zeros((), dtype=x_i.dtype, device=x_i.device))
        return self._kept_packet(x_i, keep, values, keep.sum(dim=1))

    def _kept_packet(
        self, x_i: torch.Tensor, keep: torch.Tensor, values: torch.Tensor, nnz: torch.Tensor,
        rows: torch.Tensor | None = None,
    ) -> Packet:  # fmt: skip
        """The payload of the coordinates kept (``keep``, ``values``; ``nnz`` per row) with its
        bits; ``rows``, the decoded rows where the encoder wrote them, go to the first decode."""
        nbits = self.row_bits(nnz, x_i.shape[1])
        packet = self._packet(x_i, nbits, {"keep", "values"}, keep=keep, values=values)
        return packet if rows is None else self._keep_rows(packet, rows)

    def _decode(self, packet: Packet) -> torch.Tensor:
        return packet.fields["values"].clone()

    def _use_list(self, nnz: torch.Tensor, d: int) -> torch.Tensor:
        if self.index != "auto":
            return torch.full_like(nnz, self.index == "list", dtype=torch.bool)
        listed = ceil_log2(d + 1) + nnz * (ceil_log2(d) + self.float_bits)
        return listed <= d + nnz * self.float_bits

    # ---------------------------------------------------------------- the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        keep, d = packet.fields["keep"], packet.d
        nnz = keep.sum(dim=1)
        order = kept_first(keep)
        is_list = self._use_list(nnz, d)
        if self.index == "auto":
            w.bools(is_list[:, None])
        w.uint(nnz[:, None], ceil_log2(d + 1), count=is_list.to(torch.int64))
        w.uint(order, ceil_log2(d), count=torch.where(is_list, nnz, 0))
        w.bools(keep, count=torch.where(is_list, 0, d))
        w.floats(torch.gather(packet.fields["values"], 1, order), count=nnz)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r = like.d, rd.r
        if self.index == "auto":
            is_list = rd.bools(1)[:, 0]
        else:
            is_list = torch.full((r,), self.index == "list", dtype=torch.bool, device=rd.device)
        count = rd.uint(1, ceil_log2(d + 1), count=is_list.to(torch.int64))[:, 0]
        if r and bool((count > d).any()):
            raise ValueError(f"a row claims more than d={d} kept coordinates: corrupt data")
        idx = rd.uint(d, ceil_log2(d), count=torch.where(is_list, count, 0))
        mask = rd.bools(d, count=torch.where(is_list, 0, d))
        nnz = torch.where(is_list, count, mask.sum(dim=1))
        dtype = like.fields["values"].dtype
        vals = rd.floats(d, dtype, count=nnz)
        slot = torch.arange(d, device=rd.device)[None, :] < nnz[:, None]
        # list rows: the sent indices; bitmap rows: the marked columns in ascending order
        pos = torch.where(is_list[:, None], idx, kept_first(mask))
        if r and bool((pos[slot] >= d).any()):
            raise ValueError(f"an index is out of range for d={d}: corrupt data")
        rows = torch.arange(r, device=rd.device)[:, None].expand(r, d)[slot]
        keep = torch.zeros(r, d, dtype=torch.bool, device=rd.device)
        keep[rows, pos[slot]] = True
        if r and bool((keep.sum(dim=1) != nnz).any()):
            raise ValueError("a row repeats an index: corrupt data")
        values = torch.zeros(r, d, dtype=dtype, device=rd.device)
        values[rows, pos[slot]] = vals[slot]
        nbits = self.row_bits(nnz, d)
        return self._rebuilt(like, r, nbits, keep=keep, values=values)
