"""Hypothesis profiles and shared fixtures.

Profiles: ``ci`` (default; derandomized, so a run is reproducible), ``dev`` (random, more
examples) and ``deep`` (many examples). Pick one with ``HYPOTHESIS_PROFILE=dev``.
Markers (``slow``, ``gpu``, ``dist``) are declared in pyproject.toml and deselected by default.
"""

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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
