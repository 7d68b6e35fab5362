"""The ``slowdown`` claim of a reproduction: a method's bits to tolerance at each level of a
heterogeneity axis over its bits at the base level, and the rule "much less affected, but both
suffer at high skew" (:func:`experiments.reproduce_verdict.slowdown_holds`)."""

from __future__ import annotations

import math

import pytest

from experiments import reproduce as rp
from experiments.reproduce_config import _claim as parse_claim
from experiments.reproduce_verdict import slowdown_of, verdict_table

LABELS = ["Q", "E"]
RAW = {
    "kind": "slowdown", "axis": "split", "base": "iid", "high": "sorted", "affected": "Q",
    "robust": ["E"], "factor": 2.0, "suffer": 1.5, "metric": "f_gap", "tol": 1e-4,
    "bits": "exclude-initial", "statement": "E is hurt much less than Q",
}  # fmt: skip


def _paper() -> rp.Paper:
    claim = parse_claim(RAW, "t", LABELS, {})
    methods = [{"algorithm": "dcgd", "label": "Q"}, {"algorithm": "ef-sgd", "label": "E"}]
    return rp.Paper("t", rp.PAPERS, {"methods": methods}, claim, False, None)


def _verdict(bits: dict[str, dict[str, float]]) -> dict:
    """``bits[label][split]`` -> the verdict on one data set (one multiplier, one seed)."""
    rows = [
        {"label": lab, "split": lv, "step_mult": 1.0, "seed": 0, "bits": b, "dataset": "d"}
        for lab, by in bits.items() for lv, b in by.items()
    ]  # fmt: skip
    paper = _paper()
    return rp.evaluate(rp.aggregate(rows, paper, ["split", "step_mult", "seed", "dataset"]), paper)


LEVELS = ("iid", "dir", "sorted")


def _bits(q: tuple[float, ...], e: tuple[float, ...]) -> dict[str, dict[str, float]]:
    return {"Q": dict(zip(LEVELS, q, strict=True)), "E": dict(zip(LEVELS, e, strict=True))}


@pytest.mark.parametrize(
    ("q", "e", "less", "both"),
    [
        # Q 3x and 10x slower, E 1.2x and 2x: much less affected, both suffer at sorted.
        ((10, 30, 100), (10, 12, 20), True, True),
        # E hurt as much as Q at the mild level: not "much less".
        ((10, 30, 100), (10, 20, 20), False, True),
        # E not hurt at sorted (1.4x < 1.5x): (a) holds, (b) does not.
        ((10, 30, 100), (10, 11, 14), True, False),
        # Q never slows down by 1.5x: nothing shows that heterogeneity hurts Q.
        ((10, 11, 14), (10, 10, 10), False, False),
        # Q never reaches the tolerance at sorted (inf) while E does: much less affected.
        ((10, 30, math.inf), (10, 12, 20), True, True),
        # Both never at sorted: inf is not twice inf.
        ((10, 30, math.inf), (10, 12, math.inf), False, True),
        # E never on iid: its slowdown cannot be measured, both parts fail.
        ((10, 30, 100), (math.inf, 12, 20), False, False),
    ],
)
def test_slowdown_rule(q, e, less, both):
    verdict = _verdict(_bits(q, e))
    (s,) = verdict["settings"]
    assert s["setting"] == {"dataset": "d"}  # the axis is inside the setting, not a setting
    assert (s["less_affected"], s["both_suffer"]) == (less, both)
    assert s["holds"] is (less and both) and verdict["holds"] is (less and both)
    got = {(m["label"], m["split"]): m for m in s["methods"]}
    assert got[("Q", "iid")]["slowdown"] == 1.0
    if math.isfinite(q[1]):
        assert got[("Q", "dir")]["slowdown"] == pytest.approx(q[1] / q[0])


def test_slowdown_of_base_and_never():
    assert slowdown_of(30.0, 10.0) == 3.0
    assert slowdown_of(math.inf, 10.0) == math.inf
    assert slowdown_of(10.0, math.inf) is None


def test_the_table_names_levels_slowdowns_and_both_parts():
    verdict = {
        **_verdict(_bits((10, 30, math.inf), (10, 12, 20))),
        "kind": "slowdown", "statement": RAW["statement"], "order": ["Q", "E"],
        "axis": "split", "base": "iid", "high": "sorted", "factor": 2.0, "suffer": 1.5,
        "metric": "f_gap", "tol": 1e-4, "bits": "exclude-initial",
    }  # fmt: skip
    text = verdict_table(verdict)
    assert "slowdown along split" in text and "at split=sorted every method" in text
    assert "less affected: yes (levels where Q suffers: dir, sorted)" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("  Q ")]
    assert [r[1] for r in rows] == list(LEVELS) and rows[-1][4] == "inf"
    assert text.endswith("verdict: the claim holds")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"robust": []}, "must list method labels"),
        ({"affected": "X"}, "not among methods"),
        ({"factor": 1.0}, "factor must be a number > 1"),
        ({"suffer": True}, "suffer must be a number > 1"),
        ({"high": "iid"}, "must differ"),
        ({"axis": None}, "needs [claim].axis"),
    ],
)
def test_a_malformed_slowdown_claim_is_refused(change, message):
    raw = {k: v for k, v in {**RAW, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_claim(raw, "t", LABELS, {})


def test_the_axis_must_be_a_grid_axis_holding_both_levels():
    from experiments.reproduce_config import _check_axis

    claim = parse_claim(RAW, "t", LABELS, {})
    _check_axis({"split": ["iid", "sorted"]}, claim, "t")
    with pytest.raises(ValueError, match="no grid axis"):
        _check_axis({"seed": [0]}, claim, "t")
    with pytest.raises(ValueError, match="high 'sorted' is not among"):
        _check_axis({"split": ["iid", "dirichlet:1.0"]}, claim, "t")
