"""What is optimised: ``f = (1/n) sum_i f_i``, per-node gradients as rows, exact constants."""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
from problems.base import Batch, Consts, Problem
from problems.registry import PROBLEMS, make_problem

__all__ = ["Batch", "Consts", "Problem", "PROBLEMS", "make_problem"]
