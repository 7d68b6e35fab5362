"""Rank-r: one power-iteration step on the vector viewed as a near-square matrix (PowerSGD)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from streams import Streams


def matrix_shape(d: int) -> tuple[int, int]:
    """The near-square ``(m1, m2)``, ``m1 >= m2``, ``m1 * m2 >= d`` that a row is viewed as."""
    m1 = math.isqrt(d - 1) + 1 if d > 1 else 1
    return m1, -(-d // m1)


def gram_schmidt_(a: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
    """Orthonormalize the columns of ``a`` (``(n, r)``, ``r <= n``) in place, in order, each
    divided by its norm plus ``epsilon`` (PowerSGD's ``orthogonalize``): the PowerSGD hook's
    and the low-rank methods' (PowerSGD+, LASER) one implementation. A loop over the ``r``
    columns (the rank), never over rows."""
    r = a.shape[1]
    for i in range(r):
        col = a[:, i : i + 1]
        col /= col.norm() + epsilon
        if i + 1 < r:
            rest = a[:, i + 1 :]
            rest -= (col * rest).sum(dim=0, keepdim=True) * col
    return a


@dataclass(frozen=True)
class RankR(Compressor):
    """Rank-r compression by one power step (Vogels, Karimireddy & Jaggi 2019, PowerSGD,
    arXiv 1905.13727, Alg. 1, per node and without warm start).

    The row is zero-padded to ``m1 * m2`` entries and read as ``M`` (``m1 x m2``, near square,
    ``m1 >= m2``). With a fresh Gaussian query ``Q`` (``m2 x r``) from the row's stream:
    ``P = orth(M Q)``, ``R = M^T P``, output ``P R^T = P P^T M``, unpadded.

    Class: contractive (biased), ``delta = r / m2``. The output is an orthogonal projection of
    ``M`` onto a space containing ``M Q``, so ``||P P^T M||^2 >= ||M Pi_Q||^2`` with ``Pi_Q`` the
    projection onto ``range(Q)``, and ``E Pi_Q = (r/m2) I`` for a Gaussian ``Q``. Equality when all
    singular values of ``M`` are equal (e.g. ``M`` the identity). ``r >= m2`` is exact. Cutting
    the padding off only lowers the error, but the output is then no longer an orthogonal
    projection of ``x``, so ``projection`` is not declared.

    Bits: ``float_bits * r * (m1 + m2)`` (the factors ``P`` and ``R``).

    Non-finite values (:mod:`compressors.nonfinite`): rows whose factors would overflow are
    computed on ``M / max|M|`` with ``R`` scaled back and saturated at the dtype's max; a row
    with a NaN or inf entry gives NaN factors.

    Args:
        r: the rank, ``r >= 1``.
        float_bits: wire width of one factor entry.
    """

    contractive: ClassVar[bool] = True

    r: int = 1
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"r (the rank) must be an integer >= 1, got r={self.r!r}")

    def _r(self, d: int) -> int:
        return min(self.r, matrix_shape(d)[1])

    def delta(self, d: int) -> float:
        return self._r(d) / matrix_shape(d)[1]

    def bits(self, d: int) -> int:
        m1, m2 = matrix_shape(d)
        return self.float_bits * self._r(d) * (m1 + m2)

    def worst_case(self, d: int) -> torch.Tensor | None:
        m1, m2 = matrix_shape(d)
        if m1 != m2 or m1 * m2 != d:
            return None
        return torch.eye(m1, dtype=torch.float64).reshape(-1)

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(r=2), cls(r=4)]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        m1, m2 = matrix_shape(d)
        r = self._r(d)
        w = work_dtype(x_i.dtype)
        if m1 * m2 == d:  # read in place
            mat = x_i.to(w).reshape(m, m1, m2)
        else:  # the row, then zeros
            mat = torch.zeros(m, m1 * m2, dtype=w, device=x_i.device)
            mat[:, :d] = x_i
            mat = mat.view(m, m1, m2)
        q = rng.normal(m2, r, dtype=w)
        p, rt = _power_step(mat, q)
        over = ~torch.isfinite(rt).all(dim=2).all(dim=1)
        if bool(over.any()):
            # Overflow (or a NaN/inf entry): redo those rows on M / max|M| and scale R back,
            # saturating at the dtype's max; a non-finite entry makes the row NaN.
            top = mat[over].abs().amax(dim=(1, 2))
            sub = mat[over] / torch.where(top > 0, top, 1.0)[:, None, None]
            p_o, r_o = _power_step(sub, q[over])
            big = torch.finfo(x_i.dtype).max
            r_o = torch.where(
                torch.isfinite(top)[:, None, None], r_o * top[:, None, None], torch.nan
            )
            p, rt = p.clone(), rt.clone()
            p[over], rt[over] = p_o, r_o.clamp(-big, big)
        return self._packet(x_i, self.bits(d), {"P", "R"}, P=p, R=rt)

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        p, rt = f["P"], f["R"]
        top = rt.abs().amax(dim=(1, 2))  # |(P R^T)_ij| <= r max|R| since |P_ij| <= 1
        big = torch.finfo(packet.dtype).max
        if bool((top * rt.shape[2] < big / 2).all()):
            out = torch.bmm(p, rt.transpose(1, 2))
        else:  # the product may overflow: form it on R / max|R|, then saturate
            s = torch.where(top > 0, top, 1.0)[:, None, None]
            out = torch.bmm(p, (rt / s).transpose(1, 2)) * s
            out = torch.where(torch.isfinite(s), out.clamp(-big, big), out)
        return out.reshape(packet.m, -1)[:, : packet.d]

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["P"])
        w.floats(packet.fields["R"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        (m1, m2), r = matrix_shape(like.d), self._r(like.d)
        dtype = like.fields["P"].dtype
        p = rd.floats(m1 * r, dtype).reshape(rd.r, m1, r)
        rt = rd.floats(m2 * r, dtype).reshape(rd.r, m2, r)
        p, rt = _layout_of(p, like.fields["P"]), _layout_of(rt, like.fields["R"])
        return self._rebuilt(like, rd.r, self.bits(like.d), P=p, R=rt)


def _power_step(mat: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``P = orth(M Q)`` and ``R = M^T P`` for a batch of matrices."""
    p = torch.linalg.qr(torch.bmm(mat, q)).Q
    return p, torch.bmm(mat.transpose(1, 2), p)


def _layout_of(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` in the memory layout of ``like`` (QR gives column-major factors): ``bmm`` rounds
    differently for the two layouts, and decode must be bitwise that of the sender's packet."""
    if like.stride(1) == 1 and like.shape[1] > 1:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t
