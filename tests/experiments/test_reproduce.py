"""Paper reproductions: selection over seeds, the claims, the command line, and (slow) the quick
versions against their golden records."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import reproduce as rp

NAMES = [
    "ef21-vs-ef", "marina-vs-diana", "dasha-vs-marina", "3pc-lag", "3pc-quadratic",
    "adiana-vs-diana", "fednl-vs-first-order", "fednl-rank1", "byz-vr-marina",
    "noniid-ef-vs-qsgd", "choco-vs-exact", "locodl-vs-baselines", "2direction-vs-ef21p",
    "masha-sim-vs-masha1",
]  # fmt: skip


def test_available_lists_every_reproduction():
    assert rp.available() == sorted(NAMES)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quick_reproduction_matches_golden(name, tmp_path):
    golden = json.loads((rp.PAPERS / name / "golden.json").read_text())
    out = tmp_path / name
    try:
        verdict = rp.reproduce(name, out=out, jobs=2, quick=True, progress=False)
    except rp.DataMissing as exc:
        pytest.skip(str(exc))
    rel = golden["tolerance"]["bits_to_tol_rel"]
    for key in ("kind", "order", "tol", "bits"):
        assert verdict[key] == golden[key]
    assert len(verdict["settings"]) == len(golden["settings"])
    for got, want in zip(verdict["settings"], golden["settings"], strict=True):
        assert got["setting"].keys() == want["setting"].keys()
        rows = got.get("methods") or got["cells"]
        wants = want.get("methods") or want["cells"]
        for g, w in zip(rows, wants, strict=True):
            assert g["label"] == w["label"]
            assert g["step_mult"] == w["step_mult"]
            assert g["reached"] == w["reached"]
            if w["bits_to_tol"] is None:
                assert g["bits_to_tol"] is None
            else:
                assert g["bits_to_tol"] == pytest.approx(w["bits_to_tol"], rel=rel)
        assert got["holds"] == want["holds"]
    assert verdict["holds"] == golden["holds"]
    for fig in ("figure.png", "figure.pdf"):
        assert (out / fig).stat().st_size > 1000
    assert json.loads((out / "verdict.json").read_text()) == verdict


def test_bad_name_exits_2_listing_the_available_ones():
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.reproduce", "no-such-paper"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "'no-such-paper'" in proc.stderr
    for name in NAMES:
        assert name in proc.stderr


@pytest.mark.parametrize("columns", ["60", "100", "400"])
def test_list_names_every_reproduction_with_its_whole_statement(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert rp.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    width = max(int(columns), 22 + 30)  # the widest name (20) + 2, and 30 for the text
    assert all(len(line) <= width for line in lines if " " in line.strip())
    lines = lines[lines.index("") + 1 :]  # after the full-width note on what FAILS means
    entries: dict[str, list[str]] = {}
    for line in lines:
        if not line.startswith(" "):
            name, _, text = line.partition(" ")
            entries[name] = [text.strip()]
        else:
            entries[name].append(line.strip())
    assert list(entries) == sorted(NAMES)
    for name, parts in entries.items():
        text = " ".join(parts)
        with open(rp.PAPERS / name / "config.toml", "rb") as fh:
            statement = rp.tomllib.load(fh)["claim"]["statement"]  # shown with or without data
        # the statement whole, never cut; then the registration lines and the verdicts
        assert re.match(re.escape(statement) + r"( \(needs [\w, ]+: missing here\))? "
                        r"(pre-registered: .*)?verdict: ", text), (name, text)  # fmt: skip
        assert text.count("verdict: ") >= 1


def test_run_prints_where_it_wrote(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake(name, out, **kw):
        seen[name] = out
        return {"statement": "A beats B", "kind": "order", "order": ["A", "B"], "metric": "f",
                "tol": 1e-3, "bits": "exclude-initial", "settings": [], "holds": True,
                "runs": 6}  # fmt: skip

    monkeypatch.setattr(rp, "reproduce", fake)
    assert rp.main(["ef21-vs-ef", "--quick", "--out", str(tmp_path / "o")]) == 0
    out = tmp_path / "o"
    assert seen["ef21-vs-ef"] == out
    assert capsys.readouterr().out.endswith(
        f"verdict: the claim holds\nfigure:  {out / 'figure.png'} (and .pdf)\n"
        f"verdict: {out / 'verdict.json'}\n"
        f"runs:    {out / 'runs'} (6 runs; tables {out / 'summary.csv'}, {out / 'best.csv'})\n"
    )
    assert rp.main(["ef21-vs-ef", "--quick", "--dataset", "some/w8a.txt"]) == 0
    default = Path("runs") / "reproduce" / "ef21-vs-ef-quick-w8a"
    assert seen["ef21-vs-ef"] == default
    assert f"figure:  {default / 'figure.png'} (and .pdf)" in capsys.readouterr().out


def test_write_golden_and_record_refuse_bad_combinations(capsys):
    assert rp.main(["ef21-vs-ef", "--quick", "--write-golden"]) == 2
    assert "--force" in capsys.readouterr().err
    assert rp.main(["ef21-vs-ef", "--write-golden"]) == 2
    assert "--quick" in capsys.readouterr().err
    assert rp.main(["ef21-vs-ef", "--quick", "--record"]) == 2
    assert "--quick" in capsys.readouterr().err


def test_missing_data_skips_with_a_message(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("COMPZOO_DATA", raising=False)  # searched before the alias
    monkeypatch.setenv(rp.LIBSVM_ENV, str(tmp_path))
    with pytest.raises(rp.DataMissing, match="mushrooms"):
        rp.load_paper("ef21-vs-ef")
    assert rp.main(["ef21-vs-ef", "--quick", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and str(tmp_path) in out
    assert not (tmp_path / "o").exists()


def test_config_states_tolerance_bits_and_sets(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPZOO_DATA", raising=False)  # searched before the alias
    for name in ("mushrooms", "phishing", "a9a", "w8a"):
        (tmp_path / f"{name}.txt").write_text("1 1:0.5\n-1 2:0.25\n")
    monkeypatch.setenv(rp.LIBSVM_ENV, str(tmp_path))
    full = rp.load_paper("ef21-vs-ef")
    quick = rp.load_paper("ef21-vs-ef", quick=True)
    assert full.claim.tol == 1e-5 and full.claim.bits == "exclude-initial"
    assert full.sweep["base"]["tol"] == 1e-5  # runs stop at the claim's tolerance
    assert full.sweep["grid"]["step_mult"] == {"base": 2, "from": 0, "to": 11}
    assert [s.rsplit("/", 1)[1] for s in full.sweep["grid"]["dataset"]] == [
        "mushrooms.txt", "phishing.txt", "a9a.txt", "w8a.txt",
    ]  # fmt: skip
    assert quick.sweep["grid"]["dataset"] == [f"libsvm:{(tmp_path / 'mushrooms.txt').resolve()}"]
    one = rp.load_paper("ef21-vs-ef", dataset="phishing")
    assert one.sweep["base"]["dataset"] == f"libsvm:{(tmp_path / 'phishing.txt').resolve()}"
    assert "dataset" not in one.sweep["grid"]
    assert rp.default_out(one).as_posix() == "runs/reproduce/ef21-vs-ef-phishing"
    with pytest.raises(ValueError, match="file not found"):
        rp.load_paper("ef21-vs-ef", dataset=f"libsvm:{tmp_path / 'missing.txt'}")
    with pytest.raises(ValueError, match="takes no --dataset"):
        rp.load_paper("3pc-quadratic", dataset="phishing")


def test_every_config_fixes_tolerance_and_bit_convention():
    import tomllib

    for name in NAMES:
        raw = tomllib.loads((rp.PAPERS / name / "config.toml").read_text())
        assert raw["claim"]["bits"] in rp.BITS, name
        assert raw["claim"]["tol"] > 0, name


def test_unknown_name_and_quick_key_raise():
    with pytest.raises(ValueError, match="available: 2direction-vs-ef21p, 3pc-lag") as err:
        rp.load_paper("nope")
    assert all(name in str(err.value) for name in NAMES)  # every reproduction, sorted
    with pytest.raises(ValueError, match=r"unknown \[quick\] key"):
        rp._apply_quick({}, {"methodz": []}, "x")


def _claim(**kw) -> rp.Claim:
    base = {"kind": "order", "statement": "", "metric": "grad_norm_sq", "tol": 1e-3,
            "bits": "exclude-initial", "order": ("A", "B")}  # fmt: skip
    return rp.Claim(**{**base, **kw})


def _history(values, bits0=100.0, step=10.0):
    return [
        {"iter": str(i), "bits_up": str(bits0 + step * i), "grad_norm_sq": str(v)}
        for i, v in enumerate(values)
    ]


def test_run_bits_counts_from_the_first_crossing_with_the_stated_convention():
    h = _history([1.0, 1e-2, 5e-4, 1e-6])
    assert rp.run_bits(h, "completed", _claim()) == 20.0
    assert rp.run_bits(h, "tolerance", _claim(bits="include-initial")) == 120.0
    assert rp.run_bits(h, "completed", _claim(tol=1e-9)) == math.inf
    # A run that did not end normally never counts, even after a crossing.
    for status in ("diverged", "unstable", "failed"):
        assert rp.run_bits(h, status, _claim()) == math.inf


def _paper(claim: rp.Claim, methods: list[dict]) -> rp.Paper:
    return rp.Paper("t", rp.PAPERS, {"methods": methods}, claim, False, None)


def _rows(spec: dict[tuple[str, float], list[float]], extra: dict | None = None) -> list[dict]:
    rows = []
    for (label, mult), values in spec.items():
        for seed, b in enumerate(values):
            rows.append({"label": label, "step_mult": mult, "seed": seed, "bits": b,
                         "dataset": "libsvm:/x/mushrooms.txt", **(extra or {})})  # fmt: skip
    return rows


def test_median_over_seeds_picks_the_multiplier_and_reports_the_spread():
    paper = _paper(_claim(), [{"algorithm": "a", "label": "A"}, {"algorithm": "b", "label": "B"}])
    inf = math.inf
    rows = _rows({
        ("A", 1.0): [50.0, 10.0, 30.0, inf, 20.0],   # median 30 (one seed never)
        ("A", 2.0): [40.0, 35.0, 36.0, 38.0, 39.0],  # median 38
        ("A", 4.0): [5.0, 6.0, inf, inf, inf],       # median inf: most seeds never
        ("B", 1.0): [inf, inf, inf, inf, inf],
    })  # fmt: skip
    cells = rp.aggregate(rows, paper, ["step_mult", "seed", "dataset"])
    by = {c["label"]: c for c in cells}
    assert by["A"]["step_mult"] == 1.0 and by["A"]["bits_to_tol"] == 30.0
    assert by["A"]["bits_min"] == 10.0 and by["A"]["bits_max"] is None
    assert (by["A"]["reached"], by["A"]["seeds"]) == (4, 5)
    assert by["B"]["bits_to_tol"] is None and by["B"]["step_mult"] is None
    verdict = rp.evaluate(cells, paper)
    assert verdict["holds"] is True
    (setting,) = verdict["settings"]
    assert setting["setting"] == {"dataset": "libsvm:/x/mushrooms.txt"}
    assert rp.ranking(setting["methods"]) == ["A", "B"]


@pytest.mark.parametrize(
    ("a", "b", "holds"),
    [(10.0, 20.0, True), (10.0, 10.0, False), (math.inf, math.inf, False), (30.0, 20.0, False)],
)
def test_order_is_strict_with_never_as_infinite(a, b, holds):
    paper = _paper(_claim(), [{"algorithm": "a", "label": "A"}, {"algorithm": "b", "label": "B"}])
    cells = rp.aggregate(_rows({("A", 1.0): [a], ("B", 1.0): [b]}), paper, ["step_mult"])
    assert rp.evaluate(cells, paper)["holds"] is holds


def test_beats_needs_every_winner_below_the_baseline():
    claim = _claim(kind="beats", order=("A", "B", "C"))
    methods = [{"algorithm": x, "label": x} for x in "ABC"]
    paper = _paper(claim, methods)
    ok = _rows({("A", 1.0): [5.0], ("B", 1.0): [9.0], ("C", 1.0): [10.0]})
    bad = _rows({("A", 1.0): [5.0], ("B", 1.0): [11.0], ("C", 1.0): [10.0]})
    assert rp.evaluate(rp.aggregate(ok, paper, []), paper)["holds"] is True
    assert rp.evaluate(rp.aggregate(bad, paper, []), paper)["holds"] is False


def test_beats_any_needs_the_best_winner_below_the_baseline():
    claim = _claim(kind="beats", order=("A", "B", "C"), any=True)
    paper = _paper(claim, [{"algorithm": x, "label": x} for x in "ABC"])
    one = _rows({("A", 1.0): [5.0], ("B", 1.0): [11.0], ("C", 1.0): [10.0]})
    none = _rows({("A", 1.0): [10.0], ("B", 1.0): [math.inf], ("C", 1.0): [10.0]})
    assert rp.evaluate(rp.aggregate(one, paper, []), paper)["holds"] is True
    assert rp.evaluate(rp.aggregate(none, paper, []), paper)["holds"] is False


@pytest.mark.parametrize(("inner", "holds"), [(7.0, True), (8.0, False), (math.inf, False)])
def test_heatmap_needs_an_off_baseline_cell_below_both_baselines(inner, holds):
    claim = _claim(kind="heatmap", order=(), rows="compressor", cols="zeta",
                   base_row="identity", base_col=0.0)  # fmt: skip
    paper = _paper(claim, [{"algorithm": "3pc", "label": "CLAG", "mechanism": "clag"}])
    grid = {("topk:k=1", 0.0): 8.0, ("topk:k=1", 4.0): inner,
            ("identity", 0.0): 20.0, ("identity", 4.0): 9.0}  # fmt: skip
    rows = []
    for (comp, zeta), b in grid.items():
        rows += _rows({("CLAG", 1.0): [b]}, {"compressor": comp, "zeta": zeta})
    cells = rp.aggregate(rows, paper, ["compressor", "zeta", "step_mult", "dataset"])
    verdict = rp.evaluate(cells, paper)
    (setting,) = verdict["settings"]
    assert setting["holds"] is holds
    assert setting["baseline_col_best"] == 8.0 and setting["baseline_row_best"] == 9.0
    assert len(setting["cells"]) == 4
    text = rp.verdict_table({**verdict, "kind": "heatmap", "statement": "", "metric": "g",
                             "tol": 1.0, "bits": "x", "rows": "compressor", "cols": "zeta",
                             "base_row": "identity", "base_col": 0.0, "order": []})  # fmt: skip
    assert ("holds" if holds else "FAILS") in text


def test_heatmap_figure_draws_every_cell_and_marks_the_never_reached(tmp_path):
    grid = {("topk:k=1", 0.0): 8.0, ("topk:k=1", 4.0): math.inf,
            ("identity", 0.0): 20.0, ("identity", 4.0): 9.0}  # fmt: skip
    cells = [{"compressor": c, "zeta": z, "bits_to_tol": b} for (c, z), b in grid.items()]
    verdict = {"rows": "compressor", "cols": "zeta", "metric": "g", "tol": 1.0,
               "settings": [{"setting": {}, "holds": False, "cells": cells}]}  # fmt: skip
    import matplotlib.figure

    drawn = []
    real = matplotlib.figure.Figure.savefig

    def keep(fig, path, *a, **kw):
        drawn.append([t.get_text() for ax in fig.axes for t in ax.texts])
        return real(fig, path, *a, **kw)

    matplotlib.figure.Figure.savefig = keep
    try:
        rp.heatmap_figure(verdict, tmp_path / "heatmap", "t")
    finally:
        matplotlib.figure.Figure.savefig = real
    assert (tmp_path / "heatmap.png").stat().st_size > 0 and (tmp_path / "heatmap.pdf").exists()
    assert sorted(drawn[0]) == sorted(["8", "never", "20", "9"])


def test_results_record_keeps_one_entry_per_data_set():
    v1 = {"dataset": "libsvm:/x/mushrooms.txt", "holds": True, "settings": []}
    v2 = {"dataset": "libsvm:/x/phishing.txt", "holds": False, "settings": []}
    r1 = rp.results_record(v1, ["ef21-vs-ef", "--dataset", "mushrooms"], None)
    r2 = rp.results_record(v2, ["ef21-vs-ef", "--dataset", "phishing"], r1)
    assert sorted(r2["runs"]) == ["mushrooms", "phishing"]
    assert r2["runs"]["mushrooms"]["verdict"] == v1
    assert r2["runs"]["phishing"]["command"].endswith("--dataset phishing")


def test_only_cuts_a_grid_axis_and_records_the_slice_on_its_own():
    paper = rp.load_paper("3pc-quadratic", only={"nodes": ["10", "100"]})
    assert paper.sweep["grid"]["nodes"] == [10, 100]
    assert (
        paper.sweep["grid"]["problem_opt"]
        == rp.load_paper("3pc-quadratic").sweep["grid"]["problem_opt"]
    )
    assert str(rp.default_out(paper)).endswith("3pc-quadratic-nodes=10_100")
    assert rp.slice_label(paper.only) == "nodes=10|100"
    v1 = {"dataset": None, "slice": "nodes=10", "holds": True, "settings": []}
    v2 = {"dataset": None, "slice": None, "holds": False, "settings": []}
    r1 = rp.results_record(v1, ["3pc-quadratic", "--only", "nodes=10"], None)
    r2 = rp.results_record(v2, ["3pc-quadratic"], r1)
    assert sorted(r2["runs"]) == ["all", "nodes=10"]
    assert r2["runs"]["nodes=10"]["verdict"] == v1


def test_only_takes_a_value_whose_text_has_commas():
    cell = "family=tridiagonal,dim=1000,s=0.2"
    paper = rp.load_paper("3pc-quadratic", only={"problem_opt": cell.split(","), "nodes": ["100"]})
    assert paper.sweep["grid"]["problem_opt"] == [cell.split(",")]
    assert rp.slice_label(paper.only) == f"problem_opt={cell};nodes=100"
    assert rp.parse_only(f"problem_opt={cell}") == ("problem_opt", cell.split(","))


@pytest.mark.parametrize(
    "only, message",
    [
        ("nodes=7", "value(s) ['7'] not in the grid; allowed: 10, 100, 1000"),
        ("seed=1", "no grid axis 'seed'"),
        ("nodes", "--only must be AXIS=V1[,V2...]"),
    ],
)
def test_only_refuses_what_the_grid_lacks(only, message, capsys):
    assert rp.main(["3pc-quadratic", "--only", only]) == 2
    assert message in capsys.readouterr().err


def test_refused_runs_count_as_never_only_beside_a_finished_one(tmp_path):
    """A run the method refuses at set-up (exit status 2) is recorded as never reaching the
    tolerance when another multiplier of the same method and setting finished; a method whose
    every run was refused (a problem of the machine: data missing) still blocks ``--record``."""
    from types import SimpleNamespace

    def spec(run_id, label, mult):
        return SimpleNamespace(run_id=run_id, params={"label": label, "step_mult": mult})

    specs = [spec("a1", "A", 1), spec("a4", "A", 4), spec("b1", "B", 1), spec("b4", "B", 4)]
    statuses = {"a1": "tolerance", "a4": "failed", "b1": "failed", "b4": "failed"}
    for run_id, code in (("a4", 2), ("b1", 2), ("b4", 2)):
        d = tmp_path / "runs" / run_id
        d.mkdir(parents=True)
        (d / "stderr.txt").write_text(f"exit status {code}\nerror: refused at this step\n")
    got = rp.refused_runs(specs, statuses, tmp_path)
    assert got == [{"run_id": "a4", "error": "error: refused at this step"}]
    (tmp_path / "runs" / "a4" / "stderr.txt").write_text("exit status 1\nTraceback\n")
    assert rp.refused_runs(specs, statuses, tmp_path) == []  # a crash is not a refusal
