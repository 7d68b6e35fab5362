"""``--count-init-bits yes|no``: whether a method's initialisation is charged, recorded in
config.json; the rounds' bits are the same either way."""

from __future__ import annotations

import csv
import json

import pytest

from algorithms.run import run
from compressors import parse_spec

BASE = ["--problem", "quadratic", "--nodes", "4", "--quiet", "--iters", "12", "--log-every", "4"]


def _rows(out):
    with open(out / "history.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(
    ("argv", "init_up"),
    [
        (["ef21", "--compressor", "topk:k=3"], 32 * 20),  # g_i^0 = grad f_i(x^0), uncompressed
        (["ef21", "--compressor", "topk:k=3", "--init", "compressed"], None),  # C(grad f_i(x^0))
        (["marina", "--compressor", "randk:k=3"], 32 * 20),  # g^0 = grad f(x^0)
    ],
)
def test_init_bits_counted_or_not(tmp_path, argv, init_up):
    runs = {}
    for flag in ("yes", "no"):
        out = tmp_path / flag
        assert run([*argv, *BASE, "--count-init-bits", flag, "--out", str(out)]) == 0
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["count_init_bits"] is (flag == "yes")
        runs[flag] = _rows(out)
    if init_up is None:  # a compressed start: Top-3 of a 20-vector
        init_up = parse_spec("topk:k=3").bits(20)
    yes, no = runs["yes"], runs["no"]
    assert float(yes[0]["bits_up"]) == init_up and float(no[0]["bits_up"]) == 0
    for a, b in zip(yes, no, strict=True):
        assert float(a["bits_up"]) - float(b["bits_up"]) == init_up
        assert a["bits_down"] == b["bits_down"] and a["f"] == b["f"]


def test_default_counts_and_bad_value_exits_2(tmp_path, capsys):
    out = tmp_path / "d"
    assert run(["ef21", "--compressor", "topk:k=3", *BASE, "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["count_init_bits"] is True
    assert run(["ef21", *BASE, "--count-init-bits", "maybe", "--out", str(tmp_path / "x")]) == 2
    assert "maybe" in capsys.readouterr().err
