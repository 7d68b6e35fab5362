"""Synthetic quadratics ``f_i(x) = (1/2) x^T Q_i x - q_i^T x`` with exact constants.

Two families (``family=``): ``random`` (:class:`~problems.quadratic_random.RandomQuadratic`:
``L``, ``mu``, ``zeta2`` and ``L_pm`` set exactly) and ``tridiagonal``
(:class:`~problems.quadratic_tridiagonal.TridiagonalQuadratic`: the worst-case family of the
PermK, 3PC and DASHA experiments with its noise scale ``s``).

Stochastic gradients: a quadratic has no samples, so ``sample`` draws additive Gaussian noise
``grad_noise * N(0, I) / sqrt(batch_size)`` per node from the node's own stream, i.e. a minibatch
of ``batch_size`` independent ``N(0, grad_noise^2 I)`` perturbations (variance
``grad_noise^2 d / batch_size``). The same batch adds the same noise at every point, so
``grad_i(x; xi) - grad_i(y; xi)`` is exact, as for finite sums.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from problems.base import Batch, Problem
from streams import Streams, tags

__all__ = ["Quadratic", "QUAD_KNOBS"]

QUAD_KNOBS: dict[str, tuple[Any, str]] = {
    "family": ("random", "random (exact L, mu, zeta2, L_pm) or tridiagonal (3PC/PermK)"),
    "dim": (20, "dimension d (the 3PC/PermK experiments use 1000)"),
    "L": (1.0, "random: lambda_max of the mean Hessian"),
    "zeta2": (1.0, "random: mean_i ||grad f_i(x*)||^2 (0 when n = 1)"),
    "L_pm": (0.1, "random: Hessian variance (0 when n = 1)"),
    "s": (0.1, "tridiagonal: noise scale of the Hessians and linear terms"),
    "grad_noise": (0.0, "std of the additive noise of one stochastic sample"),
    "server_zeta2": (0.1, "the server's own objective f_S = f + <s, x>, ||s||^2 = server_zeta2: "
                     "exactly ||grad f_S - grad f||^2 (CAFe-S)"),
}  # fmt: skip


def check_shape(family: str, n: Any, dim: Any, other: dict) -> int:
    """The checks every quadratic family shares: no unused knob, ``dim >= 2``, ``n >= 1``;
    returns ``d``."""
    if other:
        raise ValueError(f"quadratic: knobs {sorted(other)} are not used by family {family}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
        raise ValueError(f"quadratic: dim must be an integer >= 2, got {dim!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"quadratic: nodes must be a positive integer, got {n!r}")
    return dim


def check_positive(name: str, key: str, value: Any, *, allow_zero: bool = False) -> float:
    """``float(value)``, or a ValueError naming ``key`` and the value."""
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: {key} must be a finite number {bound}, got {value!r}")
    return float(value)


class Quadratic(Problem):
    """Common maths of the quadratic families; ``build`` picks the family.

    Subclasses set ``self._q`` (``(n, d)`` linear terms) and implement ``_hess_rows(X)``
    (row ``j``: ``Q_{nodes[j]} X[j]``) and ``_hess_mean(x)`` (``Qbar x``).
    """

    name = "quadratic"
    description = "synthetic quadratics with exact L, mu, L_pm, zeta2 (random or tridiagonal)"
    convex = True  # f is strongly convex; single f_i may be indefinite
    knobs = QUAD_KNOBS
    family: ClassVar[str] = ""
    autograd_free = True

    @classmethod
    def build(
        cls,
        *,
        dataset: str | None,
        split: str,
        nodes: int,
        lam: float | None,
        dtype: torch.dtype,
        device: torch.device | str,
        seed: int,
        x0: str,
        family: str = "random",
        server_zeta2: float = 0.1,
        **knobs: Any,
    ) -> Quadratic:
        """Build the ``family`` quadratic (``lam`` is ``mu = lambda_min`` of the mean Hessian)."""
        if dataset not in (None, "synthetic"):
            raise ValueError(f"quadratic: generates its own data; got dataset {dataset!r}")
        if split != "contiguous":
            raise ValueError(f"quadratic: has no samples to split; got split {split!r}")
        from problems.quadratic_random import RandomQuadratic
        from problems.quadratic_tridiagonal import TridiagonalQuadratic

        families = {"random": RandomQuadratic, "tridiagonal": TridiagonalQuadratic}
        if family not in families:
            raise ValueError(f"quadratic: unknown family {family!r}; allowed: random, tridiagonal")
        problem = families[family](
            nodes, lam=lam, dtype=dtype, device=device, seed=seed, x0=x0, **knobs
        )
        problem.set_server(server_zeta2, seed)
        return problem

    # ------------------------------------------------------------------ the server's data
    server_data_hint = "give it an objective with set_server(server_zeta2)"
    #: ``||grad f_S - grad f||^2``, the same at every ``x`` (None until :meth:`set_server`).
    server_zeta2: float | None = None

    def set_server(self, server_zeta2: float, seed: int = 0) -> None:
        """Give the server the objective ``f_S(x) = f(x) + <s, x>`` (a synthetic quadratic has
        no samples to hold out): ``s`` has a direction drawn from a stream keyed by ``seed``
        and ``||s||^2 = server_zeta2``, so ``||grad f_S(x) - grad f(x)||^2 = server_zeta2``
        exactly at every ``x``; 0 gives the server ``f`` itself."""
        z = check_positive(self.name, "server_zeta2", server_zeta2, allow_zero=True)
        u = np.random.default_rng([seed, tags.SERVER_DATA]).standard_normal(self.d)
        s = u * math.sqrt(z) / np.linalg.norm(u)
        self._server_shift = torch.from_numpy(s).to(self.device, self.dtype)
        self.server_zeta2 = z

    @property
    def has_server_data(self) -> bool:
        return self.server_zeta2 is not None

    def _server_grad(self, x: torch.Tensor) -> torch.Tensor:
        return self._full_grad(x) + self._server_shift

    def _init_noise(self, grad_noise: float) -> None:
        self.grad_noise = check_positive(self.name, "grad_noise", grad_noise, allow_zero=True)

    def _select(self) -> None:
        self._q_held = self._q[self.nodes]

    def _hess_rows(self, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # Exact Hessians: ``grad^2 f_i = Q_i`` at every point, the families' (exact) smoothness
    # matrices.
    hessians = True

    def _hess(self, X: torch.Tensor) -> torch.Tensor:
        return self.smoothness_matrices().to(self.device, self.dtype)

    def _hess_mean(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x @ self._hess_mean(x) - self._q.mean(0) @ x

    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        return self._hess_mean(x) - self._q.mean(0)

    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        return (0.5 * X * self._hess_rows(X) - self._q_held * X).sum(1)

    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        return self._hess_rows(X) - self._q_held

    def _sample(self, streams: Streams, batch_size: int) -> Batch:
        scale = self.grad_noise / math.sqrt(batch_size)
        noise = scale * streams.normal(self.d, dtype=torch.float64).to(self.dtype)
        return Batch(nodes=self.nodes, size=batch_size, noise=noise)

    def _batch_grad(self, X: torch.Tensor, batch: Batch) -> torch.Tensor:
        return self._grad(X) + batch.noise
