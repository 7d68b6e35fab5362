"""Parameters of the Newton-type methods with compressed Hessian learning: FedNL (Safaryan,
Islamov, Qian & Richtárik 2021, arXiv 2106.02969) and Newton-3PC (Islamov, Qian, Hanzely,
Safaryan & Richtárik 2022, arXiv 2206.03588).

Both take the unit Newton step (no step size): the theory fixes the Hessian learning rate
``alpha`` and the locality radius of the local rates. The compressor constants are those of the
``d(d+1)/2`` rows the Hessians travel as (:func:`algorithms.second_order.fednl.svec`).
"""

from __future__ import annotations

import math

__all__ = ["fednl_alpha", "newton_local_rate", "newton_locality"]


def fednl_alpha(*, delta: float | None = None, omega: float | None = None) -> float:
    """FedNL's Hessian learning rate: ``1 - sqrt(1 - delta)`` for a contractive compressor,
    ``1/(omega + 1)`` for an unbiased one (FedNL Alg. 1 with its Theorem's two compressor
    cases; the authors' code ``FedNL.method``, ``upd_rule`` 1 and 3). ``alpha = 1`` with a
    contractive compressor is also covered (code ``upd_rule`` 2; Newton-3PC's Theorem with the
    EF21 mechanism) and is an option of the method."""
    if (delta is None) == (omega is None):
        raise ValueError("give exactly one of delta (contractive) or omega (unbiased)")
    if delta is not None:
        if not 0 < delta <= 1:
            raise ValueError(f"delta must be in (0, 1], got {delta}")
        return 1.0 - math.sqrt(1.0 - delta)
    if omega < 0:
        raise ValueError(f"omega must be >= 0, got {omega}")
    return 1.0 / (omega + 1.0)


def newton_locality(mu: float, H_S: float, H_F: float, option: int) -> tuple[float, float]:
    """``(c, D)`` of the local theory and the radius ``mu / sqrt(2 D)`` of ``||x^0 - x*||``:
    Option 1 ``c = 2, D = H_S^2``, Option 2 ``c = 8, D = (H_S + 2 H_F)^2`` (Newton-3PC's local
    Theorem, thesis label ``th:NLU``, which covers FedNL's learning as the EF21 mechanism), with
    ``H_S``/``H_F`` the Lipschitz constants of the local Hessians in the spectral/Frobenius
    norm. Returns ``(c, radius)``; the Hessian errors must stay below ``mu^2/(4c)``."""
    if option not in (1, 2):
        raise ValueError(f"option must be 1 or 2, got {option}")
    c, D = (2.0, H_S**2) if option == 1 else (8.0, (H_S + 2.0 * H_F) ** 2)
    return c, mu / math.sqrt(2.0 * D)


def newton_local_rate(A: float) -> float:
    """The contraction of the Lyapunov function ``Phi^k = calH^k + 6 (1/A + 3AB) H_F^2
    ||x^k - x*||^2`` per round, ``1 - min(A/2, 1/3)``; ``||x^k - x*||^2`` itself contracts by at
    least ``1/2`` per round and superlinearly (its ratio decays at this rate)."""
    if not 0 < A <= 1:
        raise ValueError(f"A must be in (0, 1], got {A}")
    return 1.0 - min(A / 2.0, 1.0 / 3.0)
