"""TAMUNA: local training, compression by a shared mask, and partial participation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import Algorithm, State, Theory, check_count, check_unit, option
from algorithms.local.compressed_scaffnew import ownership
from algorithms.provenance import Provenance
from algorithms.stepsizes import local_training as lt
from algorithms.vr.vr_common import need
from comm.base import Comm
from streams import tags

SOURCE = (
    "Condat, Agarský, Malinovsky & Richtárik, arXiv 2302.09832 ('TAMUNA: Doubly Accelerated "
    "Distributed Optimization with Local Training, Compression, and Partial Participation'), "
    "abstract only (the algorithm box and theorem were not read); the mask, the owners' "
    "average, the masked control-variate step eta/gamma = p chi/gamma and chi's range "
    "chi <= c(s-1)/(s(c-1)) as in the coauthors' Flower baseline (adap/flower, baselines/tamuna: "
    "strategy.py, models.py, README.md)"
)


@dataclass(frozen=True)
class TAMUNAState(State):
    x_i: torch.Tensor  # (m, d) local models (a non-participant's row is idle)
    h_i: torch.Tensor  # (m, d) control variates, sum over all nodes = 0
    round_start: int  # the iteration the current round began at (keys its cohort)
    grad_star_i: torch.Tensor | None = None  # (m, d) grad f_i(x*), for the report H only


def communication_p(kappa: float, n: int, c: int, s: int) -> float:
    """``p = min(1, sqrt(n (c - 1) / (c (s - 1) kappa)))`` (``min(1, 1/sqrt(kappa))`` when
    ``c = 1``); at ``c = n`` it is CompressedScaffnew's
    :func:`algorithms.stepsizes.local_training.communication_p`.

    Derivation (a heuristic balance, not the paper's theorem, which was not read): in a round
    a node takes part with probability ``c/n`` and then owns each coordinate with probability
    ``s/c``, so its control variate moves on a coordinate with probability ``s/n`` per
    communication, by the factor ``chi = c (s - 1)/(s (c - 1))`` (the upper end of the
    coauthors' range). Taking the dual part of the per-iteration rate as
    ``1 - p^2 chi s/n = 1 - p^2 c (s - 1)/(n (c - 1))`` (CompressedScaffnew's
    :func:`~algorithms.stepsizes.local_training.communication_p` argument with ``s/n`` for the
    chance of an update) and balancing it with the primal ``1 - gamma mu = 1 - 1/kappa`` gives
    ``p^2 = n (c - 1)/(c (s - 1) kappa)``: ``O(sqrt(kappa n (c - 1)/(c (s - 1))))``
    communication rounds per ``e``-fold."""
    if not kappa >= 1:
        raise ValueError(f"kappa = L/mu must be >= 1, got {kappa}")
    if not (1 <= c <= n and min(2, c) <= s <= c):
        raise ValueError(f"need 1 <= c <= n and min(2, c) <= s <= c, got n={n}, c={c}, s={s}")
    if c == 1:
        return min(1.0, 1.0 / math.sqrt(kappa))
    return min(1.0, math.sqrt(n * (c - 1) / (c * (s - 1) * kappa)))


@dataclass(frozen=True)
class TAMUNA(Algorithm):
    """TAMUNA: local training, a shared sparsifying mask and partial participation.

    Condat, Agarský, Malinovsky & Richtárik, arXiv 2302.09832 (NeurIPS 2023 FL@FM workshop).

    What could be read: the abstract (v1 and v4 titles), and the coauthors' Flower baseline
    (adap/flower ``baselines/tamuna``, by Agarský and Malinovsky): its mask pattern (each
    coordinate owned by exactly ``s`` of the ``c`` cohort clients, columns shuffled each round,
    ``strategy.py``), the server's owners' average (``sum / s``), the local step
    ``x - lr (grad - h)`` and the control-variate step ``h += (eta/lr) (q * xbar - q * xhat)``
    (``models.py``), and the range ``p/2 <= eta <= p c (s-1)/(s (c-1))``, "usually ... simply
    set to the upper bound" (``README.md``). The paper's algorithm box, its line numbers and
    its theorem could NOT be read: the update below is a reconstruction from those pieces.

    Update, every iteration ``t``: a round ``r`` begins with a cohort ``Omega`` of ``c``
    clients drawn uniformly without replacement (a shared stream); each ``i`` in ``Omega``
    takes the local step ``xhat_i = x_i - gamma (grad f_i(x_i) - h_i)``, the others are idle.
    With probability ``p`` (a coin shared by all) the round ends: a mask ``q`` from the shared
    stream gives every coordinate exactly ``s`` owners among the cohort (:func:`ownership`
    over ``c`` columns, dealt to the cohort by a uniform permutation); client ``i`` sends
    ``q_i * xhat_i``; the server sets ``xbar = (1/s) sum_{j in Omega} q_j * xhat_j``; each
    ``i`` in ``Omega`` sets ``h_i += (p chi/gamma) q_i * (xbar - xhat_i)`` (which keeps
    ``sum_i h_i = 0``); the next cohort starts from ``xbar``. ``x^0_i = x^0``, ``h^0_i = 0``.
    With ``c = n`` this is CompressedScaffnew (``compressed-scaffnew``), draw for draw: the same
    coin and mask streams.

    Deviation from the coauthors' code: there a client applies its control-variate step at its
    next participation, with the model it then receives; here it is applied when the round
    ends, with that round's ``xbar`` (the two agree when every client takes part). Applied
    later, the corrections of one round meet different models and ``sum_i h_i = 0`` is lost,
    which shifts the fixed point; applied at once it holds exactly.

    Bits: a communication charges each cohort client ``32 |q_i|`` uplink (values only; the mask
    and the cohort come from shared seeds), ``floor`` or ``ceil`` of ``s d / c``; downlink
    ``32 d`` to each client of the next cohort (the model ``xbar``) and ``32 |q_i|`` to each
    client of the ending cohort that is not in the next one (its owned values of ``xbar``, for
    its control variate); other iterations charge nothing. Reported model ``x``: ``xbar`` of
    the last communication (``x^0`` before it). Reports ``sync`` and
    ``H = mean_i ||h_i - grad f_i(x*)||^2`` where ``x*`` is known.

    Theory (reconstruction): ``gamma = 1/L_max`` (Scaffnew's ``gamma <= 1/L``, as
    CompressedScaffnew here), ``c = n``, ``s = min(2, c)``, ``chi = c (s-1)/(s (c-1))`` (the
    coauthors' upper bound), ``p`` from :func:`communication_p` (a derived heuristic).
    Compressor: none of the library's (``needs = "none"``): the mask is the method's own, set
    by ``s`` (``--owners``) and ``c`` (``--cohort``); ``--compressor`` must be ``identity``.
    """

    cohort: int | None = option(
        None, "clients taking part in each round, c in [2, n] (default n)", check=check_count
    )
    s: int | None = option(
        None,
        "owners of each coordinate per round, 2..c (default min(2, c))",
        flag="owners",
        check=check_count,
    )
    chi: float | None = option(
        None,
        "control-variate factor in (0, 1]; the coauthors' range [1/2, c(s-1)/(s(c-1))], default",
        check=check_unit,
    )
    p: float | None = option(
        None, "probability of a communication round (default from theory)", check=check_unit
    )

    needs: ClassVar[str] = "none"
    reports: ClassVar[tuple[str, ...]] = ("sync", "H")
    provenance: ClassVar[Provenance] = pv.reconstruction(
        "TAMUNA's algorithm box and theorem (arXiv 2302.09832) were not read; the update and "
        "chi = c(s-1)/(s(c-1)) from the coauthors' Flower baseline (adap/flower, "
        "baselines/tamuna), gamma = 1/L_max as Scaffnew's gamma <= 1/L (arXiv 2202.09357, "
        "recalled), p from the heuristic balance of tamuna.communication_p"
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n = problem.n
        k = need(problem, "L_max", "mu")
        c = opts.get("cohort") or n
        s = opts.get("s") or min(2, c)
        kappa = k["L_max"] / k["mu"]
        return Theory(
            gamma=lt.scaffnew_gamma(k["L_max"]),
            formula="1 / L_max",
            inputs={**k, "n": n, "d": problem.d, "kappa": kappa, "c": c, "s": s},
            params={
                "cohort": c,
                "s": s,
                "chi": lt.chi_max(c, s),
                "p": communication_p(kappa, n, c, s),
            },
            source=SOURCE + "; gamma = 1/L_max [borrowed from Scaffnew], chi = c(s-1)/(s(c-1)) "
            "[coauthors' code], p = min(1, sqrt(n(c-1)/(c(s-1) kappa))) [U, derived]",
        )

    # ------------------------------------------------------------ resolved parameters
    def _c(self, n: int) -> int:
        c = self.cohort if self.cohort is not None else n
        if not min(2, n) <= c <= n:
            raise ValueError(f"--cohort must be in [{min(2, n)}, {n}] (n = {n} nodes), got {c}")
        return c

    def _s(self, n: int) -> int:
        c = self._c(n)
        s = self.s if self.s is not None else min(2, c)
        if not min(2, c) <= s <= c:
            raise ValueError(f"--owners must be in [{min(2, c)}, {c}] (cohort c = {c}), got {s}")
        return s

    def _chi(self, n: int) -> float:
        return self.chi if self.chi is not None else lt.chi_max(self._c(n), self._s(n))

    def _p(self, problem) -> float:
        if self.p is not None:
            return self.p
        cst = problem.consts
        if cst.L_max is None or cst.mu is None:
            raise ValueError(
                "TAMUNA's p needs kappa = L_max/mu, which this problem does not know: give --p"
            )
        n = problem.n
        return communication_p(cst.L_max / cst.mu, n, self._c(n), self._s(n))

    # ------------------------------------------------------------ randomness
    def members(self, comm: Comm, start: int, n: int) -> torch.Tensor:
        """Bool ``(n,)`` over all nodes: the cohort of the round that began at iteration
        ``start``, ``c`` nodes uniformly without replacement from the shared stream (the same on
        every process); every node when ``c = n``."""
        c = self._c(n)
        if c == n:
            return torch.ones(n, dtype=torch.bool)
        perm = comm.rng(start, shared=True, tag=tags.TAMUNA_COHORT)[:1].permutation(n)[0]
        return perm.cpu() < c

    def mask(self, comm: Comm, t: int, member: torch.Tensor, d: int) -> torch.Tensor:
        """The held rows of iteration ``t``'s mask, bool ``(m, d)``: the ``c`` template columns
        dealt to the cohort in the order of one shared permutation of the ``n`` nodes
        (CompressedScaffnew's stream; at ``c = n`` its very mask); rows of non-members are
        empty."""
        n = member.numel()
        perm = comm.rng(t, shared=True, tag=tags.SCAFFNEW_MASK)[:1].permutation(n)[0].cpu()
        order = torch.argsort(torch.where(member, perm, perm + n))
        column = torch.empty(n, dtype=torch.int64)
        column[order] = torch.arange(n)  # members get 0..c-1, by their place in perm
        nodes = comm.nodes.cpu()
        q = ownership(column[nodes], self._c(n), self._s(n), d)
        return q & member[nodes][:, None]

    def control_variates(self, h_i, q, xbar, xhat_i, step: float) -> torch.Tensor:
        """``h_i + step q_i * (xbar - xhat_i)``: only owned coordinates of cohort clients move."""
        return torch.addcmul(h_i, q.to(h_i.dtype), xbar - xhat_i, value=step)

    # ------------------------------------------------------------ the method
    def init(self, x0, problem, comm: Comm) -> TAMUNAState:
        self._s(problem.n), self._p(problem)  # refuse bad parameters before the first round
        x_i = x0.expand(problem.m, -1).clone()
        x_star = problem.x_star
        star = None if x_star is None else problem.grad(x_star)
        return TAMUNAState(
            x=x0.clone(), t=0, x_i=x_i, h_i=torch.zeros_like(x_i), round_start=0,
            grad_star_i=star,
        )  # fmt: skip

    def _step(self, state: TAMUNAState, problem, comm: Comm):
        t, n, d = state.t, problem.n, problem.d
        p = self._p(problem)
        member = self.members(comm, state.round_start, n)
        held = member[comm.nodes.cpu()].to(state.x_i.device)
        step_i = state.x_i - self.gamma * (problem.grad(state.x_i) - state.h_i)
        xhat_i = torch.where(held[:, None], step_i, state.x_i)
        sync = comm.coin(t, p, tag=tags.SCAFFNEW_COIN)
        round_start = state.round_start
        if sync:
            q = self.mask(comm, t, member, d).to(xhat_i.device)
            owned = q.sum(dim=1).cpu()
            weight = torch.where(held.cpu(), 1.0 / self._s(n), 0.0).to(xhat_i.dtype)
            xbar = comm.reduce_rows(xhat_i * q, comm.float_bits * owned, weight)
            round_start = t + 1
            after = self.members(comm, round_start, n)[comm.nodes.cpu()]
            down = torch.where(after, d, torch.where(held.cpu(), owned, 0))
            comm.charge_down(comm.float_bits * down)
            step = p * self._chi(n) / self.gamma
            h_i = self.control_variates(state.h_i, q, xbar, xhat_i, step)
            x, x_i = xbar, xbar.expand_as(xhat_i).clone()
        else:
            x, x_i, h_i = state.x, xhat_i, state.h_i
        extras = {"sync": float(sync)}
        if state.grad_star_i is not None:
            err = torch.linalg.vector_norm(h_i - state.grad_star_i, dim=1) ** 2
            extras["H"] = comm.monitor_mean(err)
        new = TAMUNAState(
            x=x, t=t + 1, x_i=x_i, h_i=h_i, round_start=round_start,
            grad_star_i=state.grad_star_i,
        )  # fmt: skip
        return new, extras
