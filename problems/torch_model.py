"""Deep-net problems over one flat parameter vector, all nodes in one batched pass.

``f_i(x) = (1/m_i) sum_{j in node i} CE(net(x; a_j), y_j) + (lam/2)||x||^2``. The network is a
module on the meta device; parameters are slices of the flat ``x`` passed through
``torch.func.functional_call``. Per-node gradients ``(m, d)`` come from
``vmap(grad(loss))`` over the node axis, each node with its own parameters and its own batch;
``batched=False`` runs the same function node by node instead, for when the vmapped pass does
not fit in memory. The two agree to rounding (about 1e-15 in float64, 1e-7 in float32; vmapped
convolutions run as grouped convolutions, which sum in another order, so in float32 a ReLU input
within rounding of zero can flip and move a few gradient entries of a large net). Full local
gradients walk the nodes' samples in chunks of ``chunk`` per node, padding shorter nodes with
zero-weight samples.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from problems.base import Batch, Consts, Problem, parse_x0
from problems.data import Dataset
from streams import Streams, tags

__all__ = ["TorchModel", "init_flat"]


def init_flat(model: nn.Module, seed: int) -> torch.Tensor:
    """PyTorch's default initialisation, drawn from a stream keyed by ``seed`` (float64, CPU).

    Linear and convolution weights and biases ``~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (what
    ``kaiming_uniform_(a=sqrt(5))`` gives), GroupNorm weights 1 and biases 0.
    """
    spec: dict[str, tuple[str, float]] = {}
    for prefix, mod in model.named_modules():
        pre = f"{prefix}." if prefix else ""
        if isinstance(mod, nn.Linear | nn.Conv2d):
            bound = 1.0 / math.sqrt(mod.weight[0].numel())
            spec[pre + "weight"] = spec[pre + "bias"] = ("uniform", bound)
        elif isinstance(mod, nn.GroupNorm):
            spec[pre + "weight"], spec[pre + "bias"] = ("ones", 0.0), ("zeros", 0.0)
    parts = []
    for k, (name, p) in enumerate(model.named_parameters()):
        kind, bound = spec.get(name, ("uniform", 1.0 / math.sqrt(max(p.shape[-1], 1))))
        if kind == "uniform":
            u = Streams.shared(seed, 1, tags.TORCH_INIT, k).uniform(p.numel())[0]
            parts.append((2.0 * u - 1.0) * bound)
        else:
            parts.append(torch.full((p.numel(),), 1.0 if kind == "ones" else 0.0))
    return torch.cat(parts).to(torch.float64)


class TorchModel(Problem):
    """Cross-entropy of a network on split data; subclasses choose the network and data."""

    convex = False
    default_dataset: ClassVar[str] = "digits"
    # No smoothness constants are known for networks: methods fall back to the usual SGD step.
    default_step: ClassVar[float | None] = 0.1

    def __init__(
        self,
        model: nn.Module,
        ds: Dataset,
        order: np.ndarray,
        counts: np.ndarray,
        *,
        lam: float = 0.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
        x0: str = "default",
        batched: bool = True,
        chunk: int = 256,
    ) -> None:
        if not math.isfinite(lam) or lam < 0:
            raise ValueError(f"{self.name}: lambda must be a finite number >= 0, got {lam!r}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or counts.size == 0 or (counts <= 0).any():
            empty = np.flatnonzero(counts <= 0).tolist()
            raise ValueError(f"{self.name}: every node needs samples; empty nodes {empty}")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"{self.name}: chunk must be a positive integer, got {chunk!r}")
        self.model, self.lam, self.batched, self.chunk = model, float(lam), bool(batched), chunk
        params = list(model.named_parameters())
        self._names = [k for k, _ in params]
        self._shapes = [p.shape for _, p in params]
        self._numels = [p.numel() for _, p in params]
        self.param_sizes = tuple(self._numels)  # one block per parameter tensor
        d = sum(self._numels)
        init = init_flat(model, seed)
        super().__init__(
            counts.size,
            d,
            consts=Consts,
            x0=parse_x0(x0, d, lambda: init, seed),
            dtype=dtype,
            device=device,
        )
        self.classes = ds.num_classes
        dev = self.device
        self._X = torch.from_numpy(np.ascontiguousarray(ds.X[order])).to(dev, dtype)
        self._y = torch.from_numpy(np.asarray(ds.y[order], dtype=np.int64)).to(dev)
        self._X_test = torch.from_numpy(np.ascontiguousarray(ds.X_test)).to(dev, dtype)
        self._y_test = torch.from_numpy(np.asarray(ds.y_test, dtype=np.int64)).to(dev)
        self.counts = torch.from_numpy(np.asarray(counts, dtype=np.int64)).to(dev)
        self.offsets = torch.cat([self.counts.new_zeros(1), torch.cumsum(self.counts, 0)])
        self._w = (1.0 / (self.n * self.counts.to(dtype))).repeat_interleave(self.counts)
        self._vgrad = vmap(grad(self._wloss))
        self._vloss = vmap(self._wloss)

    # ------------------------------------------------------------------ functional core
    def _params(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        chunks = torch.split(flat, self._numels)
        return {k: c.reshape(s) for k, c, s in zip(self._names, chunks, self._shapes, strict=True)}

    def _wloss(self, flat: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor):
        out = functional_call(self.model, self._params(flat), (xb,))
        return (F.cross_entropy(out, yb, reduction="none") * wb).sum()

    def _per_node(self, fn, X: torch.Tensor, xb, yb, wb) -> torch.Tensor:
        if self.batched:
            return (self._vgrad if fn == "grad" else self._vloss)(X, xb, yb, wb)
        one = grad(self._wloss) if fn == "grad" else self._wloss
        return torch.stack([one(X[j], xb[j], yb[j], wb[j]) for j in range(X.shape[0])])

    def _node_chunks(self):
        """Per-node sample chunks ``(idx, weights)``, each ``(m, <= chunk)``; pads with weight 0."""
        cnt = self.counts[self.nodes]
        start = self.offsets[self.nodes]
        M = int(cnt.max())
        for c0 in range(0, M, self.chunk):
            pos = torch.arange(c0, min(c0 + self.chunk, M), device=self.device)
            valid = pos[None, :] < cnt[:, None]
            idx = torch.where(valid, start[:, None] + pos[None, :], start[:, None])
            yield idx, valid.to(self.dtype) / cnt[:, None].to(self.dtype)

    def _all_chunks(self, X: torch.Tensor, y: torch.Tensor, w: torch.Tensor):
        for c0 in range(0, X.shape[0], self.chunk):
            yield X[c0 : c0 + self.chunk], y[c0 : c0 + self.chunk], w[c0 : c0 + self.chunk]

    # ------------------------------------------------------------------ Problem maths
    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        G = torch.zeros_like(X)
        for idx, wb in self._node_chunks():
            G += self._per_node("grad", X, self._X[idx], self._y[idx], wb)
        return G + self.lam * X

    def _batch_grad(self, X: torch.Tensor, batch: Batch) -> torch.Tensor:
        idx = batch.idx
        wb = torch.full(idx.shape, 1.0 / batch.size, dtype=self.dtype, device=self.device)
        return self._per_node("grad", X, self._X[idx], self._y[idx], wb) + self.lam * X

    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.m, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            for idx, wb in self._node_chunks():
                out += self._per_node("loss", X, self._X[idx], self._y[idx], wb)
        return out + 0.5 * self.lam * (X * X).sum(1)

    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            total = sum(self._wloss(x, *c) for c in self._all_chunks(self._X, self._y, self._w))
        return total + 0.5 * self.lam * (x @ x)

    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        g = self.lam * x
        for c in self._all_chunks(self._X, self._y, self._w):
            g = g + grad(self._wloss)(x, *c)
        return g

    def _sample(self, streams: Streams, batch_size: int) -> Batch:
        nodes = self.nodes
        offs = streams.integers(self.counts[nodes][:, None], batch_size)
        return Batch(nodes=nodes, size=batch_size, idx=self.offsets[nodes][:, None] + offs)

    def evaluate(self, x: torch.Tensor, with_grad: bool = True) -> dict[str, float]:
        """Held-out ``loss`` (mean cross-entropy), ``acc`` and, with ``with_grad``, the
        ``grad_norm_sq`` of that loss (a backward pass over the test set)."""
        x = self._point(x)
        N = self._X_test.shape[0]
        w = torch.full((N,), 1.0 / N, dtype=self.dtype, device=self.device)
        g = torch.zeros_like(x)
        loss, correct = 0.0, 0
        for xb, yb, wb in self._all_chunks(self._X_test, self._y_test, w):
            if with_grad:
                g += grad(self._wloss)(x, xb, yb, wb)
            with torch.no_grad():
                out = functional_call(self.model, self._params(x), (xb,))
                loss += float((F.cross_entropy(out, yb, reduction="none") * wb).sum())
                correct += int((out.argmax(1) == yb).sum())
        out = {"loss": loss, "acc": correct / N}
        if with_grad:
            out["grad_norm_sq"] = float(g @ g)
        return out
