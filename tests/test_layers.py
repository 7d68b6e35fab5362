"""The layers look only down: every import of the project's packages, read from the source, goes to
a package its layer may use.

    streams                         per-node randomness and the small shared pieces
    compressors, problems           what is compressed and what is optimized
    comm                            the node axis: reductions, bits, error feedback, the DDP hook
    algorithms                      the methods (problems only through their declared interface)
    runner                          one run: the command line, the loop, the run folder
    theory_checks, experiments, systems, benchmarks   on top

``algorithms.run`` and ``algorithms.api`` are the runner's public entry points under their
historical names: the two modules that may import the runner from ``algorithms``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = {"streams"}
MAY_USE = {
    "streams": BASE,
    "compressors": BASE | {"compressors"},
    "problems": BASE | {"problems", "compressors"},
    "comm": BASE | {"comm", "compressors"},
    "algorithms": BASE | {"algorithms", "comm", "compressors", "problems"},
    "runner": BASE | {"runner", "algorithms", "comm", "compressors", "problems"},
}
TOP = {"theory_checks", "experiments", "systems", "benchmarks"}
PROJECT = set(MAY_USE) | TOP
# Methods use the problems' interface, never a problem's internals.
PROBLEM_INTERFACE = {"problems", "problems.base", "problems.capabilities", "problems.registry"}
ENTRY_POINTS = {"algorithms/run.py", "algorithms/api.py"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in PROJECT]


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(MAY_USE))
def test_a_layer_imports_only_the_layers_below(package):
    bad = []
    for path in _files(package):
        rel = str(path.relative_to(ROOT))
        for name in _imports(path):
            top = name.split(".")[0]
            if rel in ENTRY_POINTS and top == "runner":
                continue
            if top not in MAY_USE[package]:
                bad.append(f"{rel} imports {name}")
            elif package == "algorithms" and top == "problems" and name not in PROBLEM_INTERFACE:
                bad.append(f"{rel} imports {name} (a problem's internals)")
    assert not bad, "\n".join(bad)


def test_the_check_sees_the_imports():
    """The scan reads both import forms (and so can fail)."""
    probe = ROOT / "algorithms" / "base.py"
    assert any(n.startswith("comm") for n in _imports(probe))
    assert any(n.startswith("compressors") for n in _imports(probe))
