"""Methods as init/step over a state of rows, the registry, the comm layer and the runner."""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
