"""The runner behind ``python -m algorithms.run``, one job per module.

``cli`` (the command line, ``--list``, the resume arguments), ``resolve`` (the method, problem and
config record a command line resolves to), ``folder`` (the run folder: one run per folder, its
run id, ``--overwrite``, what ``--resume`` checks), ``checkpoint`` (the safe checkpoint format),
``signals`` (SIGINT/SIGTERM: stop at a step every rank agrees on), ``loop`` (the run loop and
its history) and ``report`` (the summary). :mod:`runner.main` is the entry point.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
