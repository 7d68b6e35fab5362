"""Reproductions are pre-registered: a claim file (``config.toml``) committed before its
results, its SHA-256 in ``results.json``, and ``--record`` refusing a claim file that changed
(or is not committed) since."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from experiments import reproduce as rp
from experiments.reproduce_records import claim_sha256, registration_problem


@pytest.mark.parametrize("name", rp.available())
def test_every_record_is_of_the_claim_file_as_it_is(name):
    rec = rp.recorded(name)
    if rec is None:
        pytest.skip("no results recorded")
    folder = rp.PAPERS / name
    assert rec["claim"]["sha256"] == claim_sha256(folder), (
        f"{name}: config.toml changed after its results were recorded; a new claim is a new "
        "pre-registration (move results.json aside, commit the claim, record again)"
    )
    reg = rec["registration"]
    assert isinstance(reg["preregistered"], bool) and reg["note"]
    orig = rec.get("original_claim")
    if orig is not None:  # a claim that moved: its first verdict is kept beside the current
        assert orig["verdict"] in ("holds", "FAILS") and orig["statement"] and orig["commit"]


def _repo(tmp_path):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "config.toml").write_text('name = "t"\n')
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([git, "init", "-q", str(folder)], check=True)
    subprocess.run([git, "-C", str(folder), "add", "config.toml"], check=True)
    subprocess.run([git, "-C", str(folder), *env, "commit", "-qm", "claim"], check=True)
    return folder


def test_record_refuses_an_uncommitted_or_changed_claim(tmp_path):
    folder = _repo(tmp_path)
    assert registration_problem(folder, None) is None
    results = rp.results_record({"dataset": None, "holds": True}, ["t"], None, folder)
    assert results["claim"]["sha256"] == claim_sha256(folder) and results["claim"]["commit"]
    reg = results["registration"]  # a first record: the claim was committed before it
    assert reg["preregistered"] is True and reg["claim_commit"] == results["claim"]["commit"][:12]
    assert registration_problem(folder, results) is None  # the same claim: more runs are fine
    (folder / "config.toml").write_text('name = "t"\nweaker = true\n')
    why = registration_problem(folder, results)
    assert why is not None and "not committed" in why
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qam", "weaker"], check=True)  # fmt: skip
    why = registration_problem(folder, results)
    assert why is not None and "new pre-registration" in why and "results-" in why
    # recorded results keep their registration and original claim when runs are added
    results["original_claim"] = {"verdict": "FAILS"}
    again = rp.results_record({"dataset": None, "holds": True}, ["t"], results, None)
    assert again["original_claim"] == {"verdict": "FAILS"} and again["claim"] == results["claim"]


def test_list_says_what_fails_means_once_and_shows_registration(capsys):
    assert rp.main(["--list"]) == 0
    text = capsys.readouterr().out
    assert text.count("'FAILS': the claim as stated is not reproduced") == 1
    assert "pre-registered: yes" in text and "pre-registered: not shown" in text
    assert "original claim (b02f924" in text
    for name in rp.available():  # every entry is listed, by name, with its claim
        assert any(line.startswith(name) for line in text.splitlines()), name
