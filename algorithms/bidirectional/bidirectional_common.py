"""Shared pieces of the bidirectional methods with memory (DORE, Artemis, MCM): the downlink
compressor option and its binding, the uplink with learned memories (DIANA's shifts), and the
partial-participation draw.

Buffer ownership: :func:`uplink_with_memory` returns new tensors and never writes into its
inputs, so the caller's state stays intact (``step`` never mutates its input).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.base import Theory, check_fraction, check_unit, option
from algorithms.stepsizes import bidirectional as steps
from algorithms.vr.vr_common import need, need_unbiased
from comm.base import Comm
from compressors import Compressor
from streams import tags

INITS = ("zero", "full")


def down_option():
    """The ``down_compressor`` field of DORE, Artemis and MCM."""
    return option(
        None,
        "downlink compressor (--down-compressor; default: the uplink's compressor, as the papers)",
    )


def participation_option():
    """The ``participation`` field of Artemis and MCM."""
    return option(
        1.0,
        "probability p in (0, 1] that a node takes part in a round (own coin)",
        check=check_unit,
        required=True,
    )


ESTIMATORS = ("memory", "sampled")


def estimator_option():
    """The ``estimator`` field of Artemis and MCM (with partial participation)."""
    return option(
        "memory", "partial participation: memory | sampled aggregation", choices=ESTIMATORS
    )


def memory_step_option(help: str):  # noqa: A002 - the word argparse uses
    """A memory step (``alpha``, ``alpha_down``) in ``[0, 1]``: 0, no memory, is the checks'
    memoryless baseline."""
    return option(None, help, check=check_fraction)


def init_option():
    """The ``init_mode`` field (``--init``) of DORE, Artemis and MCM."""
    return option(
        "zero", "uplink memories h_i^0: zero | full (sent once, 32 d)", choices=INITS, flag="init"
    )


def down_omega(down: Compressor, d: int) -> float:
    """``omega`` of the downlink compressor (a contractive one, accepted only with
    ``--force-compressor``, through ``1/(omega + 1) = delta``)."""
    return down.omega(d) if down.unbiased else 1.0 / down.delta(d) - 1.0


def participation_mask(comm: Comm, t: int, p: float) -> torch.Tensor | None:
    """Bool ``(m,)``: which held nodes take part in round ``t``, each with its own Bernoulli(p)
    coin from its own stream (as the Artemis authors' code draws them); ``None`` when
    ``p = 1``."""
    if p >= 1.0:
        return None
    return comm.rng(t, tag=tags.BIDIR_PART).uniform(1)[:, 0] < p


@dataclass(frozen=True)
class Uplink:
    """One uplink round: the server's gradient estimate ``g`` and the new memories."""

    g: torch.Tensor  # (d,)
    h_i: torch.Tensor  # (m, d)
    h: torch.Tensor  # (d,) mean of h_i over all nodes
    H: float  # mean_i ||h_i - grad f_i||^2 before the update (the memories' error)


def uplink_with_memory(
    C: Compressor,
    grad_i: torch.Tensor,
    h_i: torch.Tensor,
    h: torch.Tensor,
    alpha: float,
    comm: Comm,
    t: int,
    mask: torch.Tensor | None = None,
    p: float = 1.0,
    estimator: str = "memory",
) -> Uplink:
    """Node ``i`` sends ``D_i = C(grad_i - h_i)`` and sets ``h_i += alpha D_i``; the server
    forms ``g = h + mean_i D_i`` and ``h += alpha mean_i D_i`` (DIANA's shifts, the uplink of
    DORE, Artemis and MCM).

    With partial participation (``mask`` of the nodes taking part, each with probability
    ``p``) only those nodes send and move their memory, and the server's estimate is
    ``estimator``: ``memory`` (``g = h + (1/(p n)) sum_{i in S} D_i``: unbiased, and exact at
    the optimum once the memories are learned) or ``sampled`` (``g = (1/(p n)) sum_{i in S}
    (D_i + h_i)``, the Artemis authors' aggregation: the server keeps every ``h_i`` and adds
    those of the sampled nodes; its variance keeps a term in the heterogeneity). The server's
    copies of ``h_i`` are not messages: that sum is charged nothing."""
    packet = C.encode(grad_i - h_i, comm.rng_for(C, t))
    d_i = C.decode(packet)
    H = comm.monitor_mean(((grad_i - h_i) ** 2).sum(dim=1))
    if mask is None:
        delta = comm.reduce(packet, C, decoded=d_i)
        return Uplink(g=h + delta, h_i=h_i + alpha * d_i, h=h + alpha * delta, H=H)
    m = mask.to(grad_i.device)
    # Weights 0/1, scaled after the sum: exact whatever precision a backend's gather of the
    # weights uses (1/(p n) is not a float32 number).
    w, scale = m.to(grad_i.dtype), 1.0 / (p * comm.n)
    delta = scale * comm.reduce(packet, C, weight=w, decoded=d_i)  # (1/(p n)) sum_S D_i
    if estimator == "memory":
        g = h + delta
    else:
        nothing = torch.zeros(comm.m, dtype=torch.int64)
        g = delta + scale * comm.reduce_rows(h_i, nothing, weight=w)
    h_i = h_i + alpha * m[:, None].to(grad_i.dtype) * d_i
    return Uplink(g=g, h_i=h_i, h=h + (alpha * p) * delta, H=H)


def initial_memory(init: str, problem, x0: torch.Tensor, comm: Comm):
    """``h_i^0``: zero (nothing sent) or ``grad f_i(x^0)`` sent once uncompressed (charged)."""
    if init == "full":
        grad_i = problem.grad(x0)
        return grad_i, comm.reduce_full(grad_i)
    h_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
    return h_i, torch.zeros_like(h_i[0])


def artemis_theory(name: str, problem, compressor, opts, source: str, note: str = "") -> Theory:
    """Artemis's step (:func:`algorithms.stepsizes.bidirectional.artemis`) and its memory rate,
    shared by Artemis and MCM (which also takes it, as a conservative stand-in, and adds its
    downlink memory rate)."""
    n, d = problem.n, problem.d
    w_up = need_unbiased(name, compressor, d)
    w_dn = need_unbiased(f"{name} (downlink)", opts["down_compressor"], d)
    p = float(opts.get("participation") or 1.0)
    k = need(problem, "L_max")
    return Theory(
        gamma=steps.artemis(k["L_max"], w_up, w_dn, n, p),
        formula="1 / (2 L_max (1 + omega_dwn) (1 + 4 omega_p / n)), "
        "omega_p = (1 + omega_up)/p - 1" + note,
        inputs={**k, "omega_up": w_up, "omega_dwn": w_dn, "n": n, "p": p},
        params={"alpha": steps.memory_rate(w_up)},
        source=source,
    )
