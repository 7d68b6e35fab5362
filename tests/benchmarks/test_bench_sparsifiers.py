"""The sparsifier benchmark runs and reports what each method keeps (no timed assertions)."""

from __future__ import annotations

from benchmarks import sparsifiers


def test_every_law_and_method_is_reported_with_its_achieved_k():
    rows = sparsifiers.run(N=20_000, ratio=0.01, repeats=1)
    assert [(r["law"], r["method"]) for r in rows] == [
        (law, m) for law in ("laplace", "gauss") for m in sparsifiers.METHODS
    ]
    kept = {(r["law"], r["method"]): r["kept_over_target"] for r in rows}
    assert kept[("laplace", "topk")] == kept[("gauss", "topk")] == 1.0
    assert 0.8 < kept[("laplace", "sidco-exp")] < 1.2  # the exponential law fits Laplace rows
    assert kept[("gauss", "sidco-exp")] < 0.2  # and not Gaussian ones: one stage misses
    assert all(r["seconds"] > 0 and r["vs_topk"] > 0 for r in rows)
    assert "| gauss | sidco-gpd-3 |" in sparsifiers.table(rows)
