"""EF21-SGDM and EF21-SGD2M: EF21 on Polyak momentum of stochastic gradients (Fatkhullin, Tyurin
& Richtárik, "Momentum Provably Improves Error Feedback!")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import provenance as pv
from algorithms.base import (
    State,
    Theory,
    check_unit,
    initial_estimator,
    minibatch,
    minibatch_option,
    option,
    regime_option,
)
from algorithms.ef.ef21 import EF21Base, ef21_theory, ef21_update
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags

PAPER = (
    "Fatkhullin, Tyurin & Richtárik, Momentum Provably Improves Error Feedback!, NeurIPS 2023, "
    "arXiv 2305.15155"
)
PROVENANCE = pv.borrowed(
    "EF21",
    "the EF21-SGDM theorem's step constants (arXiv 2305.15155) could not be read, so EF21's "
    "Theorem 1 step (Theorem 2 under PL, arXiv 2106.05203) for the same alpha, as the EF21 "
    "experiments use for EF21's variants; Polyak momentum v <- (1 - eta) v + eta grad keeps "
    "the effective step gamma, so the step EF21's analysis covers stays the one of the "
    "direction g^t",
)


@dataclass(frozen=True)
class EF21SGDMState(State):
    v_i: torch.Tensor  # (m, d) momentum of the nodes' stochastic gradients
    g_i: torch.Tensor  # (m, d) EF21 estimators of v_i
    g: torch.Tensor  # (d,) server estimator, mean of g_i over all nodes


@dataclass(frozen=True)
class EF21SGD2MState(EF21SGDMState):
    u_i: torch.Tensor  # (m, d) second momentum, the EMA of v_i (EF21-SGD2M)


@dataclass(frozen=True)
class EF21SGDM(EF21Base):
    """EF21-SGDM: EF21 applied to the nodes' Polyak momentum (arXiv 2305.15155, Algorithm 1).

    Fatkhullin, Tyurin & Richtárik, "Momentum Provably Improves Error Feedback!", NeurIPS
    2023, arXiv 2305.15155.

    Update, round ``t``: ``x^{t+1} = x^t - gamma g^t`` (broadcast); node ``i`` draws a minibatch
    ``xi_i`` of ``batch_size`` from its own data (its full local gradient when ``batch_size`` is
    None), sets ``v_i^{t+1} = (1 - eta) v_i^t + eta grad f_i(x^{t+1}; xi_i)``, sends
    ``c_i = C(v_i^{t+1} - g_i^t)`` and sets ``g_i^{t+1} = g_i^t + c_i``; the server sets
    ``g^{t+1} = g^t + (1/n) sum_i c_i``. Invariant ``g^t = mean_i g_i^t``. ``eta = 1`` is
    EF21-SGD exactly; the identity compressor gives distributed SGD with Polyak momentum
    (``x^{t+1} = x^t - gamma mean_i v_i^t``). Start: ``v_i^0 = grad f_i(x^0; xi_i^0)`` (a
    minibatch of the same size, drawn at ``t = -1``), ``g_i^0`` by ``--init`` from ``v_i^0``
    (``full``: ``g_i^0 = v_i^0`` sent uncompressed and charged; ``compressed``; ``zero``).
    Reports ``G = mean_i ||g_i - v_i||^2``.

    What could be read: the paper's abstract (NeurIPS page) and the update as restated, in
    the normalised form ``||EF21-SGDM||``, by Khirirat, Sadiev, Riabinin, Gorbunov & Richtárik
    ("Error Feedback under (L0, L1)-Smoothness: Normalization and Momentum", Algorithm 2,
    which without its normalisation is the update above). The paper's own algorithm box and
    its theorems' constants could not be read.

    Theory: contractive ``C`` with ``alpha = delta``. The default step is **borrowed** from
    EF21 (:func:`algorithms.ef.ef21.ef21_theory`: Theorem 1, ``1/(L + L_tilde
    sqrt(beta/theta))``; Theorem 2's PL step with ``--regime pl`` or when ``mu`` is known),
    not EF21-SGDM's own theorem step. The momentum ``eta`` has a **practical** default of
    0.1 (Polyak momentum ``beta = 1 - eta = 0.9``, the usual value): the paper's theorem
    chooses ``eta`` from the horizon and the noise, which is not read here. The paper's claim
    (abstract): momentum removes EF21-SGD's need for large minibatches and bounded
    dissimilarity; ``theory_checks.ef_momentum`` tests it (batch 1: EF21-SGD stalls at a
    noise floor that no smaller step lowers, EF21-SGDM's falls with the step).
    """

    eta: float = option(0.1, "momentum eta in (0, 1] (eta = 1: EF21-SGD)", check=check_unit)
    batch_size: int | None = minibatch_option()
    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    reports: ClassVar[tuple[str, ...]] = ("G",)
    provenance: ClassVar[Provenance] = PROVENANCE

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        th = ef21_theory(problem, compressor, opts.get("regime", "auto"))
        return Theory(
            gamma=th.gamma,
            formula=th.formula + " (EF21's step; EF21-SGDM's own constants were not read)",
            inputs=th.inputs,
            source=th.source + f"; borrowed for EF21-SGDM ({PAPER})",
            provenance=PROVENANCE,
        )

    def _start(self, x0, problem, comm: Comm) -> torch.Tensor:
        batch = minibatch(problem, comm, -1, tags.EF21_SGDM_BATCH, self.batch_size)
        return problem.grad(x0, batch)

    def init(self, x0, problem, comm: Comm) -> EF21SGDMState:
        v_i = self._start(x0, problem, comm)
        g_i, g = initial_estimator(self.init_mode, v_i.clone(), self.compressor, comm)
        return EF21SGDMState(x=x0.clone(), t=0, v_i=v_i, g_i=g_i, g=g)

    def _momentum(self, v_i: torch.Tensor, grad_i: torch.Tensor) -> torch.Tensor:
        """``(1 - eta) v_i + eta grad_i``, built in ``grad_i``."""
        if self.eta == 1.0:
            return grad_i
        return grad_i.mul_(self.eta).add_(v_i, alpha=1.0 - self.eta)

    def _fresh_momentum(self, state: EF21SGDMState, problem, comm: Comm):
        x = self._descend(state, problem, comm)
        batch = minibatch(problem, comm, state.t, tags.EF21_SGDM_BATCH, self.batch_size)
        return x, self._momentum(state.v_i, problem.grad(x, batch))

    def _step(self, state: EF21SGDMState, problem, comm: Comm):
        x, v_i = self._fresh_momentum(state, problem, comm)
        g_i, g, G = ef21_update(self.compressor, v_i.clone(), state.g_i, state.g, comm, state.t)
        return EF21SGDMState(x=x, t=state.t + 1, v_i=v_i, g_i=g_i, g=g), {"G": G}


@dataclass(frozen=True)
class EF21SGD2M(EF21SGDM):
    """EF21-SGD2M: EF21-SGDM with a second momentum (arXiv 2305.15155, the double-momentum
    method of the abstract).

    Update, round ``t``: as :class:`EF21SGDM`, then ``u_i^{t+1} = (1 - eta) u_i^t + eta
    v_i^{t+1}`` and the node sends ``c_i = C(u_i^{t+1} - g_i^t)`` (``g_i`` estimates ``u_i``);
    ``u_i^0 = v_i^0``. ``eta = 1`` is EF21-SGD. Reports ``G = mean_i ||g_i - u_i||^2``.

    What could be read: only the abstract says that a double-momentum version exists and
    improves the complexities; the form above (a second EMA of the first, with the same
    ``eta``, compressed in place of ``v_i``) is the paper's as recalled, not read from its box:
    a reconstruction. Step and ``eta`` as :class:`EF21SGDM` (EF21's step, borrowed;
    ``eta = 0.1`` practical).
    """

    def init(self, x0, problem, comm: Comm) -> EF21SGD2MState:
        v_i = self._start(x0, problem, comm)
        g_i, g = initial_estimator(self.init_mode, v_i.clone(), self.compressor, comm)
        return EF21SGD2MState(x=x0.clone(), t=0, v_i=v_i, g_i=g_i, g=g, u_i=v_i.clone())

    def _step(self, state: EF21SGD2MState, problem, comm: Comm):
        x, v_i = self._fresh_momentum(state, problem, comm)
        u_i = self._momentum(state.u_i, v_i.clone())
        g_i, g, G = ef21_update(self.compressor, u_i.clone(), state.g_i, state.g, comm, state.t)
        new = EF21SGD2MState(x=x, t=state.t + 1, v_i=v_i, g_i=g_i, g=g, u_i=u_i)
        return new, {"G": G}
