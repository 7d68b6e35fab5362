"""Multilevel Monte Carlo debiasing: unbiased compressors from biased ones (Top-K levels,
bit-precision levels)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_mlmc
from compressors.base import Compressor, Packet, ceil_log2, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import nonfinite_rows, poison_first, saturate
from streams import Streams


def draw_level(norms: torch.Tensor, rng: Streams) -> tuple[torch.Tensor, torch.Tensor]:
    """One increment per row, drawn with probability ``p_l = ||D_l|| / sum_j ||D_j||`` from
    the ``(m, L)`` float64 increment norms (uniform over the ``L`` increments when all are
    zero), with one uniform of the row's stream. Returns ``(level, p_level)``; a level of
    probability zero is never returned, also when rounding leaves the cumulative sum below
    the uniform drawn."""
    L = norms.shape[1]
    total = norms.sum(dim=1, keepdim=True)
    p = torch.where(total > 0, norms / torch.where(total > 0, total, 1.0), 1.0 / L)
    u = rng.uniform(1, dtype=torch.float64)[:, 0].to(norms.device)
    level = (p.cumsum(dim=1) <= u[:, None]).sum(dim=1)
    last = L - 1 - (p > 0).flip(1).to(torch.int64).argmax(dim=1)  # last level with p_l > 0
    level = torch.minimum(level, last)
    return level, p.gather(1, level[:, None])[:, 0]


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
        bounds = torch.tensor(ks, device=x_i.device)
        if compiled_mlmc.serves(x_i):  # the same order and sums (a radix sort), then the slots
            ranked = compiled_mlmc.rank(x_i, ks)
            norms = (ranked.csum[:, 1:] - ranked.csum[:, :-1]).clamp(min=0).sqrt()
            level, p_l = draw_level(norms, rng)
            lo, n_l = bounds[:-1][level], (bounds[1:] - bounds[:-1])[level]
            width = k0 + int(self._sizes(d).max())
            scale = (1.0 / p_l).to(x_i.dtype)
            idx, values = compiled_mlmc.pick(x_i, ranked, k0, lo, n_l, width, scale)
            fields = {"level": level, "indices": idx, "values": values}
            return self._packet(x_i, self.row_bits(level, d), set(fields), **fields)
        a = x_i.abs().to(torch.float64)
        a = torch.where(torch.isfinite(a), a, torch.inf)  # non-finite entries rank first
        order = torch.sort(-a, dim=1, stable=True).indices  # by magnitude, ties to lower index
        sq = torch.gather(torch.nan_to_num(a, posinf=0.0) ** 2, 1, order)
        csum = torch.cat([torch.zeros(m, 1, dtype=torch.float64, device=a.device),
                          sq.cumsum(dim=1)], dim=1)  # fmt: skip
        norms = (csum[:, bounds[1:]] - csum[:, bounds[:-1]]).clamp(min=0).sqrt()  # (m, L)
        level, p_l = draw_level(norms, rng)
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


def waterfill_sup(caps: list[float], kappa: float) -> float:
    """``sup ((sum_l u_l)^2 - sum_l u_l^2) / (kappa + sum_l u_l^2)`` over ``0 <= u_l <=
    caps_l`` (``kappa > 0``), exactly (up to rounding).

    For a fixed ``sum u_l^2`` the sum ``sum u_l`` is largest at ``u_l = min(t, caps_l)`` (the
    maximum of a linear function on a sphere cut by a box: water-filling), so one scalar ``t``
    remains. Between two consecutive caps the ratio is a quotient of two quadratics in ``t``;
    its maximum there is at an end of the interval or at a root of the numerator of its
    derivative, itself a quadratic.
    """
    a = sorted((float(v) for v in caps), reverse=True)
    best = 0.0
    for i in range(len(a)):
        free = i + 1  # u_l = t for the largest caps, u_l = caps_l for the others
        capped = a[i + 1 :]
        A, B = sum(capped), sum(v * v for v in capped)
        lo, hi = (capped[0] if capped else 0.0), a[i]
        # ratio = (al t^2 + be t + ga) / (free t^2 + ep); derivative numerator q2 t^2 + q1 t + q0
        al, be, ga, ep = free * free - free, 2.0 * free * A, A * A - B, kappa + B
        q2, q1, q0 = -be * free, 2.0 * (al * ep - ga * free), be * ep
        ts = [lo, hi]
        if q2 != 0.0:
            disc = q1 * q1 - 4.0 * q2 * q0
            if disc >= 0.0:
                ts += [(-q1 + sg * math.sqrt(disc)) / (2.0 * q2) for sg in (1.0, -1.0)]
        elif q1 != 0.0:
            ts.append(-q0 / q1)
        for t in ts:
            if lo <= t <= hi:
                best = max(best, (al * t * t + be * t + ga) / (free * t * t + ep))
    return best


@dataclass(frozen=True)
class MLMCBits(Compressor):
    """Multilevel Monte Carlo (MLMC) compression with bit-precision levels: truncation to
    ``b_l`` bits made unbiased by a randomized telescoping sum (Zukerman, Hamoud & Levy, ICML
    2025, arXiv 2507.05508, "Beyond Communication Overhead: A Multilevel Monte Carlo Approach
    for Mitigating Compression Bias in Distributed Learning", its bit-wise construction; the
    debiasing is that of Rhee & Glynn 2015, arXiv 1409.4302). Only the abstract could be read:
    it names bit-wise compressors as MLMC levels. The quantizer, the precision schedule, the
    top level, the adaptive probabilities and the encoding below are this library's
    reconstruction, stated as such.

    Levels: with ``s = ||x||_inf`` and ``r_j = |x_j| / s``, the biased truncation to ``b`` bits
    is ``Q_b(x)_j = s sign(x_j) q_b(r_j) 2^-b`` with ``q_b(r) = min(floor(2^b r), 2^b - 1)``
    (deterministic; the cap only touches ``r = 1``, the largest entry, so that ``q_b`` fits
    ``b`` bits). Precisions ``b_l = base_bits + step l`` for ``l = 0..depth``, and the identity
    as the top level ``depth + 1``, so the telescoping sum ends at ``x`` itself. Increments
    ``D_l = Q_{b_l}(x) - Q_{b_{l-1}}(x)`` for ``l = 1..depth`` have entries
    ``s sign(x_j) e_j 2^-b_l`` with digits ``e_j = q_{b_l} - 2^step q_{b_{l-1}}`` in
    ``[0, 2^step - 1]`` (the ``step`` bits that level ``l`` adds), and ``D_top = x -
    Q_{b_depth}(x)``, each entry below ``s 2^-b_depth`` in magnitude, of the sign of ``x_j``.
    One increment is drawn per row with probability ``p_l = ||D_l|| / sum_j ||D_j||``
    (uniform when all are zero) and the node sends ``C(x) = Q_{b_0}(x) + D_l / p_l``.

    Class: unbiased, ``E C(x) = Q_{b_0}(x) + sum_l D_l = x`` (the top level is exact; the
    bare ``Q_{b_0}`` is biased). With ``R = x - Q_{b_0}(x) = sum_l D_l``, ``S = sum_l ||D_l||``
    and ``u_l = ||D_l||``: ``E||C(x) - x||^2 = sum_l u_l^2 / p_l - ||R||^2 = S^2 - ||R||^2``.
    Every increment has the signs of ``x``, so ``<D_l, D_k> >= 0`` and ``||R||^2 >= sum u_l^2``;
    and ``||x||^2 >= s^2 (1 - c) + ||R||^2`` with ``c = 4^-base_bits`` (``|R_j| <= |x_j|``, and
    the largest entry's error is exactly ``s 2^-b_0``). Hence, in units of ``s``,
    ``E||C(x) - x||^2 / ||x||^2 <= ((sum u_l)^2 - sum u_l^2) / (1 - c + sum u_l^2)`` with
    ``u_l <= a_l``: ``a_l = (2^step - 1) 2^-b_l sqrt(d)`` and ``a_top = 2^-b_depth sqrt(d)``.
    ``omega`` is the supremum of that ratio over the box (:func:`waterfill_sup`), capped by
    ``(d - 1) c`` (from ``S <= sqrt(d) s 2^-b_0``, the ``a_l`` telescoping, and ``||R||^2 >=
    s^2 c``). The plain Cauchy–Schwarz step of MLMC Top-K, ``S^2 <= (depth + 1) sum u_l^2``,
    gives the looser ``depth d c / (1 + (d - 1) c)``, which this never exceeds. An upper bound,
    no worst case declared (equal increments need ``4^step`` times more entries per level).

    Bits (counted from the increment drawn): the level (``ceil(log2(depth + 1))`` bits), ``s``
    (``float_bits``), per entry the sign and ``q_{b_0}`` (``base_bits + 1`` bits); then for a
    truncation increment its scale ``s 2^-b_l / p_l`` (``float_bits``) and per entry the digit
    (``step`` bits), or for the top increment the ``d`` values ``D_top / p_top``
    (``float_bits`` each, sent only with probability ``p_top``). Variable size; no mean is
    declared (the probabilities depend on ``x``). A row with a NaN or inf entry has a
    non-finite ``s`` and decodes to NaN (``s`` times a zero code), also from its bytes.

    Args:
        base_bits: ``b_0``, the bits of the base level's magnitude code (1..24).
        depth: the truncation levels above the base (``>= 0``; 0: the base and the identity,
            sent exactly).
        step: bits each level adds (1..8), ``b_depth = base_bits + step depth <= 62``.
        float_bits: wire width of one float.
    """

    unbiased: ClassVar[bool] = True
    fixed_size: ClassVar[bool] = False

    base_bits: int = 2
    depth: int = 8
    step: int = 1
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        for name, lo, hi in (("base_bits", 1, 24), ("depth", 0, 62), ("step", 1, 8)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {name}={v!r}")
        if self.base_bits + self.step * self.depth > 62:
            raise ValueError(
                "base_bits + step * depth must be <= 62 (the finest level's code fits int64), "
                f"got base_bits={self.base_bits}, step={self.step}, depth={self.depth}"
            )

    def precisions(self) -> list[int]:
        """``[b_0, ..., b_depth]``; the identity follows as the top level."""
        return [self.base_bits + self.step * level for level in range(self.depth + 1)]

    def caps(self, d: int) -> list[float]:
        """The bounds ``a_l / s`` on the increments' norms, the top one last."""
        b = self.precisions()
        digit = float(2**self.step - 1)
        return [digit * 2.0**-bl * math.sqrt(d) for bl in b[1:]] + [2.0 ** -b[-1] * math.sqrt(d)]

    def omega(self, d: int) -> float:
        c = 4.0**-self.base_bits
        return min(waterfill_sup(self.caps(d), 1.0 - c), (d - 1) * c)

    def expected_bits(self, d: int) -> float | None:
        return None

    def _level_bits(self) -> int:
        return ceil_log2(self.depth + 1)

    def row_bits(self, level: torch.Tensor, d: int) -> torch.Tensor:
        """Bits of rows that drew ``level`` (0-based increment index; ``depth`` is the top)."""
        fb = self.float_bits
        inc = torch.where(level == self.depth, d * fb, fb + d * self.step)
        return self._level_bits() + fb + d * (self.base_bits + 1) + inc

    def max_bits(self, d: int) -> int:
        return int(self.row_bits(torch.tensor([0, self.depth]), d).max())

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(base_bits=1, depth=2), cls(base_bits=3, depth=3, step=2, float_bits=16)]

    # ---------------------------------------------------------------- the operator
    @staticmethod
    def _codes(r: torch.Tensor, b) -> torch.Tensor:
        """``q_b(r) = min(floor(2^b r), 2^b - 1)`` in float64 (exact integers); ``b`` an int
        or an int64 ``(m, 1)`` tensor."""
        if isinstance(b, int):
            return torch.floor(r * 2.0**b).clamp_(max=2.0**b - 1)
        top = torch.ldexp(torch.ones_like(r[:, :1]), b)
        return torch.minimum(torch.floor(torch.ldexp(r, b)), top - 1)

    @staticmethod
    def _ratios(x_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``s = ||x||_inf`` per row (exact, the input's dtype; NaN or inf for a non-finite row),
        ``r = |x| / s`` in float64 (0 for zero and non-finite rows), and the non-finite rows."""
        a = x_i.abs()
        s = a.amax(dim=1)
        bad = ~torch.isfinite(s)
        s64 = s.to(torch.float64)
        r = a.to(torch.float64) / torch.where((s64 > 0) & ~bad, s64, 1.0)[:, None]
        if bool(bad.any()):
            r = torch.where(bad[:, None], 0.0, r)
        return s, r, bad

    def quantize(self, x_i: torch.Tensor, level: int) -> torch.Tensor:
        """The biased level ``Q_{b_level}(x)`` of rows ``x_i`` (float64), ``0 <= level <=
        depth``; level ``depth + 1`` is ``x`` itself."""
        if level == self.depth + 1:
            return x_i.to(torch.float64)
        s, r, _ = self._ratios(x_i)
        b = self.precisions()[level]
        mag = s.to(torch.float64)[:, None] * (self._codes(r, b) * 2.0**-b)
        return torch.where(x_i < 0, -mag, mag)

    def _q0_dtype(self) -> torch.dtype:
        """The narrowest integer dtype of the payload's ``q0`` (``< 2^base_bits``): a byte an
        entry up to 8 bits, where int32 took four."""
        return torch.uint8 if self.base_bits <= 8 else (
            torch.int16 if self.base_bits <= 15 else torch.int32
        )  # fmt: skip

    def _value_columns(self, level: torch.Tensor, d: int) -> int:
        """The columns of the payload's ``values``: ``d`` where some row drew the top increment,
        else none (the top's probability is small on all but tiny rows, and a zero ``(m, d)``
        block cost as much memory as the rest of the payload)."""
        return d if bool((level == self.depth).any()) else 0

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        b, K, step = self.precisions(), self.depth, self.step
        if compiled_mlmc.serves(x_i):  # the same numbers, in a few passes over the row
            return self._encode_compiled(x_i, rng)
        s, r, bad = self._ratios(x_i)
        q0 = self._codes(r, b[0])
        norms = torch.empty(m, K + 1, dtype=torch.float64, device=x_i.device)
        prev = q0
        for level in range(1, K + 1):  # ||D_l|| / s = 2^-b_l ||digits||
            q = self._codes(r, b[level])
            digits = q - prev * 2.0**step
            norms[:, level - 1] = torch.linalg.vector_norm(digits, dim=1) * 2.0 ** -b[level]
            prev = q
        norms[:, K] = torch.linalg.vector_norm(r - prev * 2.0 ** -b[K], dim=1)
        level, p_l = draw_level(norms, rng)
        trunc = (level < K) & ~bad
        s64 = s.to(torch.float64)
        big = torch.finfo(x_i.dtype).max
        # the drawn truncation increment: its digits and its scale s 2^-b_l / p_l
        hi, scale = self._inc_scale(s, level, p_l, trunc, x_i.dtype)
        digits = self._codes(r, hi) - self._codes(r, hi - step) * 2.0**step
        digits = torch.where(trunc[:, None], digits, 0.0).to(torch.uint8)
        # the drawn top increment (x - Q_{b_depth}(x)) / p_top, in full
        values = torch.zeros(m, self._value_columns(level, d), dtype=x_i.dtype, device=x_i.device)
        top = (level == K) & ~bad
        if bool(top.any()):
            x = x_i[top].to(torch.float64)
            mag = s64[top, None] * (prev[top] * 2.0 ** -b[K])
            res = (x - torch.where(x < 0, -mag, mag)) / p_l[top, None]
            values[top] = res.clamp(-big, big).to(x_i.dtype)  # saturates, as the policy says
        fields = {
            "level": level,
            "scale": s,
            "signs": x_i < 0,
            "q0": q0.to(self._q0_dtype()),
            "inc_scale": scale,
            "digits": digits,
            "values": values,
        }
        return self._packet(x_i, self.row_bits(level, d), set(fields), **fields)

    def _inc_scale(self, s: torch.Tensor, level, p_l, trunc, dtype) -> tuple:
        """``hi = b_l`` of each row's truncation increment (``b_1`` where the top one was drawn)
        and its scale ``s 2^-b_l / p_l`` (saturated; 0 where no truncation increment is sent)."""
        hi = (self.base_bits + self.step * (level.clamp(max=max(self.depth - 1, 0)) + 1))[:, None]
        scale = torch.ldexp(s.to(torch.float64), -hi[:, 0]) / p_l
        big = torch.finfo(dtype).max
        return hi, torch.where(trunc, scale.clamp(max=big), 0.0).to(dtype)

    def _encode_compiled(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        """:meth:`_encode` by the kernels of :mod:`compressors.compiled_mlmc`."""
        b, K, step = self.precisions(), self.depth, self.step
        s, bad = compiled_mlmc.bits_absmax(x_i)
        if bool(bad.any()):  # torch's maximum of a non-finite row (its NaN) is the packet's
            s[bad] = x_i[bad].abs().amax(dim=1)
        norms = compiled_mlmc.bits_norms(x_i, s, bad, b, step)
        level, p_l = draw_level(norms, rng)
        _, scale = self._inc_scale(s, level, p_l, (level < K) & ~bad, x_i.dtype)
        cols = self._value_columns(level, x_i.shape[1])
        signs, q0, digits, values = compiled_mlmc.bits_fields(
            x_i, s, bad, level, p_l, b, step, self._q0_dtype(), cols
        )
        fields = {"level": level, "scale": s, "signs": signs, "q0": q0, "inc_scale": scale}
        fields |= {"digits": digits, "values": values}
        return self._packet(x_i, self.row_bits(level, x_i.shape[1]), set(fields), **fields)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        like = f["scale"]
        if compiled_mlmc.serves_rows(packet.m, packet.d, like) and (
            f["values"].shape[1] == 0 or f["values"].dtype == like.dtype
        ):
            return compiled_mlmc.bits_decode(f, self.base_bits)
        wd = work_dtype(packet.dtype)
        s = f["scale"].to(wd)[:, None]
        mag = s * (f["q0"].to(wd) * 2.0**-self.base_bits)
        mag = mag + f["digits"].to(wd) * f["inc_scale"].to(wd)[:, None]
        y = torch.where(f["signs"], -mag, mag)
        y = y + f["values"].to(wd) if f["values"].shape[1] else y + 0.0  # -0 + 0 is +0 in both
        big = torch.finfo(packet.dtype).max
        if bool((y.abs() > big).any()):  # overflow of a finite row saturates
            y = torch.where(torch.isfinite(s), y.clamp(-big, big), y)
        return y

    # ---------------------------------------------------------------- the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        d, f = packet.d, packet.fields
        lw = self._level_bits()
        if lw:
            w.uint(f["level"][:, None], lw)
        w.floats(f["scale"][:, None])
        w.uint(2 * f["q0"].to(torch.int64) + f["signs"].to(torch.int64), self.base_bits + 1)
        trunc = (f["level"] < self.depth).to(torch.int64)
        w.floats(f["inc_scale"][:, None], count=trunc)
        w.uint(f["digits"], self.step, count=trunc * d)
        w.floats(f["values"], count=(1 - trunc) * d)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        d, r, lf = like.d, rd.r, like.fields
        lw = self._level_bits()
        if lw:
            level = rd.uint(1, lw)[:, 0]
        else:
            level = torch.zeros(r, dtype=torch.int64, device=rd.device)
        if r and bool((level > self.depth).any()):
            raise ValueError(f"a row names level > depth={self.depth}: corrupt data")
        scale = rd.floats(1, lf["scale"].dtype)[:, 0]
        code = rd.uint(d, self.base_bits + 1)
        trunc = (level < self.depth).to(torch.int64)
        inc_scale = rd.floats(1, lf["inc_scale"].dtype, count=trunc)[:, 0]
        digits = rd.uint(d, self.step, count=trunc * d).to(torch.uint8)
        values = rd.floats(self._value_columns(level, d), lf["values"].dtype, count=(1 - trunc) * d)
        return self._rebuilt(
            like,
            r,
            self.row_bits(level, d),
            level=level,
            scale=scale,
            signs=(code & 1).bool(),
            q0=(code >> 1).to(self._q0_dtype()),
            inc_scale=inc_scale,
            digits=digits,
            values=values,
        )
