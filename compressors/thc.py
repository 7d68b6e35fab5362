"""THC: a randomized Hadamard transform, then stochastic quantization to a table of a shared range,
so that a server sums the nodes' table values without decompressing them."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense, compiled_thc
from compressors.base import Compressor, Packet, check_float_bits, level_dtype, work_dtype
from compressors.bitpack import BitReader, BitWriter
from compressors.fosgd import irwht, padded_dim, rwht
from compressors.shared_scale import sup_ratio
from streams import Streams, tags

__all__ = ["THC", "THC_TABLES"]

#: The authors' non-uniform tables (SophiaLi06/BytePS_THC, ``byteps/torch/tables``), by index
#: width: ``(g, T)``, the table values ``T`` on the grid ``0..g``. 2 bits: file
#: ``1001_tablesize_34_maxval_4_qlevels_512_ofreq``; 3 bits: ``1001_tablesize_16_maxval_8_
#: qlevels_32_ofreq``; 4 bits: ``1001_tablesize_30_maxval_16_qlevels_32_ofreq``.
THC_TABLES: dict[int, tuple[int, tuple[int, ...]]] = {
    2: (34, (0, 13, 21, 34)),
    3: (16, (0, 3, 5, 7, 9, 11, 13, 16)),
    4: (30, (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)),
}


@functools.lru_cache(maxsize=32)
def _pieces(g: int, table: tuple[int, ...]) -> tuple[tuple[float, float, float, float], ...]:
    v = [-1.0 + 2.0 * t / g for t in table]
    return tuple((a, b, a, b) for a, b in zip(v[:-1], v[1:], strict=True))


@dataclass(frozen=True)
class THC(Compressor):
    """THC, tensor homomorphic compression (Li, Ben Basat, Vargaftik, Lao, Xu, Mitzenmacher &
    Yu, "THC: Accelerating Distributed Deep Learning Using Tensor Homomorphic Compression",
    NSDI 2024, arXiv 2302.08545; authors' code SophiaLi06/BytePS_THC, ``NewINCACompressor``
    and ``INCACompressor`` of ``byteps/torch/compression.py``). The idea of compressing so that
    the aggregate is computed on the compressed form goes back to the position paper of Jang,
    Na & Yoon, "Homomorphic Parameter Compression for Distributed Deep Learning Training"
    (arXiv 1711.10123), which gives no concrete method.

    The row is zero-padded to ``n = 2^ceil(log2 d)`` and rotated, ``y = H D x / sqrt(n)``,
    with signs ``D`` shared by every node (:func:`compressors.fosgd.rwht`). Each ``y_j`` is
    placed on ``[0, g]``, ``p_j = g (y_j / M + 1) / 2``, and rounded stochastically,
    unbiasedly, to one of its two neighbours in a table ``T_0 = 0 < T_1 < ... < T_{q-1} = g``
    of ``q = 2^width`` integers; the payload is the ``width``-bit index. The receiver reads
    ``y_j = M (2 T / g - 1)`` and rotates back. ``table="uniform"`` is ``T = 0..q-1``
    (``g = q - 1``, the authors' uniform THC); ``table="thc"`` takes the authors' optimized
    non-uniform table for ``width`` 2, 3 or 4 (:data:`THC_TABLES`).

    The homomorphism (``integer_allreduce``, as in :mod:`compressors.shared_scale`): with the
    range ``M`` shared by every node (:meth:`encode_shared`; the maximum of the nodes'
    :meth:`scale_of`, one all-reduce MAX of a float), the server sums the table values
    ``T`` (:meth:`integers`) of all nodes, integers in ``[0, count g]``, and
    :meth:`decode_summed` rotates the sum back once.

    Deviations from the authors' code. (1) The range: THC scales by the all-reduced largest
    ``||x_i||_2`` and clips ``y`` to a Gaussian quantile ``t_p ||x||/sqrt(n)`` (the clipped
    mass is left to error feedback), which makes it biased; here ``M = ||y||_inf`` (shared: its
    maximum over nodes), so nothing is clipped and the quantizer is unbiased. The authors'
    tables were optimized for their clipped range and are used here as they are. (2) The
    authors round first to a fine grid of ``table_size`` points, then between table entries
    through precomputed sender tables; here ``p_j`` is rounded between table entries in one
    step (also unbiased, with no more variance).

    Class: unbiased, ``omega(d) = (d / n) R``, ``R`` the supremum of
    ``sum_j e(u_j) / (1 + sum_j u_j^2)`` over ``n - 1`` entries ``u_j = y_j / M`` (the largest
    is exact), ``e`` the rounding variance between table neighbours, by :func:`sup_ratio`
    (derived here: given ``D`` the rounding errors are independent with variance
    ``M^2 e(u_j)``, and every entry of ``H / sqrt(n)`` has square ``1/n``, so the ``d`` kept
    output entries carry ``(d/n) sum_j M^2 e(u_j) <= (d/n) R ||x||^2``), or, where smaller,
    ``(d/n) 2 (ln(2n) + 1) e_max`` with ``e_max = (largest table gap / g)^2`` the largest
    rounding variance in units of ``M^2``: ``sum_j e(u_j) <= n e_max`` and, each ``y_j`` being
    a Rademacher sum with squared coefficients summing to ``||x||^2 / n``, Hoeffding and a union
    bound give ``E M^2 <= 2 (ln(2n) + 1) ||x||^2 / n`` (the argument of
    :class:`compressors.fosgd.FOSGD`). Both are bounds: ``y`` cannot take every shape for a
    random ``D``, so neither is known to be attained (no worst case).

    Bits: ``float_bits + n width`` (the range, one index per padded entry). The all-reduced
    sum of ``count`` nodes' table values needs ``ceil(log2(count g + 1))`` bits per entry
    (:meth:`sum_width`). Finite rows are rotated after division by their largest magnitude and
    decode saturated at the dtype's max; a row with a NaN or inf entry has a NaN range and
    decodes to NaN.

    Args:
        width: index bits per padded entry, 1..16 (``table="thc"``: 2, 3 or 4).
        table: ``uniform`` | ``thc``.
        float_bits: wire width of the range.
    """

    unbiased: ClassVar[bool] = True
    shared_randomness: ClassVar[bool] = True
    integer_allreduce: ClassVar[bool] = True

    width: int = 4
    table: str = "uniform"
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if isinstance(self.width, bool) or not isinstance(self.width, int):
            raise ValueError(f"width must be an integer in 1..16, got width={self.width!r}")
        if self.table not in ("uniform", "thc"):
            raise ValueError(f"table must be uniform or thc, got table={self.table!r}")
        if self.table == "thc" and self.width not in THC_TABLES:
            raise ValueError(f"table=thc has widths {sorted(THC_TABLES)}, got width={self.width}")
        if not 1 <= self.width <= 16:
            raise ValueError(f"width must be in 1..16, got width={self.width}")

    @property
    def grid(self) -> tuple[int, tuple[int, ...]]:
        """``(g, T)``: the grid size and the table."""
        if self.table == "thc":
            return THC_TABLES[self.width]
        q = 1 << self.width
        return q - 1, tuple(range(q))

    def omega(self, d: int) -> float:
        n = padded_dim(d)
        g, table = self.grid
        e_max = max(b - a for a, b in zip(table[:-1], table[1:], strict=True)) ** 2 / g**2
        tail = 2.0 * (math.log(2 * n) + 1.0) * e_max
        return d / n * min(sup_ratio(_pieces(g, table), n - 1)[0], tail)

    def bits(self, d: int) -> int:
        return self.float_bits + padded_dim(d) * self.width

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(width=3, table="thc"), cls(width=1), cls(width=2, table="thc")]

    # the operator ------------------------------------------------------------------------
    def _signs(self, rng: Streams, n: int, dtype: torch.dtype) -> torch.Tensor:
        return 1.0 - 2.0 * (rng.split(tags.THC_SIGNS).bits64(n) & 1).to(dtype)

    def _rotate(self, x_i: torch.Tensor, rng: Streams):
        """``(signs, top, y)``: the shared signs, each row's largest magnitude and the rotation
        of the row divided by it."""
        x = x_i.to(work_dtype(x_i.dtype))
        signs = self._signs(rng, padded_dim(x.shape[1]), x.dtype)
        top = x.abs().amax(dim=1)
        ok = torch.isfinite(top) & (top > 0)
        return signs, top, rwht(x / torch.where(ok, top, 1.0)[:, None], signs)

    def scale_of(self, x_i: torch.Tensor, rng) -> torch.Tensor:
        """Each row's range ``||y_i||_inf`` ``(m,)``; the range shared by several nodes is the
        maximum of theirs. ``rng`` must hold the keys the rows are encoded with (the signs)."""
        streams = Streams.coerce(rng, x_i.shape[0], device=x_i.device)
        _, top, y = self._rotate(x_i, streams)
        return y.abs().amax(dim=1) * top

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        return self._quantize(x_i, rng, None)

    def encode_shared(self, x_i: torch.Tensor, rng, scale) -> Packet:
        """Encode with the range ``M`` shared by every node (a number or ``(m,)``, at least each
        row's :meth:`scale_of`)."""
        if x_i.dim() != 2:
            raise ValueError(f"x_i must have shape (m, d), got {tuple(x_i.shape)}")
        streams = Streams.coerce(rng, x_i.shape[0], device=x_i.device)
        return self._quantize(x_i, streams, scale)

    def _quantize(self, x_i: torch.Tensor, rng: Streams, shared) -> Packet:
        m, d = x_i.shape
        x = x_i.to(work_dtype(x_i.dtype))
        n = padded_dim(d)
        fast = compiled_thc.serves(x)
        if fast:
            top = compiled_dense.absmax(x)
            fast = bool(torch.isfinite(top).all())
        if fast:  # the same numbers as below, in a few passes (compressors.compiled_thc)
            den = torch.where(top > 0, top, 1.0)
            keys = rng.split(tags.THC_SIGNS).keys
            signs, y, own = compiled_thc.rotate(x, den, keys, n, math.sqrt(n))
        else:
            signs, top, y = self._rotate(x_i, rng)
            own = y.abs().amax(dim=1)
        big = torch.finfo(x_i.dtype).max
        if shared is None:
            lam = own
            scale = (own * top).clamp(max=big)
        else:
            scale = torch.as_tensor(shared, dtype=y.dtype, device=y.device).reshape(-1)
            scale = scale.expand(m) if scale.numel() == 1 else scale
            if scale.shape != (m,):
                raise ValueError(f"scale must be a number or have shape ({m},)")
            if bool((torch.isfinite(own * top) & ~(own * top <= scale * (1 + 1e-6))).any()):
                raise ValueError("a shared range must be at least every row's scale_of")
            lam = scale / torch.where(top > 0, top, 1.0)
        if shared is None:  # a zero row decodes to zero
            scale = torch.where(top > 0, scale, 0.0)
        scale = torch.where(torch.isfinite(top), scale, torch.nan)
        g, table = self.grid
        t = torch.tensor(table, dtype=y.dtype, device=y.device)
        # shared keys, distinct nodes: each node's rounding stream is split off by its id
        dither = rng.split(tags.THC_DITHER).split(rng.nodes)
        index_dtype = level_dtype((1 << self.width) - 1)
        if fast:
            den = torch.where(lam > 0, lam, 1.0)
            uniform = self.table == "uniform"
            root = math.sqrt(n)
            index = compiled_thc.quantize(y, root, den, t, g, dither.keys, index_dtype, uniform)
            return self._packet(
                x_i, self.bits(d), {"scale", "index"}, scale=scale, index=index, signs=signs
            )
        u = (y / torch.where(lam > 0, lam, 1.0)[:, None]).clamp(-1.0, 1.0)
        p = (u + 1.0) * (g / 2.0)
        i = (torch.searchsorted(t, p.contiguous(), right=True) - 1).clamp(0, len(table) - 2)
        lo, hi = t[i], t[i + 1]
        up = dither.uniform(y.shape[1], dtype=y.dtype) < (p - lo) / (hi - lo)
        index = (i + up.to(i.dtype)).to(index_dtype)
        return self._packet(
            x_i, self.bits(d), {"scale", "index"}, scale=scale, index=index, signs=signs
        )

    def _table(self, dtype: torch.dtype, device) -> torch.Tensor:
        g, table = self.grid
        return torch.tensor(table, dtype=torch.int64, device=device), g

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        t, g = self._table(f["signs"].dtype, f["signs"].device)
        signs = f["signs"]
        if compiled_thc.serves(signs) and f["scale"].dtype == signs.dtype:
            values = t.to(signs.dtype) * (2.0 / g) - 1.0  # each table entry's decoded value
            n = signs.shape[1]
            big = torch.finfo(packet.dtype).max
            return compiled_thc.decode(
                f["index"], values, signs, f["scale"], packet.d, math.sqrt(n), big
            )
        v = t[f["index"].long()].to(f["signs"].dtype) * (2.0 / g) - 1.0
        out = irwht(v, f["signs"], packet.d) * f["scale"][:, None].to(v.dtype)
        big = torch.finfo(packet.dtype).max
        return out.clamp(-big, big)

    # the all-reduce form -------------------------------------------------------------------
    def integers(self, packet: Packet) -> torch.Tensor:
        """The integers the server sums: the table values ``T`` of the indices, int64
        ``(m, n)``."""
        t, _ = self._table(torch.float64, packet.fields["index"].device)
        return t[packet.fields["index"].long()]

    def decode_summed(self, total: torch.Tensor, like: Packet, count: int) -> torch.Tensor:
        """The sum of ``count`` nodes' decoded rows from the sum of their :meth:`integers`,
        with the shared range and signs of ``like`` (any of their packets): ``(d,)``."""
        f = like.fields
        _, g = self._table(f["signs"].dtype, total.device)
        v = total.to(f["signs"].dtype) * (2.0 / g) - count
        return irwht(v, f["signs"][0], like.d) * f["scale"][0].to(v.dtype)

    def sum_width(self, count: int) -> int:
        """Bits of one entry of the sum of ``count`` nodes' table values."""
        return math.ceil(math.log2(count * self.grid[0] + 1))

    # the wire form -------------------------------------------------------------------------
    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["scale"])
        w.uint(packet.fields["index"].to(torch.int64), self.width)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        n = like.fields["index"].shape[1]
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        index = rd.uint(n, self.width)
        if rd.r and int(index.max()) >= len(self.grid[1]):
            raise ValueError("an index exceeds the table: corrupt data")
        index = index.to(like.fields["index"].dtype)
        signs = like.fields["signs"][:1].expand(rd.r, n).clone()
        return self._rebuilt(like, rd.r, self.bits(like.d), scale=scale, index=index, signs=signs)
