"""A method's options are declared once, on its dataclass fields (:func:`algorithms.base.option`):
the command line, ``--help``, ``--list`` and the checks are read from them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from algorithms.base import Algorithm, collect_options, option
from algorithms.registry import ALGORITHMS
from algorithms.run import run
from compressors.identity import Identity


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_hyperparameter_is_a_declared_option(name):
    cls = ALGORITHMS[name]
    fields = [f.name for f in dataclasses.fields(cls) if f.name not in ("compressor", "gamma")]
    assert list(cls.options) == fields  # every field, in field order, and nothing else
    assert cls.options == collect_options(cls)  # read from the fields, not a dict by hand
    for field_name, opt in cls.options.items():
        f = next(f for f in dataclasses.fields(cls) if f.name == field_name)
        default = None if f.default is dataclasses.MISSING else f.default
        assert opt.default == default and opt.help, (name, field_name)
        assert opt.choices is None or default is None or default in opt.choices


@dataclasses.dataclass(frozen=True)
class _Toy(Algorithm):
    mode: str = option("a", "a mode", choices=("a", "b"), flag="toy_mode")
    rate: float | None = option(None, "a rate")


def test_a_value_outside_the_choices_is_refused_naming_the_flag():
    assert set(_Toy.options) == {"mode", "rate"}
    assert _Toy.options["rate"].type is float and _Toy.options["mode"].flag == "toy_mode"
    _Toy(compressor=Identity(), gamma=1.0, mode="b")
    with pytest.raises(ValueError, match=r"--toy-mode must be one of a, b, got 'c'"):
        _Toy(compressor=Identity(), gamma=1.0, mode="c")


def _help(*argv: str) -> str:
    p = subprocess.run([sys.executable, "-m", "algorithms.run", *argv, "--help"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_help_is_per_method():
    top = _help()
    assert "python -m algorithms.run METHOD --help" in top
    assert "--init {" not in top and "--mechanism" not in top  # no method's options
    ef21 = _help("ef21")
    assert "ef21's options:" in ef21 and "--init {full,compressed,zero}" in ef21
    assert "--regime" in ef21 and "--mechanism" not in ef21 and "--participation" not in ef21
    threepc = _help("3pc")
    assert "--mechanism" in threepc and "--regime" in threepc
    assert len(top.splitlines()) < 100 and len(ef21.splitlines()) < 110


def test_an_option_of_another_method_is_named_as_such(capsys, tmp_path):
    assert run(["dcgd", "--init", "zero", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--init does not apply to dcgd; its options: --batch-size, --convexity, --horizon" in err
