"""CompressedScaffnew: local training (Scaffnew) with a correlated permutation-based mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_count, check_unit, option
from algorithms.provenance import Provenance
from algorithms.stepsizes import local_training as lt
from algorithms.vr.vr_common import need
from comm.base import Comm
from streams import tags

SOURCE = (
    "Condat, Agarský & Richtárik, arXiv 2210.13277 (v4: 'CompressedScaffnew: The First "
    "Theoretical Double Acceleration of Communication from Local Training and Compression "
    "in Distributed Optimization'), abstract (the algorithm box was not read); mask, "
    "masked control-variate step and chi's range as in the coauthors' TAMUNA baseline "
    "(adap/flower, baselines/tamuna)"
)


@dataclass(frozen=True)
class CompressedScaffnewState(State):
    x_i: torch.Tensor  # (m, d) local models
    h_i: torch.Tensor  # (m, d) control variates, sum over all nodes = 0
    grad_star_i: torch.Tensor | None = None  # (m, d) grad f_i(x*), for the report H only


def ownership(columns: torch.Tensor, n: int, s: int, d: int) -> torch.Tensor:
    """The mask rows ``q_i`` (bool ``(m, d)``) of the nodes that got template ``columns``.

    The template gives every coordinate exactly ``s`` distinct owners among ``n`` columns: for
    ``s d >= n`` coordinate ``k`` belongs to columns ``k s, ..., k s + s - 1 (mod n)`` (each
    column owns ``floor`` or ``ceil`` of ``s d / n`` coordinates); for ``s d < n`` to columns
    ``k, k + d, ..., k + (s - 1) d`` (columns ``>= s d`` own none). The columns are dealt to the
    nodes by a uniform random permutation, so each node owns each coordinate with probability
    exactly ``s / n``."""
    c = columns.reshape(-1, 1)
    k = torch.arange(d, device=columns.device).reshape(1, -1)
    if s * d >= n:
        return torch.remainder(c - k * s, n) < s
    return (c < s * d) & (torch.remainder(c, d) == k)


@dataclass(frozen=True)
class CompressedScaffnew(Algorithm):
    """CompressedScaffnew: local training, compression by a shared mask (arXiv 2210.13277).

    Condat, Agarský & Richtárik, arXiv 2210.13277.

    The paper's algorithm box, its line numbers and its theorem could not be read here (see
    below for what the update rests on).

    Update, every iteration ``t`` (node ``i``, rows in parallel):
    ``xhat_i = x_i - gamma (grad f_i(x_i) - h_i)`` (the Scaffnew/ProxSkip local step). With
    probability ``p`` (a coin shared by all nodes, free) a communication round follows: a
    random mask ``q`` from the shared stream gives every coordinate exactly ``s`` owners
    (:func:`ownership`); node ``i`` sends the values ``q_i * xhat_i``; the server averages
    each coordinate over its owners, ``xbar = (1/s) sum_j q_j * xhat_j``, and broadcasts it;
    every node sets ``x_i = xbar`` and ``h_i += (p chi / gamma) q_i * (xbar - xhat_i)``, which
    keeps ``sum_i h_i = 0``. Otherwise ``x_i = xhat_i``, ``h_i`` unchanged. ``x_i^0 = x^0``,
    ``h_i^0 = 0``. ``s = n`` is Scaffnew (ProxSkip with the consensus prox).

    Bits: a communicating round charges node ``i`` ``32 |q_i|`` uplink (values only: the mask
    comes from the shared seed; ``|q_i|`` is ``floor`` or ``ceil`` of ``s d / n``, or 0/1 when
    ``s d < n``) and ``32 d`` downlink (``xbar``, uncompressed); other rounds charge nothing.

    Reported model: ``x`` (what the runner logs ``f`` and ``||grad f||^2`` at) is the server's
    model ``xbar`` of the last communication round (``x^0`` before the first); the local
    models are the state's ``x_i``. Reports ``sync`` (1 in a communication round) and
    ``H = mean_i ||h_i - grad f_i(x*)||^2`` where ``x*`` is known.

    Theory (strongly convex, each ``f_i`` ``L_max``-smooth): ``gamma = 1/L_max``,
    ``s = min(2, n)``, ``chi = n (s - 1)/(s (n - 1))``,
    ``p = min(1, sqrt((n - 1)/((s - 1) kappa)))`` with ``kappa = L_max/mu``
    (:mod:`algorithms.stepsizes.local_training`). What is verified and what is not: the
    paper's algorithm box and theorem could not be read here (only the abstract of the v4
    page); the update is the Scaffnew local step with the mask, the owners' average, the full
    broadcast and the masked control-variate step ``eta/gamma q_i * (xbar - xhat_i)`` of the
    coauthors' TAMUNA code (adap/flower ``baselines/tamuna``: ``strategy.py`` builds and
    shuffles the mask, ``models.py`` updates the control variates; TAMUNA with every node
    participating is taken to be this method [U]); ``chi``'s default is the upper end of the
    range the coauthors state there (``eta = p chi``, ``chi <= n (s-1)/(s (n-1))``) [V-code];
    ``gamma = 1/L_max`` is Scaffnew's (ProxSkip, arXiv 2202.09357, main theorem: ``gamma <= 1/L``,
    ``p = 1/sqrt(kappa)``; from memory, not re-read here); ``p`` is derived [U]
    (balancing the primal factor ``1 - 1/kappa`` with a dual factor taken as
    ``1 - p^2 chi s/n``, as measured on the theory check's family of instances); ``mu`` is ``f``'s
    constant (the theorem assumes every ``f_i`` ``mu``-strongly convex). Compressor class:
    none (``needs = "none"``): the uplink compression is this method's own mask, set by ``s``
    (``--owners S``; ``--s`` would clash with torchrun's own options); ``--compressor`` must be
    ``identity`` (anything else is refused).
    """

    s: int | None = option(
        None,
        "owners of each coordinate per round, 2..n (default min(2, n))",
        flag="owners",
        check=check_count,
    )
    chi: float | None = option(
        None,
        "control-variate factor in (0, 1]; theory [1/2, n(s-1)/(s(n-1))], the default",
        check=check_unit,
    )
    p: float | None = option(
        None, "probability of a communication round (default from theory)", check=check_unit
    )

    needs: ClassVar[str] = "none"
    reports: ClassVar[tuple[str, ...]] = ("sync", "H")
    provenance: ClassVar[Provenance] = pv.borrowed(
        "Scaffnew",
        "gamma = 1/L_max, ProxSkip's gamma <= 1/L (Mishchenko et al. 2022, arXiv 2202.09357; "
        "recalled, not re-read); CompressedScaffnew's algorithm box and theorem (arXiv "
        "2210.13277) were not read; chi = n(s-1)/(s(n-1)) from the coauthors' TAMUNA baseline "
        "(adap/flower), p = min(1, sqrt((n-1)/((s-1) kappa))) a heuristic balance [U]",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n = problem.n
        k = need(problem, "L_max", "mu")
        s = opts.get("s") or min(2, n)
        kappa = k["L_max"] / k["mu"]
        return Theory(
            gamma=lt.scaffnew_gamma(k["L_max"]),
            formula="1 / L_max",
            inputs={**k, "n": n, "d": problem.d, "kappa": kappa, "s": s},
            params={"s": s, "chi": lt.chi_max(n, s), "p": lt.communication_p(kappa, n, s)},
            source=SOURCE
            + "; chi = n(s-1)/(s(n-1)) [V-code], p = min(1, sqrt((n-1)/((s-1) kappa))) "
            "[U, derived]",
        )

    # ------------------------------------------------------------ resolved parameters
    def _s(self, n: int) -> int:
        s = self.s if self.s is not None else min(2, n)
        lt.chi_max(n, s)  # ValueError unless min(2, n) <= s <= n
        return s

    def _chi(self, n: int) -> float:
        return self.chi if self.chi is not None else lt.chi_max(n, self._s(n))

    def _p(self, problem) -> float:
        if self.p is not None:
            return self.p
        c = problem.consts
        if c.L_max is None or c.mu is None:
            raise ValueError(
                "CompressedScaffnew's p needs kappa = L_max/mu, which this problem does not "
                "know: give --p"
            )
        return lt.communication_p(c.L_max / c.mu, problem.n, self._s(problem.n))

    # ------------------------------------------------------------ the method
    def init(self, x0, problem, comm: Comm) -> CompressedScaffnewState:
        self._s(problem.n), self._p(problem)  # refuse bad parameters before the first round
        x_i = x0.expand(problem.m, -1).clone()
        x_star = problem.x_star
        star = None if x_star is None else problem.grad(x_star)
        return CompressedScaffnewState(
            x=x0.clone(), t=0, x_i=x_i, h_i=torch.zeros_like(x_i), grad_star_i=star
        )

    def mask(self, comm: Comm, t: int, n: int, d: int) -> torch.Tensor:
        """The held rows of round ``t``'s mask, bool ``(m, d)``: one permutation of the ``n``
        template columns from the shared stream, the same on every process."""
        perm = comm.rng(t, shared=True, tag=tags.SCAFFNEW_MASK)[:1].permutation(n)[0]
        return ownership(perm[comm.nodes.to(perm.device)], n, self._s(n), d)

    def uplink_bits(self, comm: Comm, q: torch.Tensor) -> torch.Tensor:
        """Each held node's payload, int64 ``(m,)``: ``float_bits`` per owned value, nothing
        for the mask (every node regenerates it from the shared seed)."""
        return comm.float_bits * q.sum(dim=1).cpu()

    def control_variates(self, h_i, q, xbar, xhat_i, step: float) -> torch.Tensor:
        """``h_i + step q_i * (xbar - xhat_i)``: only owned coordinates move."""
        return torch.addcmul(h_i, q.to(h_i.dtype), xbar - xhat_i, value=step)

    def _step(self, state: CompressedScaffnewState, problem, comm: Comm):
        t, n, d = state.t, problem.n, problem.d
        p = self._p(problem)
        xhat_i = state.x_i - self.gamma * (problem.grad(state.x_i) - state.h_i)
        sync = comm.coin(t, p, tag=tags.SCAFFNEW_COIN)
        if sync:
            q = self.mask(comm, t, n, d).to(xhat_i.device)
            nbits = self.uplink_bits(comm, q)
            weight = torch.full((comm.m,), 1.0 / self._s(n), dtype=xhat_i.dtype)
            xbar = comm.reduce_rows(xhat_i * q, nbits, weight)
            comm.broadcast_full(d)
            step = p * self._chi(n) / self.gamma
            h_i = self.control_variates(state.h_i, q, xbar, xhat_i, step)
            x, x_i = xbar, xbar.expand_as(xhat_i).clone()
        else:
            x, x_i, h_i = state.x, xhat_i, state.h_i
        extras = {"sync": float(sync)}
        if state.grad_star_i is not None:
            err = torch.linalg.vector_norm(h_i - state.grad_star_i, dim=1) ** 2
            extras["H"] = comm.monitor_mean(err)
        new = CompressedScaffnewState(x=x, t=t + 1, x_i=x_i, h_i=h_i, grad_star_i=state.grad_star_i)
        return new, extras
