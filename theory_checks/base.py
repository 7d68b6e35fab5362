"""What a theory check is: a named claim of a paper, a setting, a prediction and a measurement.

A :class:`Check` runs and returns one or more :class:`Outcome` rows (one per setting, e.g. per
compressor). Each outcome states what theory predicts (a bound or an ordering, with its
number), what was measured, the tolerance and why, whether the claim held, and its signed
``margin`` (positive: the claim holds with that relative room; negative: it is violated).

**Power.** A check that passes on every variant of a method proves nothing. Each check names
the plausible broken variants it must reject (:class:`Variant`: no error feedback, no variance
reduction, a wrong shift step, a step larger than theory allows, AMSGrad removed, ...) and runs
them through the same code path: ``fn(fast, variant)`` with ``variant=None`` for the correct
method. :func:`run_power` runs the correct method and every variant; the check has power when
the correct method passes and every named variant fails (``python -m theory_checks --power``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = [
    "KINDS",
    "Check",
    "Outcome",
    "PowerRow",
    "Row",
    "Variant",
    "run_check",
    "run_power",
    "single_threaded",
]


def single_threaded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` with one torch intra-op thread, restoring the caller's setting: the checks'
    problems are tiny, and a thread pool only adds synchronisation (milliseconds per operation
    on a loaded machine)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return wrapper


@dataclass(frozen=True)
class Outcome:
    """One verdict: ``predicted`` and ``measured`` are human-readable with their numbers."""

    setting: str
    predicted: str
    measured: str
    passed: bool
    tolerance: str = "exact"
    margin: float | None = None


#: The kinds of broken variant a check can name (``--power`` prints them).
KINDS = (
    "no-error-feedback",  # DCGD (or the raw compressor) in place of the error-feedback method
    "no-variance-reduction",  # p = 1, DCGD at the method's step, no shift
    "wrong-shift",  # a shift / momentum / estimator step other than theory's
    "step-too-large",  # the step times the smallest c at which theory no longer guarantees
    "step-too-small",  # a tenth of the theory step: valid, but far slower than the claimed rate
    "no-amsgrad",  # COMP-AMS without its AMSGrad normalisation
    "wrong-constant",  # a constant (L, L_tilde, omega, delta, mu, ...) other than the true one
    "other",
)


@dataclass(frozen=True)
class Variant:
    """A plausible broken version of what a check tests; a check with power rejects it.

    Attributes:
        name: short id, unique within the check (``no-ef``, ``p=1``, ``step-x4``).
        kind: one of :data:`KINDS`.
        what: one line saying what is broken and why theory no longer guarantees the claim.
    """

    name: str
    kind: str
    what: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"variant kind must be one of {KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Check:
    """A claim of a paper, checked by ``fn(fast) -> list[Outcome]``.

    Attributes:
        name: unique id, ``family.claim`` (``--only`` matches it as a glob or substring).
        paper: the paper and theorem (or equation) the claim comes from.
        fn: runs the check, ``fn(fast)`` or, with variants, ``fn(fast, variant)`` where
            ``variant`` is ``None`` (the correct method) or a :class:`Variant` name; ``fast``
            asks for the reduced version (fewer seeds/iterations).
        fast: whether the check belongs to the fast subset run by the test suite.
        variants: the broken variants the check must reject (``--power``); at least two.
        rate: the claim is a rate (a contraction factor, an iteration count, an ``O(1/T)``
            decrease measured against the theory step's constant), not only a bound that any
            smaller step also meets: such a check names a ``step-too-small`` variant (a tenth
            of the theory step, judged against the theory step's rate) and must reject it.
    """

    name: str
    paper: str
    fn: Callable[..., list[Outcome]]
    fast: bool = True
    variants: tuple[Variant, ...] = ()
    rate: bool = False

    def __post_init__(self) -> None:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate variant names {names}")

    def run(self, fast: bool, variant: str | None = None) -> list[Outcome]:
        """The outcomes of the correct method (``variant=None``) or of a named variant."""
        if variant is None:
            return self.fn(fast)
        if variant not in {v.name for v in self.variants}:
            raise ValueError(f"{self.name} has no variant {variant!r}")
        return self.fn(fast, variant)


@dataclass(frozen=True)
class Row:
    """An outcome with the check it belongs to, as printed and saved."""

    check: str
    paper: str
    setting: str
    predicted: str
    measured: str
    verdict: str
    tolerance: str
    seconds: float
    margin: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PowerRow:
    """One line of the power table: the check on the correct method or on one broken variant.

    ``verdict`` is ``pass``/``FAIL`` for the correct method and ``rejected``/``ACCEPTED`` for a
    variant (``ACCEPTED``: the check passed a broken method, so it lacks power there).
    ``margin`` is the smallest outcome margin (``None`` where the outcomes give none).
    """

    check: str
    variant: str
    kind: str
    what: str
    verdict: str
    margin: float | None
    failed_outcomes: int
    outcomes: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict in ("pass", "rejected")

    def to_dict(self) -> dict:
        return asdict(self)


def _outcomes(check: Check, fast: bool, variant: str | None) -> tuple[list[Outcome], float, bool]:
    """Run one variant; returns the outcomes, the seconds and whether it crashed."""
    t0 = time.perf_counter()
    crashed = False
    try:
        outcomes = check.run(fast, variant)
    except Exception as e:  # noqa: BLE001 - a crashing check must fail visibly, not abort all
        outcomes, crashed = [Outcome("-", "runs", f"error: {type(e).__name__}: {e}", False)], True
    dt = time.perf_counter() - t0
    if not outcomes:
        outcomes, crashed = [Outcome("-", "at least one outcome", "none produced", False)], True
    return outcomes, dt, crashed


def run_check(check: Check, fast: bool) -> list[Row]:
    """Run ``check`` on the correct method; an exception is a failed row naming it (the
    catalogue goes on)."""
    outcomes, dt, _ = _outcomes(check, fast, None)
    return [
        Row(check.name, check.paper, o.setting, o.predicted, o.measured,
            "pass" if o.passed else "FAIL", o.tolerance, dt / len(outcomes), o.margin)
        for o in outcomes
    ]  # fmt: skip


def _min_margin(outcomes: list[Outcome]) -> float | None:
    m = [o.margin for o in outcomes if o.margin is not None]
    return min(m) if m else None


def run_power(check: Check, fast: bool) -> list[PowerRow]:
    """The check on the correct method, then on each of its broken variants.

    A variant counts as rejected when at least one of its outcomes fails; a variant whose run
    raises counts as accepted (a crash is not a rejection by the check). A check without
    variants gets one ``ACCEPTED`` row saying so: it has shown no power.
    """
    outcomes, dt, _ = _outcomes(check, fast, None)
    bad = sum(not o.passed for o in outcomes)
    rows = [PowerRow(check.name, "correct", "-", "the method as implemented",
                     "pass" if bad == 0 else "FAIL", _min_margin(outcomes), bad,
                     len(outcomes), dt)]  # fmt: skip
    if not check.variants:
        rows.append(PowerRow(check.name, "(none)", "-", "no broken variant named", "ACCEPTED",
                             None, 0, 0, 0.0))  # fmt: skip
    for v in check.variants:
        outcomes, dt, crashed = _outcomes(check, fast, v.name)
        bad = sum(not o.passed for o in outcomes)
        verdict = "rejected" if bad and not crashed else "ACCEPTED"
        what = v.what if not crashed else f"{v.what} [crashed: {outcomes[0].measured}]"
        rows.append(PowerRow(check.name, v.name, v.kind, what, verdict, _min_margin(outcomes),
                             bad, len(outcomes), dt))  # fmt: skip
    return rows
