"""The generated pages of ``docs/`` are what ``docs/generate.py`` makes of the registries.

``docs/methods.md``, ``docs/compressors.md``, ``docs/problems.md`` and ``docs/hooks.md`` hold,
between two marker comments, lists generated from the registries; the text around the markers is
written by hand. A method, compressor, problem or hook added (or a docstring, option or knob
changed) without running ``python docs/generate.py`` fails
:func:`test_generated_pages_are_up_to_date` with the difference and the command that fixes it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "docs" / "generate.py"


@pytest.fixture(scope="module")
def gen():
    """``docs/generate.py``, imported by path (``docs`` is not a package)."""
    spec = importlib.util.spec_from_file_location("compzoo_docs_generate", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_up_to_date(gen):
    stale = gen.differences()
    report = "\n".join(f"{path.name}:\n{diff}" for path, diff in stale.items())
    assert not stale, f"out of date; run: python docs/generate.py\n{report}"


def test_every_registered_name_is_on_its_page(gen):
    from algorithms.registry import ALGORITHMS
    from compressors.registry import COMPRESSORS, STRUCTURED
    from problems.registry import PROBLEMS
    from systems.hooks import hook_names

    pages = {p.name: text for p, text in gen.expected().items()}
    methods = pages["methods.md"]
    for name, cls in gen._builtin(ALGORITHMS, "compzoo.algorithms"):
        assert f"\n### {name}\n" in methods and f"`{cls.__name__}`" in methods, name
    for name in [n for n, _ in gen._builtin(COMPRESSORS, "compzoo.compressors")] + [*STRUCTURED]:
        assert f"| `{name}` |" in pages["compressors.md"], name
    for name, _ in gen._builtin(PROBLEMS, "compzoo.problems"):
        assert f"\n### {name}\n" in pages["problems.md"], name
    for name in hook_names():
        assert f"| `{name}` |" in pages["hooks.md"], name
    # what the method records as its step's source, on the default problem
    assert "arXiv 2106.05203, Theorem 2" in methods.split("### ef21\n")[1][:2000]


def test_a_method_added_without_regenerating_fails_the_check(gen, monkeypatch, tmp_path, capsys):
    from algorithms.base import option
    from algorithms.ef.ef21 import EF21
    from algorithms.registry import ALGORITHMS

    @dataclasses.dataclass(frozen=True)
    class ToyEF21(EF21):
        """ToyEF21: EF21 under another name, a test's own (arXiv 2106.05203)."""

        toy_level: int = option(3, "a toy option", flag="toy-level")

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    assert gen.main(["--check"], docs=docs) == 0
    monkeypatch.setitem(ALGORITHMS, "toy-ef21", ToyEF21)
    assert gen.main(["--check"], docs=docs) == 1
    out = capsys.readouterr().out
    assert "methods.md is out of date" in out and "toy-ef21" in out
    assert "python docs/generate.py" in out
    head = (docs / "methods.md").read_text().split(gen.BEGIN)[0]
    assert gen.main([], docs=docs) == 0  # writes the pages: the hand-written head is kept
    text = (docs / "methods.md").read_text()
    assert text.startswith(head) and "### toy-ef21" in text and "`--toy-level INT`" in text
    assert gen.main(["--check"], docs=docs) == 0


def test_a_page_without_markers_gets_them_after_its_text(gen):
    body = "| a | b |\n"
    fresh = gen.merge(None, "# Title", body)
    assert fresh == f"# Title\n\n{gen.BEGIN}\n\n{body}\n{gen.END}\n"
    kept = gen.merge("# Title\n\nWritten by hand.\n", "# Title", body)
    assert kept.startswith("# Title\n\nWritten by hand.\n\n" + gen.BEGIN)
    again = gen.merge(kept.replace(body, "old\n") + "After.\n", "# Title", body)
    assert again == kept + "After.\n"
