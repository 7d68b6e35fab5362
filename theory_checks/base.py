"""What a theory check is: a named claim of a paper, a setting, a prediction and a measurement.

A :class:`Check` runs and returns one or more :class:`Outcome` rows (one per setting, e.g. per
compressor). Each outcome states what theory predicts (a bound or an ordering, with its
number), what was measured, the tolerance and why, and whether the claim held.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["Check", "Outcome", "Row", "run_check", "single_threaded"]


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


@dataclass(frozen=True)
class Check:
    """A claim of a paper, checked by ``fn(fast) -> list[Outcome]``.

    Attributes:
        name: unique id, ``family.claim`` (``--only`` matches it as a glob or substring).
        paper: the paper and theorem (or equation) the claim comes from.
        fn: runs the check; ``fast`` asks for the reduced version (fewer seeds/iterations).
        fast: whether the check belongs to the fast subset run by the test suite.
    """

    name: str
    paper: str
    fn: Callable[[bool], list[Outcome]]
    fast: bool = True


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

    def to_dict(self) -> dict:
        return asdict(self)


def run_check(check: Check, fast: bool) -> list[Row]:
    """Run ``check``; an exception is a failed row naming it (the catalogue goes on)."""
    t0 = time.perf_counter()
    try:
        outcomes = check.fn(fast)
    except Exception as e:  # noqa: BLE001 - a crashing check must fail visibly, not abort all
        outcomes = [Outcome("-", "runs", f"error: {type(e).__name__}: {e}", False)]
    dt = time.perf_counter() - t0
    if not outcomes:
        outcomes = [Outcome("-", "at least one outcome", "none produced", False)]
    return [
        Row(check.name, check.paper, o.setting, o.predicted, o.measured,
            "pass" if o.passed else "FAIL", o.tolerance, dt / len(outcomes))
        for o in outcomes
    ]  # fmt: skip
