"""Random dithering and QSGD: stochastic rounding of |x_j| / ||x||_p to a grid of levels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_quant, compiled_shared_scale
from compressors.base import Compressor, Packet, check_float_bits, level_dtype, work_dtype
from compressors.bitpack import BitReader, BitWriter, read_elias_levels, write_elias_levels
from compressors.nonfinite import safe_norm
from streams import Streams


def elias_gamma_bits(v: torch.Tensor) -> torch.Tensor:
    """Length of the Elias gamma code of integers ``v >= 1``: ``2 floor(log2 v) + 1``."""
    return 2 * (torch.frexp(v.to(torch.float64))[1].to(torch.int64) - 1) + 1


def elias_payload_bits(level: torch.Tensor) -> torch.Tensor:
    """Per row: for each non-zero level, gamma(gap to the previous non-zero) + sign + gamma(level).

    The QSGD code (Alistarh et al. 2017, arXiv 1610.02132, Sec. 3.2), norm excluded.
    """
    m, d = level.shape
    nz = level > 0
    pos = torch.arange(d, device=level.device).expand(m, d)
    last = torch.cummax(torch.where(nz, pos, -1), dim=1).values
    prev = torch.cat(
        [torch.full((m, 1), -1, device=level.device, dtype=last.dtype), last[:, :-1]], dim=1
    )
    per = elias_gamma_bits((pos - prev).clamp(min=1)) + 1 + elias_gamma_bits(level.clamp(min=1))
    return torch.where(nz, per, 0).sum(dim=1)


@dataclass(frozen=True)
class _Dithering(Compressor):
    """Shared machinery: ``C(x) = ||x||_p sign(x) * grid[level]``, ``level`` random and unbiased.

    Subclasses define the grid (``_round``) and the constants. Encoding: the norm
    (``float_bits``), and per entry the sign and the level: ``coding="fixed"`` spends
    ``ceil(log2(2 s + 1))`` bits per entry (sign and level jointly); ``coding="elias"`` sends
    only non-zero entries, each as Elias-gamma(gap) + sign + Elias-gamma(level), a
    variable-size payload whose bits are counted from the levels actually drawn.
    On the wire (``to_bytes``) the fixed code of an entry is ``2 level + sign``; the Elias code
    is the one counted, bit for bit (entries of level 0 send no sign, so ``-0.0`` arrives as
    ``0.0``).
    """

    unbiased: ClassVar[bool] = True
    preserves_zero: ClassVar[bool] = True

    coding: str = "fixed"
    float_bits: int = 32

    def _check_common(self) -> None:
        check_float_bits(self.float_bits)
        if self.coding not in ("fixed", "elias"):
            raise ValueError(f"coding must be fixed or elias, got coding={self.coding!r}")

    @property
    def fixed_size(self) -> bool:  # type: ignore[override]
        return self.coding == "fixed"

    # subclass interface -------------------------------------------------
    @property
    def s(self) -> int:
        raise NotImplementedError

    @property
    def p(self) -> float:
        raise NotImplementedError

    def _round(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Random level index in ``0..s`` for ``r in [0, 1]``, unbiased for ``grid``."""
        raise NotImplementedError

    def _grid(self, level: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    # bits -----------------------------------------------------------------
    def bits(self, d: int) -> int:
        if self.coding != "fixed":
            return super().bits(d)
        return self.float_bits + d * math.ceil(math.log2(2 * self.s + 1))

    def expected_bits(self, d: int) -> float | None:
        return float(self.bits(d)) if self.coding == "fixed" else None

    def max_bits(self, d: int) -> int:
        if self.coding == "fixed":
            return self.bits(d)
        gamma_s = 2 * int(math.floor(math.log2(self.s))) + 1
        return self.float_bits + d * (1 + 1 + gamma_s)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(coding="elias")]

    # the operator -----------------------------------------------------------
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        x = x_i.to(work_dtype(x_i.dtype))
        grid = self._kernel_grid()
        kernel = grid is not None and compiled_quant.usable(x)
        a = None if kernel else x.abs()  # the kernel takes |x_j| itself
        # max-abs is exact; the 2-norm is scaled where it would overflow or underflow and
        # saturates at the dtype's max, which keeps C unbiased and omega valid (the scale is
        # at most ||x||_2 and at least every |x_j|); see compressors.nonfinite
        if self.p == math.inf and kernel and compiled_shared_scale.usable(x):
            norm = compiled_shared_scale.max_abs(x)  # one pass (two for _max_abs), same bits
        elif self.p == math.inf:
            norm = _max_abs(x) if a is None else a.amax(dim=1)
        else:
            norm = safe_norm(x, a, x_i.dtype)
        small = level_dtype(self.s)
        if kernel:  # the same levels in one pass
            signs, small_level = compiled_quant.dither_encode(
                x, norm, rng.keys, grid, self.s, small
            )
            level = small_level if self.coding == "fixed" else small_level.to(torch.int64)
        else:
            signs = x < 0
            r = a / torch.where(norm > 0, norm, 1.0)[:, None]
            level = self._round(r.clamp(max=1.0), rng.uniform(d, dtype=x.dtype))
            bad = ~torch.isfinite(norm)  # a NaN or inf entry: the norm carries it, levels void
            if bool(bad.any()):
                level = torch.where(bad[:, None], 0, level)
            small_level = level.to(small)
        if self.coding == "fixed":
            nbits = self.bits(d)
        else:
            nbits = self.float_bits + elias_payload_bits(level)
        return self._packet(
            x_i,
            nbits,
            {"norm", "signs", "levels"},
            norm=norm,
            signs=signs,
            levels=small_level,
        )

    def _kernel_grid(self) -> int | None:
        """The grid of :mod:`compressors.compiled_quant` that is this one, if any."""
        return None

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        grid = self._kernel_grid()
        if grid is not None and compiled_quant.usable(f["norm"][:, None]):
            return compiled_quant.dither_decode(f["norm"], f["levels"], f["signs"], grid, self.s)
        mag = f["norm"][:, None] * self._grid(f["levels"].to(torch.int64), f["norm"].dtype)
        return torch.where(f["signs"], -mag, mag)

    # the wire form -----------------------------------------------------------
    def _code_width(self) -> int:
        """Bits of one entry's joint code ``2 level + sign`` under ``coding="fixed"``."""
        return self.bits(1) - self.float_bits

    def _write(self, packet: Packet, w: BitWriter) -> None:
        f = packet.fields
        w.floats(f["norm"])
        level = f["levels"].to(torch.int64)
        if self.coding == "fixed":
            # 2 s + 2 codes fit the counted width (2 s + 1 is odd), so the sign of a zero
            # level travels too and decode stays bitwise exact, -0.0 included.
            w.uint(2 * level + f["signs"].to(torch.int64), self._code_width())
        else:
            write_elias_levels(w, level, f["signs"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d = like.d
        norm = rd.floats(1, like.fields["norm"].dtype)[:, 0]
        if self.coding == "fixed":
            code = rd.uint(d, self._code_width())
            level, signs = code >> 1, (code & 1).bool()
            if rd.r and int(level.max()) > self.s:
                raise ValueError(f"a level code exceeds s={self.s}: corrupt data")
            nbits = self.bits(d)
        else:
            # Zero levels are not sent: their sign comes back as +, so a -0.0 decodes as 0.0.
            level, signs = read_elias_levels(rd, d)
            nbits = self.float_bits + elias_payload_bits(level)
        levels = level.to(like.fields["levels"].dtype)
        return self._rebuilt(like, rd.r, nbits, norm=norm, signs=signs, levels=levels)


def _max_abs(x: torch.Tensor) -> torch.Tensor:
    """``x.abs().amax(dim=1)``, the same bits, without an ``|x|`` block: the larger of
    ``max x`` and ``-min x`` (two vectorised reductions), made ``+0`` for all-zero rows; rows
    with a NaN take the slow form, so the NaN is the one ``amax`` of ``|x|`` gives."""
    top = torch.maximum(x.amax(dim=1), -x.amin(dim=1)).abs_()
    nan = torch.isnan(top)
    if bool(nan.any()):
        top[nan] = x[nan].abs().amax(dim=1)
    return top


def norm_of(norm: str | int | float) -> float:
    if str(norm) in ("2", "2.0"):
        return 2.0
    if str(norm) == "inf":
        return math.inf
    raise ValueError(f"norm must be 2 or inf, got norm={norm!r}")


@dataclass(frozen=True)
class _LevelDithering(_Dithering):
    """A dithering with ``levels`` (``s``) and ``norm`` (``p``) fields, which the subclass
    declares with its own defaults."""

    def __post_init__(self) -> None:
        self._check_common()
        if not isinstance(self.levels, int) or self.levels < 1:
            raise ValueError(f"levels must be an integer >= 1, got levels={self.levels!r}")
        object.__setattr__(self, "norm", "inf" if norm_of(self.norm) == math.inf else "2")

    @property
    def s(self) -> int:
        return self.levels

    @property
    def p(self) -> float:
        return norm_of(self.norm)


@dataclass(frozen=True)
class QSGD(_LevelDithering):
    """Random (standard) dithering with ``s`` uniform levels; QSGD for ``norm=2``.

    ``C(x) = ||x||_p sign(x) xi / s`` with ``xi_j = l`` or ``l + 1``,
    ``l = floor(s |x_j|/||x||_p)``, rounding up with probability ``s |x_j|/||x||_p - l``
    (Alistarh, Grubic, Li, Tomioka & Vojnovic 2017, arXiv 1610.02132, Sec. 3.1; general ``p``:
    Horváth et al. 2019, arXiv 1905.10988).

    Class: unbiased. Per entry the variance is ``||x||_p^2 (y - l)(l + 1 - y) / s^2`` with
    ``y = s |x_j|/||x||_p``, at most ``||x||_p^2 min(1/4, y) / s^2``; summing,
    ``omega = min(d / (4 s^2), sqrt(d) / s)`` for ``p = 2`` (QSGD's Lemma 3.1 states the looser
    ``min(d/s^2, sqrt(d)/s)``) and ``min((d - 1) / (4 s^2), sqrt(d) / s)`` for ``p = inf``
    (the largest entry is sent exactly). For ``p = inf`` and ``s = 1`` (TernGrad) the exact
    supremum ``(sqrt(d) - 1) / 2`` is declared.

    Bits: ``float_bits + d * ceil(log2(2 s + 1))`` (``coding="fixed"``), or QSGD's Elias code of
    the non-zeros (``coding="elias"``, counted from the payload).

    Args:
        levels: ``s >= 1``, the number of non-zero levels.
        norm: ``2`` (QSGD) or ``inf``.
        coding: ``fixed`` | ``elias``.
        float_bits: wire width of the norm.
    """

    levels: int = 4
    norm: str = "2"

    def omega(self, d: int) -> float:
        s = self.s
        if self.p == math.inf:
            if s == 1:
                return (math.sqrt(d) - 1.0) / 2.0
            return min((d - 1) / (4.0 * s * s), math.sqrt(d) / s)
        return min(d / (4.0 * s * s), math.sqrt(d) / s)

    def worst_case(self, d: int) -> torch.Tensor | None:
        if self.p == math.inf and self.s == 1:
            x = torch.full((d,), 1.0 / (math.sqrt(d) + 1.0), dtype=torch.float64)
            x[0] = 1.0
            return x
        return None

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(levels=1), cls(levels=3, norm="inf"), cls(levels=16, coding="elias")]

    def _round(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        y = r * self.s
        low = y.floor()
        return (low + (u < y - low).to(y.dtype)).to(torch.int64)

    def _grid(self, level: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return level.to(dtype) / self.s

    def _kernel_grid(self) -> int | None:
        return compiled_quant.QSGD if self.s < 1 << 24 else None
