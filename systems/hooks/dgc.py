"""Deep Gradient Compression as a DDP comm hook.

Lin, Han, Mao, Wang & Dally, "Deep Gradient Compression: Reducing the Communication Bandwidth
for Distributed Training", ICLR 2018, arXiv 1712.01887. The authors' code,
synxlin/deep-gradient-compression, was read: ``dgc/compression.py::DGCCompressor`` (threshold
from a strided sample, its adjustment, the sparsity warm-up), ``dgc/optim/sgd.py::DGCSGD`` (the
optimizer applies the gradient with no momentum of its own), ``dgc/clip_grad.py``, ``train.py``
(which parameters are compressed) and ``configs/dgc/__init__.py`` (the defaults).
``dgc/memory.py::DGCSGDMemory`` itself was not available: its parameters (``momentum``,
``nesterov``, ``gradient_clipping``, ``momentum_masking=True``) were read in copies of it, and
the momentum correction and masking below follow the paper (Sec. 3), a reconstruction of that
file's update.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from comm.hooks import Collective, CommHook, numel_of
from systems.hooks.registry import register

__all__ = ["DGC", "dgc_select", "warmup_ratio"]


def warmup_ratio(step: int, ratio: float, warmup_steps: int) -> float:
    """The fraction of entries sent at ``step`` (0-based) under the exponential warm-up.

    ``DGCCompressor.warmup_compress_ratio`` per epoch, here per step: with
    ``c = ratio ** (1 / (warmup_steps + 1))`` the fraction is ``max(c ** (step + 1), ratio)``
    for ``step < warmup_steps`` and ``ratio`` afterwards, so the density falls geometrically
    from ``c`` to ``ratio`` (the paper's 75%, 93.75%, ..., 99.9% sparsity over four epochs is
    the same shape with a factor 4 per stage).
    """
    if step < warmup_steps:
        return max(ratio ** ((step + 1) / (warmup_steps + 1)), ratio)
    return ratio


def dgc_select(
    importance: torch.Tensor,
    ratio: float,
    sample_ratio: float = 0.01,
    generator: torch.Generator | None = None,
    lower: float = 0.8,
    upper: float = 1.3,
    max_adapt: int = 10,
) -> torch.Tensor:
    """Indices (ascending, int64) of the entries of a 1-D ``importance`` that DGC sends.

    ``k = ceil(ratio * n)`` entries are targeted. The threshold is the smallest of the top
    ``ceil(ratio * n_s)`` values of a strided sample of ``n_s >= max(ceil(sample_ratio n),
    ceil(2 / ratio))`` entries at a random start; every entry at or above it is selected. If
    more than ``upper * k`` are, the ``k`` largest of them are kept; if fewer than ``lower * k``,
    the threshold is multiplied by ``lower`` and the selection redone, at most ``max_adapt``
    times; finally at most ``k`` are kept. When the sample would be the whole tensor the
    selection is the exact top-``k``, ties broken toward the lower index (the authors' code
    instead keeps the first ``k`` indices at or above the k-th value, which differs only on
    exact ties). The sample's stride is a simplification of the code's (which rounds it to a
    multiple of 32 plus 1); the bounds 0.8/1.3, 10 rounds and the 1% sample are the code's.
    """
    n = importance.numel()
    k = min(n, max(1, math.ceil(ratio * n)))
    n_s = max(math.ceil(sample_ratio * n), math.ceil(2 / ratio))
    if sample_ratio >= 1.0 or n <= n_s:
        # stable descending sort: equal magnitudes keep index order
        order = torch.sort(importance, descending=True, stable=True).indices[:k]
        return torch.sort(order).values
    stride = n // n_s
    start = int(torch.randint(stride, (1,), generator=generator))
    samples = importance[start::stride]
    k_s = max(1, math.ceil(ratio * samples.numel()))
    thr = torch.topk(samples, k_s, sorted=False).values.min()
    idx = torch.nonzero(importance >= thr).view(-1)
    for _ in range(max_adapt):
        if idx.numel() > upper * k:
            top = torch.topk(importance[idx], k, sorted=False).indices
            idx = torch.sort(idx[top]).values
            break
        if idx.numel() >= lower * k:
            break
        thr = thr * lower
        idx = torch.nonzero(importance >= thr).view(-1)
    return idx[:k]


class DGC(CommHook):
    """Deep Gradient Compression (arXiv 1712.01887): momentum correction, local gradient
    clipping, momentum factor masking and sparsity warm-up around a sampled top-k.

    Per parameter, each worker keeps a momentum ``u`` and an accumulated velocity ``v``:

    1. clip (if ``clip_norm > 0``) its local gradient to norm ``clip_norm / sqrt(world)`` (the
       paper's local gradient clipping, before any accumulation; every parameter, the dense
       ones below included; the norm is the parameter tensor's, as the code's
       ``clip_grad_norm_`` takes one tensor);
    2. momentum correction: ``u = m u + g`` then ``v = v + u`` (Nesterov: ``u = m (u + g)``,
       ``v = v + u + g``);
    3. selects the entries of ``v`` to send (:func:`dgc_select`, fraction
       :func:`warmup_ratio` of the step), sends them, and zeroes ``v`` there and (momentum
       masking) ``u`` there;
    4. the decoded bucket is the sum over workers of the sent entries scattered into zeros,
       divided by the world size.

    As in the authors' training script, parameters with fewer than two dimensions (biases,
    norm scales) are not sparsified: they are all-reduced and the momentum is applied to their
    average (``u = m u + mean g``; the hook returns ``u``), the code's dense path
    (``compensate(..., accumulate=False)``).

    Because the momentum lives in the hook, train with plain SGD without momentum
    (``torch.optim.SGD(params, lr, momentum=0)``), as ``DGCSGD`` does. (``DGCSGD`` puts the
    weight decay term through a momentum of its own; with plain SGD its ``weight_decay`` acts
    without momentum.)

    Payload per bucket: the selected entries of all its sparsified parameters as one int32
    tensor, ``k`` indices into the bucket followed by the ``k`` float32 values (their bits),
    all-gathered with their length: ``8 + 8 k`` bytes; plus ``4 n_dense`` bytes all-reduced
    for the dense parameters. State is keyed by parameter, so DDP's bucket rebuild after the
    first step does not disturb it, and the first step is compressed like the others.

    Args (defaults from ``configs/dgc/__init__.py`` unless said):
        ratio: fraction of entries sent after warm-up (0.001, i.e. 99.9% sparsity).
        momentum: ``m`` (0.9, the configs' optimizer momentum).
        nesterov: Nesterov momentum correction (False).
        warmup_steps: steps of exponential sparsity warm-up (0: none; the paper warms up over
            4 epochs, the code's ``wm5`` config over 5: pass that many steps).
        sample_ratio: fraction of entries sampled for the threshold (0.01).
        clip_norm: local clipping threshold before the ``1/sqrt(world)`` factor (0: off, the
            code's default ``gradient_clipping=None``).
        masking: momentum factor masking (True).
        seed: seeds the private generator of the sample start (with the rank).
    """

    name = "dgc"
    momentum_in_hook = True  # train with plain SGD: the hook applies the momentum
    allreducible = False
    stateful = True

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        *,
        ratio: float = 0.001,
        momentum: float = 0.9,
        nesterov: bool = False,
        warmup_steps: int = 0,
        sample_ratio: float = 0.01,
        clip_norm: float = 0.0,
        masking: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__(process_group)
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got ratio={ratio!r}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got momentum={momentum!r}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got warmup_steps={warmup_steps!r}")
        if not 0 < sample_ratio <= 1:
            raise ValueError(f"sample_ratio must be in (0, 1], got sample_ratio={sample_ratio!r}")
        if clip_norm < 0:
            raise ValueError(f"clip_norm must be >= 0 (0: off), got clip_norm={clip_norm!r}")
        self.ratio = ratio
        self.momentum = momentum
        self.nesterov = nesterov
        self.warmup_steps = warmup_steps
        self.sample_ratio = sample_ratio
        self.clip_norm = clip_norm
        self.masking = masking
        self.seed = seed
        self._step = 0
        self._u: dict[int, torch.Tensor] = {}  # by id() of the parameter
        self._v: dict[int, torch.Tensor] = {}
        self._gen: torch.Generator | None = None

    def _accumulate(self, p: torch.Tensor, g: torch.Tensor, sparse: bool) -> torch.Tensor:
        """Momentum correction; returns ``v`` (sparse) or the momentum-applied ``g`` (dense)."""
        m = self.momentum
        u = self._u.get(id(p))
        if u is None:
            u = self._u[id(p)] = torch.zeros_like(g)
        if self.nesterov:
            u.add_(g).mul_(m)
            step = u + g
        else:
            u.mul_(m).add_(g)
            step = u
        if not sparse:
            return step.clone()
        v = self._v.get(id(p))
        if v is None:
            v = self._v[id(p)] = torch.zeros_like(g)
        return v.add_(step)

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        world = self.world_size
        if self._gen is None:
            self._gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.rank)
        ratio = warmup_ratio(self._step, self.ratio, self.warmup_steps)
        buf = bucket.buffer()
        params = bucket.parameters()
        with self.timer("encode"):
            flat = buf.detach().to(torch.float32)
            spans, off = [], 0
            for p in params:
                spans.append((p, off, p.numel(), p.dim() > 1 and ratio < 1.0))
                off += p.numel()
            idx_parts, val_parts, dense_parts = [], [], []
            for p, o, n, sparse in spans:
                g = flat[o : o + n]
                if self.clip_norm > 0:
                    limit = self.clip_norm / math.sqrt(world)
                    g = g * min(1.0, limit / (float(g.norm()) + 1e-6))
                if not sparse:
                    dense_parts.append(g)
                    continue
                v = self._accumulate(p, g, sparse=True)
                sel = dgc_select(v.abs(), ratio, self.sample_ratio, self._gen)
                idx_parts.append(sel + o)
                val_parts.append(v[sel])
                v[sel] = 0.0
                if self.masking:
                    self._u[id(p)][sel] = 0.0
            payload = None
            if idx_parts:
                idx = torch.cat(idx_parts).to(torch.int32)
                val = torch.cat(val_parts).to(torch.float32)
                payload = torch.cat([idx, val.view(torch.int32)])
            dense = torch.cat(dense_parts) if dense_parts else None
        if bucket.is_last():
            self._step += 1

        def decode(fut: torch.futures.Future) -> torch.Tensor:
            results = [f.value() for f in fut.value()]
            gathered = results[-1] if payload is not None else []
            with self.timer("decode"):
                out = torch.zeros_like(flat)
                for msg in gathered:
                    k = msg.numel() // 2
                    out.index_add_(0, msg[:k].to(torch.int64), msg[k:].view(torch.float32))
                out.div_(world)
                d_off = 0
                for p, o, n, sparse in spans:
                    if sparse:
                        continue
                    avg = dense[d_off : d_off + n] / world
                    out[o : o + n] = self._accumulate(p, avg, sparse=False)
                    d_off += n
                buf.copy_(out)
            return buf

        def start() -> torch.futures.Future:
            futs = [self.allreduce_future(dense)] if dense is not None else []
            if payload is not None:
                futs.append(self.allgather_varlen_future(payload))
            return torch.futures.collect_all(futs).then(decode)

        return self.in_turn(start, buf)

    def plan(self, shapes, world_size, dtype=torch.float32, step=None):
        """The dense (1-D) gradients all-reduced (float32), then the sparsified ones' selection
        as one variable-length all-gather: the int64 length, then ``k`` int32 indices and ``k``
        float32 values, ``k = sum ceil(ratio n)`` over the sparsified tensors at the ratio of
        ``step`` (:func:`warmup_ratio`; ``None``: after warm-up) — nominal, as the threshold
        selection may send fewer. At a ratio of 1 nothing is sparsified."""
        ratio = self.ratio if step is None else warmup_ratio(step, self.ratio, self.warmup_steps)
        dense = k = 0
        for shape in shapes:
            n = numel_of(shape)
            if len(shape) > 1 and ratio < 1.0:
                k += min(n, max(1, math.ceil(ratio * n)))
            else:
                dense += n
        out = [Collective("allreduce", 4 * dense)] if dense else []
        if k:
            out += [Collective("allgather", 8), Collective("allgather", 8 * k, True)]
        return out


register(DGC)
