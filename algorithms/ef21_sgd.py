"""EF21-SGD: EF21 with minibatch gradients (Fatkhullin et al., "EF21 with Bells & Whistles")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algorithms.base import Option, Theory, check_choice, check_count
from algorithms.comm.base import Comm
from algorithms.ef21 import INIT_OPTION, EF21Base, EF21State, borrowed_ef21_theory, ef21_update

TAG_BATCH = 0xE5D1
REGIMES = ("auto", "nonconvex", "pl")


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

    Theory: the paper's step constants (with an extra Young parameter) are unverified here
    [U]; the step is EF21's (Theorem 1, or Theorem 2 under PL, of arXiv 2106.05203), as in
    the paper's experiments, which tune multiples of it. With a constant step and minibatch,
    the method stalls at a noise floor that falls as ``batch_size`` grows (B&W Fig. 1).
    """

    batch_size: int | None = None
    regime: str = "auto"

    needs: ClassVar[str] = "contractive"
    stochastic: ClassVar[bool] = True
    options: ClassVar[dict[str, Option]] = {
        "batch_size": Option(int, None, "minibatch per node (default: full local gradients)"),
        "init_mode": INIT_OPTION,
        "regime": Option(str, "auto", "theory step: auto | nonconvex | pl", REGIMES),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("batch_size", self.batch_size)
        check_choice("regime", self.regime, REGIMES)

    @classmethod
    def theory(cls, problem, compressor, opts) -> Theory:
        return borrowed_ef21_theory(problem, compressor, opts, "EF21-SGD")

    def _step(self, state: EF21State, problem, comm: Comm):
        C, t = self.compressor, state.t
        x = self._descend(state, problem, comm)
        batch = None
        if self.batch_size is not None:
            batch = problem.sample(comm.rng(t, tag=TAG_BATCH), self.batch_size)
        g_i, g, _ = ef21_update(C, problem.grad(x, batch), state.g_i, state.g, comm, t)
        return EF21State(x=x, t=t + 1, g_i=g_i, g=g), {}
