"""One rule finds the named data sets, for the runner and the reproductions alike:
``$COMPZOO_DATA``, ``$COMPZOO_LIBSVM_DIR``, else the shared folder beside the repository or the
working directory; the ``--list`` outputs say where each set was found."""

from __future__ import annotations

from pathlib import Path

import pytest

import problems
from problems import datasets, make_problem

SHARED = Path(problems.__file__).resolve().parents[1].parent / "shared" / "data" / "libsvm"
TINY = "1 1:1 3:0.5\n-1 2:1\n1 1:0.25\n-1 3:1\n"


@pytest.fixture
def clean(monkeypatch):
    """No data variable set (the conftest already drops COMPZOO_DATA)."""
    monkeypatch.delenv(datasets.LIBSVM_ENV, raising=False)
    monkeypatch.delenv(datasets.DATA_ENV, raising=False)
    return monkeypatch


def test_compzoo_data_holds_the_set_or_its_libsvm_folder(tmp_path, clean):
    (tmp_path / "mushrooms.txt").write_text(TINY)
    (tmp_path / "libsvm").mkdir()
    (tmp_path / "libsvm" / "w8a.txt").write_text(TINY)
    clean.setenv("COMPZOO_DATA", str(tmp_path))
    assert datasets.find("mushrooms") == tmp_path / "mushrooms.txt"
    assert datasets.find("w8a") == tmp_path / "libsvm" / "w8a.txt"
    assert datasets.find("a9a") is None
    p = make_problem("logreg", dataset="mushrooms", nodes=2)
    assert (p.n, p.d) == (2, 3)


def test_the_alias_comes_second_and_a_set_variable_hides_the_shared_folder(tmp_path, clean):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "a9a.txt").write_text(TINY)
    (second / "phishing.txt").write_text(TINY)
    clean.setenv("COMPZOO_LIBSVM_DIR", str(second))
    assert datasets.find("a9a") == second / "a9a.txt"
    clean.setenv("COMPZOO_DATA", str(first))
    assert datasets.find("a9a") == first / "a9a.txt"
    assert datasets.find("phishing") == second / "phishing.txt"
    assert [label for label, _ in datasets.places()] == [
        "$COMPZOO_DATA", "$COMPZOO_DATA/libsvm", "$COMPZOO_LIBSVM_DIR",
    ]  # fmt: skip
    with pytest.raises(ValueError) as err:
        datasets.locate("w8a", "logreg")
    assert str(err.value) == (
        f"logreg: dataset 'w8a' not found; looked for {first / 'w8a.txt'} ($COMPZOO_DATA); "
        f"{first / 'libsvm' / 'w8a.txt'} ($COMPZOO_DATA/libsvm: no such folder); "
        f"{second / 'w8a.txt'} ($COMPZOO_LIBSVM_DIR); {datasets.HINT}"
    )


def test_with_nothing_set_the_shared_folder_beside_the_repository(tmp_path, clean):
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent")
    clean.chdir(tmp_path)
    assert datasets.places()[0] == ("beside the repository", SHARED.resolve())
    for name in datasets.NAMED_LIBSVM:
        want = SHARED / f"{name}.txt"
        assert datasets.find(name) == (want.resolve() if want.is_file() else None)


def test_with_nothing_set_the_shared_folder_beside_the_working_directory(tmp_path, clean):
    clean.setattr(datasets, "_repo_root", lambda: tmp_path / "other" / "repo")
    shared = tmp_path / "shared" / "data" / "libsvm"
    shared.mkdir(parents=True)
    (shared / "w8a.txt").write_text(TINY)
    (tmp_path / "clone").mkdir()
    clean.chdir(tmp_path / "clone")
    assert datasets.find("w8a") == shared / "w8a.txt"
    assert datasets.find("a9a") is None
    with pytest.raises(ValueError, match=r"beside the repository: no such folder\); .*a9a\.txt "):
        make_problem("logreg", dataset="a9a")


def test_the_listings_say_found_or_missing(tmp_path, clean):
    from experiments import reproduce
    from runner.cli import list_everything

    (tmp_path / "mushrooms.txt").write_text(TINY)
    clean.setenv("COMPZOO_DATA", str(tmp_path))
    for text in (list_everything(), reproduce._listing()):
        section = text[text.index("data sets:") :]
        lines = [line.strip() for line in section.splitlines()]
        assert f"mushrooms        LIBSVM, found at {tmp_path / 'mushrooms.txt'}" in " ".join(lines)
        for name in ("a9a", "phishing", "w8a"):
            assert f"{name:16s} LIBSVM, missing" in lines
        for name in datasets.BUNDLED:
            assert f"{name:16s} bundled with scikit-learn" in lines
        assert section.count("set COMPZOO_DATA to the folder holding NAME.txt") == 1
        assert text.count("COMPZOO_DATA") == section.count("COMPZOO_DATA")  # not per entry


def test_reproductions_read_the_sets_where_the_runner_does(tmp_path, clean):
    from experiments import reproduce

    for name in datasets.NAMED_LIBSVM:
        (tmp_path / "libsvm").mkdir(exist_ok=True)
        (tmp_path / "libsvm" / f"{name}.txt").write_text(TINY)
    clean.setenv("COMPZOO_DATA", str(tmp_path))
    paper = reproduce.load_paper("ef21-vs-ef")
    want = [f"libsvm:{tmp_path / 'libsvm' / f'{s}.txt'}" for s in ("mushrooms", "phishing")]
    assert paper.sweep["grid"]["dataset"][:2] == want
    assert reproduce.dataset_spec("w8a") == f"libsvm:{tmp_path / 'libsvm' / 'w8a.txt'}"
    clean.setenv("COMPZOO_DATA", str(tmp_path / "none"))
    with pytest.raises(reproduce.DataMissing, match=r"are not in .*none, .*none/libsvm \(set"):
        reproduce.load_paper("ef21-vs-ef")
