"""ADIANA: accelerated DIANA for strongly convex problems (Li, Kovalev, Qian & Richtárik 2020)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    Algorithm,
    State,
    Theory,
    check_unit,
    initial_estimator,
    option,
)
from algorithms.provenance import Provenance
from algorithms.stepsizes.accelerated import adiana_alpha, adiana_eta, adiana_momentum, adiana_p
from algorithms.vr.vr_common import (
    effective_omega,
    need,
    need_independent_unbiased,
)
from comm.base import Comm
from streams.tags import ADIANA_ANCHOR as TAG_ANCHOR
from streams.tags import ADIANA_AT_W as TAG_AT_W
from streams.tags import ADIANA_AT_X as TAG_AT_X

INITS = ("zero", "full")
SOURCE = (
    "Li, Kovalev, Qian & Richtárik 2020, arXiv 2002.11364 (ICML 2020), Algorithm 2 (ADIANA) "
    "[M]; parameters as in the coauthors' reference code, Rustem-Islamov/FedNL-Public "
    "methods.py::adiana [V-code]; the theorem's statement itself not read here [U]"
)
DERIVED = ("theta1", "gamma_z", "beta")


@dataclass(frozen=True)
class ADIANAState(State):
    """``x`` is the paper's ``y^k`` (the iterate that is reported); ``z``, ``w`` the momentum and
    anchor sequences; ``h_i`` the shifts and ``h = mean_i h_i``."""

    z: torch.Tensor  # (d,)
    w: torch.Tensor  # (d,)
    h_i: torch.Tensor  # (m, d)
    h: torch.Tensor  # (d,)
    grad_star_i: torch.Tensor | None = None  # (m, d) grad f_i(x*), for the report H only


@dataclass(frozen=True)
class ADIANA(Algorithm):
    """ADIANA: DIANA shifts + Nesterov-type acceleration with a loopless anchor (arXiv 2002.11364).

    Li, Kovalev, Qian & Richtárik 2020, "Acceleration for Compressed Gradient Descent in
    Distributed and Federated Optimization", ICML 2020, arXiv 2002.11364, Algorithm 2 (the
    distributed method; Algorithm 1 is the single-node ACGD). The box itself was not available
    here: the steps below follow the coauthors' reference code (Rustem-Islamov/FedNL-Public,
    ``methods.py::adiana``), in the box's order.

    Update (no regulariser, so the prox of the box is the identity), ``y^0 = z^0 = w^0 = x^0``:

    1. ``x^k = theta1 z^k + theta2 w^k + (1 - theta1 - theta2) y^k``;
    2. node ``i`` sends ``m_i = C(grad f_i(x^k) - h_i^k)`` and ``m~_i = C(grad f_i(w^k) - h_i^k)``
       (two independent draws) and sets ``h_i^{k+1} = h_i^k + alpha m~_i``;
    3. the server forms ``g^k = h^k + (1/n) sum_i m_i`` and ``h^{k+1} = h^k + alpha (1/n) sum_i
       m~_i``, ``y^{k+1} = x^k - eta g^k``,
       ``z^{k+1} = beta z^k + (1 - beta) x^k + (gamma_z/eta)(y^{k+1} - x^k)``, and
       ``w^{k+1} = y^k`` with probability ``p`` (one coin shared by every node), else ``w^k``.

    The library's step ``gamma`` (``--step``) is the paper's ``eta``; the paper's ``gamma`` is
    ``gamma_z``. Bits per round and node: uplink the two payloads, ``2 bits(C)``; downlink
    ``32 d``: the server broadcasts ``g^k``, from which every node updates ``y, z, w`` and forms
    ``x^{k+1}`` itself (the anchor coin is shared randomness, free). ``init``: ``h_i^0 = 0``
    (``zero``, the reference code's) or ``grad f_i(x^0)`` (``full``, charged ``32 d`` once).

    Theory (strongly convex ``f``, convex ``L``-smooth ``f_i``, independent ``U(omega)``
    compressors; :mod:`algorithms.stepsizes.accelerated`): ``alpha = 1/(omega+1)``,
    ``theta2 = 1/2``, ``p = min(1, max(alpha/2, (alpha/2)(sqrt(n/(32 omega)) - 1)))``,
    ``eta = min(1/(2L), n/(64 omega L (2p(omega+1)+1)^2))`` with ``L = L_max``, and for the step
    actually used (``--step``/``--step-mult`` included) ``theta1 = min(1/4, sqrt(eta mu/p))``,
    ``gamma_z = eta/(2(theta1 + eta mu))``, ``beta = 1 - gamma_z mu``; without compression
    ``p = 1``, ``eta = 1/(2L)``. Linear rate
    ``O~(omega + sqrt(L/mu) + sqrt((omega/n + sqrt(omega/n)) omega L/mu))`` (paper abstract).
    Compressor class: unbiased (``needs``). Reported: ``refresh`` (1 when the anchor moved) and
    ``H = mean_i ||h_i - grad f_i(x*)||^2`` (where ``x*`` is known).
    """

    alpha: float | None = option(None, "shift step alpha (default 1/(omega+1))", check=check_unit)
    p: float | None = option(
        None,
        "probability p of the shared synchronisation coin (default: the method's theory)",
        check=check_unit,
    )
    theta1: float | None = option(
        None,
        "ADIANA weight of z in x (default min(1/4, sqrt(eta mu/p)); 0 removes the acceleration)",
    )
    theta2: float | None = option(None, "ADIANA weight of the anchor w in x (default 1/2)")
    gamma_z: float | None = option(
        None, "ADIANA step of the z sequence, the paper's gamma (default eta/(2(theta1 + eta mu)))"
    )
    beta: float | None = option(None, "ADIANA z averaging beta (default 1 - gamma_z mu)")
    mu: float | None = option(
        None, "strong convexity used by ADIANA's parameters (default: the problem's mu)"
    )
    init_mode: str = option("zero", "h_i^0: zero | full", choices=INITS, flag="init")

    needs: ClassVar[str] = "unbiased"
    reports: ClassVar[tuple[str, ...]] = ("refresh", "H")
    provenance: ClassVar[Provenance] = pv.authors_code(
        "Rustem-Islamov/FedNL-Public",
        "methods.py::adiana",
        "the coauthors' group's reference implementation of Li, Kovalev, Qian & Richtárik "
        "2020, arXiv 2002.11364; the theorem's statement was not read [U]",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("theta1", "theta2", "beta"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")
        t1, t2 = self.theta1 or 0.0, 0.5 if self.theta2 is None else self.theta2
        if t1 + t2 > 1:
            raise ValueError(f"theta1 + theta2 must be <= 1, got {t1} + {t2}")
        for name in ("gamma_z", "mu"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        n, d = problem.n, problem.d
        omega = need_independent_unbiased("ADIANA", compressor, d)
        if not problem.convex:
            raise ValueError("ADIANA's theory needs a convex problem: give --step FLOAT and --mu")
        k = need(problem, "L_max", *(() if opts.get("mu") else ("mu",)))
        mu = opts.get("mu") or k["mu"]
        p = opts.get("p") or adiana_p(omega, n)
        eta = adiana_eta(k["L_max"], omega, n, p)
        theta1, gamma_z, beta = adiana_momentum(eta, mu, p)
        return Theory(
            gamma=eta,
            formula="eta = min(1 / (2 L), n / (64 omega L (2 p (omega + 1) + 1)^2)), L = L_max; "
            "p = min(1, max(alpha / 2, (alpha / 2)(sqrt(n / (32 omega)) - 1))); "
            "theta1 = min(1/4, sqrt(eta mu / p)), gamma_z = eta / (2 (theta1 + eta mu)), "
            "beta = 1 - gamma_z mu (from the step used)",
            inputs={
                **k,
                "omega": omega,
                "n": n,
                "theta1": theta1,
                "gamma_z": gamma_z,
                "beta": beta,
            },  # fmt: skip
            params={"alpha": adiana_alpha(omega), "p": p, "theta2": 0.5, "mu": mu},
            source=SOURCE,
        )

    @classmethod
    def configure(cls, problem, compressor, **kw: Any):
        # theta1, gamma_z and beta follow the step actually used (theory's eta times
        # --step-mult, or --step), as the reference code derives them from eta; the other
        # parameters are filled too when the theory step is unavailable (--step given).
        return fill_resolved(*super().configure(problem, compressor, **kw), problem)

    def resolved(self, n: int, d: int) -> dict[str, float]:
        """Every parameter, the ones left ``None`` from theory for this step ``gamma``."""
        names = ("alpha", "p", "theta2", *DERIVED)
        if all(getattr(self, k) is not None for k in names):
            return {k: getattr(self, k) for k in names}
        omega = effective_omega(self.compressor, d)
        p = self.p if self.p is not None else adiana_p(omega, n)
        out = {
            "alpha": self.alpha if self.alpha is not None else adiana_alpha(omega),
            "p": p,
            "theta2": 0.5 if self.theta2 is None else self.theta2,
        }
        if None in (self.theta1, self.gamma_z, self.beta) and self.mu is None:
            raise ValueError("ADIANA's momentum parameters need mu (--mu) or theta1, gamma_z, beta")
        if self.mu is not None:
            derived = adiana_momentum(self.gamma, self.mu, p, self.theta1, self.gamma_z)
            out.update(zip(DERIVED, derived, strict=True))
        for k in DERIVED:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if out["theta1"] + out["theta2"] > 1:
            raise ValueError(f"theta1 + theta2 must be <= 1, got {out['theta1']} + {out['theta2']}")
        return out

    def init(self, x0, problem, comm: Comm) -> ADIANAState:
        return init_state(self.compressor, self.init_mode, x0, problem, comm)

    def _step(self, state: ADIANAState, problem, comm: Comm):
        q = self.resolved(problem.n, problem.d)
        return accelerated_round(
            self.compressor, state, problem, comm, self.gamma, q["theta1"], q["theta2"],
            q["gamma_z"], q["beta"], q["alpha"], q["p"],
        )  # fmt: skip


def fill_resolved(algo, record: dict, problem) -> tuple:
    """``algo`` with its parameters still None filled from ``algo.resolved`` (ADIANA's and
    CANITA's parameters that follow the step used), recorded in ``record["params"]``."""
    resolved = algo.resolved(problem.n, problem.d)
    fill = {k: v for k, v in resolved.items() if getattr(algo, k) is None}
    record["params"].update(fill)
    return dataclasses.replace(algo, **fill), record


def init_state(C, init_mode: str, x0, problem, comm: Comm) -> ADIANAState:
    """``y^0 = z^0 = w^0 = x^0`` and the shifts of ``init_mode`` (``full`` charges ``32 d``)."""
    if init_mode == "full":
        h_i, h = initial_estimator("full", problem.grad(x0), C, comm)
    else:
        h_i = torch.zeros(problem.m, problem.d, dtype=problem.dtype, device=problem.device)
        h = torch.zeros_like(h_i[0])
    x_star = problem.x_star
    star = None if x_star is None else problem.grad(x_star)
    return ADIANAState(
        x=x0.clone(), t=0, z=x0.clone(), w=x0.clone(), h_i=h_i, h=h, grad_star_i=star
    )


def accelerated_round(
    C, state: ADIANAState, problem, comm: Comm, eta: float, th1: float, th2: float,
    gamma_z: float, beta: float, alpha: float, p: float,
) -> tuple[ADIANAState, dict[str, float]]:  # fmt: skip
    """One round of ADIANA's update (the class docstring's steps 1-3) with the coupling
    ``theta1, theta2``, the ``z`` step ``gamma_z`` and averaging ``beta`` given: shared by
    ADIANA (constant parameters) and CANITA (a schedule in ``t``)."""
    t = state.t
    x = th1 * state.z + th2 * state.w + (1.0 - th1 - th2) * state.x
    at_x = C.encode(problem.grad(x) - state.h_i, comm.rng_for(C, t, tag=TAG_AT_X))
    at_w = C.encode(problem.grad(state.w) - state.h_i, comm.rng_for(C, t, tag=TAG_AT_W))
    mw_i = C.decode(at_w)
    g = state.h + comm.reduce(at_x, C)
    mw = comm.reduce(at_w, C, decoded=mw_i)
    h_i = torch.add(state.h_i, mw_i, alpha=alpha)
    h = state.h + alpha * mw
    comm.broadcast_full(problem.d)  # g^k: every node updates y, z, w and forms x^{k+1}
    y = x - eta * g
    z = beta * state.z + (1.0 - beta) * x + (gamma_z / eta) * (y - x)
    refresh = comm.coin(t, p, tag=TAG_ANCHOR)
    w = state.x if refresh else state.w
    extras = {"refresh": float(refresh)}
    if state.grad_star_i is not None:
        err = torch.sub(h_i, state.grad_star_i, out=mw_i)
        extras["H"] = comm.monitor_mean(torch.linalg.vector_norm(err, dim=1) ** 2)
    new = ADIANAState(x=y, t=t + 1, z=z, w=w, h_i=h_i, h=h, grad_star_i=state.grad_star_i)
    return new, extras
