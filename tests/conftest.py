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
