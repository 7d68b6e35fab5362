"""All-reduce compatible quantizers: integer levels of one shared scale, summed without decoding.

Single-scale and multi-scale quantizers (Vineeth & Kumar, "Unbiased Single-scale and Multi-scale
Quantizers for Distributed Optimization", arXiv 2109.12497; authors' code
vineeths96/Gradient-Compression, ``QSGDMaxNormCompressor`` and
``QSGDMaxNormMultiScaleCompressor``), and the shared helpers of compressors whose payloads sum by
an all-reduce of integers (:mod:`compressors.thc` uses them too).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_shared_scale as compiled
from compressors.base import (
    SIGNED_LEVELS,
    Compressor,
    Packet,
    ceil_log2,
    check_float_bits,
    level_dtype,
    work_dtype,
)
from compressors.bitpack import BitReader, BitWriter
from streams import Streams

__all__ = ["MSQ", "SSQ", "sup_ratio"]


def sup_ratio(pieces: tuple[tuple[float, float, float, float], ...], others: int):
    """``sup sum_j e(u_j) / (1 + sum_j u_j^2)`` over ``others`` entries ``u_j`` and its maximiser.

    ``e`` is the variance of stochastic rounding between two neighbours: on the piece
    ``(a, b, lo, hi)``, ``e(u) = (u - lo)(hi - u)`` for ``u`` in ``[a, b]``. This is the error
    ratio of a row whose largest entry (``1``, sent exactly) sets the scale and whose other
    entries are ``u_j``. The supremum ``R`` is the root of ``others * max_u (e(u) - R u^2) = R``
    (Dinkelbach: the problem is separable, so every other entry sits at the same maximiser
    ``u*``); found by bisection, then recomputed from ``u*`` so that the row
    ``(1, u*, ..., u*)`` attains it (where ``u*`` is the open left end of a piece, to a
    relative ``1e-12``: the row ``(1, u*, ..., u*)`` with ``u*`` nudged inside). Returns
    ``(R, u*)``.
    """
    if others <= 0:
        return 0.0, 0.0
    p = torch.tensor(pieces, dtype=torch.float64)
    a, b, lo, hi = p.unbind(1)

    def best(r: float) -> tuple[float, float]:
        u = torch.minimum(torch.maximum((lo + hi) / (2.0 * (1.0 + r)), a), b)
        val = (u - lo) * (hi - u) - r * u * u
        i = int(torch.argmax(val))
        return float(val[i]), float(u[i])

    top = others * float(((hi - lo) ** 2).max()) / 4.0
    low, high = 0.0, top
    for _ in range(200):
        mid = 0.5 * (low + high)
        if others * best(mid)[0] > mid:
            low = mid
        else:
            high = mid
    u = torch.minimum(torch.maximum((lo + hi) / (2.0 * (1.0 + high)), a), b)
    i = int(torch.argmax((u - lo) * (hi - u) - high * u * u))
    ui, ai = float(u[i]), float(a[i])
    e = (ui - float(lo[i])) * (float(hi[i]) - ui)
    if ai > 0 and ui <= ai * (1.0 + 1e-12):  # a piece's left end belongs to the next piece
        ui = min(ai * (1.0 + 1e-12), float(b[i]))  # the supremum is approached from inside
    return others * e / (1.0 + others * ui * ui), ui


def _widths_of(spec: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in str(spec).split("/"))
    except ValueError:
        widths = ()
    if not widths or any(not 1 <= w <= 16 for w in widths) or list(widths) != sorted(set(widths)):
        raise ValueError(
            f"widths must be increasing level widths in bits, 1..16, joined by '/' "
            f"(e.g. '6/10'), got widths={spec!r}"
        )
    return widths


@functools.lru_cache(maxsize=64)
def _msq_pieces(widths: tuple[int, ...]) -> tuple[tuple[float, float, float, float], ...]:
    """The rounding pieces of ``|x_j| / B`` in ``[0, 1]``: scale ``k`` (``s_k = 2^b_k - 1``
    levels) covers ``(s_1 / s_{k+1}, s_1 / s_k]``, the finest covering ``[0, s_1 / s_K]``."""
    s = [(1 << w) - 1 for w in widths]
    out = []
    for k, sk in enumerate(s):
        top = s[0] / sk
        bottom = s[0] / s[k + 1] if k + 1 < len(s) else 0.0
        first = math.floor(bottom * sk)
        for lv in range(first, math.ceil(top * sk)):
            a, b = max(bottom, lv / sk), min(top, (lv + 1) / sk)
            if b > a:
                out.append((a, b, lv / sk, (lv + 1) / sk))
    return tuple(out)


@dataclass(frozen=True)
class _SharedScaleQuantizer(Compressor):
    """Shared machinery of SSQ and MSQ: stochastic rounding of ``|x_j| / B`` to the levels of
    the coordinate's scale, ``B`` the row's largest magnitude (or a scale shared by all nodes).

    Declaration ``integer_allreduce`` (this module's, not the base class's): with one scale
    ``B`` shared by every node (:meth:`encode_shared`; ``B`` at least every node's largest
    magnitude, in the authors' code the all-reduced maximum) and, for several scales, one
    choice of scale per coordinate shared by every node, the payloads' integers
    (:meth:`integers`: signed levels) sum over nodes by an all-reduce, and
    :meth:`decode_summed` turns the sum into the sum of the decoded rows without decoding any
    node's row.
    """

    unbiased: ClassVar[bool] = True
    integer_allreduce: ClassVar[bool] = True

    float_bits: int = 32

    # subclass interface --------------------------------------------------------------
    @property
    def scale_widths(self) -> tuple[int, ...]:
        raise NotImplementedError

    # constants -----------------------------------------------------------------------
    @property
    def levels(self) -> tuple[int, ...]:
        """``s_k = 2^b_k - 1`` for each scale, coarsest first."""
        return tuple((1 << w) - 1 for w in self.scale_widths)

    def _pieces(self):
        return _msq_pieces(self.scale_widths)

    def omega(self, d: int) -> float:
        return sup_ratio(self._pieces(), d - 1)[0]

    def worst_case(self, d: int) -> torch.Tensor:
        u = sup_ratio(self._pieces(), d - 1)[1]
        x = torch.full((d,), u, dtype=torch.float64)
        x[0] = 1.0
        return x

    def _index_bits(self) -> int:
        return ceil_log2(len(self.scale_widths))

    def bits(self, d: int) -> int:
        return self.float_bits + d * (self._index_bits() + 1 + self.scale_widths[0])

    # the operator ----------------------------------------------------------------------
    def resolution(self, x_i: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """Per entry the finest scale ``k`` (0 = coarsest) whose level of ``|x_j| / B`` cannot
        exceed ``s_1``: ``|x_j| s_k <= s_1 B`` (uint8 ``(m, d)``). It depends on ``x`` only, not
        on the draw, so the choice keeps the quantizer unbiased; a scale shared by several
        nodes is the entrywise minimum of theirs (the authors' all-reduce MIN)."""
        x = x_i.to(work_dtype(x_i.dtype))
        scale = self._scale_of(x) if scale is None else self._shared(scale, x)
        if compiled.usable(x):  # the same choice in one pass
            return compiled.resolution(x, scale, self.levels)
        r = x.abs() / torch.where(scale > 0, scale, 1.0)[:, None]
        res = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
        s1 = self.levels[0]
        for k, sk in enumerate(self.levels[1:], start=1):
            res = torch.where(r * sk <= s1, k, res).to(torch.uint8)
        return res

    def scale_of(self, x_i: torch.Tensor) -> torch.Tensor:
        """Each row's own scale, ``||x_i||_inf`` ``(m,)``; a scale shared by several nodes is
        the maximum of theirs (the authors' all-reduce MAX)."""
        return self._scale_of(x_i.to(work_dtype(x_i.dtype)))

    @staticmethod
    def _scale_of(x: torch.Tensor) -> torch.Tensor:
        return compiled.max_abs(x) if compiled.usable(x) else x.abs().amax(dim=1)

    @staticmethod
    def _shared(scale, x: torch.Tensor) -> torch.Tensor:
        s = torch.as_tensor(scale, dtype=x.dtype, device=x.device).reshape(-1)
        s = s.expand(x.shape[0]) if s.numel() == 1 else s
        if s.shape != (x.shape[0],):
            raise ValueError(f"scale must be a number or have shape ({x.shape[0]},)")
        own = _SharedScaleQuantizer._scale_of(x)
        if bool((torch.isfinite(own) & ~(own <= s)).any()):
            raise ValueError("a shared scale must be at least every row's largest magnitude")
        return s

    def encode_shared(
        self,
        x_i: torch.Tensor,
        rng,
        scale,
        resolution: torch.Tensor | None = None,
    ) -> Packet:
        """Encode the rows with the scale ``B`` shared by every node (a number or ``(m,)``) and,
        for several scales, the per-entry choice of scale shared by every node (``(d,)`` or
        ``(m, d)``; default: the entrywise minimum of the rows' own, :meth:`resolution`). The
        packet costs :meth:`bits` per row (the node's share of the MAX and MIN all-reduces of
        the scale and the choice, and its levels)."""
        if x_i.dim() != 2:
            raise ValueError(f"x_i must have shape (m, d), got {tuple(x_i.shape)}")
        streams = Streams.coerce(rng, x_i.shape[0], device=x_i.device)
        x = x_i.to(work_dtype(x_i.dtype))
        scale = self._shared(scale, x)
        if resolution is None:
            resolution = self.resolution(x, scale).amin(dim=0)
        res = torch.as_tensor(resolution, device=x.device).to(torch.uint8).expand(x.shape)
        return self._quantize(x_i, x, scale, res.contiguous(), streams)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        x = x_i.to(work_dtype(x_i.dtype))
        scale = self._scale_of(x)
        res = None if compiled.usable(x) else self.resolution(x, scale)  # the kernel chooses
        return self._quantize(x_i, x, scale, res, rng)

    def _quantize(self, x_i, x, scale, res, rng: Streams) -> Packet:
        """The packet of ``x`` with the choice of scale ``res`` (None: :meth:`resolution`'s,
        made with the levels by the kernel)."""
        m, d = x.shape
        if compiled.usable(x) and (res is None or int(res.max()) < len(self.levels)):
            signed, res = compiled.quantize(
                x, scale, res, self.levels, rng.keys, self._level_dtype()
            )
            return self._packet(
                x_i, self.bits(d), {"scale", "levels", "res"}, scale=scale, levels=signed, res=res
            )
        if res is None:
            res = self.resolution(x, scale)
        s = torch.tensor(self.levels, dtype=x.dtype, device=x.device)[res.long()]
        safe = torch.where(scale > 0, scale, 1.0)[:, None]
        y = (x.abs() / safe * s).clamp(max=float(self.levels[0]))
        low = y.floor()
        level = low + (rng.uniform(d, dtype=x.dtype) < y - low).to(x.dtype)
        level = torch.where(torch.isfinite(scale)[:, None], level, 0.0)
        signed = torch.where(x < 0, -level, level).to(self._level_dtype())
        return self._packet(
            x_i, self.bits(d), {"scale", "levels", "res"}, scale=scale, levels=signed, res=res
        )

    def _level_dtype(self) -> torch.dtype:
        """The signed levels' field: the narrowest holding ``+-s_1`` (SSQ's default ``s = 15``:
        int8, a quarter of the bytes of int32)."""
        return level_dtype(self.levels[0], signed=True)

    def _steps(self, dtype: torch.dtype, device) -> torch.Tensor:
        """``1 / s_k`` of each scale ``k``."""
        s = torch.tensor(self.levels, dtype=torch.float64, device=device)
        return (1.0 / s).to(dtype)

    def _step(self, res: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``1 / s_k`` of each entry's scale."""
        return self._steps(dtype, res.device)[res.long()]

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        scale = f["scale"]
        if compiled.usable(scale[:, None]) and f["levels"].dtype in SIGNED_LEVELS:
            steps = self._steps(scale.dtype, scale.device)
            return compiled.decode(scale, f["levels"], f["res"].to(torch.uint8), steps)
        return scale[:, None] * (f["levels"].to(scale.dtype) * self._step(f["res"], scale.dtype))

    # the all-reduce form -----------------------------------------------------------------
    def integers(self, packet: Packet) -> torch.Tensor:
        """The integers an all-reduce sums: the signed levels, int64 ``(m, d)``."""
        return packet.fields["levels"].to(torch.int64)

    def decode_summed(self, total: torch.Tensor, like: Packet, count: int) -> torch.Tensor:
        """The sum of ``count`` nodes' decoded rows from the sum of their :meth:`integers`
        (``(d,)``), the shared scale and choice of scale read off ``like`` (any of their
        packets). ``count`` is not needed here (the levels carry no offset)."""
        scale = like.fields["scale"][0]
        step = self._step(like.fields["res"][0], scale.dtype)
        return scale * (total.to(scale.dtype) * step)

    def sum_width(self, count: int) -> int:
        """Bits of one entry of the sum of ``count`` nodes' levels:
        ``ceil(log2(2 count s_1 + 1))``."""
        return math.ceil(math.log2(2 * count * self.levels[0] + 1))

    # the wire form -------------------------------------------------------------------
    def _write(self, packet: Packet, w: BitWriter) -> None:
        f = packet.fields
        w.floats(f["scale"])
        if self._index_bits():
            w.uint(f["res"].to(torch.int64), self._index_bits())
        level = f["levels"].to(torch.int64)
        w.uint(2 * level.abs() + (level < 0).to(torch.int64), self.scale_widths[0] + 1)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d = like.d
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        if self._index_bits():
            res = rd.uint(d, self._index_bits())
            if rd.r and int(res.max()) >= len(self.scale_widths):
                raise ValueError("a scale index exceeds the number of scales: corrupt data")
            res = res.to(torch.uint8)
        else:
            res = torch.zeros(rd.r, d, dtype=torch.uint8, device=rd.device)
        code = rd.uint(d, self.scale_widths[0] + 1)
        level = code >> 1
        if rd.r and int(level.max()) > self.levels[0]:
            raise ValueError(f"a level exceeds s_1={self.levels[0]}: corrupt data")
        signed = torch.where((code & 1).bool(), -level, level).to(self._level_dtype())
        return self._rebuilt(like, rd.r, self.bits(d), scale=scale, levels=signed, res=res)


@dataclass(frozen=True)
class SSQ(_SharedScaleQuantizer):
    """Unbiased single-scale quantizer, all-reduce compatible (Vineeth & Kumar 2021, arXiv
    2109.12497, the single-scale quantizer; authors' code ``QSGDMaxNormCompressor``).

    ``C(x)_j = B sign(x_j) xi_j / s`` with ``s = 2^width - 1`` levels, ``B`` the row's largest
    magnitude, ``xi_j = floor(y_j)`` or ``floor(y_j) + 1``, ``y_j = s |x_j| / B``, rounding up
    with probability ``y_j - floor(y_j)``. Across nodes ``B`` is one scale shared by all
    (:meth:`encode_shared`, the all-reduced maximum of the nodes' ``||x_i||_inf`` as in the
    authors' reducer), so the signed levels of all nodes sum by one integer all-reduce and are
    decoded once (``integer_allreduce``; :meth:`decode_summed`). The registered operator (what
    a method's ``comm.reduce`` and the property tests see) is the one-node form, ``B`` the
    row's own ``||x||_inf``; with a shared ``B >= ||x_i||_inf`` each node's error is at most
    ``B^2 sum_j min(1/4, y_j) / s^2``, bounded by the shared scale rather than its own norm.

    Class: unbiased, ``omega = (sqrt(1 + (d - 1)/s^2) - 1) / 2``, the exact supremum (attained
    at ``(1, u, ..., u)``, ``u = 1 / (2 s (1 + omega))``; derived here: the largest entry is
    exact, each other entry has variance ``B^2 (y - l)(l + 1 - y) / s^2``, and the ratio to
    ``B^2 (1 + sum_j u_j^2)`` is maximised with every ``u_j`` equal, see :func:`sup_ratio`).
    For ``width = 1`` this is TernGrad's ``(sqrt(d) - 1) / 2``. The paper's own variance bound
    was not read (abstract and authors' code only).

    Bits: ``float_bits + d (width + 1)`` (the scale; per entry the sign and a ``width``-bit
    level, as the authors' ``sign * xi`` integers). The all-reduced sum of ``n`` nodes' levels
    needs ``ceil(log2(2 n s + 1))`` bits per entry (:meth:`sum_width`). A row with a NaN or
    inf entry has a non-finite ``B`` and decodes to a non-finite row.

    Args:
        width: level bits ``b`` (``s = 2^b - 1``), 1..16.
        float_bits: wire width of the scale.
    """

    width: int = 4

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if isinstance(self.width, bool) or not isinstance(self.width, int):
            raise ValueError(f"width must be an integer in 1..16, got width={self.width!r}")
        if not 1 <= self.width <= 16:
            raise ValueError(f"width must be in 1..16, got width={self.width}")

    @property
    def scale_widths(self) -> tuple[int, ...]:
        return (self.width,)

    def omega(self, d: int) -> float:
        s = (1 << self.width) - 1
        return (math.sqrt(1.0 + (d - 1) / (s * s)) - 1.0) / 2.0

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(width=1), cls(width=8, float_bits=64)]


@dataclass(frozen=True)
class MSQ(_SharedScaleQuantizer):
    """Unbiased multi-scale quantizer, all-reduce compatible (Vineeth & Kumar 2021, arXiv
    2109.12497, the multi-scale quantizer; authors' code ``QSGDMaxNormMultiScaleCompressor``
    and ``QSGDMaxNormMultiScaleReducer``).

    Scales ``s_k = 2^b_k - 1`` for widths ``b_1 < ... < b_K`` (``widths="6/10"``, the
    authors' default). Entry ``j`` is rounded stochastically, unbiasedly, on the finest scale
    whose level cannot exceed ``s_1``: ``k_j = max{k : s_k |x_j| <= s_1 B}`` (small entries
    get fine levels, the largest ones the coarse scale), so every level fits ``b_1`` bits; the
    decoded entry is ``B sign(x_j) xi_j / s_{k_j}``. Across nodes ``B`` is shared (all-reduce
    MAX) and so is the choice of scale, the entrywise minimum of the nodes' own (all-reduce
    MIN), after which the signed levels sum by an integer all-reduce (``integer_allreduce``;
    :meth:`encode_shared`, :meth:`decode_summed`).

    Deviation from the authors' code: there the choice of scale is read off the *rounded*
    levels (the finest scale whose drawn level is at most ``s_1``), which makes the choice
    depend on the draw and the quantizer slightly biased for entries just above ``s_1 / s_k``;
    here it is read off ``|x_j|`` before rounding, so the quantizer is unbiased.

    Class: unbiased, ``omega`` the exact supremum of ``E||C(x) - x||^2 / ||x||^2``, computed
    by :func:`sup_ratio` over the rounding pieces of all scales (derived here as for
    :class:`SSQ`), attained at :meth:`worst_case`.

    Bits: ``float_bits + d (ceil(log2 K) + 1 + b_1)`` (the scale; per entry the scale index,
    the sign and a ``b_1``-bit level). A row with a NaN or inf entry decodes non-finite.

    Args:
        widths: level widths in bits, increasing, joined by ``/`` (``"6/10"``).
        float_bits: wire width of the scale.
    """

    widths: str = "6/10"

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        _widths_of(self.widths)

    @property
    def scale_widths(self) -> tuple[int, ...]:
        return _widths_of(self.widths)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(widths="1/3"), cls(widths="2/4/7")]
