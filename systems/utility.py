"""When does compression pay, per compressor of the library? ``python -m systems.utility --model
resnet50 --workers 64 --bandwidth 10`` measures every compressor's encode/decode on this machine
at the model's size and predicts, with the performance model of :mod:`systems.model` (Agarwal et
al., MLSys 2022, arXiv 2103.00543), the iteration time against the 16-bit baseline: fp16
all-reduce of DDP's buckets overlapped with the backward pass (Han et al., HotNets 2024, arXiv
2407.01378); fp32 all-reduce is printed beside it.

For the DDP comm hooks a user would deploy (PowerSGD, which all-reduces its factors, and the
others of :mod:`systems.hooks`), ``--hooks 'SPEC;SPEC'`` hands the question to
:mod:`systems.pays`, which models each hook's own declared collectives per bucket (a note on
stderr says so; ``--workers`` becomes ``--gpus``). The compressor table here models a whole
gradient compressed as one flat message, each compressor's collective from its declarations
(:func:`systems.measure.collective_of`: ``rank:r=4`` draws a private Gaussian query, so its
payloads are all-gathered; PowerSGD's shared, warm-started query is the hook's, not this).

Per compressor it prints the bits ratio (payload bits over ``32 d``), the measured
encode+decode milliseconds (on this CPU: ``--codec-scale F`` multiplies them, for a target
device faster at them), the collective (``--collective`` overrides it), the predicted iteration
time, the speed-up over the fp16 baseline and the break-even bandwidth below which compression
wins; then the speed-up at each of ``--table-bandwidths``. ``--plot FIG.png`` draws the speed-up
against bandwidth from 1 to 100 Gbit/s. The compute time per iteration defaults to
:data:`systems.pays.DEFAULT_COMPUTE_MS` (an assumption; stderr says so).

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
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from compressors.registry import parse_spec
from systems import model
from systems import pays as _pays
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

# The target's forward+backward milliseconds when --compute-ms is not given: assumptions,
# stated where they are defined (systems.pays).
DEFAULT_COMPUTE_MS = _pays.DEFAULT_COMPUTE_MS

Measurer = Callable[[str, tuple[int, ...]], Measurement]


def predict(s: model.Setting, m: Measurement, gbps, collective: str, method: str = "dcgd",
            codec_scale: float = 1.0):  # fmt: skip
    """Keyword arguments of :func:`systems.model.compressed_time` for measurement ``m`` (its
    codec times multiplied by ``codec_scale``)."""
    if collective == "auto":
        collective = m.collective
    return dict(
        bits=float(m.bits),
        encode_s=m.encode_s * codec_scale,
        decode_s=m.decode_s * codec_scale,
        collective=collective,
        extra_s=VECTOR_UPDATES[method] * m.axpy_s * codec_scale,
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
    ap.add_argument(
        "--codec-scale",
        type=float,
        default=1.0,
        help="multiply the encode/decode times measured here by this factor",
    )
    ap.add_argument(
        "--hooks",
        default=None,
        metavar="SPEC;SPEC",
        help="model DDP comm hooks instead (systems.pays), e.g. 'powersgd:rank=4'",
    )
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
    if not (args.codec_scale > 0 and math.isfinite(args.codec_scale)):
        return f"--codec-scale must be a finite number > 0, got {args.codec_scale}"
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
    if args.hooks is not None:
        return _to_pays(args)
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
        wire_bytes=2,
    )
    try:
        measured = _measure_all(args, sizes, measurer)
    except OSError as e:
        return _fail(f"cannot write the measurement cache {e.filename!r}: {e.strerror or e}")

    t_sync = float(model.sync_sgd_time(s, args.bandwidth))
    t_fp32 = float(model.sync_sgd_time(replace(s, wire_bytes=4), args.bandwidth))
    name = f"{args.model}" if args.params is None else f"flat vector of {args.params} floats"
    print(
        f"model {name}: d={s.d}, workers={s.workers}, bandwidth={args.bandwidth:g} Gbit/s, "
        f"compute {s.compute * 1e3:.1f} ms (speedup {args.speedup:g}), latency "
        f"{args.latency_us:g} us, method {args.method}"
    )
    print(f"sync SGD, fp32 all-reduce (DDP buckets overlapped with backward): "
          f"{t_fp32 * 1e3:.1f} ms")  # fmt: skip
    print(
        f"sync SGD, fp16 all-reduce (the 16-bit baseline of the speed-ups): {t_sync * 1e3:.1f} ms"
    )
    print(_assumptions(args), file=sys.stderr)
    header = (
        f"{'compressor':<20} {'collective':<10} {'bits ratio':>10} {'enc+dec ms':>10} "
        f"{'iter ms':>9} {'speedup':>8} {'break-even Gbps':>15}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for spec in args.compressors:
        m = measured[spec]
        kw = predict(s, m, args.bandwidth, args.collective, args.method, args.codec_scale)
        t = float(model.compressed_time(s, args.bandwidth, **kw))
        be = model.break_even_bandwidth(s, **kw)
        rows.append((spec, kw))
        codec_ms = (m.encode_s + m.decode_s) * 1e3
        print(
            f"{spec:<20} {kw['collective']:<10} {m.bits / (32 * s.d):>10.4f} {codec_ms:>10.1f} "
            f"{t * 1e3:>9.1f} {t_sync / t:>8.3f} {_break_even(be):>15}"
        )
    print()
    print(
        "predicted speedup over fp16 sync SGD at "
        + ", ".join(f"{b:g}" for b in table_bw)
        + " Gbit/s"
    )
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


def _assumptions(args) -> str:
    """What the table pairs: codec times of this CPU with a target's compute time."""
    compute = ("--compute-ms" if args.compute_ms is not None
               else f"the default for {args.model} ({DEFAULT_COMPUTE_MS[args.model]:g} ms), "
               "an assumption")  # fmt: skip
    scale = "" if args.codec_scale == 1 else f" times --codec-scale {args.codec_scale:g}"
    return (
        f"note: encode/decode times are this machine's ({args.device}){scale}; compute is "
        f"{compute}; for DDP comm hooks (PowerSGD all-reduces its factors) use --hooks or "
        "python -m systems.pays"
    )


def _to_pays(args) -> int:
    """``--hooks``: the same question for DDP comm hooks, answered by :mod:`systems.pays`."""
    argv = ["--model", args.model, "--gpus", str(args.workers), "--bandwidth",
            str(args.bandwidth), "--hooks", args.hooks, "--latency-us", str(args.latency_us),
            "--codec-scale", str(args.codec_scale)]  # fmt: skip
    if args.compute_ms is not None:
        argv += ["--compute-ms", str(args.compute_ms / args.speedup)]
    argv += ["--remeasure"] * args.remeasure + ["--quiet"] * args.quiet
    print("note: --hooks: answered by python -m systems.pays " + " ".join(argv), file=sys.stderr)
    return _pays.main(argv)


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
    ax.set_ylabel("predicted speedup over fp16 sync SGD")
    ax.set_title(f"{name}, {s.workers} workers")
    ax.legend(fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
