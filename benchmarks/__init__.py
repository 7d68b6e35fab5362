"""Speed and memory benchmarks, reported as ratios measured side by side in one run.

Not part of the test suite: ``python -m benchmarks [--quick] [--out DIR] [--device cuda]``.
Parts: :mod:`benchmarks.per_iteration` (every method against the per-node NumPy loops of
:mod:`benchmarks.baselines`), :mod:`benchmarks.bandwidth` (the triad and the bytes bound),
:mod:`benchmarks.compressors_bench`, :mod:`benchmarks.memory`, :mod:`benchmarks.deep`,
:mod:`benchmarks.paper`, :mod:`benchmarks.scale`; :mod:`benchmarks.report` turns their rows into
ratios, targets and markdown. The command's own pieces: :mod:`benchmarks.progress` (the case
counter on stderr, the skip summary), :mod:`benchmarks.results` (the results written as they
come) and :mod:`benchmarks.interrupt` (SIGINT/SIGTERM: a clean stop, no process left behind).
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
