"""``python -m compressors --dim D``: every compressor's class, constant and bits at a glance.

Measuring compresses standard normal vectors of dimension ``D`` (up to 256 rows at once for
variable-size payloads), so its memory grows with ``D``: a ``--dim`` whose estimated peak
(:func:`peak_bytes`) exceeds ``--max-memory-gib`` is refused with exit 2 before anything is
allocated (``--no-measure`` needs no memory). Progress goes to stderr (``--quiet`` turns it off).
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

from compressors.base import Compressor
from compressors.registry import COMPRESSORS, parse_spec
from streams import Streams, tags


def describe(c: Compressor, d: int) -> dict[str, str]:
    """One table row: class, constant and bits of ``c`` at dimension ``d``."""
    if c.unbiased:
        kind, const = "unbiased", f"omega={c.omega(d):.6g}"
    elif c.contractive:
        kind = "contractive"
        try:
            const = f"delta={c.delta(d):.6g}"
        except ValueError:
            kind, const = "neither", "-"
    elif c.absolute:
        kind, const = "absolute", f"Delta^2={c.abs_delta_sq(d):.6g}"
    else:
        kind, const = "neither", "-"
    expected = c.expected_bits(d)
    if c.fixed_size:
        bits = str(c.bits(d))
    elif expected is not None:
        bits = f"E={expected:.6g}"
    else:
        bits = f"<={c.max_bits(d)}"
    return {"compressor": c.spec(), "class": kind, "constant": const, "bits/node": bits}


def measured_bits(c: Compressor, d: int, seed: int) -> tuple[float, float]:
    """Mean bits per node of the payloads produced for a standard normal vector (over up to 256
    independent draws when the size is random), and its ratio to the uncompressed ``32 d``."""
    m = rows_measured(c, d)
    x = Streams.for_nodes(seed, [0], tags.DEMO_INPUT).normal(d).expand(m, d)
    keys = Streams.for_nodes(seed, range(m)).keys  # independent draws, all as node 0
    packet = c.encode(x, Streams(keys, torch.zeros(m, dtype=torch.int64)))
    b = float(packet.nbits.double().mean())
    return b, b / (32.0 * d)


# Bytes per entry of the rows measured at once: the float32 input and the float32 and int64
# temporaries of the heaviest compressor, with a margin (measured peak: about 33 bytes per
# entry at d = 10^6, 16 rows).
BYTES_PER_ENTRY = 48


def rows_measured(c: Compressor, d: int) -> int:
    """How many rows :func:`measured_bits` compresses at once."""
    return 1 if c.fixed_size else max(16, min(256, 10**7 // d))


def peak_bytes(comps: list[Compressor], d: int) -> int:
    """Estimated peak memory of measuring ``comps`` at dimension ``d``."""
    return BYTES_PER_ENTRY * d * max((rows_measured(c, d) for c in comps), default=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compressors", description=__doc__)
    ap.add_argument("--dim", type=int, default=1000, help="vector dimension d (default 1000)")
    ap.add_argument("--nodes", type=int, default=10, help="node count n for permk (default 10)")
    ap.add_argument(
        "--spec",
        action="append",
        default=None,
        help="compressor spec to list (repeatable); default: every registered compressor",
    )
    ap.add_argument(
        "--no-measure",
        action="store_true",
        help="skip compressing one N(0, I) vector to measure its bits",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-memory-gib",
        type=float,
        default=8.0,
        help="refuse a --dim whose measurement would need more memory (default 8 GiB)",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = ap.parse_args(argv)
    if args.dim < 1:
        ap.exit(2, f"error: --dim must be >= 1, got {args.dim}\n")
    if args.nodes < 1:
        ap.exit(2, f"error: --nodes must be >= 1, got {args.nodes}\n")
    if not args.max_memory_gib > 0:
        ap.exit(2, f"error: --max-memory-gib must be > 0, got {args.max_memory_gib}\n")
    try:
        comps = (
            [parse_spec(s) for s in args.spec]
            if args.spec
            else [cls() for cls in COMPRESSORS.values()]
        )
        comps = [c.bind(args.nodes) for c in comps]
        need = peak_bytes(comps, args.dim)
        if not args.no_measure and need > args.max_memory_gib * 2**30:
            ap.exit(
                2,
                f"error: --dim {args.dim}: measuring the bits would need about "
                f"{need / 2**30:.3g} GiB of memory; allowed: {args.max_memory_gib:g} GiB "
                "(raise --max-memory-gib, lower --dim, or pass --no-measure)\n",
            )
        rows = []
        for c in tqdm(comps, desc="compressors", disable=args.quiet, file=sys.stderr):
            row = describe(c, args.dim)
            if not args.no_measure:
                b, ratio = measured_bits(c, args.dim, args.seed)
                row["measured"] = f"{b:.6g}"
                row["vs 32d"] = f"{ratio:.4g}"
            rows.append(row)
    except ValueError as e:
        ap.exit(2, f"error: {e}\n")
    cols = list(rows[0])
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in cols}
    out = sys.stdout
    out.write(f"d = {args.dim}, n = {args.nodes} (permk); bits per node per message\n")
    out.write("  ".join(k.ljust(widths[k]) for k in cols) + "\n")
    out.write("  ".join("-" * widths[k] for k in cols) + "\n")
    for r in rows:
        out.write("  ".join(r[k].ljust(widths[k]) for k in cols) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
