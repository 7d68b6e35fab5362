"""Newton-3PC: Newton's method with three-point-compressed Hessians (Islamov et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    State,
    Theory,
    check_choice,
    check_compressor,
    check_unit,
)
from algorithms.base import option as _option  # (a field is named option)
from algorithms.ef import three_pc_mechanisms as mech
from algorithms.provenance import Provenance
from algorithms.second_order.fednl import (
    NewtonHessians,
    newton_direction,
    smat,
    svec,
    tri_size,
)
from algorithms.stepsizes.ef import three_pc_AB
from algorithms.stepsizes.newton import newton_local_rate
from comm.base import Comm
from streams import tags

MECHANISMS = ("cbag", "ef21", "clag", "lag")
SOURCE = (
    "Islamov, Qian, Hanzely, Safaryan & Richtárik 2022, arXiv 2206.03588, Alg. 1 (Newton-3PC), "
    "the CBAG example and lemma; read in R. Islamov's thesis (intsystems/Islamov-MS-Thesi, "
    "Paper/Islamov2023MasterThesis.tex, Alg. N3PC, Thm. NLU)"
)


def cbag(h, y, x, ctx: mech.Ctx) -> mech.Sent:
    """Compressed Bernoulli aggregation: with probability ``p`` (each node its own coin)
    ``h + C(x - h)``, sending ``C(x - h)``; otherwise ``h``, a skip flag only (the node need not
    even compute its Hessian)."""
    fire = ctx.comm.rng(ctx.t, tag=tags.NEWTON_3PC_CBAG).uniform(1)[:, 0].to(x.device) < ctx.p
    packet = ctx.C.encode(x - h, ctx.comm.rng_for(ctx.C, ctx.t, tags.NEWTON_3PC_HESS))
    c = torch.where(fire[:, None], ctx.C.decode(packet), 0.0)
    nbits = torch.where(fire.cpu(), packet.nbits, mech.SKIP_BITS).to(torch.int64)
    return mech.Sent(h + c, c, nbits)


@dataclass(frozen=True)
class Newton3PCState(State):
    g: torch.Tensor  # (d,) grad f(x^k), sent by the nodes in the previous round
    h_i: torch.Tensor  # (m, d(d+1)/2) H_i^k as svec rows
    h: torch.Tensor  # (d(d+1)/2,) H^k = mean_i H_i^k
    y_i: torch.Tensor  # (m, d(d+1)/2) grad^2 f_i(x^k) (the 3PC's y: LAG/CLAG triggers)
    l: torch.Tensor  # (1,) Option 2's l^k = mean_i ||H_i^k - grad^2 f_i(x^k)||_F (else 0)
    hess_star_i: torch.Tensor | None = None  # (m, d(d+1)/2) grad^2 f_i(x*), for the report


@dataclass(frozen=True)
class Newton3PC(NewtonHessians):
    """Newton-3PC: Newton steps with Hessians learned through a 3PC mechanism (arXiv 2206.03588).

    Islamov, Qian, Hanzely, Safaryan & Richtárik 2022, "Distributed Newton-Type Methods with
    Communication Compression and Bernoulli Aggregation", Algorithm 1 (Newton-3PC).

    Iteration ``k`` (Alg. 1, thesis version lines 3-11): the server steps ``x^{k+1} = x^k - gamma
    [H^k]_mu^{-1} grad f(x^k)`` (Option 1) or ``x^k - gamma (H^k + l^k I)^{-1} grad f(x^k)``
    (Option 2) and broadcasts ``x^{k+1}``; node ``i`` sends ``grad f_i(x^{k+1})``
    (uncompressed), updates ``H_i^{k+1} = C_{H_i^k, grad^2 f_i(x^k)}(grad^2 f_i(x^{k+1}))`` (the
    3PC mechanism) and sends its message (and, Option 2, ``l_i^{k+1} = ||H_i^{k+1} - grad^2
    f_i(x^{k+1})||_F``); the server averages. Unlike FedNL (whose ``H^k`` has learned up to
    ``x^{k-1}``), ``H^{k+1}`` already includes ``grad^2 f_i(x^{k+1})``. Mechanisms (Hessians as
    ``d(d+1)/2``-entry rows, :func:`algorithms.second_order.fednl.svec`): ``cbag`` (compressed
    Bernoulli aggregation, the paper's new example: with probability ``p`` per node ``H_i + C(X -
    H_i)``, else ``H_i`` and the Hessian is not needed), ``ef21`` (``H_i + C(X - H_i)``, FedNL's
    learning with ``alpha = 1``), ``clag``/``lag`` (LAG's trigger ``||X - H_i||_F^2 > zeta ||X -
    Y_i||_F^2``).

    Bits per round and node: up ``32 d`` (gradient) ``+`` the mechanism's message (Top-K
    ``k (32 + ceil(log2(d(d+1)/2)))``; a skip costs the library's 1-bit flag) ``+ 32``
    (Option 2); down ``32 d`` (the model). Initialisation: ``H_i^0 = grad^2 f_i(x^0)``
    (``hessian``, ``32 d(d+1)/2`` up; or ``zero``) and ``grad f_i(x^0)`` (``32 d`` up).

    Theory (the local Theorem, thesis label ``th:NLU``): the unit step ``gamma = 1``; with the
    mechanism's ``(A, B)`` (CBAG: ``1 - A = (1 - p delta)(1 + s)``, ``B = (1 - p delta)(1 +
    1/s)``; the thesis prints ``A = (1 - p alpha)(1 + s)``, a typo by the 3PC definition),
    locally ``||x^k - x*||^2 <= 2^-k ||x^0 - x*||^2`` and ``Phi^k`` contracts by ``1 - min(A/2,
    1/3)``, independently of the condition number. ``p`` has no theoretical optimum: its default
    0.75 is the paper's experiments' (Fig. 1, Top-d). ``needs``: contractive. Reports ``H_err =
    mean_i ||H_i - grad^2 f_i(x*)||_F^2``, ``sent`` (fraction of nodes that sent a Hessian
    message) and ``l`` (Option 2).
    """

    mechanism: str = _option("cbag", "3PC for the Hessians", choices=MECHANISMS)
    p: float = _option(
        0.75, "CBAG: each node's probability to send (paper: 0.75)", check=check_unit, required=True
    )
    zeta: float = _option(1.0, "LAG/CLAG trigger zeta >= 0")

    reports: ClassVar[tuple[str, ...]] = ("H_err", "sent", "l")
    provenance: ClassVar[Provenance] = pv.theorem(
        "Islamov, Qian, Hanzely, Safaryan & Richtárik 2022, arXiv 2206.03588, Newton-3PC's "
        "local theorem (read in R. Islamov's thesis, intsystems/Islamov-MS-Thesi, "
        "Paper/Islamov2023MasterThesis.tex, Thm. th:NLU): the unit Newton step; CBAG's p = "
        "0.75 from the paper's experiments (Fig. 1)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.zeta >= 0:
            raise ValueError(f"zeta must be >= 0, got {self.zeta}")

    @classmethod
    def configure(cls, problem, compressor, *, force: bool = False, **opts: Any):
        c = compressor.bind(problem.n)
        check_compressor(cls.__name__, "contractive", c, tri_size(problem.d), force)
        return super().configure(problem, compressor, force=True, **opts)

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        D = tri_size(problem.d)
        delta = compressor.delta(D)
        m, p, zeta = opts.get("mechanism", "cbag"), opts.get("p", 0.75), opts.get("zeta", 1.0)
        check_choice("mechanism", m, MECHANISMS)  # before the constants, for their messages
        check_unit("p", p, optional=False)
        if not zeta >= 0:
            raise ValueError(f"zeta must be >= 0, got {zeta}")
        if m == "cbag":
            A, B = three_pc_AB("ef21", p * delta)
        else:
            A, B = three_pc_AB(m, delta, zeta=float(zeta))
        inputs: dict[str, Any] = {"delta": delta, "entries": D, "A": A, "B": B}
        inputs["Phi_rate"] = newton_local_rate(A)
        params: dict[str, Any] = {}
        if (mu := cls.projection_mu(problem, opts, "Newton-3PC")) is not None:
            params["mu"] = inputs["mu"] = mu
        ab = "CBAG: 1 - A = (1 - p delta)(1 + s)" if m == "cbag" else f"{m}: 3PC constants"
        return Theory(
            gamma=1.0,
            formula=f"1 (unit Newton step); {ab}, Phi rate 1 - min(A/2, 1/3)",
            inputs=inputs,
            params=params,
            source=SOURCE,
        )

    def init(self, x0, problem, comm: Comm) -> Newton3PCState:
        d, vec = problem.d, self.hess_vec
        if self.option == 1 and self.mu is None:
            raise ValueError("Newton-3PC Option 1 needs mu (from theory or --mu)")
        y_i = svec(problem.hess(x0), vec)
        if self.init_mode == "hessian":
            h_i, h = y_i, comm.reduce_full(y_i)
        else:
            h_i = torch.zeros_like(y_i)
            h = torch.zeros_like(y_i[0])
        g = comm.reduce_full(problem.grad(x0))
        l = torch.zeros(1, dtype=problem.dtype, device=problem.device)
        if self.option == 2:
            l = comm.reduce_full(self._l_i(y_i - h_i, d)[:, None])
        x_star = problem.x_star
        star = None if x_star is None else svec(problem.hess(x_star), vec)
        return Newton3PCState(x=x0.clone(), t=0, g=g, h_i=h_i, h=h, y_i=y_i, l=l,
                              hess_star_i=star)  # fmt: skip

    def _l_i(self, diff_i: torch.Tensor, d: int) -> torch.Tensor:
        err = smat(diff_i, d, self.hess_vec)
        return torch.linalg.matrix_norm(err, ord="fro" if self.l_norm == "fro" else 2)

    def _mechanism(self, h_i, y_i, X_i, ctx: mech.Ctx) -> mech.Sent:
        """The nodes' 3PC ``C_{H_i, Y_i}(X_i)`` over svec rows."""
        apply = cbag if self.mechanism == "cbag" else mech.APPLY[self.mechanism]
        return apply(h_i, y_i, X_i, ctx)

    def _aggregate(self, sent: mech.Sent, comm: Comm) -> torch.Tensor:
        """The server's increment ``H^{k+1} - H^k = (1/n) sum_i (H_i^{k+1} - H_i^k)`` over all
        ``n`` nodes (the skipping ones contribute zero), charging each node's message."""
        return comm.reduce_rows(sent.delta_i, sent.nbits)

    def _step(self, state: Newton3PCState, problem, comm: Comm):
        t, d, vec = state.t, problem.d, self.hess_vec
        shift = float(state.l[0]) if self.option == 2 else None
        x = state.x - self.gamma * newton_direction(smat(state.h, d, vec), state.g, self.mu, shift)
        comm.broadcast_full(d)
        g = comm.reduce_full(problem.grad(x))
        X_i = svec(problem.hess(x), vec)
        ctx = mech.Ctx(self.compressor, None, self.zeta, self.p, "ef21", comm, t)
        sent = self._mechanism(state.h_i, state.y_i, X_i, ctx)
        h = state.h + self._aggregate(sent, comm)
        extras = {"sent": comm.monitor_mean((sent.nbits > mech.SKIP_BITS).double())}
        l = torch.zeros_like(state.l)
        if self.option == 2:
            l = comm.reduce_full(self._l_i(X_i - sent.g_i, d)[:, None])
            extras["l"] = float(l[0])
        if state.hess_star_i is not None:
            e = smat(sent.g_i - state.hess_star_i, d, vec)
            extras["H_err"] = comm.monitor_mean(torch.linalg.matrix_norm(e, ord="fro") ** 2)
        new = Newton3PCState(x=x, t=t + 1, g=g, h_i=sent.g_i, h=h, y_i=X_i, l=l,
                             hess_star_i=state.hess_star_i)  # fmt: skip
        return new, extras
