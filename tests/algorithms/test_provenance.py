"""Every registered method declares where its default step comes from
(:mod:`algorithms.provenance`), and every place a user chooses a step shows it: ``--list``,
``METHOD --help``, the run's summary line, ``config.json`` and ``docs/methods.md``."""

from __future__ import annotations

import json
import re

import pytest

from algorithms import provenance as pv
from algorithms.registry import ALGORITHMS, usual_compressor
from compressors import parse_spec
from problems.registry import make_problem
from runner.main import run


class _Run:
    def __init__(self, returncode: int, stdout: str) -> None:
        self.returncode, self.stdout = returncode, stdout


def run_cli(argv: list[str], capsys) -> _Run:
    """The command line in this process: its exit status and what it printed."""
    capsys.readouterr()
    try:
        code = run(argv)
    except SystemExit as e:  # --help and --list exit through argparse
        code = e.code
    return _Run(code, capsys.readouterr().out)


DERIVATION = re.compile(r"^\s*Derivation\b", re.M)


def _check(p: pv.Provenance, what: str) -> None:
    assert isinstance(p, pv.Provenance), f"{what}: no Provenance declared"
    assert p.kind in pv.KINDS, what
    assert len(p.ref) > 10, f"{what}: the reference {p.ref!r} says too little to follow"
    if p.kind == "derived":
        text = pv.derivation_text(p.where)  # imports: the module and function exist
        assert DERIVATION.search(text), f"{what}: {p.where} has no written Derivation paragraph"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_method_declares_its_steps_provenance(name):
    cls = ALGORITHMS[name]
    _check(cls.provenance, name)
    if cls.provenance.kind == "practical":
        assert cls.practical.__func__ is not ALGORITHMS["ef21"].practical.__func__, (
            f"{name} declares a practical default but no practical() step"
        )


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("regime", [None, "nonconvex", "pl"])
def test_a_regimes_own_provenance_is_declared_too(name, regime):
    cls = ALGORITHMS[name]
    if regime is not None and "regime" not in cls.options:
        pytest.skip("one regime")
    p = make_problem("quadratic", nodes=4, lam=0.2, dim=8, seed=0)
    opts = {} if regime is None else {"regime": regime}
    try:
        algo, record = cls.configure(p, parse_spec(usual_compressor(name, 2)), **opts)
    except ValueError:
        pytest.skip("no theory step on this problem")
    th = record["theory"]
    if th.get("provenance") is not None:
        _check(pv.Provenance(**th["provenance"]), f"{name} regime {regime}")
    assert record["provenance"] == (th.get("provenance") or cls.provenance.to_dict())


def test_a_bad_declaration_is_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        pv.Provenance("folklore", "everyone knows")
    with pytest.raises(ValueError, match="where its derivation is written"):
        pv.Provenance("derived", "derived somewhere")
    with pytest.raises(ValueError, match="needs a reference"):
        pv.theorem("  ")


def test_list_and_help_show_it(capsys):
    listing = run_cli(["--list"], capsys).stdout
    for name, cls in ALGORITHMS.items():
        line = next(ln for ln in listing.splitlines() if ln.split()[:1] == [name])
        assert f"[{cls.provenance.kind}]" in line, line
    text = " ".join(run_cli(["ef21", "--help"], capsys).stdout.split())
    assert "Default step (theorem): Richtárik, Sokolov & Fatkhullin" in text
    text = " ".join(run_cli(["comp-ams", "--help"], capsys).stdout.split())
    assert "Default step (practical)" in text and "--step theory gives" in text


def test_the_run_records_and_prints_the_steps_origin(tmp_path, capsys):
    r = run_cli(["ef21", "--iters", "5", "--out", str(tmp_path / "a"), "--quiet"], capsys)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["step"]["step_origin"] == "theory"
    assert config["step"]["provenance"] == ALGORITHMS["ef21"].provenance.to_dict()
    assert "provenance theorem: Richtárik" in r.stdout
    r = run_cli(
        ["ef21", "--iters", "5", "--step", "0.1", "--out", str(tmp_path / "b"), "--quiet"], capsys
    )
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["step"]["step_origin"] == "given" and "given: --step 0.1" in r.stdout


def test_comp_ams_defaults_to_its_labelled_practical_step(tmp_path, capsys):
    # The theorem's step (about 1e-5 at eps = 1e-8) barely moves: the run says "stalled";
    # the default is the practical 1e-3, labelled, and it moves.
    out = tmp_path / "practical"
    r = run_cli(["comp-ams", "--iters", "400", "--out", str(out), "--quiet"], capsys)
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["step"]["step_origin"] == "practical" and summary["gamma"] == 1e-3
    assert config["step"]["gamma_theory"] < 1e-4  # the theorem's step is recorded beside it
    assert summary["reason"] == "completed" and "provenance practical" in r.stdout
    out = tmp_path / "theory"
    r = run_cli(
        ["comp-ams", "--iters", "400", "--step", "theory", "--out", str(out), "--quiet"], capsys
    )
    summary = json.loads((out / "summary.json").read_text())
    assert r.returncode == 0 and summary["reason"] == "stalled", summary
    assert "stalled:" in r.stdout and "--step-mult" in r.stdout
