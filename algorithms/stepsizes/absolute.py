"""Step sizes and neighbourhoods of error compensation with an absolute compressor.

An absolute compressor has ``E||C(v) - v||^2 <= Delta^2`` for every ``v`` (Sahu et al. 2021,
arXiv 2108.00951; Danilova & Gorbunov 2022, arXiv 2203.02383). Error compensation (EC-SGD,
EC-LSVRG) keeps ``e_i^{k+1} = v_i - C(v_i)`` with ``v_i = e_i^k + gamma g_i^k``, so
``E||e_i^k||^2 <= Delta^2`` at every step whatever ``gamma``, and the virtual iterate
``x~^k = x^k - mean_i e_i^k`` is plain (stochastic) gradient descent,
``x~^{k+1} = x~^k - gamma mean_i g_i^k``, with gradients taken at ``x^k``.

The perturbed-iterate analysis behind every function here, for ``f`` ``mu``-strongly convex and
``L``-smooth, ``f_i`` convex, ``E||ḡ - grad f(x)||^2`` bounded as stated per method: with
``<grad f(x), x~ - x> >= -(1/(4L))||grad f(x)||^2 - L||x - x~||^2`` and
``||x - x*||^2 >= ||x~ - x*||^2/2 - ||x - x~||^2``, one step gives

    E||x~^{k+1} - x*||^2 <= (1 - gamma mu/2) ||x~^k - x*||^2 - (gamma/2)(f(x^k) - f*)
                            + gamma (2L + mu) Delta^2 + (noise)

once ``gamma <= 1/(4A)`` (``A`` the second-moment constant of the estimator below). The
compression term ``2 (2L + mu) Delta^2 / mu`` in ``||x~ - x*||^2`` (``2 (2L + mu) Delta^2`` in
the averaged ``f`` gap) does not depend on ``gamma``; the stochastic term of EC-SGD falls with
``gamma`` and EC-LSVRG has none.

Stochastic gradients (minibatch ``b`` per node, with replacement; ``calL`` the mean-square
per-sample smoothness ``(1/m_i) sum_j ||grad f_ij(x) - grad f_ij(y)||^2 <= calL_i^2 ||x -
y||^2``, ``calL^2 = mean_i calL_i^2``): EC-SGD's estimator has
``E||ḡ||^2 <= 2 (L + 2 calL^2/(mu n b)) (f(x) - f*) + 2 sigma_*^2/(n b)``, ``sigma_*^2`` the
per-sample variance at ``x*``; EC-LSVRG's (Kovalev, Horváth & Richtárik 2019, arXiv
1901.08689, loopless SVRG) ``E||ḡ||^2 <= 2 (L + 2 calL^2/(mu n b)) (f - f*) + 2 D^k/(n b)`` with
``D^k = mean_i (1/m_i) sum_j ||grad f_ij(w_i^k) - grad f_ij(x*)||^2``, and
``D^{k+1} <= (1 - p) D^k + (2 p calL^2/mu)(f(x^k) - f*)``; the Lyapunov function
``||x~ - x*||^2 + (4 gamma^2/(n b p)) D`` contracts by ``1 - min(gamma mu, p)/2``.
``calL^2/mu`` stands where the papers' per-sample expected smoothness would (it bounds it,
through ``||x - x*||^2 <= (2/mu)(f(x) - f*)``, from the constants the problems know).
"""

from __future__ import annotations


def _check(L: float, mu: float, n: int) -> None:
    if not (L > 0 and mu > 0 and n >= 1):
        raise ValueError(f"need L > 0, mu > 0, n >= 1; got L={L}, mu={mu}, n={n}")


def ec_second_moment(L: float, mu: float, n: int, calL: float | None, batch: int | None) -> float:
    """``A = L + 2 calL^2/(mu n b)`` (``L`` for full gradients or ``calL`` unknown)."""
    _check(L, mu, n)
    if batch is None or calL is None:
        return L
    return L + 2.0 * calL**2 / (mu * n * batch)


