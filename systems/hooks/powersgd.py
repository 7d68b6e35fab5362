"""PowerSGD: rank-r gradient compression by one step of subspace (power) iteration, all-reduced.

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019, arXiv 1905.13727, Algorithm 1 with error feedback (Algorithm 2).
Authors' code: epfml/powersgd ``paper-code/gradient_reducers.py::RankKReducer.reduce`` and
``orthogonalize``; PyTorch's ``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py``
(``PowerSGDState``, ``powerSGD_hook``) is the DDP form this hook follows step for step.

Per bucket, every parameter gradient ``g`` is viewed as a matrix ``(n, m)`` with ``n = shape[0]``
and ``m = prod(shape[1:])``; with ``r = min(rank, n, m)`` it is compressed when it is at least
2-D and ``(n + m) r * min_compression_rate < n m`` (PyTorch's ``_should_compress``), otherwise it
is all-reduced raw (1-D tensors always are, as in ``RankKReducer``). For the compressed ones:

1. ``M = g + e`` (error feedback; ``e = 0`` at first);
2. ``Q``: the previous step's averaged ``Q`` (warm start, the paper's ``reuse_query``) or, at
   the first compressed step of a bucket (every step without warm start), a standard normal
   draw; either way orthogonalized (Gram-Schmidt, column ``/= norm + epsilon``);
3. ``P = M Q``; all-reduce (sum) all layers' ``P`` as one flat tensor;
4. orthogonalize ``P``; ``Q = Mᵀ P``; all-reduce all ``Q`` as one flat tensor, divide by ``W``;
5. output ``P Qᵀ`` (the rank-r approximation of the mean of the ``M``), ``e = M - P Qᵀ``.

Gram-Schmidt depends only on the nested column spans of its input, so orthogonalizing ``Q``
before ``P = M Q`` (PyTorch) or not (``RankKReducer``) gives the same ``P`` after step 4 up to
column signs, which ``P Qᵀ`` does not see; the orthogonalized form is kept for conditioning.
For ``rank > 2`` PyTorch uses a QR factorization instead: the same up to column signs.

The initial ``Q`` are drawn as PyTorch draws them, so that both hooks agree to rounding: a
``numpy.random.RandomState(seed)`` gives each bucket initialization a seed
``randint(1_000_000_000)``, a private ``torch.Generator`` with that seed draws the ``Q`` of the
bucket's compressed layers, grouped by shape in order of first appearance. The same seed on
every rank gives every rank the same ``Q``.

Defaults and where they come from: ``rank=1`` (the defaults of ``PowerSGDState`` and of
``RankKReducer``; the paper's experiments vary it), ``min_compression_rate=2.0``,
``warm_start=True``, ``error_feedback=True`` (``PowerSGDState``), ``orthogonalization_epsilon
=1e-8`` (``orthogonalize`` of the paper code; ``PowerSGDState`` defaults to 0),
``seed=0`` (``PowerSGDState.random_seed``). ``start_iter=2``: the paper compresses from the
first step; DDP rebuilds its buckets after the first iteration and PyTorch requires
``start_powerSGD_iter > 1`` with error feedback or warm start, so the steps ``t < start_iter``
(counted from 0) are plain all-reduces (``PowerSGDState`` defaults to 1000).

Payload per step and bucket (bytes, float32): ``4 (sum_compressed (n + m) r + uncompressed
numel)``; a plain step sends ``4 numel``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.distributed as dist

from comm.error_feedback import Memory, compensate_, residual_
from comm.hooks import Collective, CommHook, chain, itemsize, numel_of
from compressors.rank_r import gram_schmidt_
from systems.hooks.registry import register

__all__ = ["PowerSGD", "check_powersgd_args", "gram_schmidt_"]


def check_powersgd_args(name: str, rank, min_compression_rate, orthogonalization_epsilon) -> None:
    """The parameter checks shared by the PowerSGD hooks (``name`` prefixes the message)."""
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"{name}: rank must be an integer >= 1, got {rank!r}")
    if not min_compression_rate > 0:
        raise ValueError(f"{name}: min_compression_rate must be > 0, got {min_compression_rate!r}")
    if not orthogonalization_epsilon >= 0:
        raise ValueError(
            f"{name}: orthogonalization_epsilon must be >= 0, got {orthogonalization_epsilon!r}"
        )


class PowerSGD(CommHook):
    """PowerSGD (arXiv 1905.13727): per-layer rank-r power step, P and Q all-reduced, with EF.

    Args:
        rank: the approximation rank ``r`` (per layer ``min(r, n, m)``), ``>= 1``.
        start_iter: steps ``t < start_iter`` are plain all-reduces; ``>= 2``.
        min_compression_rate: compress a layer only if ``n m > (n + m) r * rate``; ``> 0``.
        warm_start: reuse the previous step's ``Q`` (else a fresh random ``Q`` every step).
        error_feedback: add the previous residual ``M - P Qᵀ`` to the gradient.
        orthogonalization_epsilon: added to each column norm in Gram-Schmidt; ``>= 0``.
        seed: seeds the initial ``Q`` (the same on every rank).
    """

    name = "powersgd"
    allreducible = True
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        rank: int = 1,
        start_iter: int = 2,
        min_compression_rate: float = 2.0,
        warm_start: bool = True,
        error_feedback: bool = True,
        orthogonalization_epsilon: float = 1e-8,
        seed: int = 0,
    ) -> None:
        super().__init__(process_group)
        check_powersgd_args(self.name, rank, min_compression_rate, orthogonalization_epsilon)
        self.rank_r = rank
        self.start_iter = self.check_start_iter(self.name, start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.warm_start = bool(warm_start)
        self.error_feedback = bool(error_feedback)
        self.orthogonalization_epsilon = float(orthogonalization_epsilon)
        self.seed = seed
        self.iter = 0
        self._np_rng = np.random.RandomState(seed)
        self._errors: dict[int, Memory] = {}  # error feedback: per bucket, one per matrix
        self._qs: dict[int, list[torch.Tensor]] = {}

    def describe(self) -> dict[str, object]:
        out = super().describe()
        out["params"]["rank"] = out["params"].pop("rank_r")
        out["params"].pop("iter", None)
        return out

    def _compress(self, g: torch.Tensor) -> bool:
        if g.dim() < 2:
            return False
        n, m = g.shape[0], g[0].numel()
        r = min(n, m, self.rank_r)
        return (n + m) * r * self.min_compression_rate < n * m

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """The raw (uncompressed) layers' all-reduce, then ``P``'s, then ``Q``'s: each of the
        compressed layers ``(n, m)`` adds ``n r`` to ``P`` and ``m r`` to ``Q`` (a bucket with
        no compressed layer issues the raw all-reduce alone, one with no raw layer ``P`` and
        ``Q`` alone); the whole bucket before ``start_iter``."""
        if step is not None and step < self.start_iter:
            return self.plain_plan(shapes, dtype)
        size = itemsize(dtype)
        raw = p_len = q_len = 0
        for shape in shapes:
            if len(shape) < 2:
                raw += numel_of(shape)
                continue
            n, m = int(shape[0]), numel_of(shape[1:])
            r = min(n, m, self.rank_r)
            if (n + m) * r * self.min_compression_rate < n * m:
                p_len += n * r
                q_len += m * r
            else:
                raw += n * m
        out = [Collective("allreduce", raw * size)] if raw else []
        if p_len:
            out += [Collective("allreduce", p_len * size), Collective("allreduce", q_len * size)]
        return out

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        if self.iter < self.start_iter:
            return self.plain_step(bucket)
        buf = bucket.buffer()
        W = self.world_size
        idx = bucket.index()
        eps = self.orthogonalization_epsilon
        with self.timer("encode"):
            grads = bucket.gradients()
            comp = [g for g in grads if self._compress(g)]
            raw = [g for g in grads if not self._compress(g)]
            by_shape: dict[torch.Size, list[torch.Tensor]] = defaultdict(list)
            for g in comp:
                by_shape[g.shape].append(g)
            mats = [g.view(g.shape[0], -1) for group in by_shape.values() for g in group]
            ranks = [min(a.shape[0], a.shape[1], self.rank_r) for a in mats]
            memory, inputs = None, []
            if self.error_feedback:
                memory = self._errors.setdefault(idx, Memory())
                for j, a in enumerate(mats):
                    compensate_(a, memory.get(j))  # M = g + e, in the bucket's own views
                inputs = [a.clone() for a in mats]
            if not self.warm_start or idx not in self._qs:
                gen = torch.Generator().manual_seed(int(self._np_rng.randint(1_000_000_000)))
                self._qs[idx] = [
                    torch.randn(a.shape[1], r, generator=gen, dtype=a.dtype).to(a.device)
                    for a, r in zip(mats, ranks, strict=True)
                ]
            qs = [gram_schmidt_(q, eps) for q in self._qs[idx]]
            flat_raw = torch.cat([g.reshape(-1) for g in raw]) if raw else None
            p_parts = [(a @ q).reshape(-1) for a, q in zip(mats, qs, strict=True)]
            p_flat = torch.cat(p_parts) if mats else None
        self.tick(bucket)
        ps: list[torch.Tensor] = []

        def compute_q(fut: torch.futures.Future) -> torch.futures.Future:
            fut.value()
            with self.timer("encode"):
                off = 0
                for a, r in zip(mats, ranks, strict=True):
                    ps.append(gram_schmidt_(p_flat[off : off + a.shape[0] * r].view(-1, r), eps))
                    off += a.shape[0] * r
                q_flat = torch.cat([(a.T @ p).reshape(-1) for a, p in zip(mats, ps, strict=True)])
            return self.allreduce_future(q_flat)

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            done = fut.value()
            with self.timer("decode"):
                if p_flat is not None:
                    q_flat = done[-1].value()[0].div_(W)
                    new_qs, off = [], 0
                    for a, p, r in zip(mats, ps, ranks, strict=True):
                        q = q_flat[off : off + a.shape[1] * r].view(-1, r)
                        off += a.shape[1] * r
                        torch.matmul(p, q.T, out=a)
                        new_qs.append(q)
                    if self.warm_start:
                        self._qs[idx] = new_qs
                    if memory is not None:
                        for j, (m, a) in enumerate(zip(inputs, mats, strict=True)):
                            memory.keep(j, residual_(m, a))  # e = M - P Q^T
                if flat_raw is not None:
                    done[0].value()
                    flat_raw.div_(W)
                    off = 0
                    for g in raw:
                        g.copy_(flat_raw[off : off + g.numel()].view_as(g))
                        off += g.numel()
            return buf

        def start() -> torch.futures.Future:
            futs = [self.allreduce_future(flat_raw)] if flat_raw is not None else []
            if p_flat is not None:
                futs.append(chain(self.allreduce_future(p_flat), compute_q, buf))
            return torch.futures.collect_all(futs).then(decode)

        return self.in_turn(start, buf)


register(PowerSGD)
