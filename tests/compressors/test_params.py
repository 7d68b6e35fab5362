"""Bad parameters and bad specs raise ValueError naming the value and what is allowed."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from compressors import parse_spec


@pytest.mark.parametrize(
    "spec,d,words",
    [
        ("topk:k=0", None, ["k", "0", "1 <= k <= d"]),
        ("topk:k=-3", None, ["k", "-3", "positive"]),
        ("randk:k=0", None, ["k", "0"]),
        ("topk:k=11", 10, ["k must be <= d", "k=11", "d=10"]),
        ("randk:k=11", 10, ["k must be <= d", "k=11", "d=10"]),
        ("topk:ratio=0", None, ["ratio", "0", "(0, 1]"]),
        ("randk:ratio=1.5", None, ["ratio", "1.5", "(0, 1]"]),
        ("randk:k=3,ratio=0.5", None, ["k or ratio", "k=3", "ratio=0.5"]),
        ("qsgd:levels=0", None, ["levels", "0", ">= 1"]),
        ("natural-dithering:levels=-1", None, ["levels", "-1", ">= 1"]),
        ("qsgd:norm=3", None, ["norm", "3", "2 or inf"]),
        ("qsgd:coding=huffman", None, ["coding", "huffman", "fixed or elias"]),
        ("bernoulli:p=0", None, ["p", "0", "(0, 1]"]),
        ("bernoulli:p=1.5", None, ["p", "1.5", "(0, 1]"]),
        ("rank:r=0", None, ["r (the rank)", "0", ">= 1"]),
        ("permk:n=0", None, ["n", "0", "positive"]),
        ("identity:float_bits=8", None, ["float_bits", "8", "16, 32 or 64"]),
        ("topk:index=golomb", None, ["index", "golomb", "list, bitmap, auto"]),
        ("scaled:topk", None, ["unbiased", "topk"]),
        ("compose:topk", None, ["two or more"]),
        ("nosuch", None, ["unknown compressor", "nosuch", "randk"]),
        ("topk:q=3", None, ["unknown parameter", "'q'", "allowed", "ratio"]),
        ("topk:k=three", None, ["k='three'", "int"]),
        ("topk:k", None, ["key=value"]),
    ],
)
def test_bad_input_names_value_and_allowed(spec, d, words):
    with pytest.raises(ValueError) as err:
        c = parse_spec(spec)
        c.encode(torch.ones(2, d or 20), 0)
    for w in words:
        assert w in str(err.value), f"{w!r} not in {str(err.value)!r}"


def test_permk_needs_its_node_count_and_matching_ids():
    with pytest.raises(ValueError, match="needs the node count"):
        parse_spec("permk").omega(10)
    with pytest.raises(ValueError, match="n=4 but the run has n=5"):
        parse_spec("permk:n=4").bind(5)
    with pytest.raises(ValueError, match=r"multiple of d, got d=3, n=4"):
        parse_spec("permk:n=4").encode(torch.ones(1, 3), 0)


def test_encode_rejects_bad_shapes():
    c = parse_spec("topk:k=1")
    with pytest.raises(ValueError, match=r"shape \(m, d\)"):
        c.encode(torch.ones(5), 0)
    with pytest.raises(ValueError, match="floating-point"):
        c.encode(torch.ones(1, 5, dtype=torch.int64), 0)
    with pytest.raises(ValueError, match="rng has 3 rows but the input has 2"):
        from streams import Streams

        c.encode(torch.ones(2, 5), Streams.for_nodes(0, range(3)))


def test_table_cli_lists_every_compressor_and_rejects_bad_input():
    out = subprocess.run(
        [sys.executable, "-m", "compressors", "--dim", "1000"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    from compressors import COMPRESSORS

    for name in COMPRESSORS:
        assert f"\n{name}" in out
    assert "randk                 unbiased     omega=99 " in out
    bad = subprocess.run(
        [sys.executable, "-m", "compressors", "--spec", "topk:k=0"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "k must be a positive integer" in bad.stderr


def test_table_cli_progress_goes_to_stderr_unless_quiet(capsys):
    from compressors.__main__ import main

    assert main(["--dim", "100", "--no-measure"]) == 0
    out, err = capsys.readouterr()
    assert "compressors: 100%" in err and "topk" in out and "compressors:" not in out
    assert main(["--dim", "100", "--no-measure", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "topk" in out
