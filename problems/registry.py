"""Problem registry and the factory the command line uses.

``PROBLEMS`` maps each ``--problem`` name to its class; every class has a ``build`` classmethod
taking the common options (``dataset``, ``split``, ``nodes``, ``lam``, ``dtype``, ``device``,
``seed``, ``x0``) and its own ``knobs`` (a dict of name -> (default, help)).
"""

from __future__ import annotations

from typing import Any

import torch

from problems.base import Problem
from problems.deep_nets import CNNProblem, MLPProblem, ResNet18Problem
from problems.least_squares import LeastSquares
from problems.logreg import LogReg
from problems.logreg_nonconvex import LogRegNonconvex
from problems.quadratic import Quadratic
from problems.quadratic_game import QuadraticGame
from problems.sigmoid_squared import SigmoidSquared
from problems.torch_model import TorchModel
from streams import plugins
from streams.suggest import did_you_mean

__all__ = ["PROBLEMS", "SPLIT_HELP", "X0_HELP", "make_problem", "parse_dtype"]

# Command-line help of the common options (the runner and ``python -m problems`` share it).
SPLIT_HELP = (
    "contiguous (node i: rows [floor(i N/n), floor((i+1) N/n)), file order) | contiguous:last "
    "(EF21 code: N//n rows each, the remainder on the last node) | contiguous:drop (3PC/CLAG "
    "code: N//n rows each, the remainder dropped) | contiguous:array (DASHA code: "
    "np.array_split, the first (N mod n) nodes one row more) | iid | sorted | dirichlet:ALPHA"
)
X0_HELP = (
    "default | zeros (the origin) | ones | randn[:SCALE] (x0 ~ N(0, SCALE^2 I), SCALE 1 by "
    "default, drawn from a stream keyed by --seed alone: the same on every rank and device; "
    "the EF21 experiments use N(0, I), some scripts N(0, 4 I))"
)

PROBLEMS: dict[str, type[Problem]] = {
    "quadratic": Quadratic,
    "logreg": LogReg,
    "logreg-nonconvex": LogRegNonconvex,
    "sigmoid-squared": SigmoidSquared,
    "least-squares": LeastSquares,
    "quadratic-game": QuadraticGame,
    "mlp": MLPProblem,
    "cnn": CNNProblem,
    "resnet18": ResNet18Problem,
}
# Installed packages' classes under the entry-point group 'compzoo.problems', added on first use
# (streams.plugins).
PROBLEMS = plugins.Registry("compzoo.problems", Problem, PROBLEMS)

_DTYPES = {
    "float64": torch.float64,
    "double": torch.float64,
    "float32": torch.float32,
    "float": torch.float32,
}


def parse_dtype(dtype: torch.dtype | str | None, name: str) -> torch.dtype:
    """A torch dtype from ``float64``/``float32`` (None: float32 for deep nets, else float64)."""
    if dtype is None:
        return torch.float32 if issubclass(PROBLEMS[name], TorchModel) else torch.float64
    if isinstance(dtype, torch.dtype) and dtype in (torch.float64, torch.float32):
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"dtype must be float64 or float32, got {dtype!r}")


def make_problem(
    name: str,
    *,
    dataset: str | None = None,
    split: str = "contiguous",
    nodes: int = 10,
    lam: float | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str = "cpu",
    seed: int = 0,
    x0: str = "default",
    **knobs: Any,
) -> Problem:
    """Build the problem ``name`` of :data:`PROBLEMS`.

    Args:
        name: registry name (``--problem``).
        dataset: ``--dataset`` (None: the problem's default, ``synthetic`` for GLMs, ``digits``
            for ``mlp``/``cnn``, synthetic images for ``resnet18``).
        split: ``contiguous``, ``contiguous:last``, ``contiguous:drop``, ``contiguous:array``,
            ``iid``, ``sorted`` or ``dirichlet:ALPHA`` (:mod:`problems.splits`).
        nodes: number of nodes ``n``.
        lam: ``--lambda`` (None: the problem's default).
        dtype: float64 or float32 (None: float32 for deep nets, float64 otherwise).
        device: where tensors live.
        seed: seeds synthetic data, the ``iid``/``dirichlet`` splits and ``--x0 randn``.
        x0: ``default``, ``zeros`` (the origin), ``ones`` or ``randn[:SCALE]``
            (``N(0, SCALE^2 I)`` from a stream keyed by ``seed`` alone, so the same start on
            every rank and device; ``randn`` is the papers' ``x0 ~ N(0, I)``).
        **knobs: the problem's own knobs (``PROBLEMS[name].knobs``); None means default.
    """
    if name not in PROBLEMS:
        hint = did_you_mean(name, PROBLEMS)
        raise ValueError(f"unknown problem {name!r}{hint}; allowed: {', '.join(PROBLEMS)}")
    cls = PROBLEMS[name]
    unknown = sorted(set(knobs) - set(cls.knobs))
    if unknown:
        raise ValueError(
            f"{name}: unknown option(s) {unknown}; allowed: {', '.join(cls.knobs) or 'none'}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"{name}: nodes must be a positive integer, got {nodes!r}")
    if not isinstance(x0, str):
        raise ValueError(f"x0 must be a string such as 'zeros' or 'randn', got {x0!r}")
    given = {k: v for k, v in knobs.items() if v is not None}
    if dataset is None and not issubclass(cls, (Quadratic, TorchModel)):
        dataset = "synthetic"
    return cls.build(
        dataset=dataset,
        split=split,
        nodes=nodes,
        lam=lam,
        dtype=parse_dtype(dtype, name),
        device=device,
        seed=seed,
        x0=x0,
        **given,
    )
