"""``R`` copies of one problem's nodes, for ``R`` runs that advance together in one process.

A batch of runs that differ only in scalars (a step multiplier) holds its per-node state as
``(R m, d)`` rows, run ``r``'s node ``j`` in row ``r m + j``, and its server vectors as
``(R, d)``: the same layout as one run with ``R m`` nodes, which is what the methods, the
compressors and the comm layer already handle. :class:`Tiled` answers a method's calls in that
layout: ``grad`` at the runs' ``R`` server points is one pass over the data for all of them
(:meth:`problems.base.Problem.grad_points`, a product with ``R`` right-hand sides), and every
other call is the original problem's, run by run.

The runner's log rows need ``f`` and ``grad f`` at the runs' iterates. Where a step takes its
gradients at the iterate it then logs (EF21), its own pass gives them (with the losses, when
the runner says the next step is logged); where the next step takes them at the logged iterate
(EF14), the log rows' pass gives that step its gradients. Either way a logged step costs one
pass, not two, and the numbers are the same.

``exact=True`` computes every gradient as the single run does (one :meth:`grad` call per run):
a batched run then equals the same run alone bit for bit; by default the one-pass product is
used, equal to rounding (its sums run in another order).
"""

from __future__ import annotations

from typing import Any

import torch

from problems.base import Batch, Problem


class Tiled:
    """``problem`` held ``runs`` times (see the module docstring)."""

    def __init__(self, problem: Problem, runs: int, exact: bool = False) -> None:
        if runs < 1:
            raise ValueError(f"runs must be >= 1, got {runs}")
        self.base = problem
        self.runs = int(runs)
        self.exact = bool(exact)
        self.nodes = problem.nodes.repeat(self.runs)
        self._seen: tuple | None = None  # the last points of grad_points, with f and grad f
        # the points of the last log rows' pass, with each node's gradient there: the next
        # step's gradients when it takes them at these points (EF14 logs the iterate that its
        # next step differentiates)
        self._ahead: tuple | None = None
        # set by the runner when the next step is logged: the gradient pass then computes f too
        self.log_next = False
        self.x0 = problem.x0.expand(self.runs, problem.d).clone()

    def __getattr__(self, name: str) -> Any:
        # n, d, dtype, device, consts, x_star, name, ...: the problem's own
        return getattr(self.base, name)

    @property
    def m(self) -> int:
        return self.runs * self.base.m

    def take(self, keep: list[int]) -> Tiled:
        """The batch of the runs at positions ``keep`` (runs that finished leave it)."""
        return Tiled(self.base, len(keep), self.exact)

    # ------------------------------------------------------------------ the methods' calls
    def _per_run(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``x`` as each run's argument: a shared ``(d,)`` point, a run's ``(d,)`` row of an
        ``(R, d)`` tensor, or its ``(m, d)`` block of an ``(R m, d)`` tensor."""
        b, R = self.base, self.runs
        if x.shape == (b.d,):
            return [x] * R
        if x.dim() == 2 and x.shape[0] == R and x.shape[1] == b.d and R != self.m:
            return list(x)
        if x.dim() == 2 and x.shape[0] == self.m:
            return list(x.view(R, b.m, b.d))
        raise ValueError(
            f"{b.name}: a batch of {R} runs takes points of shape ({b.d},), ({R}, {b.d}) or "
            f"({self.m}, {b.d}), got {tuple(x.shape)}"
        )

    def grad(self, x: torch.Tensor, batch: Batch | None = None) -> torch.Tensor:
        b = self.base
        if x.shape == (b.d,):
            return b.grad(x, batch).repeat(self.runs, 1)
        if batch is None and not self.exact and x.dim() == 2 and x.shape[0] == self.runs:
            if x.shape[0] != self.m:
                ahead, self._ahead = self._ahead, None
                if ahead is not None and torch.equal(ahead[0], x):
                    # the log rows' pass was at these points: its gradients, the same numbers
                    self._seen = ahead if self.log_next else None
                    return ahead[3].reshape(self.m, b.d)
                if not (b.points_with_loss and self.log_next):
                    self._seen = None
                    return b.grad_points(x).reshape(self.m, b.d)
                G, L = b.grad_points(x, with_loss=True)
                # f and grad f at these points, kept for the log rows (all nodes are held)
                self._seen = (x.detach().clone(), L.mean(dim=1), G.mean(dim=1), G)
                return G.reshape(self.m, b.d)
        return torch.cat([b.grad(p, batch) for p in self._per_run(x)])

    def grad_diff(self, x: torch.Tensor, y: torch.Tensor, batch: Batch | None = None):
        pairs = zip(self._per_run(x), self._per_run(y), strict=True)
        return torch.cat([self.base.grad_diff(p, q, batch) for p, q in pairs])

    def sample(self, rng, batch_size: int) -> Batch:
        """The runs share their seed, so every run draws the same minibatch: run 0's rows of
        ``rng`` draw it, and each run's gradient uses it."""
        from streams import Streams

        streams = Streams.coerce(rng, self.m, device=self.base.device)
        return self.base.sample(streams[: self.base.m], batch_size)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.base.loss(p) for p in self._per_run(x)])

    def full_grad(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.base.full_grad(p) for p in self._per_run(x)])

    def node_loss(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.base.node_loss(p) for p in self._per_run(x)])

    def evaluate_points(
        self, X: torch.Tensor, which: list[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``f`` and ``grad f`` at the points ``X`` ``(k, d)`` of the runs at positions
        ``which`` (the runner's log rows): taken from the last gradient pass when it was at
        these very points (EF21 computes its gradients at the iterate it logs), else one pass
        for all of them; with ``exact``, the single run's calls."""
        if self.exact:
            return _stack(self.base.loss, X), _stack(self.base.full_grad, X)
        seen = self._seen
        if seen is not None and which is not None and torch.equal(seen[0][which], X):
            return seen[1][which], seen[2][which]  # the step's own gradient pass, at X
        if self.base.points_with_loss:
            G, L = self.base.grad_points(X, with_loss=True)
            f, g = L.mean(dim=1), G.mean(dim=1)
            if which == list(range(self.runs)):  # every run's point: the next step may use it
                self._ahead = (X.detach().clone(), f, g, G)
            return f, g
        return self.base.loss_grad_points(X)

    def __repr__(self) -> str:
        return f"Tiled({self.base!r}, runs={self.runs})"


def _stack(fn, X: torch.Tensor) -> torch.Tensor:
    return torch.stack([fn(x) for x in X])
