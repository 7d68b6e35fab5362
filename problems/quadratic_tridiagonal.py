"""The tridiagonal quadratic of the PermK, 3PC and DASHA experiments."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
import torch

from problems.base import Consts, parse_x0
from problems.quadratic import Quadratic, check_positive, check_shape

__all__ = ["TridiagonalQuadratic"]

CHUNK = 4096  # nodes per block of the constants' per-node sums


def _stencil(X: torch.Tensor) -> torch.Tensor:
    """``X T`` for ``T = tridiag(-1, 2, -1)`` acting on each row (zero boundary)."""
    out = 2.0 * X
    out[..., 1:] -= X[..., :-1]
    out[..., :-1] -= X[..., 1:]
    return out


class TridiagonalQuadratic(Quadratic):
    """``f_i(x) = (1/2) x^T A_i x - b_i^T x`` with ``A_i = a_i T + sigma I``, ``T = tridiag(-1,
    2, -1)`` (Szlendak, Tyurin & Richtarik 2021, arXiv 2110.03300, Sec. 6; Richtarik et al. 2022,
    3PC, arXiv 2202.00998; generator ``quad_preprocessing.py`` of the 3PC code).

    For each node in turn ``xi_s, xi_b ~ N(0, 1)`` from ``numpy.random.RandomState(seed)`` (the
    authors use seed 12345 and ``dim = 1000``), ``nu_s = 1 + s xi_s``, ``nu_b = s xi_b``,
    ``a_i = nu_s/4`` and ``b_i = a_i (nu_b - 1) e_1``; then ``sigma = lam - lambda_min(abar T)``
    so that ``lambda_min(Abar) = lam``. Start ``x0 = sqrt(d) e_1``. Closed forms, with
    ``t_k = 2 - 2 cos(k pi/(d+1))`` the eigenvalues of ``T``:

    * ``L_i = max(|a_i t_1 + sigma|, |a_i t_d + sigma|)``, ``L = max(|abar t_1 + sigma|,
      |abar t_d + sigma|)`` (the spectral norm; the papers' ``lambda_max`` whenever
      ``lambda_max >= |lambda_min|``, the case for moderate ``s``);
    * ``L_pm = std(a) t_d`` (population std), since ``mean A_i^2 - Abar^2 = var(a) T^2``;
    * ``mu = lam``; ``x* = Abar^{-1} bbar`` by a banded Cholesky solve.

    Single ``A_i`` may be indefinite after the shift, so single ``f_i`` may be nonconvex. The
    authors' code logs ``(1/2) x^T (Abar x - bbar)`` as "loss"; ``loss`` here is the true ``f``.
    """

    family = "tridiagonal"

    def __init__(
        self,
        n: int,
        *,
        lam: float | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
        seed: int = 12345,
        x0: str = "default",
        dim: int = 20,
        s: float = 0.1,
        grad_noise: float = 0.0,
        **other: object,
    ) -> None:
        d = check_shape(self.family, n, dim, other)
        lam = check_positive(self.name, "lambda", 1e-6 if lam is None else lam)
        s = check_positive(self.name, "s", s, allow_zero=True)
        if not 0 <= seed < 2**32:
            raise ValueError(f"quadratic: tridiagonal seed must be in [0, 2**32), got {seed}")
        xi = np.random.RandomState(seed).normal(size=(n, 2))  # per node: xi_s, then xi_b
        a = (1.0 + s * xi[:, 0]) / 4.0
        t1, td = (2.0 - 2.0 * math.cos(k * math.pi / (d + 1)) for k in (1, d))
        abar = float(a.mean())
        sigma = lam - (abar * t1 if abar >= 0 else abar * td)
        # b_i is zero but for its first entry: kept as that entry, so the problem holds O(n + d)
        # numbers and a process holding a block of 10^5 nodes stores no (n, d) array for it.
        q0 = a * (s * xi[:, 1] - 1.0)
        self._a64, self._sigma, self._q0_64, self.lam = a, sigma, q0, lam
        self._t = (t1, td)
        x0_default = torch.zeros(d, dtype=torch.float64)
        x0_default[0] = math.sqrt(d)
        super().__init__(
            n,
            d,
            consts=self._compute_consts,
            x0=parse_x0(x0, d, lambda: x0_default, seed),
            dtype=dtype,
            device=device,
            x_star=lambda: torch.from_numpy(self._solution()[0]),
        )
        self._init_noise(grad_noise)
        self._a = torch.from_numpy(a).to(self.device, dtype)
        self._q0 = torch.from_numpy(q0).to(self.device, dtype)
        self._qbar = torch.zeros(d, dtype=dtype, device=self.device)
        self._qbar[0] = float(q0.mean())  # bbar, from the float64 entries
        self._select()

    def _select(self) -> None:
        self._a_held = self._a[self.nodes]
        self._q0_held = self._q0[self.nodes]

    # The dense forms would only subtract b_i's zeros (v - 0 = v): these skip them.
    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x @ self._hess_mean(x) - self._qbar @ x

    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        return self._hess_mean(x) - self._qbar

    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        T = 0.5 * X * self._hess_rows(X)
        T[:, 0] -= self._q0_held * X[:, 0]
        return T.sum(1)

    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        G = self._hess_rows(X)
        G[:, 0] -= self._q0_held
        return G

    def smoothness_matrices(self) -> torch.Tensor:
        """``L_i = A_i = a_i T + sigma I`` (exact), float64 ``(m, d, d)``."""
        m, d = self.m, self.d
        if m * d * d > 2**28:
            raise ValueError(
                f"quadratic: the smoothness matrices of {m} nodes would hold m d^2 = "
                f"{m * d * d} entries (> {2**28}); hold fewer nodes or use a smaller dim"
            )
        T = _stencil(torch.eye(d, dtype=torch.float64))
        a = torch.from_numpy(self._a64[self.nodes.cpu().numpy()])
        return a[:, None, None] * T + self._sigma * torch.eye(d, dtype=torch.float64)

    def _hess_rows(self, X: torch.Tensor) -> torch.Tensor:
        return self._a_held[:, None] * _stencil(X) + self._sigma * X

    def _hess_mean(self, x: torch.Tensor) -> torch.Tensor:
        return self._a.mean() * _stencil(x) + self._sigma * x

    def _solution(self) -> tuple[np.ndarray, float]:
        abar, d = float(self._a64.mean()), self.d
        ab = np.empty((2, d))
        ab[0, :] = -abar
        ab[1, :] = 2.0 * abar + self._sigma
        qbar = np.zeros(d)
        qbar[0] = self._q0_64.mean()
        x = sla.solveh_banded(ab, qbar)
        x -= sla.solveh_banded(ab, self._hess64(abar, x) - qbar)  # one refinement step
        return x, float(0.5 * x @ self._hess64(abar, x) - qbar @ x)

    def _hess64(self, a: float | np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.asarray(a)[..., None] * _stencil(torch.from_numpy(x)).numpy() + self._sigma * x

    def _compute_consts(self) -> Consts:
        t1, td = self._t
        a, sig = self._a64, self._sigma
        abar = float(a.mean())
        L_i = np.maximum(np.abs(a * t1 + sig), np.abs(a * td + sig))
        x, f = self._solution()
        # ||grad f_i(x*)||^2 per node, in blocks of nodes (no (n, d) array at once)
        sq = np.empty(self.n)
        for lo in range(0, self.n, CHUNK):
            hi = min(lo + CHUNK, self.n)
            G = self._hess64(a[lo:hi], np.broadcast_to(x, (hi - lo, self.d)).copy())
            G[:, 0] -= self._q0_64[lo:hi]
            sq[lo:hi] = np.sum(G * G, axis=1)
        return Consts.from_L_i(
            L_i,
            L=max(abs(abar * t1 + sig), abs(abar * td + sig)),
            L_pm=float(a.std() * td),
            mu=self.lam,
            f_star=f,
            zeta2=float(np.mean(sq)),
        )
