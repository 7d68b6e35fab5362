"""The power mode of the theory checks: the framework (theory_checks.base, ``--power``) and every
fast check of the catalogue, which must pass on the correct method and reject each broken
variant it names."""

from __future__ import annotations

import pytest

from theory_checks.__main__ import main
from theory_checks.base import Check, Outcome, Variant, run_power
from theory_checks.catalogue import all_checks

BIG = Variant("big", "step-too-large", "doubles the measured value")
SMALL = Variant("small", "other", "halves it: still within the bound")
BOOM = Variant("boom", "other", "raises")


def _bound(fast: bool, variant: str | None = None) -> list[Outcome]:
    """A toy check: the measured value 0.6 (x2 for ``big``, /2 for ``small``) must be <= 1."""
    if variant == "boom":
        raise RuntimeError("broken variant")
    v = 0.6 * {None: 1.0, "big": 2.0, "small": 0.5}[variant]
    return [Outcome("toy", "<= 1", f"{v}", v <= 1.0, "exact", 1.0 - v)]


def _by_variant(rows):
    return {r.variant: r for r in rows}


def test_power_rejects_accepts_crashes_and_no_variants():
    rows = _by_variant(run_power(Check("toy.bound", "-", _bound, variants=(BIG, SMALL, BOOM)),
                                 fast=True))  # fmt: skip
    assert rows["correct"].verdict == "pass" and rows["correct"].margin == pytest.approx(0.4)
    assert rows["big"].verdict == "rejected" and rows["big"].margin == pytest.approx(-0.2)
    assert rows["big"].ok and rows["big"].failed_outcomes == 1
    assert rows["small"].verdict == "ACCEPTED" and not rows["small"].ok
    assert rows["boom"].verdict == "ACCEPTED" and "crashed" in rows["boom"].what
    bare = run_power(Check("toy.bare", "-", _bound), fast=True)
    assert [r.verdict for r in bare] == ["pass", "ACCEPTED"] and bare[1].variant == "(none)"


def test_a_crashing_or_silent_correct_method_fails():
    def crash(fast, variant=None):
        raise ValueError("no")

    (row, _) = run_power(Check("toy.crash", "-", crash, variants=(BIG,)), fast=True)
    assert row.verdict == "FAIL"
    (row, _) = run_power(Check("toy.empty", "-", lambda f, v=None: [], variants=(BIG,)), True)
    assert row.verdict == "FAIL"


def test_variant_names_and_kinds_are_validated():
    with pytest.raises(ValueError, match="kind"):
        Variant("x", "no-such-kind", "-")
    with pytest.raises(ValueError, match="duplicate"):
        Check("toy.dup", "-", _bound, variants=(BIG, BIG))
    with pytest.raises(ValueError, match="no variant"):
        Check("toy.bound", "-", _bound, variants=(BIG,)).run(True, "small")


def test_cli_power_exit_codes(capsys):
    assert main(["--power", "--fast", "--only", "ef-bv.reduces-to-ef21"]) == 0
    text = capsys.readouterr().out
    assert "lam=0.5" in text and "rejected" in text and "1 of 1 checks" in text


FAST = [c for c in all_checks() if c.fast]


# About seven minutes in all on 2 cores: run by CI after the default suite (-m heavy).
@pytest.mark.heavy
@pytest.mark.parametrize("chk", FAST, ids=lambda c: c.name)
def test_fast_check_has_power(chk):
    """The correct method passes, at least one variant is named, and each one is rejected."""
    rows = run_power(chk, fast=True)
    correct, variants = rows[0], rows[1:]
    assert correct.verdict == "pass", correct
    assert chk.variants, f"{chk.name} names no broken variant"
    accepted = [(r.variant, r.what, r.margin) for r in variants if r.verdict != "rejected"]
    assert not accepted, accepted


@pytest.mark.parametrize("chk", all_checks(), ids=lambda c: c.name)
def test_every_check_names_two_broken_variants(chk):
    """A check that rejects a single broken variant may still pass others; each names two or
    more, and a rate check one of them a step ten times too small (a valid step far slower than
    the claimed rate), which a check of a bound alone would pass."""
    assert len(chk.variants) >= 2, f"{chk.name} names {len(chk.variants)} broken variant(s)"
    if chk.rate:
        kinds = {v.kind for v in chk.variants}
        assert "step-too-small" in kinds, f"{chk.name} is a rate check with no step-too-small"
