"""A distributed quadratic game: a strongly monotone variational inequality with exact constants.

Each node holds the saddle function
``f_i(x, y) = x^T A_i x / 2 + x^T B_i y - y^T C_i y / 2 + a_i^T x - b_i^T y`` and the problem is
``min_x max_y (1/n) sum_i f_i(x, y)``, i.e. the variational inequality (VI) of the operator
``F(z) = (1/n) sum_i F_i(z)`` with ``z = (x, y)`` and ``F_i(z) = (grad_x f_i, -grad_y f_i)``.
The setting of Beznosikov & Gasnikov 2022 (arXiv 2206.09446) and of the compressed-VI methods
(Beznosikov, Richtárik, Diskin, Ryabinin & Gasnikov 2021, arXiv 2110.03313).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from problems.base import Batch, Consts, Problem, parse_x0
from problems.linalg import single_threaded
from problems.quadratic import check_positive
from streams import Streams, tags

__all__ = ["QuadraticGame"]

_MAX_ENTRIES = 20_000_000  # n d^2 of the stored Jacobians


class QuadraticGame(Problem):
    """The quadratic game ``min_x max_y (1/n) sum_i f_i(x, y)``: a strongly monotone VI.

    ``F_i(z) = M_i z + m_i`` with the Jacobian ``M_i = [[A_i, B_i], [-B_i^T, C_i]]`` and
    ``m_i = (a_i, b_i)``: :meth:`grad` returns ``F_i`` at each node's row, :meth:`full_grad`
    ``F = Mbar z + mbar``. This is a variational inequality, not a minimisation
    (``variational = True``): a method must declare ``solves_vi`` to run on it
    (:func:`problems.capabilities.check_kind`), since ``F`` is no gradient field.

    Constants, exact (dense float64 linear algebra, ``n d^2 <= 2e7``):

    * ``mu``: strong monotonicity, ``<F(z) - F(z'), z - z'> >= mu ||z - z'||^2``, i.e.
      ``lambda_min((Mbar + Mbar^T)/2) = lambda_min(blockdiag(Abar, Cbar))``;
    * ``L``: Lipschitz constant of ``F``, ``||Mbar||_2``; ``L_i = ||M_i||_2`` (``L_tilde``,
      ``L_max`` from them);
    * ``L_pm``: the operator analogue of the Hessian variance, the smallest constant with
      ``(1/n) sum_i ||F_i(u) - F_i(v)||^2 - ||F(u) - F(v)||^2 <= L_pm^2 ||u - v||^2``:
      ``lambda_max(mean_i M_i^T M_i - Mbar^T Mbar)``;
    * :attr:`similarity` ``delta = max_i ||M_i - Mbar||_2``, the data-similarity constant
      (``||F_i'(z) - F'(z)|| <= delta`` at every ``z``; exact, the Jacobians are constant);
    * ``zeta2 = (1/n) sum_i ||F_i(z*)||^2``; ``x_star`` is ``z*``, the solution of
      ``F(z*) = 0`` (a linear solve).

    What the runner logs: a VI has no objective, so :meth:`loss` is the squared distance to
    the solution, ``||z - z*||^2``, and ``f_star = 0``: ``f`` and ``f_gap`` in ``history.csv``
    are ``||z - z*||^2``, and ``grad_norm_sq`` is ``||F(z)||^2``. ``node_loss`` is the same
    distance at each node's row. ``convex`` is set: ``F`` is strongly monotone, ``z*`` exists,
    is unique and known.

    Data (``build``, from ``--seed``): ``Abar = U diag(linspace(mu, ell, dim)) U^T`` and
    ``Cbar`` likewise with another Haar-orthogonal ``U`` (so ``mu`` is exact), ``Bbar``
    Gaussian scaled to ``||Bbar||_2 = coupling``; ``M_i = Mbar + E_i`` with
    ``E_i = [[P_i, Q_i], [-Q_i^T, R_i]]`` (``P_i``, ``R_i`` symmetric Gaussian, ``Q_i``
    Gaussian: each ``f_i`` stays a quadratic saddle function), centred over nodes and scaled
    so that ``max_i ||E_i||_2 = similarity``; ``z* ~ N(0, I)``; ``m_i = h_i - M_i z*`` with
    ``h_i`` centred over nodes and scaled to ``mean_i ||h_i||^2 = zeta2``, so
    ``F_i(z*) = h_i`` and ``F(z*) = 0``. With one node ``similarity = L_pm = zeta2 = 0``. A
    ``similarity`` above ``mu`` can make single ``F_i`` non-monotone (``F`` stays
    ``mu``-strongly monotone).

    Stochastic operators: as the quadratics, ``F_i(z) + grad_noise N(0, I) / sqrt(batch)``
    from the node's own stream (the same batch adds the same noise at every point).
    """

    name = "quadratic-game"
    description = (
        "distributed quadratic game min_x max_y (a strongly monotone VI): exact mu, L, L_i, "
        "similarity delta and z*"
    )
    convex = True  # strongly monotone: z* exists, is unique and known
    #: a variational inequality: F is an operator, not the gradient of an objective.
    variational = True
    autograd_free = True
    knobs = {
        "dim": (10, "quadratic-game: dimension of x and of y each (d = 2 dim)"),
        "mu": (0.1, "quadratic-game: strong monotonicity of F (lambda_min of Abar, Cbar)"),
        "ell": (1.0, "quadratic-game: the largest eigenvalue of Abar and Cbar"),
        "coupling": (1.0, "quadratic-game: ||Bbar||_2, the bilinear coupling of x and y"),
        "similarity": (0.1, "quadratic-game: delta = max_i ||M_i - Mbar||_2 (0 when n = 1)"),
        "zeta2": (1.0, "quadratic-game: mean_i ||F_i(z*)||^2 (0 when n = 1)"),
        "grad_noise": (0.0, "std of the additive noise of one stochastic sample"),
    }

    @classmethod
    def build(cls, *, dataset, split, nodes, lam, dtype, device, seed, x0, **knobs: Any):
        """The problem ``make_problem`` and ``--problem quadratic-game`` build."""
        if dataset not in (None, "synthetic"):
            raise ValueError(f"quadratic-game: generates its own data; got dataset {dataset!r}")
        if split != "contiguous":
            raise ValueError(f"quadratic-game: has no samples to split; got split {split!r}")
        if lam is not None:
            raise ValueError(
                "quadratic-game: takes no --lambda; set the strong monotonicity with "
                "--problem-opt mu=VALUE"
            )
        values = {k: knobs.get(k, v[0]) for k, v in cls.knobs.items()}
        return cls.generate(nodes, seed=seed, x0=x0, dtype=dtype, device=device, **values)

    @classmethod
    def generate(
        cls,
        n: int,
        *,
        dim: int = 10,
        mu: float = 0.1,
        ell: float = 1.0,
        coupling: float = 1.0,
        similarity: float = 0.1,
        zeta2: float = 1.0,
        grad_noise: float = 0.0,
        seed: int = 0,
        x0: str = "default",
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> QuadraticGame:
        """A seeded instance with the given constants (see the class docstring)."""
        name = cls.name
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"{name}: dim must be a positive integer, got {dim!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name}: nodes must be a positive integer, got {n!r}")
        d = 2 * dim
        if n * d * d > _MAX_ENTRIES:
            raise ValueError(
                f"{name}: stores n d^2 = {n * d * d} Jacobian entries (> {_MAX_ENTRIES}); "
                "use fewer nodes or a smaller dim"
            )
        mu = check_positive(name, "mu", mu)
        ell = check_positive(name, "ell", ell)
        if mu > ell:
            raise ValueError(f"{name}: mu must be <= ell = {ell}, got {mu}")
        coupling = check_positive(name, "coupling", coupling, allow_zero=True)
        similarity = check_positive(name, "similarity", similarity, allow_zero=True)
        zeta2 = check_positive(name, "zeta2", zeta2, allow_zero=True)
        if n == 1:
            similarity = zeta2 = 0.0
        rng = np.random.default_rng([seed, tags.QUADRATIC_GAME_DATA])
        spectrum = np.linspace(mu, ell, dim)

        def block() -> np.ndarray:
            U, R = np.linalg.qr(rng.standard_normal((dim, dim)))
            U *= np.sign(np.diag(R))
            return (U * spectrum) @ U.T

        Abar, Cbar = block(), block()
        Bbar = rng.standard_normal((dim, dim))
        Bbar *= coupling / np.linalg.norm(Bbar, 2)
        P = rng.standard_normal((n, dim, dim))
        R = rng.standard_normal((n, dim, dim))
        Q = rng.standard_normal((n, dim, dim))
        E = np.block(
            [
                [(P + P.transpose(0, 2, 1)) / 2, Q],
                [-Q.transpose(0, 2, 1), (R + R.transpose(0, 2, 1)) / 2],
            ]
        )
        E -= E.mean(0)
        top = np.linalg.norm(E, 2, axis=(1, 2)).max() if n > 1 else 0.0
        E = E * (similarity / top) if similarity > 0 and top > 0 else np.zeros_like(E)
        Mbar = np.block([[Abar, Bbar], [-Bbar.T, Cbar]])
        M = Mbar + E
        z_star = rng.standard_normal(d)
        h = rng.standard_normal((n, d))
        h -= h.mean(0)
        h = h * math.sqrt(zeta2 / np.mean(np.sum(h * h, axis=1))) if zeta2 > 0 else 0.0 * h
        m = h - np.einsum("nij,j->ni", M, z_star)
        return cls(M, m, grad_noise=grad_noise, x0=parse_x0(x0, d, lambda: torch.zeros(d), seed),
                   dtype=dtype, device=device)  # fmt: skip

    def __init__(
        self,
        M: np.ndarray,
        m: np.ndarray,
        *,
        grad_noise: float = 0.0,
        x0: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        M, m = np.asarray(M, dtype=np.float64), np.asarray(m, dtype=np.float64)
        if M.ndim != 3 or M.shape[1] != M.shape[2] or m.shape != M.shape[:2]:
            raise ValueError(
                f"{self.name}: M must be (n, d, d) and m (n, d), got {M.shape} and {m.shape}"
            )
        n, d = m.shape
        self.grad_noise = check_positive(self.name, "grad_noise", grad_noise, allow_zero=True)
        self._M64, self._m64 = M, m
        Mbar, mbar = M.mean(0), m.mean(0)
        with single_threaded():
            z = np.linalg.solve(Mbar, -mbar)
            z -= np.linalg.solve(Mbar, Mbar @ z + mbar)  # one refinement step
        self._z64 = z
        # What the constants' computation leaves for ``similarity``: made here, so ``local``
        # copies share it as they share the constants.
        self._box: dict[str, float] = {}
        super().__init__(
            n,
            d,
            consts=self._compute_consts,
            x0=torch.zeros(d) if x0 is None else x0,
            dtype=dtype,
            device=device,
            x_star=lambda: torch.from_numpy(self._z64.copy()),
        )
        self._M = torch.from_numpy(M).to(self.device, dtype)
        self._m = torch.from_numpy(m).to(self.device, dtype)
        self._Mbar, self._mbar = self._M.mean(0), self._m.mean(0)
        self._z = torch.from_numpy(z).to(self.device, dtype)
        self._select()

    # ------------------------------------------------------------------ constants
    @property
    def similarity(self) -> float:
        """``delta = max_i ||M_i - Mbar||_2``: ``||F_i'(z) - F'(z)||_2 <= delta`` for every
        ``i`` and ``z`` (over all ``n`` nodes, whatever is held)."""
        self.consts  # noqa: B018 - computed with the constants
        return self._box["delta"]

    def jacobians(self) -> torch.Tensor:
        """The held nodes' Jacobians ``M_i = F_i'``, float64 ``(m, d, d)`` on the CPU."""
        return torch.from_numpy(self._M64[self.nodes.cpu().numpy()].copy())

    def _compute_consts(self) -> Consts:
        with single_threaded():
            M, n = self._M64, self.n
            Mbar = M.mean(0)
            sym = (Mbar + Mbar.T) / 2
            mu = float(np.linalg.eigvalsh(sym)[0])
            L_i = np.linalg.norm(M, 2, axis=(1, 2))
            V = np.einsum("nji,njk->ik", M, M) / n - Mbar.T @ Mbar
            L_pm = math.sqrt(max(float(np.linalg.eigvalsh((V + V.T) / 2)[-1]), 0.0))
            delta = float(np.linalg.norm(M - Mbar, 2, axis=(1, 2)).max())
            G = np.einsum("nij,j->ni", M, self._z64) + self._m64
        self._box["delta"] = delta
        return Consts.from_L_i(
            L_i,
            L=float(np.linalg.norm(Mbar, 2)),
            L_pm=L_pm,
            mu=mu,
            f_star=0.0,
            zeta2=float(np.mean(np.sum(G * G, axis=1))),
        )

    # ------------------------------------------------------------------ the maths
    def _select(self) -> None:
        self._M_held, self._m_held = self._M[self.nodes], self._m[self.nodes]

    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self._z) ** 2).sum()

    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        return ((X - self._z) ** 2).sum(1)

    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        return self._Mbar @ x + self._mbar

    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        return torch.bmm(self._M_held, X[:, :, None])[:, :, 0] + self._m_held

    def _sample(self, streams: Streams, batch_size: int) -> Batch:
        scale = self.grad_noise / math.sqrt(batch_size)
        noise = scale * streams.normal(self.d, dtype=torch.float64).to(self.dtype)
        return Batch(nodes=self.nodes, size=batch_size, noise=noise)

    def _batch_grad(self, X: torch.Tensor, batch: Batch) -> torch.Tensor:
        return self._grad(X) + batch.noise
