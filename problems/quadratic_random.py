"""Random quadratics whose constants are set exactly."""

from __future__ import annotations

import numpy as np
import torch

from problems.base import Consts, parse_x0
from problems.linalg import single_threaded
from problems.quadratic import Quadratic, check_positive, check_shape
from streams import tags

__all__ = ["RandomQuadratic"]

_MAX_ENTRIES = 20_000_000  # n d^2 of the stored Hessians


class RandomQuadratic(Quadratic):
    """``f_i(x) = (1/2) x^T Q_i x - q_i^T x`` with ``L``, ``mu``, ``zeta2`` and ``L_pm`` exact.

    ``Qbar = U diag(linspace(mu, L, d)) U^T`` with ``U`` Haar-orthogonal; ``Q_i = Qbar + E_i``
    with symmetric Gaussian ``E_i`` centred over nodes and scaled so that
    ``lambda_max(mean_i E_i^2) = L_pm^2`` (``mean_i Q_i^2 - Qbar^2 = mean_i E_i^2``: the Hessian
    variance of Szlendak et al. 2021, arXiv 2110.03300); ``x* ~ N(0, I)`` and
    ``q_i = Q_i x* + h_i`` with ``h_i`` centred over nodes and scaled to
    ``mean_i ||h_i||^2 = zeta2``, so ``grad f_i(x*) = -h_i`` and ``grad f(x*) = 0``. ``L_i`` is the
    spectral norm of ``Q_i`` by a dense eigendecomposition, so the family is meant for small
    ``d`` (``n d^2 <= 2e7``); with one node ``zeta2 = L_pm = 0`` whatever is asked. A large
    ``L_pm`` makes single ``Q_i`` indefinite (``f`` stays ``mu``-strongly convex). All constants
    are recomputed from the stored matrices in float64.
    """

    family = "random"

    def __init__(
        self,
        n: int,
        *,
        lam: float | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
        seed: int = 0,
        x0: str = "default",
        dim: int = 20,
        L: float = 1.0,
        zeta2: float = 1.0,
        L_pm: float = 0.1,
        grad_noise: float = 0.0,
        **other: object,
    ) -> None:
        d = check_shape(self.family, n, dim, other)
        if n * d * d > _MAX_ENTRIES:
            raise ValueError(
                f"quadratic: family random stores n d^2 = {n * d * d} entries (> {_MAX_ENTRIES}); "
                "use fewer nodes, a smaller dim, or family tridiagonal"
            )
        L = check_positive(self.name, "L", L)
        mu = check_positive(self.name, "lambda (mu)", 0.01 if lam is None else lam)
        if mu > L:
            raise ValueError(f"quadratic: lambda (mu) must be <= L = {L}, got {mu}")
        zeta2 = check_positive(self.name, "zeta2", zeta2, allow_zero=True)
        L_pm = check_positive(self.name, "L_pm", L_pm, allow_zero=True)
        if n == 1:  # one node: no heterogeneity by definition
            zeta2 = L_pm = 0.0
        rng = np.random.default_rng([seed, tags.QUADRATIC_RANDOM])
        U, R = np.linalg.qr(rng.standard_normal((d, d)))
        U *= np.sign(np.diag(R))
        Qbar = (U * np.linspace(mu, L, d)) @ U.T
        E = rng.standard_normal((n, d, d))
        E = (E + E.transpose(0, 2, 1)) / 2.0
        E -= E.mean(0)
        if L_pm > 0:
            E *= L_pm / np.sqrt(np.linalg.eigvalsh(np.einsum("nij,njk->ik", E, E) / n)[-1])
        else:
            E[:] = 0.0
        Q = (Qbar + E + (Qbar + E).transpose(0, 2, 1)) / 2.0
        x_star = rng.standard_normal(d)
        h = rng.standard_normal((n, d))
        h -= h.mean(0)
        if zeta2 > 0:
            h *= np.sqrt(zeta2 / np.mean(np.sum(h * h, axis=1)))
        else:
            h[:] = 0.0
        q = np.einsum("nij,j->ni", Q, x_star) + h
        self._Q64, self._q64, self.lam = Q, q, mu
        super().__init__(
            n,
            d,
            consts=self._compute_consts,
            x0=parse_x0(x0, d, lambda: torch.zeros(d), seed),
            dtype=dtype,
            device=device,
            x_star=lambda: torch.from_numpy(self._solution()[0]),
        )
        self._init_noise(grad_noise)
        self._Q = torch.from_numpy(Q).to(self.device, dtype)
        self._Qbar = self._Q.mean(0)
        self._q = torch.from_numpy(q).to(self.device, dtype)
        self._select()

    def _select(self) -> None:
        super()._select()
        self._Q_held = self._Q[self.nodes]

    def smoothness_matrices(self) -> torch.Tensor:
        """``L_i = Q_i`` (exact: ``f_i`` is quadratic), float64 ``(m, d, d)``; indefinite when
        ``L_pm > 0`` makes ``Q_i`` so."""
        return torch.from_numpy(self._Q64[self.nodes.cpu().numpy()].copy())

    def _hess_rows(self, X: torch.Tensor) -> torch.Tensor:
        return torch.bmm(self._Q_held, X[:, :, None])[:, :, 0]

    def _hess_mean(self, x: torch.Tensor) -> torch.Tensor:
        return self._Qbar @ x

    def _solution(self) -> tuple[np.ndarray, float]:
        Qbar, qbar = self._Q64.mean(0), self._q64.mean(0)
        x = np.linalg.solve(Qbar, qbar)
        x -= np.linalg.solve(Qbar, Qbar @ x - qbar)  # one refinement step
        return x, float(0.5 * x @ Qbar @ x - qbar @ x)

    def _compute_consts(self) -> Consts:
        with single_threaded():
            return self._compute_consts_now()

    def _compute_consts_now(self) -> Consts:
        Q, n = self._Q64, self.n
        Qbar = Q.mean(0)
        ev_i = np.linalg.eigvalsh(Q)
        ev = np.linalg.eigvalsh(Qbar)
        V = np.einsum("nij,njk->ik", Q, Q) / n - Qbar @ Qbar
        x, f = self._solution()
        G = np.einsum("nij,j->ni", Q, x) - self._q64
        return Consts.from_L_i(
            np.abs(ev_i).max(1),
            L=float(np.abs(ev).max()),
            L_pm=float(np.sqrt(max(np.linalg.eigvalsh((V + V.T) / 2)[-1], 0.0))),
            mu=float(ev[0]),
            f_star=f,
            zeta2=float(np.mean(np.sum(G * G, axis=1))),
        )
