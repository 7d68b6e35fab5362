"""``python -m compressors.warm``: compile the compressors' CPU kernels once, ahead of use.

The compiled kernels (:mod:`streams.compiled`, ``compressors.compiled_*``) are compiled by
numba the first time each is called with a given dtype and argument layout, and the machine
code is cached on disk next to the sources. On a fresh checkout that first compilation costs a
few seconds per kernel, minutes in all, and lands on whatever calls the kernel first (a run, a
benchmark, the test suite: about 2.5 of its minutes on 2 cores). This command pays it once, at
set-up: every registered compressor encodes, decodes, sums and encodes shifted
(:meth:`~compressors.base.Compressor.encode_shifted`) rows large enough for its kernels
(``compiled_dense.FAST_FROM`` entries and up), in float32 and float64, as several rows and as one
long row, and a small block of rows (the one-thread kernels that serve a node's rows of a small
problem); each compressor in every configuration its tests exercise (``examples()``: other
widths of the payload's fields are other compilations). Later processes load the cached
code. Progress goes to stderr (``--quiet`` turns it
off); it exits 0 with one line saying how many compressors it ran and how long it took.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from compressors import compiled_dense
from compressors.registry import COMPRESSORS
from streams import Streams, tags

__all__ = ["SHAPES", "warm"]

NODES = 4

# Several rows of the kernels' smallest size, one long row (the one-row kernels), and a small
# block (the one-thread kernels, below ``streams.compiled.SERIAL_BELOW`` entries).
SHAPES = (
    (4, max(1, compiled_dense.FAST_FROM // 2)),
    (1, max(1, 2 * compiled_dense.FAST_FROM)),
    (NODES, 100),
)


def warm(progress: bool = False) -> int:
    """Encode, decode and sum with every registered compressor, in each of its
    ``examples()``, at :data:`SHAPES` in float32 and float64; returns the number of
    compressors run."""
    comps = [c.bind(NODES) for cls in COMPRESSORS.values() for c in cls.examples()
             if _binds(c)]  # fmt: skip
    cases = [(c, dt, shape) for c in comps for dt in (torch.float32, torch.float64)
             for shape in SHAPES]  # fmt: skip
    for c, dt, (m, d) in tqdm(cases, desc="compiling", disable=not progress, file=sys.stderr):
        x = Streams.for_nodes(0, range(m), tags.DEMO_INPUT).normal(d).to(dt)
        rng = Streams.for_nodes(1, range(m))
        packet = c.encode(x, rng)
        c.decode(packet)
        c.decode_sum(packet)
        c.encode_shifted(x.clone(), 0.5 * x, rng)  # the shifted form (Top-K's own kernel)
    return len(COMPRESSORS)


def _binds(c) -> bool:
    """Whether ``c`` serves :data:`NODES` nodes (an example made for another count does not:
    its default instance is run)."""
    try:
        c.bind(NODES)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compressors.warm", description=__doc__)
    ap.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    count = warm(progress=not args.quiet)
    print(f"compiled the kernels of {count} compressors in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
