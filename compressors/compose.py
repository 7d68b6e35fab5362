"""Composition: apply several compressors in turn, with the constants that theory propagates."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from compressors.base import Compressor, Packet
from compressors.bitpack import BitReader, BitWriter
from compressors.nonfinite import saturate
from streams import Streams


@dataclass(frozen=True)
class Compose(Compressor):
    """``C = C_k o ... o C_1``: the parts apply in the order given (spec
    ``compose:topk:k=10+qsgd:levels=4`` is Top-K, then QSGD).

    If the first part is a sparsifier (Top-K, Rand-K) the rest compresses its ``k`` kept values
    only, so the payload is the sparsifier's support plus the rest's payload of a
    ``k``-vector, and the rest's constants are taken at dimension ``k``. Otherwise the rest
    compresses the decoded output of the first part, and only the rest's payload is sent.

    Constants (first part ``C_1``, the rest ``R``, independent randomness):

    * both unbiased: unbiased, ``omega = (omega_1 + 1)(omega_R + 1) - 1``
      (Horváth et al. 2019, arXiv 1905.10988, Theorem 3; THEORY sheet §1.1);
    * ``C_1`` an orthogonal projection with contraction ``delta_1`` (Top-K) and ``R`` shrinking
      its input by ``c_R`` (``E||R(y) - y||^2 <= (1 - c_R)||y||^2``: ``c_R = delta_R`` for a
      contractive ``R``, ``c_R = 1 - omega_R`` for an unbiased ``R`` with ``omega_R < 1``):
      contractive with ``delta = delta_1 c_R``. With ``y = C_1(x)``, ``||y||^2 = ||x||^2 -
      ||x - y||^2 >= delta_1 ||x||^2`` and the cross term ``<R(y) - y, y - x>`` vanishes (in
      expectation for unbiased ``R``; exactly when ``R`` acts on the kept values of a
      sparsifier, whose support is disjoint from that of ``y - x``), so
      ``E||R(y) - x||^2 <= ||x||^2 - c_R ||y||^2``. Top-K then ``scaled:qsgd`` is the case
      ``Q(C_1 x)/(omega + 1)`` of the EF21 papers, ``delta = delta_1 / (omega + 1)``;
    * anything else has no known constant: the composition is in neither class (``omega`` and
      ``delta`` raise), and the methods that need one refuse it.

    Bits: sparsifier first: its index bits plus the rest's bits for ``k`` values; otherwise the
    rest's bits.

    Args:
        parts: at least two compressors, in the order they apply.
    """

    parts: tuple[Compressor, ...] = field(default_factory=lambda: _default_parts())

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if len(parts) < 2 or not all(isinstance(c, Compressor) for c in parts):
            raise ValueError(f"compose needs at least two compressors, got {self.parts!r}")
        object.__setattr__(self, "parts", parts)

    # ------------------------------------------------------------ structure
    @property
    def first(self) -> Compressor:
        return self.parts[0]

    @property
    def rest(self) -> Compressor:
        return self.parts[1] if len(self.parts) == 2 else Compose(self.parts[1:])

    def _rest_dim(self, d: int) -> int:
        return self.first.k_of(d) if self.first.sparsifier else d

    # ------------------------------------------------------------ declarations
    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        return self.first.unbiased and self.rest.unbiased

    @property
    def contractive(self) -> bool:  # type: ignore[override]
        return self._contraction_rule()

    def _contraction_rule(self) -> bool:
        f, r = self.first, self.rest
        if not (f.projection and f.contractive):
            return False
        return r.unbiased or (r.contractive and f.sparsifier)

    def _rest_contraction(self, d: int) -> float:
        """``c_R``: how much the rest shrinks its own input, ``1 - E||R(y)-y||^2/||y||^2``."""
        r, k = self.rest, self._rest_dim(d)
        if r.unbiased:
            w = r.omega(k)
            if w >= 1.0:
                raise ValueError(
                    f"{self.spec()} is in neither class at d={d}: {r.spec()} on {k} values has "
                    f"omega={w:.4g} >= 1; wrap it as scaled:{r.spec()} or use more levels"
                )
            return 1.0 - w
        return r.delta(k)

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        return all(c.deterministic for c in self.parts)

    @property
    def shared_randomness(self) -> bool:  # type: ignore[override]
        return any(c.shared_randomness for c in self.parts)

    @property
    def needs_node_count(self) -> bool:  # type: ignore[override]
        return any(c.needs_node_count for c in self.parts)

    @property
    def linear(self) -> bool:  # type: ignore[override]
        return all(c.linear for c in self.parts)

    @property
    def fixed_size(self) -> bool:  # type: ignore[override]
        return self.first.fixed_size and self.rest.fixed_size

    @property
    def preserves_zero(self) -> bool:  # type: ignore[override]
        return all(c.preserves_zero for c in self.parts)

    @property
    def nonfinite_on_wire(self) -> bool:  # type: ignore[override]
        return self.rest.nonfinite_on_wire  # the rest's payload is what carries the values

    def bind(self, n: int) -> Compose:
        return Compose(tuple(c.bind(n) for c in self.parts))

    # ------------------------------------------------------------ constants
    def omega(self, d: int) -> float:
        if not self.unbiased:
            return super().omega(d)
        return (self.first.omega(d) + 1.0) * (self.rest.omega(self._rest_dim(d)) + 1.0) - 1.0

    def delta(self, d: int) -> float:
        if self.unbiased:
            return super().delta(d)
        if not self._contraction_rule():
            raise ValueError(f"{self.spec()} is in neither class: no constant is known for it")
        return self.first.delta(d) * self._rest_contraction(d)

    def support(self, d: int) -> int:
        return min(self.first.support(d), self.rest.support(self._rest_dim(d)))

    def _head_bits(self, d: int) -> int:
        return self.first.index_bits(d) if self.first.sparsifier else 0

    def bits(self, d: int) -> int:
        return self._head_bits(d) + self.rest.bits(self._rest_dim(d))

    def expected_bits(self, d: int) -> float | None:
        e = self.rest.expected_bits(self._rest_dim(d))
        return None if e is None else self._head_bits(d) + e

    def max_bits(self, d: int) -> int:
        return self._head_bits(d) + self.rest.max_bits(self._rest_dim(d))

    @classmethod
    def examples(cls) -> list[Compressor]:
        from compressors.dithering import QSGD
        from compressors.natural import Natural
        from compressors.rand_k import RandK
        from compressors.scaled import Scaled
        from compressors.top_k import TopK

        return [
            cls(),
            cls((TopK(k=5), QSGD(levels=4))),
            cls((TopK(k=4), Scaled(QSGD(levels=2, coding="elias")))),
            cls((RandK(k=10), Natural())),
            cls((Natural(), RandK(ratio=0.5), QSGD(levels=2))),
        ]

    # ------------------------------------------------------------ the operator
    def _encode(self, x_i: torch.Tensor, rng: Streams) -> Packet:
        head = self.first._encode(x_i, rng.split(1))
        if self.first.sparsifier:
            inner = head.fields["values"]
            nbits = head.nbits - self.first.float_bits * inner.shape[1]
        else:
            inner = self.first._decode(head).to(x_i.dtype)
            nbits = torch.zeros_like(head.nbits)
        tail = self.rest._encode(inner, rng.split(2))
        fields = {f"rest.{k}": v for k, v in tail.fields.items()}
        wire = {f"rest.{k}" for k in tail.wire}
        if self.first.sparsifier:
            fields["indices"] = head.fields["indices"]
            wire |= {"indices"} & head.wire
        meta = {"head": head, "tail": tail}
        return self._packet(x_i, nbits + tail.nbits, wire, meta, **fields)

    def _decode(self, packet: Packet) -> torch.Tensor:
        head, tail = packet.meta["head"], packet.meta["tail"]
        values = self.rest._decode(tail)
        if not self.first.sparsifier:
            return values
        out = torch.zeros(packet.m, packet.d, dtype=values.dtype, device=values.device)
        scaled = saturate(values * head.meta["scale"], values, packet.dtype)
        return out.scatter_(1, head.fields["indices"], scaled)

    # ------------------------------------------------------------ the wire form
    def _write(self, packet: Packet, w: BitWriter) -> None:
        if self.first.sparsifier:
            self.first._write_support(packet.meta["head"], w)
        self.rest._write(packet.meta["tail"], w)

    def _read(self, rd: BitReader, like: Packet, nodes: torch.Tensor) -> Packet:
        r, lh = rd.r, like.meta["head"]
        if self.first.sparsifier:
            idx, head_meta = self.first._read_support(rd, lh, nodes)
            head_bits = self.first.index_bits(like.d)
            head = Packet(
                {"indices": idx},
                torch.full((r,), self.first.bits(like.d), dtype=torch.int64, device=idx.device),
                like.d,
                like.dtype,
                frozenset({"values"}) | ({"indices"} & lh.wire),
                head_meta,
            )
            fields = {"indices": idx}
        else:
            # The first part's output is not sent: the receiver needs only the rest's payload.
            head_bits = 0
            zeros = torch.zeros(r, dtype=torch.int64, device=like.nbits.device)
            head = Packet({}, zeros, like.d, like.dtype, frozenset())
            fields = {}
        tail = self.rest._read(rd, like.meta["tail"], nodes)
        fields.update({f"rest.{k}": v for k, v in tail.fields.items()})
        meta = {"head": head, "tail": tail}
        return self._rebuilt(like, r, head_bits + tail.nbits, meta, **fields)


def _default_parts() -> tuple[Compressor, ...]:
    from compressors.natural import Natural
    from compressors.top_k import TopK

    return (TopK(), Natural())
