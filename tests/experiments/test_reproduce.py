"""Paper reproductions: the quick versions against their golden records, and the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from experiments import reproduce as rp

NAMES = ["ef21-vs-ef", "marina-vs-diana", "dasha-vs-marina", "3pc-lag", "3pc-quadratic"]
# ef21-vs-ef's quick version stays in the default suite; the others take longer together.
QUICK = [
    pytest.param(name, marks=() if name == "ef21-vs-ef" else pytest.mark.slow) for name in NAMES
]


def test_available_lists_every_reproduction():
    assert rp.available() == sorted(NAMES)


@pytest.mark.parametrize("name", QUICK)
def test_quick_reproduction_matches_golden(name, tmp_path):
    golden = json.loads((rp.PAPERS / name / "golden.json").read_text())
    out = tmp_path / name
    verdict = rp.reproduce(name, out=out, jobs=2, quick=True, progress=False)
    rel = golden["tolerance"]["bits_to_tol_rel"]
    assert verdict["order"] == golden["order"]
    assert verdict["tol"] == golden["tol"]
    assert len(verdict["settings"]) == len(golden["settings"])
    for got, want in zip(verdict["settings"], golden["settings"], strict=True):
        assert got["setting"] == want["setting"]
        for g, w in zip(got["methods"], want["methods"], strict=True):
            assert g["label"] == w["label"]
            assert g["step_mult"] == w["step_mult"]
            if w["bits_to_tol"] is None:
                assert g["bits_to_tol"] is None
            else:
                assert g["bits_to_tol"] == pytest.approx(w["bits_to_tol"], rel=rel)
        assert rp.ranking(got["methods"]) == want["ranking"]
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


def test_list_names_every_reproduction(capsys):
    assert rp.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(NAMES)


def test_write_golden_refuses_to_overwrite(capsys):
    assert rp.main(["ef21-vs-ef", "--quick", "--write-golden"]) == 2
    assert "--force" in capsys.readouterr().err
    assert rp.main(["ef21-vs-ef", "--write-golden"]) == 2
    assert "--quick" in capsys.readouterr().err


def test_quick_overrides_and_offline_data():
    full = rp.load_paper("ef21-vs-ef")
    quick = rp.load_paper("ef21-vs-ef", quick=True)
    assert full.sweep["base"]["iters"] == 2000
    assert quick.sweep["base"]["iters"] == 400
    assert full.sweep["grid"]["step_mult"] == {"base": 2, "from": 0, "to": 11}
    assert quick.sweep["grid"]["step_mult"] == [16, 64]
    assert quick.sweep["base"]["dataset"] == "breast-cancer"
    assert quick.claim.order == ("EF21", "EF14", "DCGD")
    assert quick.claim.tol == 1e-5
    # DCGD's "1/L" is resolved from the problem: breast-cancer standardised, n = 20.
    (dcgd,) = [m for m in quick.sweep["methods"] if m["algorithm"] == "dcgd"]
    assert dcgd["step"] == pytest.approx(0.283937, rel=1e-5)


def test_dataset_file_becomes_libsvm_spec(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("1 1:0.5\n-1 2:0.25\n")
    paper = rp.load_paper("3pc-lag", dataset=str(f))
    assert paper.sweep["base"]["dataset"] == f"libsvm:{f.resolve()}"
    assert "problem_opt" not in paper.sweep["base"]
    assert rp.default_out(paper).as_posix() == "runs/reproduce/3pc-lag-tiny"
    with pytest.raises(ValueError, match="file not found"):
        rp.load_paper("3pc-lag", dataset=f"libsvm:{tmp_path / 'missing.txt'}")
    with pytest.raises(ValueError, match="takes no --dataset"):
        rp.load_paper("3pc-quadratic", dataset=str(f))


def test_unknown_name_and_quick_key_raise():
    with pytest.raises(ValueError, match="available: 3pc-lag"):
        rp.load_paper("nope")
    with pytest.raises(ValueError, match=r"unknown \[quick\] key"):
        rp._apply_quick({}, {"methodz": []}, "x")


def _rows(values: dict[str, float]) -> tuple[list[dict], list[dict]]:
    best, summary = [], []
    for i, (label, v) in enumerate(values.items()):
        best.append(
            {"label": label, "compressor": "topk:k=1", "step_mult": 2.0, "value": v,
             "run_ids": f"r{i}"}
        )  # fmt: skip
        summary.append({"run_id": f"r{i}", "grad_norm_sq": str(0.5 * (i + 1))})
    return best, summary


@pytest.mark.parametrize(
    ("values", "holds"),
    [
        ({"EF21": 10.0, "EF14": 20.0, "DCGD": math.inf}, True),
        ({"EF21": 10.0, "EF14": 10.0, "DCGD": 30.0}, False),
        ({"EF21": 10.0, "EF14": math.inf, "DCGD": math.inf}, False),
        ({"EF21": 30.0, "EF14": 20.0, "DCGD": 40.0}, False),
    ],
)
def test_evaluate_strict_order_with_never_as_infinite(values, holds):
    paper = rp.load_paper("ef21-vs-ef", quick=True)
    best, summary = _rows(values)
    verdict = rp.evaluate(best, summary, paper, ["compressor", "step_mult", "seed"])
    assert verdict["holds"] is holds
    (setting,) = verdict["settings"]
    assert setting["setting"] == {"compressor": "topk:k=1"}
    got = {m["label"]: m["bits_to_tol"] for m in setting["methods"]}
    assert got == {k: (None if math.isinf(v) else v) for k, v in values.items()}
    assert [m["final"] for m in setting["methods"]] == [0.5, 1.0, 1.5]
