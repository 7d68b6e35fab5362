"""Threshold sparsifiers against Top-K: SIDCo's fitted thresholds, DGC's sampled threshold
and an exact Top-K, in time and in the number of coordinates they actually keep.

``python -m benchmarks.sparsifiers [--dim N] [--ratio R] [--repeats K]`` prints, for rows of
``N`` float32 values drawn from a Laplace law (``|x|`` exponential: SIDCo's exponential fit is
exact) and a Gaussian law (a misfit that the multi-stage fit repairs), each method's median
time of one compression (encode, on one row), that time over Top-K's (``torch.topk`` of
``|x|``, the exact ``k``), and the achieved ``k`` over the target ``R N``. DGC's threshold
(Lin, Han, Mao, Wang & Dally 2018, arXiv 1712.01887, Sec. 3: "sample 0.1%-1% of the
gradients and perform top-k selection on the samples") is written here as a baseline: the
``(1 - R)`` quantile of ``|x|`` on a uniform sample of 1% of the entries (``torch.kthvalue``),
then the mask ``|x| >= t``. The comparison is measured side by side in one run; nothing here
is a timed assertion.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from benchmarks.clock import median_seconds
from comm import SimulatedComm
from compressors import parse_spec

__all__ = ["run", "table", "METHODS"]

METHODS = ("topk", "dgc-sampled", "sidco-exp", "sidco-exp-3", "sidco-gpd-3")
SAMPLE = 0.01  # DGC's sample fraction


def _rows(law: str, N: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if law == "laplace":
        u = torch.rand(1, N, generator=g)
        mag = -torch.log1p(-torch.rand(1, N, generator=g))
        return torch.where(u < 0.5, mag, -mag)
    return torch.randn(1, N, generator=g)


def _method(name: str, x: torch.Tensor, ratio: float):
    """``fn() -> kept count`` for one compression of ``x`` (one row)."""
    N = x.shape[1]
    k = max(1, round(ratio * N))
    if name == "topk":
        return lambda: torch.topk(x.abs(), k, dim=1, sorted=False).indices.shape[1]
    if name == "dgc-sampled":
        g = torch.Generator().manual_seed(1)
        s = max(1, round(SAMPLE * N))

        def fn():
            idx = torch.randint(0, N, (s,), generator=g)
            sample = x[0, idx].abs()
            t = torch.kthvalue(sample, max(1, math.ceil((1 - ratio) * s))).values
            return int((x.abs() >= t).sum())

        return fn
    spec = {"sidco-exp": "sidco:ratio={r}", "sidco-exp-3": "sidco:ratio={r},stages=3",
            "sidco-gpd-3": "sidco:ratio={r},dist=gpd,stages=3"}[name].format(r=ratio)  # fmt: skip
    C = parse_spec(spec)
    rng = SimulatedComm(1, seed=0).rng_for(C, 0)
    return lambda: int(C.encode(x, rng).fields["keep"].sum())


def run(N: int = 10**6, ratio: float = 0.01, repeats: int = 5) -> list[dict]:
    """One row per law and method: ``seconds`` (median of ``repeats``), ``vs_topk`` (time over
    Top-K's), ``kept`` and ``kept_over_target`` (achieved ``k`` over ``ratio N``)."""
    out = []
    for law in ("laplace", "gauss"):
        x = _rows(law, N)
        base = None
        for name in METHODS:
            fn = _method(name, x, ratio)
            kept = fn()
            sec = median_seconds(fn, repeats)
            base = sec if name == "topk" else base
            out.append({"law": law, "method": name, "seconds": sec, "vs_topk": sec / base,
                        "kept": kept, "kept_over_target": kept / (ratio * N)})  # fmt: skip
    return out


def table(rows: list[dict]) -> str:
    lines = ["| law | method | ms | time / Top-K | kept / target |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['law']} | {r['method']} | {1e3 * r['seconds']:.2f} | "
                     f"{r['vs_topk']:.2f} | {r['kept_over_target']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sparsifiers", description=__doc__)
    ap.add_argument("--dim", type=int, default=10**6, help="row length N (default 10^6)")
    ap.add_argument("--ratio", type=float, default=0.01, help="target fraction kept")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per method")
    args = ap.parse_args(argv)
    if args.dim < 100 or not 0 < args.ratio < 1 or args.repeats < 1:
        ap.error(f"need --dim >= 100, 0 < --ratio < 1, --repeats >= 1; got {args.dim}, "
                 f"{args.ratio}, {args.repeats}")  # fmt: skip
    sys.stdout.write(table(run(args.dim, args.ratio, args.repeats)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
