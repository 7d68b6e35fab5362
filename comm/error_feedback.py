"""Error feedback, in one place: the two mechanisms every method and DDP hook with error
feedback uses.

**EF14: a residual memory** (Seide et al. 2014; Stich, Cordonnier & Jaggi 2018, arXiv
1809.07599; Karimireddy et al. 2019, arXiv 1901.09847). A node keeps ``e``, what it did not send:
it sends ``c = C(p)`` of ``p = x + e`` (:func:`compensate_`) and keeps ``e = p - c``
(:func:`residual_`); a low-pass memory (ScaleCom, Chen et al. 2020, arXiv 2104.11125) keeps
``e = (1 - beta) e + beta (p - c)``. :class:`Memory` holds such residuals by key (a bucket, a
parameter) for the hooks; the methods hold theirs as a state row ``e_i``.

**EF21: an estimator** (Richtárik, Sokolov & Fatkhullin 2021, arXiv 2106.05203, Alg. 2): node
``i`` and the server share ``g_i``; the node sends ``c_i = C(x_i - g_i)`` and both add it,
``g_i += c_i``, and the server adds the mean of the ``c_i`` to ``g = mean_i g_i``
(:func:`ef21_update`).

The functions update their first argument in place and return it (the callers own the buffers:
a fresh gradient, a bucket's copy), so that error feedback costs no extra ``(m, d)`` buffer.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

__all__ = ["Memory", "compensate_", "ef14_send", "ef21_update", "residual_"]


def compensate_(x: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
    """EF14's message ``p = x + e``, built in ``x`` (``e`` None: nothing kept yet)."""
    return x if e is None else x.add_(e)


def residual_(p: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
    """EF14's new memory ``e = p - sent``, built in ``p``."""
    return p.sub_(sent)


def ef14_send(C, comm, t: int, p_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """EF14's round for a compensated message ``p_i`` (:func:`compensate_`): node ``i`` sends
    ``c_i = C(p_i)``; returns ``(mean_i c_i, e_i)`` with the new memory ``e_i = p_i - c_i``
    built in ``p_i``."""
    packet = C.encode(p_i, comm.rng_for(C, t))
    c_i = C.decode(packet)
    mean = comm.reduce(packet, C, decoded=c_i)
    return mean, residual_(p_i, c_i)


class Memory:
    """EF14 residuals by key (a DDP bucket's index, a parameter's id), for the hooks.

    ``beta`` < 1 is a low-pass memory: ``e = (1 - beta) e + beta r`` for the new residual ``r``.
    """

    def __init__(self, beta: float = 1.0) -> None:
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {beta!r}")
        self.beta = beta
        self._e: dict[Hashable, torch.Tensor] = {}

    def get(self, key: Hashable) -> torch.Tensor | None:
        """The residual kept under ``key``, or None."""
        return self._e.get(key)

    def zeros(self, key: Hashable, like: torch.Tensor) -> torch.Tensor:
        """The residual under ``key``, a zero one shaped as ``like`` when none is kept yet."""
        e = self._e.get(key)
        if e is None:
            e = self._e[key] = torch.zeros_like(like)
        return e

    def keep(self, key: Hashable, r: torch.Tensor) -> torch.Tensor:
        """Keep the new residual ``r`` under ``key`` (through the low-pass filter when
        ``beta < 1``, in the kept tensor); returns what is kept."""
        if self.beta == 1.0:
            self._e[key] = r
            return r
        e = self.zeros(key, r)
        return e.mul_(1 - self.beta).add_(r, alpha=self.beta)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._e

    def __getitem__(self, key: Hashable) -> torch.Tensor:
        return self._e[key]


def ef21_update(
    C,
    target_i: torch.Tensor,
    g_i: torch.Tensor,
    g: torch.Tensor,
    comm,
    t: int,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The EF21 estimator update shared by EF21, its variants and the EF21 hook (arXiv
    2106.05203, Alg. 2 lines 5-7): node ``i`` sends ``c_i = C(target_i - g_i)``, ``g_i += c_i``,
    and the server adds ``(1/n) sum_i c_i`` to ``g``. With ``mask`` (partial participation) only
    the nodes in it send, and the others keep ``g_i``. Returns ``(g_i, g, G)`` with
    ``G = mean_i ||g_i - target_i||^2``.

    ``target_i`` is a fresh gradient owned by the caller and is overwritten: the update then
    holds, besides the old ``g_i``, only that buffer and the decoded message. Without ``mask``
    the node side is the compressor shifted by ``g_i``
    (:meth:`compressors.base.Compressor.encode_shifted`, one compiled pass for Top-K on a
    CPU), which builds the new ``g_i`` in ``target_i``; with it, ``target_i`` holds the
    difference, then the error ``target_i - g_i^{t+1}``, and the decoded message becomes the
    new ``g_i``."""
    if mask is None:
        packet, c_i, sq = C.encode_shifted(target_i, g_i, comm.rng_for(C, t))
        g = g + comm.reduce(packet, C, None, decoded=c_i)
        return target_i, g, comm.monitor_mean(sq)
    diff = target_i.sub_(g_i)
    packet = C.encode(diff, comm.rng_for(C, t))
    c_i = C.decode(packet)
    weight = None
    if mask is not None:
        c_i.masked_fill_(~mask[:, None], 0.0)
        weight = mask.to(c_i.dtype) / comm.n
    g = g + comm.reduce(packet, C, weight, decoded=c_i)
    err = diff.sub_(c_i)  # target_i - g_i^{t+1}
    G = comm.monitor_mean(torch.linalg.vector_norm(err, dim=1) ** 2)
    return c_i.add_(g_i), g, G
