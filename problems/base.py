"""The problem interface: ``f = (1/n) sum_i f_i``, per-node gradients as rows, exact constants.

A node is a row. A :class:`Problem` holds the nodes listed in ``nodes`` (all ``n`` of them in a
simulation, one per rank under ``torch.distributed``) and answers, for all of them at once and
without a Python loop over nodes:

* ``grad(x_i)``: row ``j`` is the full local gradient of node ``nodes[j]`` at ``x_i[j]``;
* ``grad(x_i, batch)``: the stochastic gradient on a :class:`Batch` drawn by :meth:`sample`; the
  same batch can be evaluated at two points, which MARINA, DASHA and PAGE need
  (``grad_i(x; xi) - grad_i(y; xi)``);
* ``loss(x)`` and ``full_grad(x)`` of the full objective ``f`` at one point.

The theory's constants are in :class:`Consts` (Szlendak et al. 2021, arXiv 2110.03300, for the
Hessian variance ``L_pm``; Richtarik et al. 2021, arXiv 2106.05203, for ``L_tilde``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from streams import Streams, tags

__all__ = ["Batch", "Consts", "Problem", "RngLike", "parse_x0"]

RngLike = Streams | torch.Generator | list | tuple | int

# Stream tag of the seeded random start ``--x0 randn``.


@dataclass(frozen=True, eq=False)
class Consts:
    """Constants the theory uses; ``None`` where unknown or undefined.

    Attributes:
        L: smoothness of ``f``.
        L_i: float64 ``(n,)``, smoothness of each ``f_i`` (all ``n`` nodes, whatever is held).
        L_tilde: ``sqrt(mean_i L_i^2)``.
        L_max: ``max_i L_i``.
        L_pm: Hessian variance, the smallest constant with
            ``(1/n) sum_i ||grad f_i(x) - grad f_i(y)||^2 - ||grad f(x) - grad f(y)||^2
            <= L_pm^2 ||x - y||^2`` (Szlendak et al. 2021, arXiv 2110.03300, Assumption 1.4).
        mu: strong convexity (or PL) constant of ``f``.
        f_star: ``min f`` (convex problems).
        zeta2: heterogeneity at the optimum, ``(1/n) sum_i ||grad f_i(x*)||^2``.
    """

    L: float | None = None
    L_i: torch.Tensor | None = None
    L_tilde: float | None = None
    L_max: float | None = None
    L_pm: float | None = None
    mu: float | None = None
    f_star: float | None = None
    zeta2: float | None = None

    def __post_init__(self) -> None:
        if self.L_i is not None:
            if self.L_i.dim() != 1:
                raise ValueError(f"L_i must be 1-D, got shape {tuple(self.L_i.shape)}")
            object.__setattr__(self, "L_i", self.L_i.detach().to("cpu", torch.float64))

    @classmethod
    def from_L_i(cls, L_i: torch.Tensor | Any, **kw: float | None) -> Consts:
        """Constants with ``L_tilde`` and ``L_max`` derived from ``L_i``."""
        L_i = torch.as_tensor(L_i, dtype=torch.float64).reshape(-1)
        return cls(
            L_i=L_i,
            L_tilde=float(torch.sqrt(torch.mean(L_i**2))),
            L_max=float(L_i.max()),
            **kw,
        )

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """JSON-ready values; ``L_i`` as a min/mean/max summary (all values when ``full``)."""
        out: dict[str, Any] = {}
        for key in ("L", "L_tilde", "L_max", "L_pm", "mu", "f_star", "zeta2"):
            v = getattr(self, key)
            out[key] = None if v is None else float(v)
        if self.L_i is None:
            out["L_i"] = None
        else:
            out["L_i"] = {
                "n": self.L_i.numel(),
                "min": float(self.L_i.min()),
                "mean": float(self.L_i.mean()),
                "max": float(self.L_i.max()),
            }
            if full:
                out["L_i"]["values"] = [float(v) for v in self.L_i]
        return out


@dataclass(frozen=True, eq=False)
class Batch:
    """One minibatch per held node, drawn once and reusable at any number of points.

    Attributes:
        nodes: int64 ``(m,)``, the nodes the rows belong to.
        size: samples per node.
        idx: int64 ``(m, size)``, sample indices (into the problem's node-sorted rows), or None.
        noise: ``(m, d)`` additive gradient noise (synthetic quadratics), or None.
    """

    nodes: torch.Tensor
    size: int
    idx: torch.Tensor | None = None
    noise: torch.Tensor | None = None


class _Lazy:
    """A value computed on first use and shared by a problem and its ``local`` copies."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn: Callable[[], Any] | None = fn
        self._value: Any = None

    def get(self) -> Any:
        if self._fn is not None:
            self._value = self._fn()
            self._fn = None
        return self._value


def parse_x0(spec: str, d: int, default: Callable[[], torch.Tensor], seed: int) -> torch.Tensor:
    """The start point named by ``--x0``: ``default``, ``zeros``, ``ones``, ``randn[:SCALE]``.

    ``randn`` draws ``N(0, SCALE^2 I)`` (SCALE defaults to 1; the EF21 experiments use 1 and 2)
    from a stream keyed by ``seed``, identical on every rank and device. Returns float64 on CPU.
    """
    name, _, arg = spec.partition(":")
    if name == "default" and not arg:
        return default().to("cpu", torch.float64)
    if name in ("zeros", "ones") and not arg:
        return (torch.zeros if name == "zeros" else torch.ones)(d, dtype=torch.float64)
    if name == "randn":
        try:
            scale = float(arg) if arg else 1.0
        except ValueError:
            scale = math.nan
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"x0 randn scale must be a positive number, got {spec!r}")
        return scale * Streams.shared(seed, 1, tags.X0).normal(d)[0]
    raise ValueError(f"x0 must be one of default, zeros, ones, randn[:SCALE], got {spec!r}")


