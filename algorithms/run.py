"""``python -m algorithms.run ALGORITHM [options]``: the runner's command line, under the name
the project has always had (the runner itself is :mod:`runner.main`)."""

from __future__ import annotations

import sys

from runner import main as _main
from runner.main import *  # noqa: F403  (the command line's public names)

__all__ = _main.__all__


def __getattr__(name: str):
    return getattr(_main, name)  # the names runner.main imports when first used


if __name__ == "__main__":
    _main.main()
    sys.exit(0)
