"""The theory sheet's check column (``theory_checks/coverage.py``) names real methods and real
checks, and every check that names a method's family in its id is listed for that method."""

from __future__ import annotations

from algorithms.registry import ALGORITHMS
from theory_checks.catalogue import all_checks
from theory_checks.coverage import COVERS


def test_coverage_names_registered_methods_and_existing_checks():
    checks = {c.name for c in all_checks()}
    for method, names in COVERS.items():
        assert method in ALGORITHMS, method
        assert names, f"{method}: an entry lists at least one check"
        missing = set(names) - checks
        assert not missing, f"{method}: no such check {sorted(missing)}"


def test_a_check_named_after_a_method_is_listed_for_it():
    listed = {name for names in COVERS.values() for name in names}
    for c in all_checks():
        family = c.name.split(".")[0]
        if family in ALGORITHMS:  # for that method or one of its family (neolithic-acc)
            owners = [m for m, names in COVERS.items() if c.name in names]
            assert any(m.startswith(family) for m in owners), f"{c.name}: not for {family}"
        if family not in ("compressors", "ridge", "absolute") and c.name not in listed:
            raise AssertionError(f"{c.name} covers no method in theory_checks/coverage.py")
