"""The compressor checks of the catalogue, and the catalogue's command line."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

from compressors.rand_k import RandK
from compressors.top_k import TopK
from theory_checks.__main__ import main
from theory_checks.compressor_checks import (
    CHECKS,
    check_compressor,
    overclaiming,
    underclaiming,
)


def test_every_declared_constant_holds_in_fast_mode():
    (chk,) = CHECKS
    outcomes = chk.fn(True)
    assert len(outcomes) >= 14
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]


@dataclass(frozen=True)
class _Overclaiming(RandK):
    """Rand-K declaring half its true omega."""

    def omega(self, d: int) -> float:
        return 0.5 * super().omega(d)


@dataclass(frozen=True)
class _Loose(RandK):
    """Rand-K declaring twice its true omega: valid, but not tight at the worst case."""

    def omega(self, d: int) -> float:
        return 2.0 * super().omega(d)


def test_the_check_fails_a_wrong_or_loose_constant():
    assert check_compressor(RandK(k=5), fast=True).passed
    assert not check_compressor(_Overclaiming(k=5), fast=True).passed
    assert not check_compressor(_Loose(k=5), fast=True).passed


def test_the_variants_declare_other_constants_of_the_same_operator():
    (chk,) = CHECKS
    assert not chk.rate and {v.name for v in chk.variants} == {"overclaim", "underclaim"}
    c, t = RandK(k=5), TopK(k=5)
    assert overclaiming(c).omega(100) == 0.5 * c.omega(100)
    assert underclaiming(c).omega(100) == 2.0 * c.omega(100)
    assert overclaiming(t).delta(100) == 0.5 * (1.0 + t.delta(100))
    assert underclaiming(t).delta(100) == 0.5 * t.delta(100)
    assert underclaiming(c).k == c.k and isinstance(underclaiming(c), RandK)  # same operator
    out = check_compressor(underclaiming(c), fast=True)
    assert not out.passed and out.margin < 0  # loose: not attained at the worst case


def test_cli_writes_json_and_csv_and_exit_codes(tmp_path, capsys):
    assert main(["--only", "compressors.*", "--fast", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "compressors.declared-constants" in text and "0 failed" in text
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["rows"] and all(r["verdict"] == "pass" for r in data["rows"])
    with open(tmp_path / "results.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(data["rows"])
    assert main(["--only", "no-such-check"]) == 2
