"""Fixtures of the problem tests: a private f_star cache, the shared LIBSVM folder."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBSVM = ROOT.parent / "shared" / "data" / "libsvm"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test writes its f_star cache under tmp_path, never to the home directory."""
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "compzoo-cache"))
    monkeypatch.delenv("COMPZOO_DATA", raising=False)


@pytest.fixture
def libsvm_dir() -> Path:
    if not LIBSVM.is_dir():
        pytest.skip(f"LIBSVM data folder {LIBSVM} is absent")
    return LIBSVM
