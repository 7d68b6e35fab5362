"""The bad-input and fault catalogue: every case ends with its stated exit code and a message
that names the bad value and what is allowed, never a traceback.

The cases live in ``cases_*.py`` beside this file, one module per area (runner, compressors and
data, experiments and systems); each exports ``CASES``. ``python -m tests.catalogue`` prints the
table (input, exit code, first line of the message).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

from .harness import Case, assert_case

_HERE = Path(__file__).parent


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for info in sorted(pkgutil.iter_modules([str(_HERE)]), key=lambda m: m.name):
        if info.name.startswith("cases_"):
            cases += importlib.import_module(f"{__package__}.{info.name}").CASES
    return cases


CASES = all_cases()


def test_ids_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, tmp_path: Path):
    assert_case(case, tmp_path)
