"""When does compression pay? ``python -m systems.utility --model resnet50 --workers 64
--bandwidth 10`` measures every compressor's encode/decode on this machine at the model's size
and predicts, with the performance model of :mod:`systems.model` (Agarwal et al., MLSys 2022,
arXiv 2103.00543), the iteration time against optimized synchronous SGD.

Per compressor it prints the bits ratio (payload bits over ``32 d``), the measured
encode+decode milliseconds, the collective (all-reduce when payloads can be summed, see
:func:`systems.measure.collective_of`, else all-gather, unless ``--collective`` says
otherwise), the predicted iteration time, the speed-up over synchronous SGD and the break-even
bandwidth below which compression wins; then the speed-up at each of ``--table-bandwidths``.
``--plot FIG.png`` draws the speed-up against bandwidth from 1 to 100 Gbit/s.

Measurements are cached (:func:`systems.measure.cache_path`); when the table reuses cached ones,
stderr says so: from which file, measured when, on which host and by which process, and that
``--remeasure`` measures afresh. Measuring shows a progress bar on stderr (``--quiet``: none).

Exit status: 0 done, 2 bad input (a message names the bad value and what is allowed).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from compressors.registry import parse_spec
from systems import model
from systems.layers import MODELS, model_sizes
from systems.measure import VECTOR_UPDATES, Measurement, lookup, measure_cached

__all__ = ["DEFAULT_COMPRESSORS", "DEFAULT_COMPUTE_MS", "main", "predict"]

DEFAULT_COMPRESSORS = (
    "topk:ratio=0.01",
    "randk:ratio=0.01",
    "qsgd",
    "scaled-sign",
    "sign",
    "rank:r=4",
)

# Forward+backward milliseconds per iteration used when --compute-ms is not given: ResNet-50 is
# the calibrated figure of systems.paper (a V100 at batch 64); the others scale it by their
# forward FLOPs (ResNet-101 7.8 vs 4.1 GFLOPs, He et al. 2016 Table 1) or are a rough V100
# figure (BERT-base, sequence 128, batch 32). They are defaults to override, not measurements.
DEFAULT_COMPUTE_MS = {"resnet50": 290.0, "resnet101": 550.0, "bert-base": 350.0}

Measurer = Callable[[str, tuple[int, ...]], Measurement]


def predict(s: model.Setting, m: Measurement, gbps, collective: str, method: str = "dcgd"):
    """Keyword arguments of :func:`systems.model.compressed_time` for measurement ``m``."""
    if collective == "auto":
        collective = m.collective
    return dict(
        bits=float(m.bits),
        encode_s=m.encode_s,
        decode_s=m.decode_s,
        collective=collective,
        extra_s=VECTOR_UPDATES[method] * m.axpy_s,
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m systems.utility",
        description="Predict whether gradient compression speeds up data-parallel training.",
    )
    ap.add_argument("--model", default="resnet50", choices=list(MODELS))
    ap.add_argument("--params", type=int, default=None, metavar="D",
                    help="use a flat vector of D floats instead of the model's size")  # fmt: skip
    ap.add_argument("--layerwise", action="store_true",
                    help="compress the model's parameter tensors one by one")  # fmt: skip
    ap.add_argument("--workers", type=int, default=8, metavar="P")
    ap.add_argument("--bandwidth", type=float, default=10.0, metavar="GBPS",
                    help="link bandwidth per worker, Gbit/s")  # fmt: skip
    ap.add_argument("--compute-ms", type=float, default=None,
                    help="forward+backward time per iteration (default: per model)")  # fmt: skip
    ap.add_argument("--speedup", type=float, default=1.0, help="compute speed-up factor")
    ap.add_argument("--latency-us", type=float, default=10.0, help="latency per message")
    ap.add_argument("--compressors", nargs="+", default=list(DEFAULT_COMPRESSORS),
                    metavar="SPEC")  # fmt: skip
    ap.add_argument("--method", default="dcgd", choices=list(VECTOR_UPDATES),
                    help="whose extra per-step vector work to charge")  # fmt: skip
    ap.add_argument("--collective", default="auto", choices=["auto", *model.COLLECTIVES])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--remeasure", action="store_true",
                    help="measure afresh, replacing the cached measurements")  # fmt: skip
    ap.add_argument("--quiet", action="store_true", help="no progress bar while measuring")
    ap.add_argument("--table-bandwidths", default="1,10,25,100", metavar="GBPS,GBPS,...")
    ap.add_argument("--plot", default=None, metavar="FIG.png")
    return ap


def _break_even(bw: float) -> str:
    """``never`` when compression loses at every bandwidth, ``always`` when it always wins."""
    if bw == 0.0:
        return "never"
    return "always" if math.isinf(bw) else f"{bw:.3g}"


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _check(args) -> str | None:
    if not args.workers >= 1:
        return f"--workers must be an integer >= 1, got {args.workers}"
    if not (args.bandwidth > 0 and math.isfinite(args.bandwidth)):
        return f"--bandwidth must be a finite number > 0 Gbit/s, got {args.bandwidth}"
    if args.compute_ms is not None and not args.compute_ms >= 0:
        return f"--compute-ms must be >= 0, got {args.compute_ms}"
    if not args.speedup > 0:
        return f"--speedup must be > 0, got {args.speedup}"
    if not args.latency_us >= 0:
        return f"--latency-us must be >= 0, got {args.latency_us}"
    if args.params is not None and args.params < 1:
        return f"--params must be an integer >= 1, got {args.params}"
    if args.params is not None and args.layerwise:
        return "--layerwise needs the model's tensors; it cannot be combined with --params"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "--device cuda was asked for but no CUDA device is available; allowed: cpu"
    for spec in args.compressors:
        try:
            parse_spec(spec)
        except ValueError as e:
            return f"--compressors {spec!r}: {e}"
    return None


def main(argv: list[str] | None = None, measurer: Measurer | None = None) -> int:
    """Run the command line; ``measurer(spec, sizes)`` replaces the cached measurement."""
    ap = _parser()
    args = ap.parse_args(argv)
    bad = _check(args)
    try:
        table_bw = [float(v) for v in args.table_bandwidths.split(",")]
    except ValueError:
        bad = (
            bad
            or f"--table-bandwidths must be numbers joined by commas, got {args.table_bandwidths!r}"
        )  # noqa: E501
        table_bw = []
    if bad is None and not all(b > 0 for b in table_bw):
        bad = f"--table-bandwidths must all be > 0 Gbit/s, got {args.table_bandwidths!r}"
    if bad:
        return _fail(bad)

    full = tuple(model_sizes(args.model))
    sizes = (args.params,) if args.params else full if args.layerwise else (sum(full),)
    compute_ms = DEFAULT_COMPUTE_MS[args.model] if args.compute_ms is None else args.compute_ms
    s = model.Setting(
        sizes=full if args.params is None else sizes,
        workers=args.workers,
        compute_s=compute_ms / 1e3,
        speedup=args.speedup,
        alpha=args.latency_us * 1e-6,
    )
    try:
        measured = _measure_all(args, sizes, measurer)
    except OSError as e:
        return _fail(f"cannot write the measurement cache {e.filename!r}: {e.strerror or e}")

    t_sync = float(model.sync_sgd_time(s, args.bandwidth))
    name = f"{args.model}" if args.params is None else f"flat vector of {args.params} floats"
    print(
        f"model {name}: d={s.d}, workers={s.workers}, bandwidth={args.bandwidth:g} Gbit/s, "
        f"compute {s.compute * 1e3:.1f} ms (speedup {args.speedup:g}), latency "
        f"{args.latency_us:g} us, method {args.method}"
    )
    print(f"sync SGD (bucketed ring all-reduce overlapped with backward): {t_sync * 1e3:.1f} ms")
    header = (
        f"{'compressor':<20} {'collective':<10} {'bits ratio':>10} {'enc+dec ms':>10} "
        f"{'iter ms':>9} {'speedup':>8} {'break-even Gbps':>15}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for spec in args.compressors:
        m = measured[spec]
        kw = predict(s, m, args.bandwidth, args.collective, args.method)
        t = float(model.compressed_time(s, args.bandwidth, **kw))
        be = model.break_even_bandwidth(s, **kw)
        rows.append((spec, kw))
        codec_ms = (m.encode_s + m.decode_s) * 1e3
        print(
            f"{spec:<20} {kw['collective']:<10} {m.bits / (32 * s.d):>10.4f} {codec_ms:>10.1f} "
            f"{t * 1e3:>9.1f} {t_sync / t:>8.3f} {_break_even(be):>15}"
        )
    print()
    print("predicted speedup over sync SGD at " + ", ".join(f"{b:g}" for b in table_bw) + " Gbit/s")
    print(f"{'compressor':<20} " + " ".join(f"{f'{b:g} Gbps':>10}" for b in table_bw))
    bw = np.asarray(table_bw)
    for spec, kw in rows:
        sp = model.speedup(s, bw, **kw)
        print(f"{spec:<20} " + " ".join(f"{v:>10.3f}" for v in np.atleast_1d(sp)))
    if args.plot:
        try:
            _plot(s, rows, Path(args.plot), name)
        except (OSError, ValueError) as e:
            return _fail(
                f"cannot write the plot {args.plot!r}: {getattr(e, 'strerror', None) or e}"
            )
        print(f"plot written to {args.plot}")
    return 0


def _measure_all(args, sizes: tuple[int, ...], measurer: Measurer | None) -> dict:
    """Each compressor's measurement: injected, cached (said on stderr) or measured now (with a
    progress bar)."""
    if measurer is not None:
        return {spec: measurer(spec, sizes) for spec in args.compressors}
    out, cached, todo = {}, {}, []
    for spec in dict.fromkeys(args.compressors):
        hit = None if args.remeasure else lookup(spec, sizes, args.device, args.workers)
        if hit is None:
            todo.append(spec)
        else:
            out[spec], cached[spec] = hit
    if cached:
        print(_cache_note(cached, len(set(args.compressors))), file=sys.stderr)
    bar = tqdm(todo, desc="measuring", unit="compressor", file=sys.stderr,
               disable=args.quiet or not todo)  # fmt: skip
    for spec in bar:
        bar.set_postfix_str(spec)
        out[spec] = measure_cached(spec, sizes, args.device, True, args.workers)
    return out


def _cache_note(cached: dict[str, dict], total: int) -> str:
    """Which cached measurements are reused: the file, when, where and by whom, and how to
    refresh them."""
    path = next(iter(cached.values()))["path"]
    origins: dict[str, list[str]] = {}
    for spec, prov in cached.items():
        if prov["measured"] is None:
            what = (
                "at an unknown time (an entry older than the recorded times; the file last "
                f"changed {prov['file_mtime']})"
            )
        else:
            host = prov["host"] or "an unknown host"
            pid = f", process {prov['pid']}" if prov["pid"] is not None else ""
            what = f"{prov['measured']} on host {host}{pid}"
        origins.setdefault(what, []).append(spec)
    lines = [f"note: using cached measurements for {len(cached)} of {total} compressors, "
             f"from {path}:"]  # fmt: skip
    lines += [f"  measured {what}: {', '.join(specs)}" for what, specs in origins.items()]
    lines.append("  (--remeasure measures them afresh on this machine and updates the cache)")
    return "\n".join(lines)


def _plot(s: model.Setting, rows, out: Path, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bw = np.geomspace(1, 100, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    for spec, kw in rows:
        ax.plot(bw, model.speedup(s, bw, **kw), label=f"{spec} ({kw['collective']})")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bandwidth (Gbit/s)")
    ax.set_ylabel("predicted speedup over sync SGD")
    ax.set_title(f"{name}, {s.workers} workers")
    ax.legend(fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
