"""Steps of the smoothness-aware methods DCGD+ and DIANA+ (Safaryan, Hanzely & Richtárik 2021,
arXiv 2106.03524), in terms of the expected-smoothness constant
``calL_max = max_i lambda_max(L_i^{1/2} (P_i^{-1} - I) L_i^{1/2})`` of
:mod:`algorithms.shifts.smoothness_aware` (uniform sampling: ``calL_max = omega L_max``).

Both are derived here [V-deriv] in the form of the library's DCGD and DIANA steps (theory sheet
§2.1 and §2.8), with ``omega L_i`` replaced by the matrix constant; the paper's own theorems
could not be read, so their constants are [U].
"""

from __future__ import annotations

__all__ = ["dcgd_plus", "diana_plus", "diana_plus_rate"]


def dcgd_plus(L: float, calL_max: float, n: int) -> float:
    """DCGD+, strongly convex, convex ``f_i``: ``1/(L + 2 calL_max/n)``. The compressed
    gradient ``g = (1/n) sum_i S_i(grad f_i(x))`` satisfies ``E||g - grad f(x*)||^2 <= 2 (L + 2
    calL_max/n) D_f(x, x*) + (2/n^2) sum_i ||grad f_i(x*)||^2_{P_i^{-1} - I}``, the expected
    smoothness ``A = L + 2 calL_max/n`` of the DCGD analysis (Gorbunov, Hanzely & Richtárik
    2020, arXiv 1905.11261), which takes ``gamma = 1/A``: linear rate ``1 - gamma mu`` to a
    neighbourhood.

    Derivation: node ``i`` keeps coordinate ``j`` with probability ``p_ij`` (independently)
    and scales it by ``1/p_ij``, so ``S_i(v)`` is unbiased with ``E||S_i(v) - v||^2 =
    sum_j (1/p_ij - 1) v_j^2 = v^T D_i v``, ``D_i = P_i^{-1} - I``. For ``u = L_i^{1/2} z``,
    ``u^T D_i u = z^T (L_i^{1/2} D_i L_i^{1/2}) z <= calL_i ||z||^2 = calL_i u^T L_i^{-1} u``,
    and a convex ``L_i``-matrix-smooth ``f_i`` has ``||grad f_i(x) - grad f_i(x*)||^2_{L_i^{-1}}
    <= 2 D_{f_i}(x, x*)`` (pseudo-inverse for a singular ``L_i``: the difference lies in its
    range). With ``u_i = grad f_i(x) - grad f_i(x*)``, ``grad f_i(x) = u_i + grad f_i(x*)`` and
    independence over nodes: ``E||g - grad f(x*)||^2 = ||grad f(x) - grad f(x*)||^2 + (1/n^2)
    sum_i grad f_i(x)^T D_i grad f_i(x) <= 2 L D_f + (1/n^2) sum_i (2 u_i^T D_i u_i +
    2 ||grad f_i(x*)||^2_{D_i}) <= 2 (L + 2 calL_max/n) D_f + (2/n^2) sum_i
    ||grad f_i(x*)||^2_{D_i}`` (``sum_i D_{f_i} = n D_f``). Then ``E||x^+ - x*||^2 <=
    (1 - gamma mu)||x - x*||^2 - 2 gamma (1 - gamma A) D_f + gamma^2 (2/n^2) sum_i
    ||grad f_i(x*)||^2_{D_i}`` (strong convexity: ``<grad f(x), x - x*> >= D_f + (mu/2)
    ||x - x*||^2``), and ``gamma <= 1/A`` drops the ``D_f`` term: linear convergence at rate
    ``1 - gamma mu`` to a ball of radius ``O(gamma/mu)`` times that last sum."""
    return 1.0 / (L + 2.0 * calL_max / n)


def diana_plus(L: float, calL_max: float, n: int) -> float:
    """DIANA+ with the per-coordinate shift steps ``alpha_ij = p_ij``: ``1/(L + 6 calL_max/n)``.

    Derivation (strongly convex ``f``, convex ``f_i``): with ``e_i = h_i - grad f_i(x*)``,
    ``u_i = grad f_i(x) - grad f_i(x*)`` and ``D_i = P_i^{-1} - I``, one step gives
    ``E e_ij^+2 = (1 - p_ij) e_ij^2 + p_ij u_ij^2`` and ``E||g - grad f(x*)||^2 <= 2 (L + 2
    calL_max/n) D_f + (2/n^2) sum_i e_i^T D_i e_i``. The Lyapunov function
    ``||x - x*||^2 + (4 gamma^2/n^2) sum_i sum_j ((D_i)_jj/p_ij) e_ij^2`` then contracts by
    ``max(1 - gamma mu, 1 - min_ij p_ij / 2)`` when ``gamma <= 1/(L + 6 calL_max/n)``. Uniform
    ``p = tau/d`` recovers DIANA's ``1/(L + 6 omega L_max/n)``, ``alpha = 1/(omega + 1)``."""
    return 1.0 / (L + 6.0 * calL_max / n)


def diana_plus_rate(gamma: float, mu: float, p_min: float) -> float:
    """The contraction factor of :func:`diana_plus`'s Lyapunov function per round."""
    return max(1.0 - gamma * mu, 1.0 - p_min / 2.0)
