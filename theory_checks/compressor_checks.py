"""Every registered compressor's declared constant against Monte Carlo (the property tests'
machinery, ``compressors.montecarlo``), on adversarial vectors and the worst case."""

from __future__ import annotations

import torch

from compressors import COMPRESSORS, Compressor
from compressors.montecarlo import declared_constant, error_ratios, estimate
from theory_checks.base import Check, Outcome

D = 100


def _vectors(d: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    one_hot = torch.zeros(d, dtype=torch.float64)
    one_hot[3] = 1.0
    heavy = torch.empty(d, dtype=torch.float64).cauchy_(generator=g)
    return {
        "gaussian": torch.randn(d, generator=g, dtype=torch.float64),
        "one-hot": one_hot,
        "constant": torch.ones(d, dtype=torch.float64),
        "heavy-tailed": heavy,
        "tiny": 1e-30 * torch.randn(d, generator=g, dtype=torch.float64),
        "huge": 1e30 * torch.randn(d, generator=g, dtype=torch.float64),
    }


def _label(c: Compressor) -> str:
    try:
        return c.spec()
    except ValueError:  # not in the registry (a user's subclass)
        return type(c).__name__


def check_compressor(c: Compressor, fast: bool) -> Outcome:
    decl = declared_constant(c, D)
    if decl is None:
        return Outcome(
            _label(c), "in neither class (no constant declared)", "nothing to check", True, "-"
        )
    label, bound = decl
    draws = 4000 if fast else 40000
    worst = c.worst_case(D)
    vecs = _vectors(D) | ({"worst case": worst} if worst is not None else {})
    ests = {name: estimate(error_ratios(c, x, draws, seed=7)[0]) for name, x in vecs.items()}
    name, top = max(ests.items(), key=lambda kv: kv[1].mean)
    ok = all(e.at_most(bound) for e in ests.values())
    measured = f"max E ratio {top} at {name}"
    predicted = f"E||C(x)-x||^2/||x||^2 <= {label} = {bound:.4g}"
    if worst is not None:
        tight = ests["worst case"].at_least(0.9 * bound)
        ok = ok and tight
        predicted += " (attained at the worst case)"
        measured += f"; worst case {ests['worst case']}"
    tol = f"5 standard errors over {draws} draws; tight: >= 90% at the worst case"
    return Outcome(f"{_label(c)}, d={D}", predicted, measured, ok, tol)


def _run(fast: bool) -> list[Outcome]:
    out = []
    for cls in COMPRESSORS.values():
        examples = cls.examples()
        for c in examples[:1] if fast else examples:
            c = c.bind(c.n) if getattr(c, "n", None) is not None else c.bind(4)
            out.append(check_compressor(c, fast))
    return out


CHECKS = [
    Check(
        "compressors.declared-constants",
        "each compressor's paper (its docstring); Monte-Carlo protocol of THEORY §1.3",
        _run,
        fast=True,
    ),
]
