"""Sweep selection never picks an unstable run, nor one that reaches tol and then blows up."""

from __future__ import annotations

import math

from experiments.config import Selection
from experiments.select import best, bits_to_tol, blew_up, run_score


def _history(values: list[float]) -> list[dict]:
    return [
        {"iter": str(t), "bits_up": str(100 * t), "grad_norm_sq": repr(v)}
        for t, v in enumerate(values)
    ]


def test_a_run_that_crosses_tol_and_then_blows_up_has_no_bits_to_tol():
    # reached tol = 1e-3 at t = 2, then rose to 3.4e6 (the case the audit found selected)
    rows = _history([1.0, 0.1, 1e-4, 1e-2, 3.4e6])
    assert blew_up(rows, "grad_norm_sq", 1e-3)
    assert bits_to_tol(rows, "grad_norm_sq", 1e-3) is None
    # ends above its start but never non-finite: also a blow-up
    assert blew_up(_history([1.0, 1e-4, 2.0]), "grad_norm_sq", 1e-3)
    # ends non-finite
    assert blew_up(_history([1.0, 1e-4, math.inf]), "grad_norm_sq", 1e-3)


def test_a_run_that_stays_near_tol_keeps_its_bits():
    rows = _history([1.0, 0.1, 1e-4, 5e-4, 2e-4])  # wobbles below 10 x max(best, tol)
    assert not blew_up(rows, "grad_norm_sq", 1e-3)
    assert bits_to_tol(rows, "grad_norm_sq", 1e-3) == 200.0


def _row(run_id: str, mult: float, status: str, value: float, bits: float | None) -> dict:
    return {
        "run_id": run_id,
        "label": "m",
        "step_mult": mult,
        "seed": 0,
        "status": status,
        "grad_norm_sq": value,
        "bits_to_tol": bits,
    }


def test_unstable_status_scores_inf_and_is_never_chosen():
    assert math.isinf(run_score(_row("a", 1.0, "unstable", 1e-9, 10.0), Selection()))
    table = [
        _row("a", 1.0, "completed", 1e-3, 500.0),
        _row("b", 2.0, "unstable", 1e-9, 100.0),  # better numbers, but unstable
        _row("c", 4.0, "diverged", math.inf, None),
    ]
    for sel in (
        Selection(rule="min_final", metric="grad_norm_sq"),
        Selection(rule="bits_to_tol", metric="grad_norm_sq", tol=1e-2),
    ):
        (win,) = best(table, sel)
        assert win["step_mult"] == 1.0 and win["run_ids"] == "a"
