"""``python -m benchmarks [--quick] [--out DIR] [--device cpu|cuda] [--only PARTS]``: the
issue-9 benchmark suite (not tests): per-iteration time against per-node NumPy loops, % of
the memory-bandwidth bound, compressors against torch primitives, peak memory against state
size, batched against looped deep-net gradients, and (``paper``, issue 16) the EF21, DIANA,
MARINA and DASHA papers' setups on the LIBSVM sets mushrooms, phishing, a9a and w8a (n = 20,
from ``$COMPZOO_DATA`` or ``../shared/data/libsvm/``, each skipped with a message when absent)
against careful per-node NumPy/SciPy-CSR loops, with the data-pass bounds and the per-step
floor: ``python -m benchmarks --only paper``. Prints a markdown report; with ``--out``
also writes ``DIR/benchmarks.md`` and the raw numbers in ``DIR/benchmarks.json``.

On a 2-core machine ``--quick`` takes about 3 minutes (numba's first compilation included); the
full run takes much longer (every case, more repeats, each loop timed twice) and several GiB of
memory (the ``d = 10^4, m_i = 500`` case, and the memory part at ``(n, d) = (1000, 10^5)``,
where one method's subprocess peaks near 4 GiB). ``--only paper`` times 500 steps (100 with
``--quick``) per method, set and dtype, three times. ``--only scale`` runs 10^4 and 10^5 nodes
sharded over 1, 2 and 4 processes (:mod:`benchmarks.scale`; several GiB at W = 1).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import torch

from benchmarks import (
    bandwidth,
    compressors_bench,
    deep,
    memory,
    paper,
    per_iteration,
    report,
    scale,
)

PARTS = ("iterations", "compressors", "memory", "deep", "paper", "scale")
log = logging.getLogger("benchmarks")


def _parts(text: str) -> tuple[str, ...]:
    chosen = tuple(p for p in text.split(",") if p)
    bad = [p for p in chosen if p not in PARTS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"unknown part(s) {bad or text!r}; allowed: {PARTS}")
    return chosen


def _device(text: str) -> str:
    if text not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"device must be cpu or cuda, got {text!r}")
    if text == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("device cuda asked for, but torch sees no CUDA device")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer cases, iterations and repeats")
    ap.add_argument("--out", default=None, help="folder for benchmarks.md and benchmarks.json")
    ap.add_argument("--device", type=_device, default="cpu", help="cpu or cuda")
    ap.add_argument("--only", type=_parts, default=PARTS, help=f"comma list of {PARTS}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    t_start = time.perf_counter()
    dev = args.device
    raw: dict = {"bandwidth": bandwidth.triad(2**24 if args.quick else 2**26, 5, dev)}
    log.info("triad: %.2f GB/s", raw["bandwidth"]["best"] / 1e9)
    steps = {
        "iterations": lambda: per_iteration.run(args.quick, dev),
        "compressors": lambda: compressors_bench.run(args.quick, dev),
        "memory": lambda: memory.run(args.quick, dev),
        "deep": lambda: deep.run(args.quick, dev),
        "paper": lambda: paper.run(args.quick, dev),
        "scale": lambda: scale.run(args.quick),
    }
    for part in PARTS:
        t0 = time.perf_counter()
        raw[part] = steps[part]() if part in args.only else []
        log.info("%s: %.1f s", part, time.perf_counter() - t0)
    # Measured again at the end, the better of the two kept: the machine may be shared.
    again = bandwidth.triad(2**24 if args.quick else 2**26, 5, dev)
    raw["bandwidth"] = {k: max(v, again[k]) for k, v in raw["bandwidth"].items()}
    bw = raw["bandwidth"]["best"]
    res = {
        "bandwidth": raw["bandwidth"],
        "iterations": report.derive_iterations(raw["iterations"], bw),
        "sparse": report.derive_sparse(raw["iterations"]),
        "compressors": report.derive_compressors(raw["compressors"]),
        "memory": report.derive_memory(raw["memory"]),
        "deep": report.derive_deep(raw["deep"]),
        "paper": report.derive_paper(raw["paper"], bw),
        "scale": scale.derive(raw["scale"]),
    }
    total = time.perf_counter() - t_start
    res["meta"] = (
        f"{'quick' if args.quick else 'full'} run on {dev} ({platform.processor() or 'cpu'}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} torch "
        f"threads), {total:.0f} s in all. Medians of repeats; timings on a shared machine are "
        "noisy. Rerun: `python -m benchmarks"
        + (" --quick" if args.quick else "")
        + (f" --device {dev}" if dev != "cpu" else "")
        + "`."
    )
    text = report.markdown(res)
    sys.stdout.write(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "benchmarks.md").write_text(text)
        (out / "benchmarks.json").write_text(json.dumps({**res, "raw": raw}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
