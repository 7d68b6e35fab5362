"""What a problem can give beyond ``f``, gradients and minibatches: the capabilities a method
may need, declared as protocols.

A method names the capabilities it needs (``Algorithm.requires``, e.g. FedNL's
``("hessians",)``), and they are checked when the method is built for a problem, before its
first step: a missing one is a ``ValueError`` (exit 2 on the command line) naming the method,
the capability, the problem and which problems have it, never an ``AttributeError`` mid-run.

- ``hessians``: exact per-node Hessians, :meth:`problems.base.Problem.hess` (GLMs, quadratics);
- ``server_data``: an objective of the server's own, :meth:`problems.base.Problem.server_grad`
  (given by a knob such as ``--problem-opt server_rows=K``);
- ``smoothness_matrices``: the nodes' smoothness matrices ``L_i``,
  :meth:`problems.base.Problem.smoothness_matrices`;
- ``objective``: an objective ``f`` whose gradients ``grad`` returns, which every problem has
  but a variational inequality (``variational = True``, e.g. ``quadratic-game``: ``grad`` is an
  operator ``F_i`` and ``loss`` the distance to the solution). :func:`check_kind` asks it of
  every method that does not declare ``solves_vi = True``: a minimisation method's steps and
  theory assume a gradient field and ``f``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "CAPABILITIES",
    "Capability",
    "HasHessians",
    "HasServerData",
    "check",
    "check_kind",
    "missing",
]


@runtime_checkable
class HasHessians(Protocol):
    """Exact per-node Hessians."""

    hessians: bool

    def hess(self, x_i: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class HasServerData(Protocol):
    """An objective of the server's own."""

    has_server_data: bool

    def server_grad(self, x: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class Capability:
    """A capability: what it is, how to tell whether a problem has it, and how to get one."""

    what: str
    present: Callable[[Any], bool]
    hint: Callable[[Any], str]


def _hessian_problems(_problem) -> str:
    from problems.registry import PROBLEMS

    names = [name for name, cls in PROBLEMS.items() if getattr(cls, "hessians", False)]
    return f"problems with them: {', '.join(names)}"


CAPABILITIES: dict[str, Capability] = {
    "hessians": Capability(
        "exact per-node Hessians",
        lambda p: bool(getattr(p, "hessians", False)) and isinstance(p, HasHessians),
        _hessian_problems,
    ),
    "server_data": Capability(
        "data of the server's own",
        lambda p: bool(getattr(p, "has_server_data", False)),
        lambda p: getattr(p, "server_data_hint", "no way to give the server data"),
    ),
    "smoothness_matrices": Capability(
        "the nodes' smoothness matrices L_i",
        lambda p: p.smoothness_matrices() is not None,
        lambda p: "the GLMs (logreg, least-squares, ...) and the quadratics know them",
    ),
    "objective": Capability(
        "an objective f to minimise (its gradients, f and f*)",
        lambda p: not getattr(p, "variational", False),
        lambda p: (
            "it is a variational inequality (an operator F, no objective): use a method "
            "that solves VIs (python -m algorithms.run --list: masha1, ...)"
        ),
    ),
}


def missing(problem, required: tuple[str, ...]) -> list[str]:
    """The capabilities of ``required`` that ``problem`` lacks (``KeyError`` for a name that is
    not a capability: a method declaring it is a registry error)."""
    return [name for name in required if not CAPABILITIES[name].present(problem)]


def check(method: str, problem, required: tuple[str, ...]) -> None:
    """``ValueError`` naming the first capability of ``required`` that ``problem`` lacks."""
    for name in missing(problem, required):
        cap = CAPABILITIES[name]
        pname = getattr(problem, "name", "") or type(problem).__name__
        raise ValueError(
            f"{method} needs {cap.what} ({name}), which problem {pname!r} does not give; "
            f"{cap.hint(problem)}"
        )


def check_kind(method: str, method_cls, problem) -> None:
    """``ValueError`` when ``problem`` is a variational inequality and ``method_cls`` does not
    declare ``solves_vi = True`` (its steps and theory assume the gradients of an objective)."""
    if not getattr(method_cls, "solves_vi", False):
        check(method, problem, ("objective",))
