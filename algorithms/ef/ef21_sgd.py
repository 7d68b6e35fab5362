"""EF21-SGD: EF21 with minibatch gradients (Fatkhullin et al., "EF21 with Bells & Whistles")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms import provenance as pv
from algorithms import stepsizes
from algorithms.base import Theory, minibatch, minibatch_option, regime_option
from algorithms.ef.ef21 import EF21Base, EF21State, ef21_update
from algorithms.provenance import Provenance
from comm.base import Comm
from streams import tags


@dataclass(frozen=True)
class EF21SGD(EF21Base):
    """EF21-SGD: EF21 with minibatch gradients (arXiv 2110.03294, Algorithm 2).

    Fatkhullin, Sokolov, Gorbunov, Li & Richtárik 2021, "EF21 with Bells & Whistles".

    Update: ``x^{t+1} = x^t - gamma g^t``; node ``i`` draws a minibatch of ``batch_size`` from
    its own data (its own stream), forms ``hat g_i = (1/tau) sum_j grad f_ij(x^{t+1})`` and
    sends ``c_i = C(hat g_i - g_i^t)``; ``g_i^{t+1} = g_i^t + c_i``,
    ``g^{t+1} = g^t + (1/n) sum_i c_i``. With ``batch_size=None`` the local gradients are full
    and the method is EF21.

    ``init``: ``g_i^0 = grad f_i(x^0)`` with the full local gradient (``full``, the authors'
    code; sent uncompressed and charged), its compression (``compressed``) or ``0``.

    Theory: the paper's Appendix D constants were not available here, so the step is derived
    for this library (:func:`stepsizes.ef21_sgd`, :func:`stepsizes.ef21_sgd_constants`) for
    stochastic gradients with ``A_i = 0``, ``B_i = 1``, ``C_i = sigma_i^2/tau`` in the
    paper's Assumption 2: ``1/(L + L_tilde sqrt(beta^/theta^))`` (PL:
    ``min(1/(L + L_tilde sqrt(2 beta^/theta^)), theta^/(2 mu))``), ``theta^ = theta/2``,
    ``beta^ = (1 + nu) beta`` with ``nu = theta/(2(1 - theta))`` (an extra Young parameter,
    as in the paper). The step does not depend on ``sigma^2``; the bound is
    ``2 Psi^0/(gamma T) + kappa sigma^2/(theta^ tau)``, a noise floor that falls as
    ``batch_size`` grows (B&W Fig. 1). The ABC constants from the data: minibatches here are
    ``tau`` uniform draws *with replacement* from node ``i``'s ``m_i`` samples
    (``Problem.sample``), so ``C_i = sigma_i^2/tau`` with ``sigma_i^2 = (1/m_i) sum_j
    ||grad f_ij(x) - grad f_i(x)||^2 <= sup_x (1/m_i) sum_j ||grad f_ij(x)||^2`` over the
    data part; for logistic regression each sample's data gradient
    ``-b_j a_j sigmoid(-b_j a_j^T x)`` has norm ``<= ||a_j||`` (the regulariser cancels), so
    ``sigma_i^2 <= (1/m_i) sum_j ||a_j||^2`` and ``A_i = 0``. Least squares has unbounded
    variance (``A_i = max_j L_ij/tau > 0``), which this step does not cover. With
    ``batch_size=None`` (full gradients) the step is still this one, smaller than EF21's by
    about ``sqrt(2(1 + nu))``; ``--step-mult`` or ``--step`` restore EF21's.
    """

    batch_size: int | None = minibatch_option()
    regime: str = regime_option()

    batchable: ClassVar[bool] = True
    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    provenance: ClassVar[Provenance] = pv.derived(
        "algorithms.stepsizes.ef21_variants:ef21_sgd",
        "EF21's Theorems 1 and 2 (arXiv 2106.05203) redone for minibatch gradients of bounded "
        "variance (A_i = 0, B_i = 1 in Assumption 2 of Fatkhullin et al. 2021, arXiv "
        "2110.03294); that paper's Appendix D constants were not available",
    )

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        c, d = problem.consts, problem.d
        alpha = compressor.delta(d)
        theta_h, beta_h, kappa = stepsizes.ef21_sgd_constants(alpha)
        regime = opts.get("regime", "auto")
        pl = regime == "pl" or (regime == "auto" and c.mu is not None)
        if pl and c.mu is None:
            raise ValueError("the PL step needs mu, which this problem does not know")
        inputs = {"L": c.L, "L_tilde": c.L_tilde, "alpha": alpha, "theta_hat": theta_h}
        inputs.update(beta_hat=beta_h, kappa=kappa, **({"mu": c.mu} if pl else {}))
        return Theory(
            gamma=stepsizes.ef21_sgd(c.L, c.L_tilde, alpha, c.mu if pl else None),
            formula=(
                "min(1 / (L + L_tilde sqrt(2 beta^ / theta^)), theta^ / (2 mu))"
                if pl
                else "1 / (L + L_tilde sqrt(beta^ / theta^))"
            )
            + ", theta^ = theta / 2, beta^ = (1 + nu) beta, nu = theta / (2 (1 - theta)) "
            "(derived for A_i = 0, B_i = 1)",
            inputs=inputs,
            source="Fatkhullin et al. 2021, arXiv 2110.03294, Alg. 2 and Assumption 2; step "
            "derived for this library (the paper's Appendix D constants were not available)",
        )

    def _step(self, state: EF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        batch = minibatch(problem, comm, t, tags.EF21_SGD_BATCH, self.batch_size)
        g_i, g, _ = ef21_update(C, problem.grad(x, batch), state.g_i, state.g, comm, t)
        return EF21State(x=x, t=t + 1, g_i=g_i, g=g), {}
