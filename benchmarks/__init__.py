"""Speed and memory benchmarks, reported as ratios measured side by side in one run.

Not part of the test suite: ``python -m benchmarks``.
"""
