"""Catalogue cases of the runner (``python -m algorithms.run``): options, run folders,
checkpoints and resumes."""

from __future__ import annotations

from .harness import Case

RUN = "algorithms.run"

CASES: list[Case] = [
    Case(
        "run-unknown-compressor",
        RUN,
        ["ef21", "--compressor", "nope", "--iters", "5", "--out", "{tmp}/r"],
        message=r"nope",
    ),
]
