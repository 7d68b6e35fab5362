"""Spherical compression (reconstruction): the row projected on the best of a shared random codebook
of unit vectors, sent as the codeword's index and one coefficient."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_spherical
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from streams import Streams, tags

__all__ = ["Spherical", "expected_best_cos2"]

_CHUNK = 1 << 22  # codebook entries generated at once (rows x K x d)


@functools.lru_cache(maxsize=256)
def expected_best_cos2(d: int, K: int) -> float:
    """``E max_{j <= K} <c_j, u>^2`` for ``K`` independent uniform unit vectors ``c_j`` and a
    unit ``u`` in ``R^d``: each ``<c_j, u>^2`` is Beta(1/2, (d-1)/2), so the mean of the
    maximum is ``int_0^1 (1 - I_t(1/2, (d-1)/2)^K) dt`` (``I`` the regularized incomplete beta)."""
    if d == 1:
        return 1.0
    from scipy import integrate, special

    def tail(t: float) -> float:
        return 1.0 - float(special.betainc(0.5, (d - 1) / 2.0, t)) ** K

    mean = 1.0 / d  # the mass sits near the mean of one draw; split the range there
    cut = min(0.5, 20.0 * mean * math.log(2.0 + K))
    a = integrate.quad(tail, 0.0, cut, limit=400, epsabs=1e-14, epsrel=1e-12)[0]
    b = integrate.quad(tail, cut, 1.0, limit=400, epsabs=1e-14, epsrel=1e-12)[0]
    return a + b


@dataclass(frozen=True)
class Spherical(Compressor):
    """Spherical compression, a reconstruction (after Albasyoni, Safaryan, Condat & Richtárik,
    "Optimal Gradient Compression for Distributed and Federated Learning", arXiv 2010.03246).

    What could be read: the abstract and table of contents (the paper studies the trade-off
    between the bits of a compressed vector and its error, with tight lower bounds in the
    worst case and on average, and names "Spherical Compression" as the operator that attains
    the average-case bound). The operator's definition could not be read; what is implemented
    is the natural reading of the name, labelled a reconstruction: the direction of ``x`` is
    coded by the nearest (up to sign) of ``K = 2^k`` unit vectors ``c_1..c_K`` drawn uniformly
    on the sphere from the shared stream (every node and the receiver hold the same codebook,
    so it costs no bits), and ``C(x) = <x, c_J> c_J`` with ``J = argmax_j |<x, c_j>|``: the
    orthogonal projection of ``x`` on the chosen line.

    Class: contractive, ``delta(d) = E max_j <c_j, u>^2`` for unit ``u`` (every ``x`` alike:
    the codebook's law is rotation invariant), so ``E||C(x) - x||^2 = (1 - delta)||x||^2`` for
    every ``x``, exactly (:func:`expected_best_cos2`; derived here). Each ``<c_j, u>^2`` is
    Beta(1/2, (d - 1)/2), mean ``1/d``: ``delta`` grows with ``k`` like the rate-distortion
    bound ``1 - delta >= 2^(-2 b / d)`` allows (:mod:`theory_checks.compression_bounds`).

    Bits: ``float_bits + k`` (the coefficient ``<x, c_J>`` and the index ``J``). Finite rows
    are projected after division by their largest magnitude and the coefficient saturates at
    the dtype's max; a row with a NaN or inf entry has a NaN coefficient and decodes to NaN.

    Args:
        k: index bits, ``K = 2^k`` codewords, 0..14.
        float_bits: wire width of the coefficient.
    """

    contractive: ClassVar[bool] = True
    shared_randomness: ClassVar[bool] = True

    k: int = 4
    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 0 <= self.k <= 14:
            raise ValueError(f"k must be an integer in 0..14, got k={self.k!r}")

    def delta(self, d: int) -> float:
        return expected_best_cos2(d, 1 << self.k)

    def bits(self, d: int) -> int:
        return self.float_bits + self.k

    def worst_case(self, d: int) -> torch.Tensor:
        return torch.ones(d, dtype=torch.float64)  # the error ratio is the same for every x

    @classmethod
    def examples(cls) -> list[Compressor]:
        return [cls(), cls(k=0), cls(k=2, float_bits=16)]

    def _codebook(self, rng: Streams, d: int, dtype: torch.dtype) -> torch.Tensor:
        """The rows' codebooks ``(m, K, d)``, unit rows."""
        K = 1 << self.k
        if compiled_spherical.serves(rng.device, dtype, rng.m * K * d):
            return compiled_spherical.codebook(rng.split(tags.SPHERICAL_CODEBOOK).keys, K, d, dtype)
        u = rng.split(tags.SPHERICAL_CODEBOOK).uniform(K, d, dtype=torch.float64)
        c = torch.special.ndtri(u + 2.0**-54)  # normal by inversion, u + 2^-54 in (0, 1)
        return (c / torch.linalg.vector_norm(c, dim=2, keepdim=True)).to(dtype)

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        x = x_i.to(work_dtype(x_i.dtype))
        top = x.abs().amax(dim=1)
        ok = torch.isfinite(top) & (top > 0)
        unit = x / torch.where(ok, top, 1.0)[:, None]
        coef = torch.empty(m, dtype=x.dtype, device=x.device)
        index = torch.empty(m, dtype=torch.int64, device=x.device)
        word = torch.empty(m, d, dtype=x.dtype, device=x.device)
        K = 1 << self.k
        step = max(1, _CHUNK // (K * max(d, 1)))
        for a in range(0, m, step):  # chunks of rows bound the codebooks' memory
            part = rng[a : a + step]
            if compiled_spherical.serves(x.device, x.dtype, part.m * K * d):
                # the same codebook's products, which torch sums, and the codeword drawn again
                keys = part.split(tags.SPHERICAL_CODEBOOK).keys
                prod, norm = compiled_spherical.products(keys, K, unit[a : a + step])
                score = prod.sum(dim=2)
                j = score.abs().argmax(dim=1)
                word[a : a + step] = compiled_spherical.words(keys, d, j, norm, x.dtype)
            else:
                book = self._codebook(part, d, x.dtype)
                score = (book * unit[a : a + step, None, :]).sum(dim=2)  # row by row, bitwise
                j = score.abs().argmax(dim=1)
                word[a : a + step] = book[torch.arange(j.numel(), device=x.device), j]
            rows = torch.arange(j.numel(), device=x.device)
            coef[a : a + step], index[a : a + step] = score[rows, j], j
        big = torch.finfo(x_i.dtype).max
        coef = (coef * torch.where(ok, top, 0.0)).clamp(-big, big)
        coef = torch.where(torch.isfinite(top), coef, torch.nan)
        meta = {"keys": rng.keys}
        return self._packet(
            x_i, self.bits(d), {"coef", "index"}, meta, coef=coef, index=index, word=word
        )

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        out = f["coef"][:, None] * f["word"]
        big = torch.finfo(packet.dtype).max
        return out.clamp(-big, big)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["coef"])
        w.uint(packet.fields["index"], self.k)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        coef = rd.floats(1, like.fields["coef"].dtype)[:, 0]
        index = rd.uint(1, self.k)[:, 0]
        keys = like.meta["keys"][:1].to(rd.device)
        book = self._codebook(Streams(keys, torch.zeros(1, dtype=torch.int64)), like.d, coef.dtype)
        word = book[0, index].to(like.fields["word"].dtype)
        meta = {"keys": keys.expand(rd.r).clone()}
        return self._rebuilt(like, rd.r, self.bits(like.d), meta, coef=coef, index=index, word=word)
