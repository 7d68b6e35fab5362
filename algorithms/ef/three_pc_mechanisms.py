"""The 3PC mechanisms ``C_{h,y}(x)`` of Richtárik et al. 2022 (arXiv 2202.00998), over rows.

Each mechanism maps ``h = g_i^t`` (the node's estimator), ``y = grad f_i(x^t)`` and
``x = grad f_i(x^{t+1})`` (all ``(m, d)``) to a :class:`Sent`: the new estimator, the increment
``g_i^{t+1} - g_i^t`` the server rebuilds from the message, and the message's bits per node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from comm.base import Comm
from compressors import Compressor
from streams.tags import DEFAULT as TAG_MAIN
from streams.tags import THREE_PC_COIN as TAG_COIN
from streams.tags import THREE_PC_SECOND as TAG_SECOND

SKIP_BITS = 1  # LAG/CLAG's "nothing new" flag

MECHANISMS = ("ef21", "lag", "clag", "v1", "v2", "v3", "v4", "v5")
INNER = ("ef21", "lag", "clag")


@dataclass(frozen=True)
class Sent:
    """What the nodes send in one round.

    Attributes:
        g_i: ``(m, d)`` the new estimators ``g_i^{t+1}``.
        delta_i: ``(m, d)`` the increments the server adds, or the full ``g_i^{t+1}`` when
            ``full`` (every node sent its whole vector).
        nbits: int64 ``(m,)`` the bits each node put on the wire.
        full: the rows are whole vectors, not increments.
    """

    g_i: torch.Tensor
    delta_i: torch.Tensor
    nbits: torch.Tensor
    full: bool = False


@dataclass(frozen=True)
class Ctx:
    """The round's context: compressors, parameters and where randomness comes from."""

    C: Compressor
    C2: Compressor | None
    zeta: float
    p: float | None
    inner: str
    comm: Comm
    t: int


def _compress(C: Compressor, v_i: torch.Tensor, ctx: Ctx, tag: int):
    packet = C.encode(v_i, ctx.comm.rng_for(C, ctx.t, tag))
    return C.decode(packet), packet.nbits


def _trigger(h, y, x, zeta: float) -> torch.Tensor:
    """LAG's rule: send iff ``||x - h||^2 > zeta ||x - y||^2``, bool ``(m,)``."""
    return ((x - h) ** 2).sum(dim=1) > zeta * ((x - y) ** 2).sum(dim=1)


def ef21(h, y, x, ctx: Ctx, C: Compressor | None = None, tag: int = TAG_MAIN) -> Sent:
    """``h + C(x - h)``: sends ``C(x - h)``."""
    c, nbits = _compress(C or ctx.C, x - h, ctx, tag)
    return Sent(h + c, c, nbits)


def lag(h, y, x, ctx: Ctx) -> Sent:
    """``x`` if ``||x - h||^2 > zeta ||x - y||^2``, else ``h``: the full vector or a skip."""
    fire = _trigger(h, y, x, ctx.zeta)
    full_bits = ctx.comm.float_bits * x.shape[1]
    nbits = torch.where(fire, full_bits, SKIP_BITS).to(torch.int64)
    f = fire[:, None]
    return Sent(torch.where(f, x, h), torch.where(f, x - h, 0.0), nbits)


def clag(h, y, x, ctx: Ctx, C: Compressor | None = None, tag: int = TAG_MAIN) -> Sent:
    """``h + C(x - h)`` if LAG's rule fires, else ``h``: ``C(x - h)`` or a skip."""
    fire = _trigger(h, y, x, ctx.zeta)
    c, bits = _compress(C or ctx.C, x - h, ctx, tag)
    c = torch.where(fire[:, None], c, 0.0)
    return Sent(h + c, c, torch.where(fire, bits, SKIP_BITS).to(torch.int64))


def v1(h, y, x, ctx: Ctx) -> Sent:
    """``y + C(x - y)``; the server is assumed to know ``y`` (illustrative, as in the paper)."""
    c, nbits = _compress(ctx.C, x - y, ctx, TAG_MAIN)
    g_i = y + c
    return Sent(g_i, g_i - h, nbits)


def v2(h, y, x, ctx: Ctx) -> Sent:
    """``b + C(x - b)``, ``b = h + Q(x - y)`` with unbiased ``Q``: sends both messages."""
    q, q_bits = _compress(ctx.C2, x - y, ctx, TAG_SECOND)
    b = h + q
    c, c_bits = _compress(ctx.C, x - b, ctx, TAG_MAIN)
    return Sent(b + c, q + c, q_bits + c_bits)


def v3(h, y, x, ctx: Ctx) -> Sent:
    """``b + C(x - b)`` with ``b`` the inner 3PC's output (``ef21`` or ``clag`` with the second
    compressor, or ``lag``): sends the inner message and ``C(x - b)``."""
    if ctx.inner == "lag":
        inner = lag(h, y, x, ctx)
    else:
        inner = (ef21 if ctx.inner == "ef21" else clag)(h, y, x, ctx, ctx.C2, TAG_SECOND)
    c, c_bits = _compress(ctx.C, x - inner.g_i, ctx, TAG_MAIN)
    return Sent(inner.g_i + c, inner.delta_i + c, inner.nbits + c_bits)


def v4(h, y, x, ctx: Ctx) -> Sent:
    """``b + C1(x - b)``, ``b = h + C2(x - h)``: 3PCv3 with the EF21 inner mechanism."""
    return v3(h, y, x, replace(ctx, inner="ef21"))


def v5(h, y, x, ctx: Ctx) -> Sent:
    """With probability ``p`` (a coin shared by all, free): ``x``, sent in full; otherwise
    ``h + C(x - y)``, sending ``C(x - y)``."""
    if ctx.comm.coin(ctx.t, ctx.p, tag=TAG_COIN):
        nbits = torch.full((x.shape[0],), ctx.comm.float_bits * x.shape[1], dtype=torch.int64)
        return Sent(x, x, nbits, full=True)
    c, nbits = _compress(ctx.C, x - y, ctx, TAG_MAIN)
    return Sent(h + c, c, nbits)


APPLY = {"ef21": ef21, "lag": lag, "clag": clag, "v1": v1, "v2": v2, "v3": v3, "v4": v4, "v5": v5}
