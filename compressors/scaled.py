"""An unbiased compressor made contractive by the factor 1/(omega + 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from compressors.base import Compressor, Packet
from compressors.bitpack import BitReader, BitWriter
from streams import Streams


@dataclass(frozen=True)
class Scaled(Compressor):
    """``C(x) / (omega + 1)`` for an unbiased ``C`` (Richtárik, Sokolov & Fatkhullin 2021,
    EF21, arXiv 2106.05203, Sec. 2; Fatkhullin et al. 2021, EF21 with bells & whistles,
    arXiv 2110.03294, Lemma 2).

    Class: contractive, ``delta = 1/(omega + 1)``: ``E||C(x)/(w+1) - x||^2 =
    E||C(x)||^2/(w+1)^2 - 2||x||^2/(w+1) + ||x||^2 <= (1 - 1/(w+1))||x||^2``.
    Scaled Rand-K is exactly biased Rand-K (``delta = k/d``).

    Bits: those of the inner compressor; the receiver applies the factor.

    Args:
        inner: an unbiased compressor (spec ``scaled:INNER_SPEC``, e.g. ``scaled:randk:k=10``).
    """

    contractive: ClassVar[bool] = True

    inner: Compressor = field(default_factory=lambda: _default_inner())

    def __post_init__(self) -> None:
        if not isinstance(self.inner, Compressor):
            raise ValueError(f"inner must be a compressor, got {self.inner!r}")
        if not self.inner.unbiased:
            raise ValueError(
                f"scaled needs an unbiased compressor, got {self.inner.spec()} (allowed: "
                "compressors that declare omega)"
            )

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        return self.inner.deterministic

    @property
    def shared_randomness(self) -> bool:  # type: ignore[override]
        return self.inner.shared_randomness

    @property
    def needs_node_count(self) -> bool:  # type: ignore[override]
        return self.inner.needs_node_count

    @property
    def linear(self) -> bool:  # type: ignore[override]
        return self.inner.linear

    @property
    def fixed_size(self) -> bool:  # type: ignore[override]
        return self.inner.fixed_size

    @property
    def projection(self) -> bool:  # type: ignore[override]
        return self.inner.projection or self.inner.scaled_projection

    @property
    def nonfinite_on_wire(self) -> bool:  # type: ignore[override]
        return self.inner.nonfinite_on_wire

    def bind(self, n: int) -> Scaled:
        return Scaled(self.inner.bind(n))

    def delta(self, d: int) -> float:
        return 1.0 / (self.inner.omega(d) + 1.0)

    def bias_variance(self, d: int) -> tuple[float, float]:
        """EF-BV's ``(eta, omega)``: ``E C(x) = x/(w+1)``, so ``||E C(x) - x|| =
        (w/(w+1))||x||``, and ``E||C(x) - E C(x)||^2 = E||inner(x) - x||^2/(w+1)^2 <=
        (w/(w+1)^2)||x||^2``; with ``w = omega(inner)``. Both are exact where the inner ``w``
        is attained (Rand-K: every ``x``; scaled Rand-K: ``(1 - k/d, (k/d)(1 - k/d))``)."""
        w = self.inner.omega(d)
        return w / (w + 1.0), w / (w + 1.0) ** 2

    def bias_variance_exact(self, d: int) -> bool:
        # eta is exact at every x; omega is the class's own where the inner omega is attained
        return self.inner.worst_case(d) is not None

    def support(self, d: int) -> int:
        return self.inner.support(d)

    def bits(self, d: int) -> int:
        return self.inner.bits(d)

    def expected_bits(self, d: int) -> float | None:
        return self.inner.expected_bits(d)

    def max_bits(self, d: int) -> int:
        return self.inner.max_bits(d)

    def worst_case(self, d: int) -> torch.Tensor | None:
        return self.inner.worst_case(d)

    @classmethod
    def examples(cls) -> list[Compressor]:
        from compressors.natural import Natural
        from compressors.rand_k import RandK

        return [cls(), cls(RandK(k=3)), cls(Natural())]

    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        return self.inner._encode(x_i, rng)

    def _decode(self, packet: Packet) -> torch.Tensor:
        return self.inner._decode(packet) / (self.inner.omega(packet.d) + 1.0)

    def _write(self, packet: Packet, w: BitWriter) -> None:
        self.inner._write(packet, w)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        return self.inner._read(rd, like, nodes)


def _default_inner() -> Compressor:
    from compressors.rand_k import RandK

    return RandK()