def ec_sgd(L: float, mu: float, n: int, calL: float | None = None, batch: int | None = None):
    """EC-SGD with an absolute compressor: ``gamma = 1/(4 A)``, ``A = L + 2 calL^2/(mu n b)``
    (``1/(4L)`` with full gradients). Does not depend on ``Delta``.

    Derivation (the perturbed-iterate bound of the module docstring, spelled out): the virtual
    iterate ``x~ = x - mean_i e_i`` follows ``x~^+ = x~ - gamma ḡ`` with ``E ḡ = grad f(x)``,
    and ``E||x - x~||^2 <= mean_i E||e_i||^2 <= Delta^2``. Expanding the square,
    ``E||x~^+ - x*||^2 = ||x~ - x*||^2 - 2 gamma <grad f(x), x~ - x*> + gamma^2 E||ḡ||^2``.
    Split ``<grad f(x), x~ - x*> = <grad f(x), x - x*> + <grad f(x), x~ - x>`` and bound the
    first by strong convexity, ``>= (f(x) - f*) + (mu/2)||x - x*||^2``, the second by Young,
    ``>= -(1/(4L))||grad f(x)||^2 - L||x - x~||^2 >= -(1/2)(f(x) - f*) - L||x - x~||^2``; with
    ``||x - x*||^2 >= ||x~ - x*||^2/2 - ||x - x~||^2``: ``-2 gamma <grad f(x), x~ - x*> <=
    -gamma (f - f*) - (gamma mu/2)||x~ - x*||^2 + gamma (2L + mu)||x - x~||^2``. The second
    moment: a minibatch of ``b`` draws with replacement has per-node variance ``<= (1/b)
    (1/m_i) sum_j ||grad f_ij(x) - grad f_i(x)||^2 <= (2/b)(calL_i^2 ||x - x*||^2 +
    sigma_{*,i}^2)`` (split at ``x*``), so with ``||x - x*||^2 <= (2/mu)(f - f*)`` and
    ``||grad f(x)||^2 <= 2L (f - f*)``: ``E||ḡ||^2 <= 2 A (f - f*) + 2 sigma_*^2/(n b)``,
    ``A = L + 2 calL^2/(mu n b)`` (``A = L``, no noise, with full gradients; ``A = L`` plus a
    state-independent noise when ``calL`` is unknown). Altogether ``E||x~^+ - x*||^2 <=
    (1 - gamma mu/2)||x~ - x*||^2 - gamma (1 - 2 gamma A)(f - f*) + gamma (2L + mu) Delta^2 +
    2 gamma^2 sigma_*^2/(n b)``; ``gamma = 1/(4A)`` makes ``1 - 2 gamma A = 1/2 > 0``, and
    unrolling gives :func:`ec_distance_bound` with ``rho = gamma mu/2``: the neighbourhood
    ``2 (2L + mu) Delta^2/mu`` (:func:`ec_neighbourhood`) plus ``4 gamma sigma_*^2/(mu n b)``."""
    return 1.0 / (4.0 * ec_second_moment(L, mu, n, calL, batch))


def ec_lsvrg(L: float, mu: float, n: int, calL: float, batch: int) -> float:
    """EC-LSVRG with an absolute compressor: ``gamma = 1/(4 (L + 6 calL^2/(mu n b)))``
    (the ``f``-coefficient ``1 - 2 gamma L - 12 gamma calL^2/(mu n b) >= 1/2``).

    Derivation: as :func:`ec_sgd` up to the second moment. The estimator ``ḡ_i =
    (1/b) sum_j (grad f_ij(x) - grad f_ij(w_i)) + grad f_i(w_i)`` is unbiased with variance
    ``<= (1/b)(1/m_i) sum_j ||grad f_ij(x) - grad f_ij(w_i)||^2 <= (2/b)(calL_i^2 ||x - x*||^2
    + D_i)``, ``D_i = (1/m_i) sum_j ||grad f_ij(w_i) - grad f_ij(x*)||^2``; so
    ``E||ḡ||^2 <= 2 (L + 2 calL^2/(mu n b))(f - f*) + 2 D/(n b)`` (``D = mean_i D_i``), and the
    refresh ``w_i <- x`` with probability ``p`` gives ``E D^+ <= (1 - p) D + (2 p calL^2/mu)
    (f - f*)``. With ``Psi = ||x~ - x*||^2 + M D``, ``M = 4 gamma^2/(n b p)``: the ``D``
    coefficient is ``2 gamma^2/(n b) + M (1 - p) = M (1 - p/2)``; the ``f - f*`` coefficient is
    ``-gamma + 2 gamma^2 (L + 2 calL^2/(mu n b)) + M 2 p calL^2/mu = -gamma + 2 gamma^2
    (L + 6 calL^2/(mu n b))``, which is ``-gamma/2`` at this ``gamma``. Hence ``E Psi^+ <=
    (1 - min(gamma mu, p)/2) Psi + gamma (2L + mu) Delta^2``: no variance term, the same
    compression neighbourhood as EC-SGD."""
    _check(L, mu, n)
    return 1.0 / (4.0 * (L + 6.0 * calL**2 / (mu * n * batch)))


def lsvrg_p(batch: int, m: int | None) -> float:
    """L-SVRG's refresh probability ``p = min(1, b/m)`` (one full local gradient per ``m/b``
    steps in expectation, the cost of the minibatches; arXiv 1901.08689); 1 when ``m`` is
    unknown."""
    return 1.0 if m is None else min(1.0, batch / m)


def ec_neighbourhood(L: float, mu: float, Delta_sq: float) -> float:
    """The compression part of the floor of ``E||x~^k - x*||^2``: ``2 (2L + mu) Delta^2/mu``."""
    return 2.0 * (2.0 * L + mu) * Delta_sq / mu


def ec_distance_bound(
    L: float,
    mu: float,
    gamma: float,
    Delta_sq: float,
    r0: float,
    k: int,
    noise: float = 0.0,
    rho: float | None = None,
) -> float:
    """Bound on ``E||x^k - x*||^2`` at the last iterate: ``2 E||x~^k - x*||^2 + 2 Delta^2`` with
    ``E||x~^k - x*||^2 <= (1 - rho)^k r0 + gamma ((2L + mu) Delta^2 + noise)/rho``;
    ``rho = gamma mu / 2`` (EC-SGD; ``noise = 2 gamma sigma_*^2/(n b)``) or
    ``min(gamma mu, p)/2`` (EC-LSVRG, ``r0`` its Lyapunov value, ``noise = 0``)."""
    rho = gamma * mu / 2.0 if rho is None else rho
    if not 0 < rho <= 1:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    tilde = (1.0 - rho) ** k * r0 + gamma * ((2 * L + mu) * Delta_sq + noise) / rho
    return 2.0 * tilde + 2.0 * Delta_sq
