"""Sweeps over methods, compressors and step-size multipliers, the papers' selection of the best
multiplier, and plots of convergence against bits, iterations or time.

Everything here sits on top of the runner (``python -m algorithms.run``) and reads only the run
folders it leaves, so a sweep's results can be re-tabled and re-plotted without rerunning.

Modules: ``config`` (sweep configs, one ``RunSpec`` per run), ``sweep`` (parallel, resumable
execution; ``python -m experiments.sweep``), ``select`` (best multiplier per group) and ``plot``
(``python -m experiments.plot``).
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
