"""AdaComp (Adaptive Residual Gradient Compression) as a DDP comm hook.

Chen, Choi, Brand, Agrawal, Zhang & Gopalakrishnan, "AdaComp: Adaptive Residual Gradient
Compression for Data-Parallel Distributed Training", AAAI 2018, arXiv 1712.02679. No code by the
authors was found. The selection rule and the quantization below were read in an MXNet contrib
operator implementing the paper (``ada_comp-inl.h``: ``generate_G_H``, ``generate_g_max``,
``generate_Index``, ``generate_Gq``); the paper's own text (its Algorithm 1) could not be read
here, so where the two might differ this is that implementation, labelled a reconstruction.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, numel_of
from systems.hooks.registry import register

__all__ = ["AdaComp", "adacomp_select", "pack_signs", "unpack_signs"]


def adacomp_select(
    residue: torch.Tensor, grad: torch.Tensor, bin_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """One parameter's AdaComp step on 1-D ``residue`` and ``grad``.

    ``G = residue + grad``, ``H = G + grad`` (the latest gradient counted twice); ``G`` is cut
    into consecutive bins of ``bin_len`` entries (the last one shorter); ``g_max`` is each bin's
    ``max |G|``; entry ``i`` is sent when ``|H_i| >= g_max`` of its bin (and ``g_max > 0``, so
    an all-zero bin sends nothing), as ``sign(G_i) * scale`` with ``scale`` the mean of the
    bins' ``g_max`` (sign bit ``G_i > 0``, so ``G_i = 0`` sends ``-scale``, as in the
    operator). The new residue is ``G`` minus what was sent.

    Returns:
        ``(indices, positive, new_residue, scale)``: int64 ascending indices, bool signs.
    """
    G = residue + grad
    H = G + grad
    n = G.numel()
    nbins = -(-n // bin_len)
    padded = torch.zeros(nbins * bin_len, dtype=G.dtype, device=G.device)
    padded[:n] = G.abs()
    g_max = padded.view(nbins, bin_len).amax(dim=1)
    thr = g_max.repeat_interleave(bin_len)[:n]
    idx = torch.nonzero((H.abs() >= thr) & (thr > 0)).view(-1)
    scale = float(g_max.mean())
    positive = G[idx] > 0
    new_residue = G.clone()
    new_residue[idx] -= torch.where(positive, scale, -scale).to(G.dtype)
    return idx, positive, new_residue, scale


def pack_signs(positive: torch.Tensor) -> torch.Tensor:
    """Bools to uint8, 8 per byte, entry ``8 b + j`` in bit ``j`` of byte ``b``."""
    k = positive.numel()
    bits = torch.zeros(-(-k // 8) * 8, dtype=torch.uint8, device=positive.device)
    bits[:k] = positive.to(torch.uint8)
    weights = torch.tensor([1 << j for j in range(8)], dtype=torch.uint8, device=bits.device)
    return (bits.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor, k: int) -> torch.Tensor:
    """Inverse of :func:`pack_signs` for ``k`` entries."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    return ((packed[:, None] >> shifts) & 1).view(-1)[:k].bool()


class AdaComp(CommHook):
    """AdaComp (arXiv 1712.02679): per-bin self-adjusting selection of residue + gradient,
    ternary-quantized, the rest kept in a local residue (error feedback).

    Per parameter (the paper compresses layer by layer) each worker runs
    :func:`adacomp_select` with bin length ``bin_conv`` for convolution kernels (tensors of
    three or more dimensions) and ``bin_fc`` otherwise. The decoded bucket is the sum over
    workers of ``±scale`` scattered at the sent indices, divided by the world size.

    Defaults: ``bin_conv = 50`` and ``bin_fc = 500``, the paper's ``L_T`` for convolutional and
    for fully connected / recurrent layers (as recalled from the paper, not re-read here; the
    MXNet operator defaults to 64). The paper applies the same ``L_T`` to every layer of a kind;
    biases and other 1-D tensors use ``bin_fc`` here (a choice, not from the paper).

    Payload per bucket (one uint8 message, all-gathered with its int64 length): the ``P``
    per-parameter scales (float32), the ``k`` selected indices into the bucket (int32), and
    their ``k`` signs packed 8 per byte: ``8 + 4 P + 4 k + ceil(k / 8)`` bytes. The receiver
    reads ``k = floor(8 (len - 4 P) / 33)`` from the length (the operator's own format has the
    same index and sign arrays, with its length and one scale in a header). State (the residue)
    is keyed by parameter, so DDP's bucket rebuild after the first step does not disturb it.

    Args:
        bin_conv: bin length ``L_T`` for convolution kernels.
        bin_fc: bin length ``L_T`` for all other tensors.
    """

    name = "adacomp"
    allreducible = False
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        bin_conv: int = 50,
        bin_fc: int = 500,
    ) -> None:
        super().__init__(process_group)
        for key, val in (("bin_conv", bin_conv), ("bin_fc", bin_fc)):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {key}={val!r}")
        self.bin_conv = bin_conv
        self.bin_fc = bin_fc
        self._residue: dict[int, torch.Tensor] = {}  # by id() of the parameter

    def bin_len(self, p: torch.Tensor) -> int:
        return self.bin_conv if p.dim() >= 3 else self.bin_fc

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        params = bucket.parameters()
        with self.timer("encode"):
            flat = buf.detach().to(torch.float32)
            scales, idx_parts, sign_parts, ends, off = [], [], [], [], 0
            for p in params:
                n = p.numel()
                res = self._residue.get(id(p))
                res = flat.new_zeros(n) if res is None else res
                idx, pos, res, scale = adacomp_select(res, flat[off : off + n], self.bin_len(p))
                self._residue[id(p)] = res
                scales.append(scale)
                idx_parts.append(idx + off)
                sign_parts.append(pos)
                off += n
                ends.append(off)
            idx = torch.cat(idx_parts).to(torch.int32)
            msg = torch.cat(
                [
                    torch.tensor(scales, dtype=torch.float32, device=flat.device).view(torch.uint8),
                    idx.view(torch.uint8),
                    pack_signs(torch.cat(sign_parts)),
                ]
            )

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            gathered = fut.value()
            with self.timer("decode"):
                P = len(params)
                ends_t = torch.tensor(ends, device=flat.device)
                out = torch.zeros_like(flat)
                for m in gathered:
                    sc = m[: 4 * P].clone().view(torch.float32)
                    k = (8 * (m.numel() - 4 * P)) // 33
                    ix = m[4 * P : 4 * P + 4 * k].clone().view(torch.int32).to(torch.int64)
                    pos = unpack_signs(m[4 * P + 4 * k :], k)
                    mag = sc[torch.searchsorted(ends_t, ix, right=True)]
                    out.index_add_(0, ix, torch.where(pos, mag, -mag))
                buf.copy_(out.div_(self.world_size))
            return buf

        return self.in_turn(lambda: self.allgather_varlen_future(msg).then(decode), buf)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One variable-length all-gather: the int64 length, then the message of ``4 P + 4 k
        + ceil(k / 8)`` bytes, ``k`` the selected entries; nominally one per bin (``k = sum
        ceil(n / L_T)``), the count varying with the data."""
        k = sum(-(-numel_of(s) // (self.bin_conv if len(s) >= 3 else self.bin_fc)) for s in shapes)
        msg = 4 * len(shapes) + 4 * k + -(-k // 8)
        return [Collective("allgather", 8), Collective("allgather", msg, True)]


register(AdaComp)
