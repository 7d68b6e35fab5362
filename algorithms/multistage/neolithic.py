"""NEOLITHIC: gradient accumulation and multi-step compression of the residual (Huang, Chen,
Yin & Yuan 2022, arXiv 2206.03665)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_count,
    option,
)
from algorithms.provenance import Provenance
from algorithms.stepsizes.neolithic import msc_delta, neolithic, neolithic_rounds
from comm.base import Comm
from compressors import Compressor
from compressors.identity import Identity
from streams import Streams
from streams.tags import NEOLITHIC_BATCH as TAG_BATCH
from streams.tags import NEOLITHIC_DOWN as TAG_DOWN
from streams.tags import NEOLITHIC_MSC as TAG_MSC

__all__ = ["NEOLITHIC", "NEOLITHICState", "msc"]

MEMORIES = ("ef", "none")
SOURCE = (
    "Huang, Chen, Yin & Yuan 2022, arXiv 2206.03665 (NeurIPS 2022); He, Huang, Chen, Yin & "
    "Yuan 2023, arXiv 2305.07612 (abstracts read; algorithm box and theorem not available)"
)


@dataclass(frozen=True)
class NEOLITHICState(State):
    e_i: torch.Tensor  # (m, d) node error memories (zero with memory="none")
    e: torch.Tensor  # (d,) server error memory of the downlink module (zero without one)


def msc(
    C: Compressor, x_i: torch.Tensor, R: int, streams: Callable[[int], Streams]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-step compression: ``v^(0) = 0``, ``v^(r+1) = v^(r) + C(x - v^(r))`` for
    ``r < R``, stage ``r`` drawing from ``streams(r)``. Returns ``v^(R)`` (``(m, d)``) and the
    bits of the ``R`` payloads per row (``(m,)``, their sum: one packet of ``R`` parts).

    For a ``delta``-contractive ``C``, ``E||x - v^(R)||^2 <= (1 - delta)^R ||x||^2``
    (:func:`algorithms.stepsizes.neolithic.msc_delta`)."""
    v = torch.zeros_like(x_i)
    nbits = torch.zeros(x_i.shape[0], dtype=torch.int64)
    for r in range(R):
        packet = C.encode(x_i - v, streams(r))
        v = v + C.decode(packet)
        nbits = nbits + packet.nbits.to(torch.int64).cpu()
    return v, nbits


