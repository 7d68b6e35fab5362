"""Every registered compressor's declared constant against Monte Carlo (the property tests'
machinery, ``compressors.montecarlo``), on adversarial vectors and the worst case.

The claim (``compressors.declared-constants``): ``E||C(x) - x||^2/||x||^2`` is at most the
declared ``omega`` (unbiased) or ``1 - delta`` (contractive) on every test vector (the mean
less ``Z = 5`` standard errors, and ``1e-12`` relative for rounding), and where the compressor
names a worst case it is attained there (at least 90% of the bound). Not a rate (``rate=False``):
a constant of an operator, with no step.

Tight instance: the worst cases attain the bound, many of them deterministically or with no
spread (Top-K, scaled sign, Rank-r, PermK, Bernoulli, Rand-K at the all-ones vector: ratio
exactly ``1 - delta`` or ``omega``), so the correct method's margin is at rounding level by
design (``~1e-12``: the rounding slack of :meth:`compressors.montecarlo.Estimate.at_most` and
nothing else; identity's bound is 0). The vectors and worst cases are built in float64
explicitly; in float32, or with another BLAS summing in another order, a ratio one ulp above the
bound could flip the verdict without any bug.

Power: every compressor declaring half its ``omega`` or half its ``1 - delta`` (``overclaim``,
a constant too good to hold) and every compressor declaring twice its ``omega`` or half its
``delta`` (``underclaim``: a valid but loose constant, which the tightness at the worst case
rejects; theory steps built on it are needlessly small) must fail. ``underclaim`` is rejected by
the unbiased compressors with a worst case (Rand-K, PermK, natural, TernGrad, Bernoulli: 5 of
18 outcomes at margin ``~0.5``); for a contractive one with a small ``delta`` the loose ``1 -
delta/2`` stays within the 90% tightness (Top-K: 0.99 attained against 0.995 declared).
"""

from __future__ import annotations

import math

import torch

from compressors import COMPRESSORS, Compressor
from compressors.montecarlo import Z, declared_constant, error_ratios, estimate
from theory_checks.base import Check, Outcome, Variant

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


_ESTIMATES: dict[tuple[str, bool], dict] = {}


def _estimates(c: Compressor, fast: bool, key: str | None = None) -> dict:
    """Monte-Carlo ``E||C(x)-x||^2/||x||^2`` on each test vector (and the worst case); cached
    under ``key`` (the same operator declaring another constant reuses the draws)."""
    if key is not None and (key, fast) in _ESTIMATES:
        return _ESTIMATES[key, fast]
    draws = 4000 if fast else 40000
    worst = c.worst_case(D)
    if worst is not None:  # the tight instance: float64 whatever the compressor builds it in
        worst = worst.to(torch.float64)
    vecs = _vectors(D) | ({"worst case": worst} if worst is not None else {})
    ests = {name: estimate(error_ratios(c, x, draws, seed=7)[0]) for name, x in vecs.items()}
    if key is not None:
        _ESTIMATES[key, fast] = ests
    return ests


def check_compressor(c: Compressor, fast: bool, key: str | None = None) -> Outcome:
    """``c``'s declared constant against Monte Carlo (``key``: cache the draws under it)."""
    decl = declared_constant(c, D)
    if decl is None:
        return Outcome(
            _label(c), "in neither class (no constant declared)", "nothing to check", True, "-"
        )
    label, bound = decl
    draws = 4000 if fast else 40000
    ests = _estimates(c, fast, key)
    worst = ests.get("worst case")
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
    # room after the tolerance: the largest mean less Z standard errors (and rounding)
    low = max(e.mean - Z * e.se for e in ests.values()) - 1e-12 * max(1.0, bound)
    margin = 1.0 - low / bound if bound > 0 else (0.0 if low <= 1e-12 else -math.inf)
    if worst is not None and bound > 0:  # and the room above 90% at the worst case
        w = ests["worst case"]
        high = w.mean + Z * w.se + 1e-12 * max(1.0, bound)
        margin = min(margin, high / (0.9 * bound) - 1.0)
    return Outcome(f"{_label(c)}, d={D}", predicted, measured, ok, tol, margin)


def declaring(c: Compressor, omega, delta, name: str) -> Compressor:
    """``c`` declaring a constant it does not have: ``omega(true omega)`` (unbiased) and
    ``delta(true delta)`` (contractive); the same operator, its class named ``name``."""
    cls = type(c)
    sub = type(f"{name}{cls.__name__}", (cls,), {
        "omega": lambda self, d: omega(cls.omega(self, d)),
        "delta": lambda self, d: delta(cls.delta(self, d)),
        "spec": lambda self: f"{cls.spec(self)} ({name.lower()})",
    })  # fmt: skip
    out = object.__new__(sub)
    out.__dict__.update(c.__dict__)
    return out


def overclaiming(c: Compressor) -> Compressor:
    """``c`` declaring half its ``omega`` (unbiased) and ``delta' = (1 + delta)/2``
    (contractive: half its ``1 - delta``); the same operator."""
    return declaring(c, lambda w: 0.5 * w, lambda dl: 0.5 * (1.0 + dl), "Overclaiming")


def underclaiming(c: Compressor) -> Compressor:
    """``c`` declaring twice its ``omega`` (unbiased) and half its ``delta`` (contractive); the
    same operator, with a valid but loose constant."""
    return declaring(c, lambda w: 2.0 * w, lambda dl: 0.5 * dl, "Underclaiming")


V_OVER = Variant("overclaim", "wrong-constant",
                 "every compressor declaring half its omega (unbiased) or half its 1 - delta "
                 "(contractive): a too-small omega / too-large delta")  # fmt: skip
V_UNDER = Variant("underclaim", "wrong-constant",
                  "every compressor declaring twice its omega (unbiased) or half its delta "
                  "(contractive): valid but loose, not attained at the worst case")  # fmt: skip
WRAP = {None: lambda c: c, "overclaim": overclaiming, "underclaim": underclaiming}


def _run(fast: bool, variant: str | None = None) -> list[Outcome]:
    out = []
    for cls in COMPRESSORS.values():
        examples = cls.examples()
        for c in examples[:1] if fast else examples:
            c = c.bind(c.n) if getattr(c, "n", None) is not None else c.bind(4)
            key = f"{type(c).__name__}:{c!r}"
            out.append(check_compressor(WRAP[variant](c), fast, key))
    return out


CHECKS = [
    Check(
        "compressors.declared-constants",
        "each compressor's paper (its docstring); Monte-Carlo protocol of THEORY §1.3",
        _run,
        fast=True,
        variants=(V_OVER, V_UNDER),
    ),
]
