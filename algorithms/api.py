"""The Python entry point, ``algorithms.api.run`` (its home is :mod:`runner.api`)."""

from runner.api import Result, run, run_args

__all__ = ["Result", "run", "run_args"]