@dataclass(frozen=True)
class NEOLITHIC(Algorithm):
    """NEOLITHIC (arXiv 2206.03665): ``R`` accumulated stochastic gradients per round, sent
    through an ``R``-stage compression of the residual, with error feedback.

    Huang, Chen, Yin & Yuan, "Lower Bounds and Nearly Optimal Algorithms in Distributed Learning
    with Communication Compression", NeurIPS 2022, arXiv 2206.03665 (non-convex); the
    accelerated version and the convex lower bounds: He, Huang, Chen, Yin & Yuan 2023, arXiv
    2305.07612 (a labelled reconstruction with Nesterov momentum:
    :class:`algorithms.multistage.neolithic_acc.NEOLITHICAcc`, ``neolithic-acc``).

    What was read: the two abstracts and secondary summaries only; the algorithm box (its line
    numbers) and the theorem could not be read. The update below is the method as those sources
    and the project's notes describe it; each point marked [U] is an assumption:

    Round ``k``: node ``i`` averages ``R`` minibatch gradients at ``x^k``
    (``g_i = (1/R) sum_r grad F_i(x^k; xi_{i,r})``, drawn as one batch of ``R * batch_size``
    samples with replacement, the same distribution; full local gradients without
    ``batch_size``), forms ``p_i = e_i + g_i`` and sends ``v_i = MSC_R(p_i)`` (:func:`msc`:
    compress, subtract, compress the remainder, ``R`` times; one packet of ``R`` payloads);
    it keeps ``e_i <- p_i - v_i`` ([U] error feedback in gradient units, Seide's form;
    ``memory="none"`` drops it). The server averages ``v = mean_i v_i``; with a downlink
    compressor it sends ``u = MSC_R(e + v)`` with its own memory ``e <- e + v - u`` (the
    bidirectional form the paper's abstract highlights, [U] same ``R`` both ways), otherwise
    ``u = v`` uncompressed; everyone steps ``x^{k+1} = x^k - gamma u``.

    Theory ([U], deviations from the unread theorem): with ``delta`` the compressor's
    contraction, the module is ``delta_R``-contractive, ``delta_R = 1 - (1 - delta)^R``
    (exact, :func:`msc_delta`). ``R`` defaults to the smallest count with
    ``(1 - delta)^R <= msc_tol`` (``msc_tol = 0.01``), i.e. ``R ~ ln(100)/delta``: logarithmic
    in the accuracy as the papers' ``R`` is, but not the theorem's expression. The step is
    EF21's Theorem 1 step at the composite contraction ``delta_R`` (times ``delta_R`` of the
    downlink when there is one), the library's convention for error feedback without a step of
    its own (as EF14); it tends to ``1/L`` as ``delta_R -> 1``.

    Compressor class (``needs``): contractive (Top-K, scaled Rand-K, ...); an unbiased ``C``
    enters as ``scaled:C`` (``delta = 1/(omega + 1)``). Bits per round: uplink the ``R``
    payloads (``R k (32 + ceil(log2 d))`` for Top-K), downlink ``32 d`` or the ``R`` server
    payloads. Reports ``E = mean_i ||e_i||^2``.
    """

    rounds: int | None = option(
        None,
        "R: compression stages and accumulated minibatches per "
        "round (default: smallest R with (1 - delta)^R <= msc-tol)",
        check=check_count,
    )
    msc_tol: float = option(
        0.01,
        "target residual (1 - delta)^R of the multi-step "
        "compression that sets the default R, in (0, 1)",
    )
    memory: str = option("ef", "node error memory: ef | none", choices=MEMORIES)
    batch_size: int | None = option(
        None, "minibatch per stochastic gradient (default: full local gradients)", check=check_count
    )
    down_compressor: Compressor = option(
        help="downlink compressor (--down-compressor), applied R times to the residual",
        default_factory=Identity,
    )

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    down_needs: ClassVar[str | None] = "contractive"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("E",)
    provenance: ClassVar[Provenance] = pv.borrowed(
        "EF21",
        "Theorem 1's nonconvex step (arXiv 2106.05203) at the multi-step module's contraction "
        "delta_R (times the downlink's), the library's convention for error-feedback methods "
        "without a step of their own; NEOLITHIC's theorem step and R (arXiv 2206.03665, "
        "2305.07612) were not read, and R = min{R: (1 - delta)^R <= msc_tol} is the "
        "library's choice",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.down_compressor is None:
            object.__setattr__(self, "down_compressor", Identity())
        tol = self.msc_tol
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < 1:
            raise ValueError(f"msc_tol must be in (0, 1), got {tol!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        delta = compressor.delta(d)
        down = opts.get("down_compressor") or Identity()
        tol = opts.get("msc_tol", 0.01)
        R = opts.get("rounds") or neolithic_rounds(delta, tol)
        delta_R = msc_delta(delta, R)
        down_R = 1.0 if isinstance(down, Identity) else msc_delta(down.delta(d), R)
        return Theory(
            gamma=neolithic(c.L, c.L_tilde, delta_R * down_R),
            formula="1 / (L + L_tilde sqrt(beta/theta)) at delta_R = (1 - (1 - delta)^R) x "
            "(downlink's 1 - (1 - delta_down)^R), theta = 1 - sqrt(1 - delta_R), beta = "
            "(1 - delta_R)/theta; R = min{R: (1 - delta)^R <= msc_tol} (library's choices)",
            inputs={
                "L": c.L,
                "L_tilde": c.L_tilde,
                "delta": delta,
                "R": R,
                "msc_tol": tol,
                "delta_R": delta_R,
                "delta_R_down": down_R,
            },  # fmt: skip
            params={"rounds": R},
            source=SOURCE + "; step: EF21 Thm 1 (arXiv 2106.05203) at the module's delta_R, "
            "R from msc_tol: deviations (the theorem's step and R were not read)",
        )

    def _R(self, d: int) -> int:
        return self.rounds or neolithic_rounds(self.compressor.delta(d), self.msc_tol)

    def _msc(self, C: Compressor, x_i: torch.Tensor, R: int, streams: Callable[[int], Streams]):
        """The multi-step module (a seam for the theory checks' broken variants)."""
        return msc(C, x_i, R, streams)

    def init(self, x0, problem, comm: Comm) -> NEOLITHICState:
        e_i = torch.zeros(comm.m, problem.d, dtype=x0.dtype, device=x0.device)
        return NEOLITHICState(x=x0.clone(), t=0, e_i=e_i, e=torch.zeros_like(x0))

    def _step(self, state: NEOLITHICState, problem, comm: Comm):
        u, e_i, e, info = self._round(state, state.x, problem, comm)
        return NEOLITHICState(x=state.x - self.gamma * u, t=state.t + 1, e_i=e_i, e=e), info

    def _round(self, state: NEOLITHICState, at: torch.Tensor, problem, comm: Comm):
        """One round's message at the point ``at`` (``x^k``; the accelerated variant's
        extrapolated point): the direction ``u`` everyone steps along, the new memories and
        the reported ``E``."""
        C, CM, t = self.compressor, self.down_compressor, state.t
        R = self._R(problem.d)
        batch = None
        if self.batch_size is not None:
            batch = problem.sample(comm.rng(t, tag=TAG_BATCH), R * self.batch_size)
        p_i = problem.grad(at, batch)
        if self.memory == "ef":
            p_i = p_i.add_(state.e_i)
        v_i, nbits = self._msc(C, p_i, R, lambda r: comm.rng_for(C, t, tag=TAG_MSC + r))
        v = comm.reduce_rows(v_i, nbits)
        e_i = p_i.sub_(v_i) if self.memory == "ef" else state.e_i
        if isinstance(CM, Identity):
            comm.broadcast_full(problem.d)
            u, e = v, state.e
        else:
            q = (state.e + v)[None, :]
            u, down_bits = self._msc(CM, q, R, lambda r: comm.server_rng(t, tag=TAG_DOWN + r))
            comm.charge_down(int(down_bits[0]))
            u, e = u[0], (q - u)[0]
        E = comm.monitor_mean(torch.linalg.vector_norm(e_i, dim=1) ** 2)
        return u, e_i, e, {"E": E}
