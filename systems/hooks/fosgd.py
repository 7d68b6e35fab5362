"""FO-SGD as a DDP comm hook: randomized Walsh-Hadamard transform, then dithered one-bit codes.

Stollenwerk & Jacques, "Flattened one-bit stochastic gradient descent: compressed distributed
optimization with controlled variance", arXiv 2405.11095. No authors' code was found.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, numel_of
from compressors.fosgd import irwht, padded_dim, rwht
from streams import Streams, tags
from systems.hooks.registry import register

__all__ = ["FOSGD"]


class FOSGD(CommHook):
    """Flattened one-bit SGD (Stollenwerk & Jacques 2024, arXiv 2405.11095), worker to worker.

    Per bucket ``g`` of ``d`` entries, each step:

    1. pad ``g`` with zeros to ``n = 2^ceil(log2 d)`` and flatten it,
       ``y = H D g / sqrt(n)``: ``D`` random signs drawn from ``(seed, step, bucket index)``, the
       same on every rank and fresh every step; ``H`` the Hadamard matrix, applied by the fast
       Walsh-Hadamard transform (:func:`compressors.fosgd.fwht`, ``log2 n`` vectorized stages);
    2. quantize with a uniform dither private to the rank (``(seed, step, bucket, rank)``):
       bit ``b_j = 1`` with probability ``(1 + y_j / lam) / 2``, standing for
       ``lam (2 b_j - 1)``, with the scale ``lam = ||y||_inf``, so the code is unbiased;
    3. all-gather the ``n`` bits packed into ``ceil(n / 8)`` bytes and the scale as float32;
    4. average the ranks' ``lam_w (2 b_w - 1)`` and invert the shared transform once:
       ``g_avg = (D H mean_w q_w / sqrt(n))[:d]``.

    Unbiased per rank; the variance constant, with its proof, is that of the library compressor
    :class:`compressors.fosgd.FOSGD`: ``omega = (d/n) min(n - 1, 2 ln(2n) + 1)``.

    Reconstruction, labelled: the paper's abstract (the body was not readable here) describes a
    biased scheme, its scale being a parameter of the method; ``lam = ||y||_inf`` is chosen here
    so that every entry is in the dither's range and the code is unbiased. The paper also
    compresses the server's broadcast; worker-to-worker all-gather has no server, and each rank
    decodes the gathered codes itself. Stateless apart from the step counter (no error feedback).

    Payload per bucket and step: ``ceil(n / 8) + 4`` bytes, all-gathered (bits cannot be summed).

    Args:
        seed: base of the shared signs and the private dithers (the same on every rank).
    """

    name = "fo-sgd"
    allreducible = False
    stateful = False

    def __init__(self, process_group: dist.ProcessGroup | None = None, *, seed: int = 0) -> None:
        super().__init__(process_group)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        self.seed = seed
        self._step = 0

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        d, index = buf.numel(), bucket.index()
        n = padded_dim(d)
        with self.timer("encode"):
            work = torch.float64 if buf.dtype == torch.float64 else torch.float32
            signs = self.signs(n, self._step, index, buf.device, work)
            y = rwht(buf.to(work)[None], signs)[0]
            lam = y.abs().max()
            p = 0.5 * (1.0 + y / torch.where(lam > 0, lam, 1.0))
            dither = Streams.for_nodes(self.seed, [self.rank], self._step, index, tags.FOSGD_DITHER)
            u = dither.to(buf.device).uniform(n, dtype=work)[0]
            bits = torch.nn.functional.pad(u < p, (0, -n % 8)).reshape(-1, 8)
            weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
            packed = (bits.to(torch.uint8) * weights.to(buf.device)).sum(1, dtype=torch.uint8)
            scale = lam.to(torch.float32).reshape(1).view(torch.uint8)
            payload = torch.cat([packed, scale])
        if bucket.is_last():
            self._step += 1

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            gathered = fut.value()
            with self.timer("decode"):
                rows = torch.stack(gathered)  # (world, ceil(n / 8) + 4)
                lams = rows[:, -4:].contiguous().view(torch.float32).to(work)  # (world, 1)
                unpacked = (rows[:, :-4, None] & weights.to(buf.device)) != 0
                q = (2.0 * unpacked.reshape(rows.shape[0], -1)[:, :n].to(work) - 1.0) * lams
                avg = irwht(q.mean(0, keepdim=True), signs, d)[0]
                buf.copy_(avg)
            return buf

        # one collective per bucket, issued at once: the buckets' order is DDP's on every rank
        return self.allgather_future(payload).then(decode)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """One all-gather of ``ceil(n / 8) + 4`` bytes, ``n`` the bucket's size padded to a
        power of two."""
        n = padded_dim(sum(numel_of(s) for s in shapes))
        return [Collective("allgather", -(-n // 8) + 4)]

    def signs(self, n: int, step: int, index: int, device=None, dtype=torch.float32):
        """The transform's signs ``(1, n)`` of a step and bucket, the same on every rank."""
        words = Streams.shared(self.seed, 1, step, index, tags.FOSGD_SIGNS, device=device).bits64(n)
        return 1.0 - 2.0 * (words & 1).to(dtype)


register(FOSGD)
