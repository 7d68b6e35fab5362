"""Hypothesis profiles and shared fixtures.

Profiles: ``ci`` (default; derandomized, so a run is reproducible), ``dev`` (random, more
examples) and ``deep`` (many examples). Pick one with ``HYPOTHESIS_PROFILE=dev``.
Markers (``slow``, ``gpu``, ``dist``) are declared in pyproject.toml and deselected by default.
"""

import os
import sys
import tempfile

import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Nothing the tests compute (f_star caches) lands in the user's home folder; subprocesses
# inherit this.
os.environ["COMPZOO_CACHE"] = tempfile.mkdtemp(prefix="compzoo-test-cache-")

# The suite's problems are small: one intra-op thread is faster for them, and immune to the
# thread-pool oversubscription that makes small ops 100x slower when the cores are shared.
torch.set_num_threads(1)

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ``python -m pytest -m smoke``: about a minute of the suite, one file or two per package (the
# core contracts, the runner and its bad-input catalogue, a sweep, theory steps, the systems
# model), for a quick check of a change; the default suite runs them too.
SMOKE_FILES = {
    "tests/test_streams.py",
    "tests/compressors/test_contract.py",
    "tests/compressors/test_wire.py",
    "tests/problems/test_problems_registry.py",
    "tests/algorithms/test_dcgd_ef21.py",
    "tests/algorithms/test_runner.py",
    "tests/algorithms/test_checkpoint.py",
    "tests/experiments/test_config.py",
    "tests/experiments/test_examples.py",
    "tests/theory_checks/test_tc_stepsizes.py",
    "tests/systems/test_systems_model.py",
    "tests/catalogue/test_catalogue.py",
}


def pytest_collection_modifyitems(config, items):
    import pytest

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for item in items:
        if os.path.relpath(str(item.path), root) in SMOKE_FILES:
            item.add_marker(pytest.mark.smoke)
        # the long tests (reproductions, GPU and multi-process runs) get an hour before the
        # hang guard (pyproject's timeout) stops them, unless they name their own limit
        if item.get_closest_marker("timeout") is None and any(
            item.get_closest_marker(m) is not None for m in ("slow", "gpu", "dist")
        ):
            item.add_marker(pytest.mark.timeout(3600))
