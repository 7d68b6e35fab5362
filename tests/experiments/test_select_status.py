"""best.csv never names a winner for a group whose every multiplier failed: it says why."""

from __future__ import annotations

import pytest

from experiments.config import Selection
from experiments.select import best

TOL = Selection(rule="bits_to_tol", metric="grad_norm_sq", tol=1e-3)
FINAL = Selection(rule="min_final", metric="grad_norm_sq")


def rows(label: str, runs: list[tuple[float, int, str, str]]) -> list[dict]:
    """Summary rows of one group: ``(step_mult, seed, status, bits_to_tol or final value)``."""
    return [
        {"run_id": f"{label}_m{m}_s{s}", "status": status, "label": label, "algorithm": "ef21",
         "compressor": "topk:k=1", "step_mult": m, "seed": s, "grad_norm_sq": v,
         "bits_to_tol": v}
        for m, s, status, v in runs
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("runs", "selection", "status"),
    [
        ([(1, 0, "diverged", ""), (2, 0, "unstable", ""), (4, 0, "diverged", "")], TOL,
         "all diverged"),
        ([(1, 0, "failed", ""), (2, 0, "failed", "")], FINAL, "all failed"),
        ([(1, 0, "missing", ""), (2, 0, "missing", "")], FINAL, "none finished"),
        ([(1, 0, "completed", ""), (2, 0, "diverged", "")], TOL, "none reached tol"),
        ([(1, 0, "completed", "nan"), (2, 0, "failed", "")], FINAL, "no finite grad_norm_sq"),
        # each multiplier has one seed that never got there: no multiplier scores
        ([(1, 0, "completed", "10"), (1, 1, "diverged", ""), (2, 0, "failed", ""),
          (2, 1, "completed", "5")], TOL, "none reached tol"),
        ([(1, 0, "diverged", ""), (2, 0, "failed", "")], TOL,
         "none finished normally (diverged, failed)"),
    ],
)  # fmt: skip
def test_a_group_without_a_winner_names_no_multiplier(runs, selection, status):
    ok = rows("ok", [(1, 0, "completed", 50.0), (2, 0, "completed", 20.0)])
    bad = rows("bad", runs)
    chosen, none = best(ok + bad, selection)
    assert (chosen["label"], chosen["step_mult"], chosen["status"], chosen["value"]) == (
        "ok", 2.0, "chosen", 20.0
    )  # fmt: skip
    assert (chosen["n_seeds"], chosen["at_edge"], chosen["run_ids"]) == (1, True, "ok_m2_s0")
    assert none["label"] == "bad" and none["status"] == status
    assert none["n_mults"] == len({m for m, *_ in runs})
    for key in ("step_mult", "value", "n_seeds", "at_edge", "run_ids"):
        assert none[key] is None, key
