"""``python -m compressors --dim D``: every compressor's class, constant and bits at a glance."""

from __future__ import annotations

import argparse
import sys

import torch

from compressors.base import Compressor
from compressors.registry import COMPRESSORS, parse_spec
from streams import Streams


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
    m = 1 if c.fixed_size else max(16, min(256, 10**7 // d))
    x = Streams.for_nodes(seed, [0], 0xDA7A).normal(d).expand(m, d)
    keys = Streams.for_nodes(seed, range(m)).keys  # independent draws, all as node 0
    packet = c.encode(x, Streams(keys, torch.zeros(m, dtype=torch.int64)))
    b = float(packet.nbits.double().mean())
    return b, b / (32.0 * d)


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
    args = ap.parse_args(argv)
    if args.dim < 1:
        ap.exit(2, f"error: --dim must be >= 1, got {args.dim}\n")
    if args.nodes < 1:
        ap.exit(2, f"error: --nodes must be >= 1, got {args.nodes}\n")
    try:
        comps = (
            [parse_spec(s) for s in args.spec]
            if args.spec
            else [cls() for cls in COMPRESSORS.values()]
        )
        rows = []
        for c in comps:
            c = c.bind(args.nodes)
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
