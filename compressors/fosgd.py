"""FO-SGD's compressor: a randomized Walsh-Hadamard transform, then dithered one-bit quantization.

Also home of the transform itself (:func:`fwht`, :func:`rwht`, :func:`irwht`), which the DDP hook
``systems.hooks.fosgd`` uses on gradient buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from compressors import compiled_dense, compiled_fwht
from compressors.base import Compressor, Packet, check_float_bits, work_dtype
from compressors.bitpack import BitReader, BitWriter
from streams import Streams, tags

__all__ = ["FOSGD", "fwht", "fwht_staged", "irwht", "padded_dim", "rwht"]

_NODE = 0x9E3779B97F4A7C15 - (1 << 64)  # odd: distinct nodes give distinct dither keys


def padded_dim(d: int) -> int:
    """The transform length: the least power of two ``>= d``."""
    return 1 << (int(d) - 1).bit_length() if d > 1 else 1


def fwht(x: torch.Tensor) -> torch.Tensor:
    """The unnormalized Walsh-Hadamard transform ``H x`` along the last axis (Sylvester order,
    ``H`` symmetric with ``H H = n I``); the length ``n`` must be a power of two. One butterfly
    stage per factor of two (``a + b``, ``a - b``), each vectorized over the whole tensor:
    ``O(n log n)``; on the CPU the compiled in-place form (:mod:`compressors.compiled_fwht`)
    does the same butterflies with fewer passes over memory, so the result is the same."""
    *lead, n = x.shape
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    if x.requires_grad:  # differentiable: each stage a new tensor
        y, h = x, 1
        while h < n:
            y = y.reshape(*lead, n // (2 * h), 2, h)
            a, b = y[..., 0, :], y[..., 1, :]
            y = torch.stack((a + b, a - b), dim=-2)
            h *= 2
        return y.reshape(*lead, n)
    src = x.reshape(-1, n).clone(memory_format=torch.contiguous_format)
    if compiled_fwht.serves(src):
        return compiled_fwht.fwht_(src).reshape(x.shape)
    return fwht_staged(src).reshape(x.shape)


def fwht_staged(src: torch.Tensor) -> torch.Tensor:
    """The transform of the rows of ``src`` (contiguous ``(m, n)``, ``n`` a power of two) in
    torch, stage by stage: two buffers in turn, each stage's ``a + b`` and ``a - b`` written
    into the other, so ``src`` is overwritten and the result may be either buffer. One pass
    over memory per stage (``log2 n`` of them): :func:`fwht`'s form where the compiled one does
    not serve, and the transform a hand-written torch version pays for
    (:mod:`benchmarks.compressors_bench`)."""
    dst, h, n = torch.empty_like(src), 1, src.shape[-1]
    while h < n:
        a, b = src.view(-1, 2, h).unbind(1)
        pair = dst.view(-1, 2, h)
        torch.add(a, b, out=pair[:, 0])
        torch.sub(a, b, out=pair[:, 1])
        src, dst, h = dst, src, 2 * h
    return src


def rwht(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """``H D x / sqrt(n)``: ``x`` (``(..., d)``) zero-padded to the length ``n`` of ``signs``
    (``(..., n)``, entries ``+-1``), sign-flipped, transformed; orthonormal, so norms are kept."""
    n = signs.shape[-1]
    pad = torch.nn.functional.pad(x, (0, n - x.shape[-1]))
    return fwht(pad * signs) / math.sqrt(n)


def irwht(y: torch.Tensor, signs: torch.Tensor, d: int) -> torch.Tensor:
    """The inverse of :func:`rwht`: ``D H y / sqrt(n)``, cut to the first ``d`` entries."""
    n = signs.shape[-1]
    return (signs * (fwht(y) / math.sqrt(n)))[..., :d]


@dataclass(frozen=True)
class FOSGD(Compressor):
    """Flattened one-bit quantization (Stollenwerk & Jacques 2024, FO-SGD, arXiv 2405.11095).

    The row is zero-padded to ``n = 2^ceil(log2 d)`` entries and flattened by the randomized
    Walsh-Hadamard transform ``y = H D x / sqrt(n)`` (``D`` random signs, ``H`` the Hadamard
    matrix); each entry is then quantized to one bit with a uniform dither:
    ``Q(y)_j = lam * sign(y_j + tau_j)``, ``tau_j ~ U[-lam, lam]``, with the scale
    ``lam = ||y||_inf``; the receiver outputs ``D H Q(y) / sqrt(n)`` cut to ``d`` entries. The
    paper's own choice of the scale (with which its quantizer is biased) is not used: with
    ``lam = ||y||_inf`` every entry lies in the dither's range and the quantizer is unbiased.

    Class: unbiased, ``omega(d) = (d / n) min(n - 1, 2 ln(2n) + 1)``. Proof: given ``D``,
    the errors ``Q(y)_j - y_j`` are independent, of mean 0 and variance ``lam^2 - y_j^2``, and
    every entry of ``H`` is ``+-1``, so each output entry has error variance
    ``(1/n) sum_j (lam^2 - y_j^2) = (n lam^2 - ||x||^2) / n`` (the transform is orthogonal) and
    the ``d`` kept entries give ``E||C(x) - x||^2 = (d/n) (n E||y||_inf^2 - ||x||^2)``. First,
    ``||y||_inf <= ||y||_2 = ||x||``, giving ``n - 1``. Second, each ``y_j`` is a Rademacher sum
    whose coefficients' squares sum to ``s^2 = ||x||^2 / n``; Hoeffding and a union bound give
    ``P(||y||_inf^2 > t) <= 2n exp(-t / (2 s^2))``, and integrating the tail from
    ``u = 2 s^2 ln(2n)`` gives ``E||y||_inf^2 <= 2 s^2 (ln(2n) + 1)``, hence the
    ``2 ln(2n) + 1``. The constant is attained at ``d = 1`` (``omega = 0``) and ``d = 2``
    (``x = (1, 1)``: ``y`` is 1-sparse whatever the signs, ``omega = 1``); for larger ``d`` the
    logarithmic bound is not known to be attained (``worst_case`` is None).

    Randomness: the signs ``D`` must be the receiver's too, so they come from the rows' shared
    keys (``shared_randomness``) and cost no bits; the dither of each row is drawn from its key
    and its node id, so nodes quantize independently.

    Bits: ``n + float_bits`` (one bit per padded entry, the scale as one float). A row with a
    NaN or inf entry has a NaN scale; finite rows are transformed after division by their
    largest magnitude, and the decoded row saturates at the dtype's max
    (:mod:`compressors.nonfinite`).

    Args:
        float_bits: wire width of the scale.
    """

    unbiased: ClassVar[bool] = True
    shared_randomness: ClassVar[bool] = True

    float_bits: int = 32

    def __post_init__(self) -> None:
        check_float_bits(self.float_bits)

    def omega(self, d: int) -> float:
        n = padded_dim(d)
        return float(d / n * min(n - 1, 2.0 * math.log(2 * n) + 1.0))

    def bits(self, d: int) -> int:
        return padded_dim(d) + self.float_bits

    def worst_case(self, d: int) -> torch.Tensor | None:
        if d == 2:
            return torch.ones(2, dtype=torch.float64)
        return None

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        m, d = x_i.shape
        n = padded_dim(d)
        w = work_dtype(x_i.dtype)
        x = x_i.to(w)
        fast = compiled_fwht.serves(x) and d > 0
        top = compiled_dense.absmax(x) if fast else x.abs().amax(dim=1)
        ok = torch.isfinite(top) & (top > 0)
        big = torch.finfo(x_i.dtype).max
        if fast and bool(torch.isfinite(top).all()):
            # the same numbers as below, in a few passes (compressors.compiled_fwht)
            signs, lam, bits = compiled_fwht.fosgd_encode(
                x,
                torch.where(ok, top, 1.0),
                rng.split(tags.FOSGD_SIGNS).keys,
                _dither_streams(rng).keys,
                n,
                math.sqrt(n),
            )
            scale = torch.where(ok, (lam * top).clamp(max=big), 0.0)
            return self._packet(
                x_i, self.bits(d), {"scale", "bits"}, scale=scale, bits=bits, signs=signs
            )
        signs = 1.0 - 2.0 * (rng.split(tags.FOSGD_SIGNS).bits64(n) & 1).to(w)
        unit = x / torch.where(ok, top, 1.0)[:, None]
        y = rwht(unit, signs)
        lam = y.abs().amax(dim=1)
        p = 0.5 * (1.0 + y / torch.where(lam > 0, lam, 1.0)[:, None])
        u = _dither_streams(rng).uniform(n, dtype=w)
        scale = torch.where(ok, (lam * top).clamp(max=big), 0.0)
        scale = torch.where(torch.isfinite(top), scale, torch.nan)
        return self._packet(
            x_i, self.bits(d), {"scale", "bits"}, scale=scale, bits=u < p, signs=signs
        )

    def _decode(self, packet: Packet) -> torch.Tensor:
        f = packet.fields
        big = torch.finfo(packet.dtype).max
        signs = f["signs"]
        if compiled_fwht.serves(signs) and f["scale"].dtype == signs.dtype:
            n = signs.shape[1]
            return compiled_fwht.fosgd_decode(
                f["bits"], signs, f["scale"], packet.d, math.sqrt(n), big
            )
        pm = 2.0 * f["bits"].to(signs.dtype) - 1.0
        out = irwht(pm, signs, packet.d) * f["scale"][:, None]
        return out.clamp(-big, big)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        w.floats(packet.fields["scale"])
        w.bools(packet.fields["bits"])

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        n = like.fields["bits"].shape[1]
        scale = rd.floats(1, like.fields["scale"].dtype)[:, 0]
        bits = rd.bools(n)
        signs = like.fields["signs"][:1].expand(rd.r, n).clone()
        return self._rebuilt(like, rd.r, self.bits(like.d), scale=scale, bits=bits, signs=signs)


def _dither_streams(rng: Streams) -> Streams:
    """Per-row dither streams from the row's key and node id (shared keys, distinct nodes)."""
    return Streams(rng.keys ^ (rng.nodes * _NODE), rng.nodes).split(tags.FOSGD_DITHER)
