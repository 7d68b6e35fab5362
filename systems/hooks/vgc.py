"""Variance-based gradient compression as a DDP comm hook.

Tsuzuku, Imachi & Akiba, "Variance-based Gradient Compression for Efficient Distributed Deep
Learning", ICLR 2018 workshop, arXiv 1802.06058. No authors' code was found.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook
from systems.hooks.registry import register

__all__ = ["VarianceCompression", "pack_words", "unpack_words"]


def pack_words(idx: torch.Tensor, neg: torch.Tensor, e: torch.Tensor, exp_bits: int):
    """One int32 word per sent entry: index, sign bit, exponent (high to low bits)."""
    w = (idx.to(torch.int64) << (exp_bits + 1)) | (neg.to(torch.int64) << exp_bits) | e
    return torch.where(w >= 1 << 31, w - (1 << 32), w).to(torch.int32)


def unpack_words(words: torch.Tensor, exp_bits: int):
    """``(index, negative, exponent)`` of :func:`pack_words`' words."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    return w >> (exp_bits + 1), ((w >> exp_bits) & 1).bool(), w & ((1 << exp_bits) - 1)


class VarianceCompression(CommHook):
    """Variance-based compression (Tsuzuku, Imachi & Akiba 2018, arXiv 1802.06058).

    Each worker keeps, per gradient entry, the accumulated gradient ``r`` and an accumulated
    variance estimate ``v``, and sends an entry only once its accumulated gradient is
    unambiguous, large against its variance. Each step, on the bucket's local gradient ``g``:

    1. ``r += g``, ``v += g^2``;
    2. send the entries with ``r^2 > alpha v``, quantized (below); clear them: ``r = v = 0``;
    3. decay the rest: ``v *= zeta``;
    4. all-gather the sent entries (variable length), scatter-add them and divide by the world
       size: the entries a worker holds back are zero in its message, not lost.

    Quantization and wire format: with ``M`` the largest ``|r|`` sent in the bucket, a sent
    entry is ``sign(r) M 2^-e`` with ``e = clamp(round(log2(M / |r|)), 0, 2^exp_bits - 1)``
    (rounding to the nearest power of two in the log domain); one int32 word carries the index
    (``31 - exp_bits`` bits), the sign bit and ``e``; the first word of the message is ``M`` as
    float32. Payload per bucket and step: ``8 + 4 (1 + k)`` bytes for ``k`` sent entries (the
    int64 length that :meth:`~comm.hooks.CommHook.allgather_varlen` gathers first, the
    scale, the words).

    Sources and reconstructions. The abstract (read) gives the principle: delay an entry until
    a high-amplitude, low-variance gradient is accumulated, with a cheap variance estimate. The
    paper's body was not readable here; a public re-implementation reads it as above (``r`` +=
    the mini-batch mean, ``v`` += the mean of squared per-example gradients, send where
    ``r^2 > alpha v``, clear sent entries, ``v *= zeta`` otherwise, ``alpha = 2``,
    ``zeta = 0.999``), and the defaults follow it. Labelled reconstructions: (a) a comm hook sees
    the mini-batch gradient only, not per-example gradients, so ``v`` accumulates the squared
    mini-batch gradient, an over-estimate of its variance by the squared mean. After one step
    ``r^2 = v``, so with ``alpha >= 1`` no entry is sent from one step's gradient alone; an
    entry of steady gradient (``r^2 ~ k^2 g^2``, ``v ~ k g^2`` after ``k`` steps) waits about
    ``alpha`` steps, where the paper's per-example estimate (``1/B`` of the squared mini-batch
    mean for a steady one) would send it at once; (b) the 4-bit code (sign and a 3-bit exponent
    against the largest sent value) and the 28-bit index packed with it into 32 bits.
    Sent entries are cleared, so the quantization error of a sent entry is dropped, as the
    paper's clearing does.

    State (``r``, ``v``) is kept per parameter, so it survives DDP's rebuilding of buckets after
    the first step.

    Args:
        alpha: the send threshold, ``r^2 > alpha v`` (``> 0``).
        zeta: decay of ``v`` for entries held back, in ``(0, 1]``.
        exp_bits: exponent bits of a sent value, 1 to 7 (the index gets ``31 - exp_bits``).
    """

    name = "vgc"
    allreducible = False
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        alpha: float = 2.0,
        zeta: float = 0.999,
        exp_bits: int = 3,
    ) -> None:
        super().__init__(process_group)
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got alpha={alpha!r}")
        if not 0 < zeta <= 1:
            raise ValueError(f"zeta must be in (0, 1], got zeta={zeta!r}")
        if not isinstance(exp_bits, int) or not 1 <= exp_bits <= 7:
            raise ValueError(f"exp_bits must be an integer from 1 to 7, got exp_bits={exp_bits!r}")
        self.alpha, self.zeta, self.exp_bits = float(alpha), float(zeta), exp_bits
        self._r: dict[int, torch.Tensor] = {}
        self._v: dict[int, torch.Tensor] = {}

    def _flat(self, store: dict[int, torch.Tensor], params) -> torch.Tensor:
        parts = [store.setdefault(id(p), torch.zeros_like(p).reshape(-1)) for p in params]
        return torch.cat(parts)

    def _store(self, store: dict[int, torch.Tensor], params, flat: torch.Tensor) -> None:
        for p, part in zip(params, flat.split([p.numel() for p in params]), strict=True):
            store[id(p)] = part

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf, params = bucket.buffer(), bucket.parameters()
        d = buf.numel()
        if d >= 1 << (31 - self.exp_bits):
            raise ValueError(
                f"vgc: a bucket of {d} entries does not fit {31 - self.exp_bits}-bit indices; "
                "use smaller buckets (bucket_cap_mb) or fewer exp_bits"
            )
        with self.timer("encode"):
            r = self._flat(self._r, params).add_(buf)
            v = self._flat(self._v, params).addcmul_(buf, buf)
            send = r * r > self.alpha * v
            idx = send.nonzero().reshape(-1)
            vals = r[idx]
            top = vals.abs().max() if idx.numel() else r.new_zeros(())
            ratio = top / torch.where(vals == 0, top, vals.abs())
            e = torch.log2(ratio).round().clamp(0, (1 << self.exp_bits) - 1).to(torch.int64)
            words = pack_words(idx, vals < 0, e, self.exp_bits)
            scale = top.to(torch.float32).reshape(1).view(torch.int32)
            payload = torch.cat([scale, words])
            r[send] = 0.0
            v.mul_(torch.where(send, 0.0, self.zeta))
            self._store(self._r, params, r)
            self._store(self._v, params, v)

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            gathered = fut.value()
            with self.timer("decode"):
                scales = torch.cat([m[:1].view(torch.float32) for m in gathered])
                counts = torch.tensor([m.numel() - 1 for m in gathered], device=buf.device)
                i, neg, e = unpack_words(torch.cat([m[1:] for m in gathered]), self.exp_bits)
                mag = scales.repeat_interleave(counts).to(buf.dtype) * torch.exp2(-e.to(buf.dtype))
                out = torch.zeros_like(buf).index_add_(0, i, torch.where(neg, -mag, mag))
                buf.copy_(out.div_(self.world_size))
            return buf

        return self.in_turn(lambda: self.allgather_varlen_future(payload).then(decode), buf)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One variable-length all-gather: the int64 length, then ``4 (1 + k)`` bytes; how many
        entries pass ``r^2 > alpha v`` is set by the data, nominally none (the scale alone)."""
        return [Collective("allgather", 8), Collective("allgather", 4, True)]


register(VarianceCompression)