class Problem:
    """``min_x f(x) = (1/n) sum_i f_i(x)``, answered for the held nodes as rows.

    Subclasses implement ``_node_loss``, ``_grad``, ``_batch_grad``, ``_loss``, ``_full_grad``,
    ``_sample`` and ``_select`` (re-derive the held-node structures after ``local``), and pass a
    constants function to ``__init__``; constants are computed on first access of ``consts``.

    Attributes:
        name: registry name.
        n: total number of nodes.
        d: dimension of ``x``.
        nodes: int64 ``(m,)``, the nodes this object holds (default ``arange(n)``).
        dtype, device: of every tensor returned.
        convex: whether every ``f`` is convex (then ``f_star`` and ``x_star`` are computed).
        x0: ``(d,)`` start point.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    convex: ClassVar[bool] = False
    #: knob name -> (default, help); the keyword arguments ``make_problem`` accepts.
    knobs: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: the step a method uses with ``--step theory`` when its theory needs constants this problem
    #: does not know (deep nets); None: such a run must give ``--step``.
    default_step: ClassVar[float | None] = None
    #: Whether the problem's functions make no use of torch's autograd (gradients in closed
    #: form): the runner then steps methods in torch's inference mode
    #: (:func:`algorithms.base.step_mode`). A problem that differentiates by autograd, or may
    #: (a subclass of this class written elsewhere), keeps False.
    autograd_free: ClassVar[bool] = False

    def __init__(
        self,
        n: int,
        d: int,
        *,
        consts: Callable[[], Consts],
        x0: torch.Tensor,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
        x_star: Callable[[], torch.Tensor | None] | None = None,
    ) -> None:
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
        self.n = int(n)
        self.d = int(d)
        self.dtype = dtype
        self.device = torch.device(device)
        self.nodes = torch.arange(self.n, dtype=torch.int64, device=self.device)
        self.x0 = x0.to(self.device, dtype)
        self._consts = _Lazy(consts)
        self._x_star = _Lazy(x_star if x_star is not None else lambda: None)

    # ------------------------------------------------------------------ shared facts
    @property
    def m(self) -> int:
        """Number of nodes held."""
        return self.nodes.numel()

    @property
    def consts(self) -> Consts:
        """The constants (computed on first access, then shared with ``local`` copies)."""
        return self._consts.get()

    @property
    def x_star(self) -> torch.Tensor | None:
        """A minimiser of ``f`` where known (convex problems), else None."""
        x = self._x_star.get()
        return None if x is None else x.to(self.device, self.dtype)

    def local(self, nodes: torch.Tensor | list[int] | int) -> Problem:
        """The same problem holding only ``nodes`` (e.g. one node per rank); constants shared."""
        ids = torch.as_tensor(nodes, dtype=torch.int64).reshape(-1)
        if ids.numel() == 0:
            raise ValueError(f"{self.name}: local() needs at least one node, got {ids.tolist()}")
        if int(ids.min()) < 0 or int(ids.max()) >= self.n:
            raise ValueError(f"{self.name}: nodes must lie in [0, {self.n}), got {ids.tolist()}")
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"{self.name}: nodes must be distinct, got {ids.tolist()}")
        new = copy.copy(self)
        new.nodes = ids.to(self.device)
        new._select()
        return new

    # ------------------------------------------------------------------ public maths
    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """``f(x) = (1/n) sum_i f_i(x)`` over all ``n`` nodes, a 0-dim tensor."""
        return self._loss(self._point(x))

    def node_loss(self, x_i: torch.Tensor) -> torch.Tensor:
        """``(m,)``: entry ``j`` is ``f_{nodes[j]}(x_i[j])``."""
        return self._node_loss(self._rows(x_i))

    def full_grad(self, x: torch.Tensor) -> torch.Tensor:
        """``grad f(x)``, shape ``(d,)``."""
        return self._full_grad(self._point(x))

    # ------------------------------------------------------------------ the server's data
    #: How a run gives the server a data set of its own (the hint of the error below).
    server_data_hint: ClassVar[str] = "this problem has no way to give the server data"

    @property
    def has_server_data(self) -> bool:
        """Whether the server holds an objective ``f_S`` of its own: a small private data set
        that no node holds (CAFe-S, Ortega et al., arXiv 2512.22623). Default: no."""
        return False

    def server_grad(self, x: torch.Tensor) -> torch.Tensor:
        """``grad f_S(x)``, shape ``(d,)``: the gradient of the server's own objective (its
        data; the same on every process, whatever nodes it holds). ``ValueError`` naming how
        to give the server data when the problem has none."""
        if not self.has_server_data:
            raise ValueError(f"{self.name}: the server holds no data: {self.server_data_hint}")
        return self._server_grad(self._point(x))

    def _server_grad(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def grad(self, x_i: torch.Tensor, batch: Batch | None = None) -> torch.Tensor:
        """Per-node gradients, ``(m, d)``: row ``j`` is ``grad f_{nodes[j]}(x_i[j])``.

        Args:
            x_i: ``(m, d)`` (rows may differ) or ``(d,)`` (the same point for every node).
            batch: None for full local gradients, else a :class:`Batch` from :meth:`sample`
                (stochastic gradients on that batch; the same batch gives the same sample).
        """
        X = self._rows(x_i)
        if batch is None:
            return self._grad(X)
        self._check_batch(batch)
        return self._batch_grad(X, batch)

    def grad_diff(
        self, x_i: torch.Tensor, y_i: torch.Tensor, batch: Batch | None = None
    ) -> torch.Tensor:
        """``grad(x_i, batch) - grad(y_i, batch)``, ``(m, d)``: the gradient difference of the
        minibatch methods (VR-MARINA, DASHA-PAGE), on the same samples at both points. A
        problem may compute it in one pass over the samples (the GLMs do)."""
        X, Y = self._rows(x_i), self._rows(y_i)
        if batch is not None:
            self._check_batch(batch)
        return self._grad_diff(X, Y, batch)

    #: :meth:`grad_points` takes ``with_loss`` (each node's ``f_i`` at each point as well)
    points_with_loss: ClassVar[bool] = False

    def grad_points(self, P: torch.Tensor) -> torch.Tensor:
        """``(R, m, d)``: entry ``[r, j]`` is ``grad f_{nodes[j]}(P[r])``, every held node at each
        of ``R`` points ``P`` ``(R, d)`` (``R`` runs that advance together). This default calls
        :meth:`grad` at each point; a problem that can do better in one pass over its data (the
        GLMs: a product with ``R`` right-hand sides) overrides it."""
        return torch.stack([self.grad(p) for p in P])

    def prepare_points(self, R: int) -> None:
        """Make ready what :meth:`grad_points` at ``R`` points will use, as its first call
        would (a problem that chooses an engine for it by measurement chooses it here, and
        memoises it where the machine is quiet); by default nothing. A sweep calls it before
        its batches start (:func:`experiments.validate.resolve_runs`)."""

    def loss_grad_points(self, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``f`` ``(R,)`` and ``grad f`` ``(R, d)`` at each of ``R`` points ``(R, d)`` (what the
        runner logs for a batch of runs); by default :meth:`loss` and :meth:`full_grad` at
        each point."""
        f = torch.stack([self.loss(p) for p in P])
        return f, torch.stack([self.full_grad(p) for p in P])

    def _check_batch(self, batch) -> None:
        if not isinstance(batch, Batch):
            raise ValueError(f"batch must be a Batch from sample(), got {type(batch).__name__}")
        if batch.nodes.shape != self.nodes.shape or not torch.equal(
            batch.nodes.to(self.device), self.nodes
        ):
            raise ValueError(
                f"{self.name}: batch was drawn for nodes {batch.nodes.tolist()}, "
                f"but this problem holds {self.nodes.tolist()}"
            )

    def _grad_diff(self, X: torch.Tensor, Y: torch.Tensor, batch: Batch | None) -> torch.Tensor:
        if batch is None:
            return self._grad(X).sub_(self._grad(Y))
        return self._batch_grad(X, batch).sub_(self._batch_grad(Y, batch))

    def sample(self, rng: RngLike, batch_size: int) -> Batch:
        """Each held node draws its own minibatch of ``batch_size`` from its own row of ``rng``.

        Samples are drawn uniformly *with replacement* from the node's own samples (so any
        ``batch_size`` is allowed; quadratics draw additive noise instead, see
        :mod:`problems.quadratic`).

        ``rng`` is anything :meth:`Streams.coerce` accepts for ``m`` rows; row ``j``'s draw
        depends on that row's key alone, so simulated and distributed runs draw the same batch.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        streams = Streams.coerce(rng, self.m, device=self.device)
        return self._sample(streams, batch_size)

    # ------------------------------------------------------------------ exact Hessians
    #: whether :meth:`hess` is available (GLMs, quadratics); deep nets: no.
    hessians: ClassVar[bool] = False

    def hess(self, x_i: torch.Tensor) -> torch.Tensor:
        """Per-node Hessians, ``(m, d, d)``: entry ``j`` is ``grad^2 f_{nodes[j]}(x_i[j])``,
        exact and symmetric, all held nodes in one batched pass (second-order methods: FedNL,
        Safaryan et al. 2021, arXiv 2106.02969). ``x_i`` is ``(m, d)`` or ``(d,)`` as for
        :meth:`grad`. ``ValueError`` where the problem has no exact Hessians (deep nets)."""
        if not self.hessians:
            raise ValueError(
                f"{self.name}: exact per-node Hessians are not available for this problem; "
                "second-order methods need a GLM (logreg, least-squares, ...) or a quadratic"
            )
        return self._hess(self._rows(x_i))

    def _hess(self, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def _point(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.shape != (self.d,):
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{self.name}: x must have shape ({self.d},), got {shape}")
        return x.to(self.device, self.dtype)

    def _rows(self, x_i: torch.Tensor) -> torch.Tensor:
        if not isinstance(x_i, torch.Tensor):
            raise ValueError(f"{self.name}: x_i must be a tensor, got {type(x_i).__name__}")
        if x_i.shape == (self.d,):
            return x_i.to(self.device, self.dtype).expand(self.m, self.d)
        if x_i.shape != (self.m, self.d):
            raise ValueError(
                f"{self.name}: x_i must have shape ({self.m}, {self.d}) or ({self.d},), "
                f"got {tuple(x_i.shape)}"
            )
        return x_i.to(self.device, self.dtype)

    def _select(self) -> None:
        """Rebuild what depends on ``self.nodes`` (called by :meth:`local`)."""

    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _node_loss(self, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _full_grad(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _grad(self, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _batch_grad(self, X: torch.Tensor, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def _sample(self, streams: Streams, batch_size: int) -> Batch:
        raise NotImplementedError

    # ------------------------------------------------------------------ label flipping
    def label_flipped(self, nodes: torch.Tensor | list[int]) -> Problem:
        """The same problem with the labels of ``nodes``' samples negated (``b -> -b``): the
        data of label-flipping nodes (Byzantine attacks). Constants and ``x_star`` stay the
        original problem's. ``ValueError`` where the problem has no labels (the default)."""
        raise ValueError(
            f"{self.name} has no labels to flip: label flipping needs a classification problem "
            "(logreg, logreg-nonconvex)"
        )

    # ------------------------------------------------------------------ matrix smoothness
    def smoothness_matrices(self) -> torch.Tensor | None:
        """The held nodes' smoothness matrices, float64 ``(m, d, d)`` on the CPU, or None where
        unknown (deep nets; the default).

        Row ``j`` is a symmetric ``L_i`` (``i = nodes[j]``) with
        ``f_i(x) <= f_i(y) + <grad f_i(y), x - y> + (1/2) ||x - y||^2_{L_i}`` for all ``x, y``
        (Safaryan, Hanzely & Richtárik 2021, arXiv 2106.03524, matrix smoothness); its largest
        eigenvalue is at most the problem's ``L_i`` constant. Single ``L_i`` of a nonconvex
        ``f_i`` may be indefinite; methods whose theory needs them positive semidefinite check.
        """
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, d={self.d}, m={self.m}, dtype={self.dtype})"
