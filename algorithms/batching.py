"""One method object for ``R`` runs that differ only in their step: the step as a per-run scalar.

A batch of ``R`` runs holds its server vectors as ``(R, d)`` and its nodes as ``(R n, d)`` rows
(:mod:`comm.batched`, :mod:`problems.batched`). A method written for one run multiplies its step
by both kinds of tensor (``x - gamma g`` on the server, ``gamma grad f_i`` on the nodes); the
step of a batch, :class:`PerRun`, is a tensor that takes the shape each product needs: ``(R, 1)``
against server vectors, each run's value repeated over its ``n`` rows against node rows. A
method whose ``_step`` uses its step only in such products (no ``float(gamma)``, no ``alpha=``
keyword) declares ``batchable = True``; the contract test runs each such method batched and
alone and compares their histories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

__all__ = ["PerRun", "for_runs"]


class PerRun(torch.Tensor):
    """Per-run scalars ``(R, 1)`` that broadcast over a run's ``n`` node rows (see the module
    docstring). Every operation's result is a plain tensor."""

    nodes_per_run: int = 1

    @staticmethod
    def make(values: Sequence[float], n: int, dtype: torch.dtype, device=None) -> PerRun:
        t = torch.tensor(list(values), dtype=dtype, device=device).reshape(-1, 1)
        out = t.as_subclass(PerRun)
        out.nodes_per_run = int(n)
        return out

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rows = _leading(args, kwargs)

        def plain(a):
            if isinstance(a, PerRun):
                t = a.as_subclass(torch.Tensor)
                n = a.nodes_per_run
                if rows is not None and n > 1 and rows == t.shape[0] * n:
                    return t.repeat_interleave(n, dim=0)
                return t
            if isinstance(a, list | tuple):
                return type(a)(plain(b) for b in a)
            return a

        with torch._C.DisableTorchFunctionSubclass():
            return func(*(plain(a) for a in args), **{k: plain(v) for k, v in kwargs.items()})

    def __float__(self) -> float:
        raise TypeError("a batch's step is one value per run: this method is not batchable")


def _leading(args, kwargs) -> int | None:
    """The leading size of the first plain tensor operand with two or more dimensions."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and not isinstance(a, PerRun) and a.dim() >= 2:
            return a.shape[0]
    return None


def for_runs(algo, gammas: Sequence[float], n: int, dtype: torch.dtype, device=None):
    """``algo`` for a batch whose run ``r`` takes the step ``gammas[r]``."""
    step = PerRun.make(gammas, n, dtype, device)
    return dataclasses.replace(algo, gamma=step)
