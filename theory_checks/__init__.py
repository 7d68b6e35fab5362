"""Constants, step sizes and predicted rates, checked against runs."""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
