"""python -m benchmarks [--quick] [--out DIR] [--device cpu|cuda] [--only PARTS] [--quiet]

The issue-9 benchmark suite (not tests): per-iteration time against per-node NumPy loops, % of
the memory-bandwidth bound, compressors against torch primitives, peak memory against state
size, batched against looped deep-net gradients, the EF21, DIANA, MARINA and DASHA papers'
setups on the LIBSVM sets mushrooms, phishing, a9a and w8a (``paper``, issue 16: n = 20, from
$COMPZOO_DATA or ../shared/data/libsvm/, each skipped with a message when absent) against
careful per-node NumPy/SciPy-CSR loops and all-nodes vectorized NumPy/SciPy scripts, and
10^4-10^5 nodes sharded over several processes (``scale``). Prints a markdown report; with
--out also writes DIR/benchmarks.md and the raw numbers in DIR/benchmarks.json, after every
case, so a run stopped half way keeps what it measured.

Runtime of --quick, measured on this project's 2-core machine while others used it: 90-115 s
in all. By part (the "PART: N s" lines on stderr): iterations 14-21 s, compressors 1-2 s,
memory 19-23 s, deep 15-19 s, paper 14-18 s, scale 20-27 s; --only PART --quick takes that
plus 6-8 s (start-up and the bandwidth triad). The full run takes far longer (every case on
every method, more repeats, each loop timed twice, the 2.5 * 10^7-element compressors) and
several GiB of memory (the d = 10^4, m_i = 500 case, and the memory part at (n, d) =
(1000, 10^5), where one method's process peaks near 4 GiB).
--only paper times 500 steps per method, set and dtype (float64, float32), in three rounds,
compzoo and the vectorized script back to back twice a round (with --quick: 25 steps, float64
only); --only scale runs 10^4 and 10^5 nodes on 1, 2 and 4
processes (with --quick: 10^5 nodes on 1 and 2); --only grid runs the EF21 paper's 96-run grid
twice, one run per process and batched (``benchmarks.grid``; 4-5 minutes on 2 cores; with
--quick: two sets at 300 iterations).

Progress goes to stderr, one line per case ("[3/12] iterations (part 1/6): CASE"), and one
line per part names the methods skipped because they have no theory step on its problem;
--quiet keeps only warnings. Ctrl-C (SIGINT) or SIGTERM stops the run without a traceback:
the parts and cases finished so far are written to --out, one line says so, and the exit
status is 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

import torch

from benchmarks import (
    bandwidth,
    compressors_bench,
    deep,
    grid,
    interrupt,
    memory,
    paper,
    per_iteration,
    scale,
)
from benchmarks.progress import Tracker
from benchmarks.results import Results

PARTS = ("iterations", "compressors", "memory", "deep", "paper", "scale", "grid")
log = logging.getLogger("benchmarks")


def _parts(text: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(p for p in text.split(",") if p))
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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--quick", action="store_true", help="fewer, smaller cases; about 2 minutes on 2 cores"
    )
    ap.add_argument(
        "--out", default=None, metavar="DIR", help="folder for benchmarks.md and benchmarks.json"
    )
    ap.add_argument("--device", type=_device, default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--only", type=_parts, default=PARTS, metavar="PARTS", help=f"comma list of {PARTS}"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return ap


def _run_part(part: str, args: argparse.Namespace, track: Tracker) -> list[dict]:
    quick, dev = args.quick, args.device
    if part == "iterations":
        return per_iteration.run(quick, dev, track=track)
    if part == "compressors":
        return compressors_bench.run(quick, dev, track=track)
    if part == "memory":
        return memory.run(quick, dev, track=track)
    if part == "deep":
        return deep.run(quick, dev, track=track)
    if part == "paper":
        return paper.run(quick, dev, track=track)
    if part == "grid":
        return grid.run(quick, track=track, device=dev)
    return scale.run(quick, track=track)


def measure(args: argparse.Namespace, results: Results) -> None:
    """Every chosen part in turn, each case's rows saved as they come."""
    elements = 2**24 if args.quick else 2**26
    results.raw["bandwidth"] = bandwidth.triad(elements, 5, args.device)
    log.info("triad: %.2f GB/s", results.raw["bandwidth"]["best"] / 1e9)
    chosen = [p for p in PARTS if p in args.only]
    results.raw.update({part: [] for part in PARTS})
    for part in chosen:

        def on_rows(rows: list[dict], part: str = part) -> None:
            results.raw[part] = list(rows)
            results.save_partial()

        track = Tracker(part, chosen.index(part) + 1, len(chosen), args.quiet, on_rows)
        results.running = (part, track)
        t0 = time.perf_counter()
        results.raw[part] = _run_part(part, args, track)
        results.running = None
        results.done.append(part)
        track.finish()
        log.info("%s: %.1f s", part, time.perf_counter() - t0)
        results.save_partial()
    # Measured again at the end, the better of the two kept: the machine may be shared.
    again = bandwidth.triad(elements, 5, args.device)
    results.raw["bandwidth"] = {k: max(v, again[k]) for k, v in results.raw["bandwidth"].items()}


def _stopped(e: interrupt.Interrupted, results: Results | None) -> str:
    """Save what was measured; the one line that says where it went."""
    if results is None:
        return f"benchmarks: interrupted by {e.name} before measuring anything"
    if results.complete:
        return f"benchmarks: interrupted by {e.name} after the run had finished"
    where = "while measuring the memory bandwidth"
    if results.running is not None:
        part, track = results.running
        results.raw[part] = list(track.measured)
        where = f"during {part} ({track.finished} of {track.total} cases done)"
    if results.out is None:
        return f"benchmarks: interrupted by {e.name} {where}; nothing saved (no --out DIR)"
    results.save(interrupted=e.name)
    done = ", ".join(results.done) or "no part finished"
    return (
        f"benchmarks: interrupted by {e.name} {where}; partial results ({done}) in "
        f"{results.out / 'benchmarks.md'} and {results.out / 'benchmarks.json'}"
    )


def main(argv: list[str] | None = None, *, ending: bool = False) -> int:
    """The command; its exit status. ``ending``: the process ends when this returns, so SIGINT
    and SIGTERM are then ignored rather than given back to the handlers before (a signal
    while the interpreter shuts down changes nothing)."""
    with interrupt.catching(then=signal.SIG_IGN if ending else None):
        results = None
        level = log.level
        try:
            interrupt.ready()
            args = parser().parse_args(argv)
            fmt = "%(asctime)s %(message)s"
            logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr)
            log.setLevel(logging.WARNING if args.quiet else logging.INFO)
            results = Results(args.quick, args.device, args.only, args.out)
            measure(args, results)
            text = results.save()
            results.complete = True
            sys.stdout.write(text)
            sys.stdout.flush()
            return 0
        except interrupt.Interrupted as e:
            line = _stopped(e, results)
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            return e.code
        finally:
            log.setLevel(level)


if __name__ == "__main__":
    sys.exit(main(ending=True))
