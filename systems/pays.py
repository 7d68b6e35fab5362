"""Will compression pay on my cluster? ``python -m systems.pays --model resnet50 --gpus 64
--bandwidth 10 --hooks 'fp16;powersgd:rank=4'``.

For each DDP comm hook of :mod:`systems.hooks` (specs separated by ``;``, since a spec contains
``,``), the registry the measured study uses, it predicts one data-parallel iteration with the
per-bucket pipeline of :mod:`systems.model` (Agarwal, Wang, Venkataraman & Papailiopoulos, MLSys
2022, arXiv 2103.00543, for the question; the model's docstring for each formula) and compares
it with the 16-bit baseline, fp16 all-reduce (Han, Vargaftik, Mitzenmacher, Karp & Ben Basat,
HotNets 2024, arXiv 2407.01378), with fp32 all-reduce beside it:

- model: ``resnet18``, ``resnet50``, ``resnet101``, ``vgg16`` or ``bert-base``
  (:mod:`systems.layers`, :mod:`systems.nets`, built from the published architectures), or any
  module the user imports, ``--model package.module:factory`` (a callable returning an
  ``nn.Module``; ``--input-shape``, and ``--input-vocab`` for token ids, say what one sample is);
- buckets: DDP's own assignment of the model's parameters (:func:`systems.model.ddp_buckets`,
  torch's ``_compute_bucket_assignment_by_size``; 1 MiB first bucket then 25 MiB unless
  ``--bucket-cap-mb`` is given, as DDP does);
- collectives: what the hook declares for each bucket (``CommHook.plan``): kind and bytes, each
  collective with its own latency ``--latency-us``. Nothing is guessed from a compressor: a hook
  that does not declare its collectives is refused (exit 2);
- overlap window: the backward profile of the real model measured on this machine's CPU
  (:func:`systems.nets.profile_module`: when each gradient is ready, and the forward's share),
  scaled to the target's compute time, so only the profile's shape is measured;
- compute per iteration: ``--compute-ms`` given, or ``--measure-compute``: forward+backward of
  the model timed on the device at hand (``--device``, CUDA when present) at ``--batch`` per GPU,
  or else the per-model default below (an assumption, labelled as one); ``--speedup-compute F``
  divides it (a target F times faster at compute; the codec is not divided, the paper's "what
  if compute gets faster" question);
- encode/decode: each hook timed on the device at hand (:mod:`systems.hookcodec`, CUDA
  synchronised) on the model's real DDP buckets, the fp16 and fp32 baselines' casts and
  divisions included; ``--codec-scale F`` multiplies every measured codec time, ``--encode-ms``
  gives a hook's encode+decode per iteration instead (``SPEC=MS;...``, or one number for every
  hook but the fp16/fp32 baselines; such a hook is not measured, its time split over buckets by
  their size, half encode and half decode). A measured payload that is all-gathered is decoded
  from every worker: its measured decode (one message here) is multiplied by ``--gpus``.

The answer per hook: iteration time split into compute, encode/decode, exposed communication
and latency (:func:`terms`; the largest is the *dominant term*), speed-up over the fp16
baseline with a sensitivity band ``[low, high]`` (:func:`band`: the lowest and highest speed-up
over the ranges of the uncertain inputs: the bandwidth delivered, the compute, the codec and the
latency, each a factor range set by ``--bandwidth-range``, ``--compute-range``,
``--codec-range``, ``--latency-range``), the bandwidth below which the hook beats fp16
(break-even), and a verdict from the band: ``pays`` (low > 1), ``does not pay`` (high < 1),
``uncertain`` (the band straddles 1). Under the table: which inputs were measured, which
given and which assumed. ``--json FILE`` writes the numbers. Measurements are cached as
:mod:`systems.measure` caches its own (the report says when cached ones are used;
``--remeasure`` measures afresh); progress goes to stderr (``--quiet``: none).

Exit status: 0 done; 2 bad input (a message names the bad value and what is allowed).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from systems import model
from systems.layers import MODELS, model_shapes
from systems.paysreport import report

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_COMPUTE_MS",
    "DEFAULT_HOOKS",
    "DEFAULT_RANGES",
    "band",
    "build_parser",
    "main",
    "plan_hook",
    "terms",
]

BASELINE, FP32 = "fp16", "allreduce"
DEFAULT_HOOKS = "fp16;bf16;powersgd:rank=4"

# Forward+backward milliseconds of one iteration on the target GPU at DEFAULT_BATCH when neither
# --compute-ms nor --measure-compute is given: assumptions, not measurements. ResNet-50: NVIDIA's
# published V100 training throughput of about 1,400 images/s with mixed precision at batch 256
# (DeepLearningExamples, PyTorch ResNet-50 v1.5 performance table) is ~46 ms for a batch of 64;
# 60 ms adds the data loader and optimizer. ResNet-18, ResNet-101 and VGG-16 scale it by forward
# FLOPs (1.8, 7.8 and 15.5 vs 4.1 GFLOPs: He et al. 2016, Table 1; Simonyan & Zisserman's
# configuration D); VGG's large convolutions run nearer the device's peak, so its figure is
# likely high. BERT-base: about 3x ResNet-50's FLOPs per sample at sequence 128 (22 vs 4.1
# GFLOPs forward), at batch 32: ~170 ms. Another --batch scales them linearly.
DEFAULT_COMPUTE_MS = {"resnet18": 26.0, "resnet50": 60.0, "resnet101": 115.0, "vgg16": 225.0,
                      "bert-base": 170.0}  # fmt: skip
DEFAULT_BATCH = {"resnet18": 64, "resnet50": 64, "resnet101": 64, "vgg16": 64, "bert-base": 32}
USER_BATCH = 32  # --batch for a user's module when not given
PROFILE_BATCH_USER = 2  # the backward profile's batch for a user's module (batch norm needs 2)

# The sensitivity band's factor ranges: the bandwidth a collective gets of the nominal one, the
# compute, the codec (a target device slower or faster at it than measured or given) and the
# latency (a ring's per-step latency is often several times a link's nominal one).
DEFAULT_RANGES = {"bandwidth": (0.5, 1.0), "compute": (0.5, 2.0), "codec": (0.5, 2.0),
                  "latency": (1.0, 10.0)}  # fmt: skip
TERMS = ("compute", "codec", "communication", "latency")


class BadInput(ValueError):
    """Bad user input: exit 2 with this message."""


@dataclass
class Target:
    """The model asked about: its name (or ``module:factory``), shapes, and how to feed it."""

    name: str
    shapes: list[tuple[int, ...]]
    user: bool = False
    net: torch.nn.Module | None = None  # a user's module, built once
    input_spec: object = None  # systems.nets.InputSpec for a user's module
    key: str = ""  # what the cache keys its measurements by

    @property
    def buckets_key(self) -> str:
        return self.key or self.name


@dataclass
class Inputs:
    """What the report says about where each input came from."""

    compute_ms: float  # before --speedup-compute
    compute_source: str  # "given", "measured" or "assumed"
    compute_detail: str
    device: str
    profile_inputs: str


def plan_hook(spec: str, shapes, buckets: list[list[int]], workers: int) -> list:
    """The hook's declared collectives for each bucket: a list (per bucket) of
    :class:`comm.hooks.Collective`. ``BadInput`` for an unknown hook or one without ``plan``."""
    from systems.hooks.registry import make_hook

    try:
        hook = make_hook(spec)
    except ValueError as e:
        raise BadInput(f"--hooks {spec!r}: {e}") from None
    out = []
    for b in buckets:
        try:
            out.append(hook.plan([tuple(shapes[i]) for i in b], workers, torch.float32))
        except NotImplementedError:
            raise BadInput(
                f"--hooks {spec!r}: this hook does not declare its collectives yet "
                "(CommHook.plan), so its communication cannot be modelled; leave it out"
            ) from None
        except ValueError as e:  # the hook cannot serve this bucket (a k above its size, ...)
            raise BadInput(f"--hooks {spec!r} on this model's DDP buckets: {e}") from None
    for cols in out:
        for c in cols:
            if c.kind not in model.KINDS:
                raise BadInput(f"--hooks {spec!r}: collective kind {c.kind!r} is not modelled; "
                               f"modelled: {', '.join(model.KINDS)}")  # fmt: skip
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m systems.pays",
        description="Predict whether DDP gradient-compression hooks beat fp16 all-reduce.",
    )
    ap.add_argument("--model", default="resnet50",
                    help=f"one of {', '.join(MODELS)}, or package.module:factory (a callable "
                    "returning an nn.Module)")  # fmt: skip
    ap.add_argument(
        "--input-shape",
        default=None,
        metavar="D,D,...",
        help="one sample's input shape, for a module:factory model (e.g. 3,32,32)",
    )
    ap.add_argument(
        "--input-vocab",
        type=int,
        default=None,
        metavar="N",
        help="the input is token ids below N (module:factory models)",
    )
    ap.add_argument("--gpus", type=int, default=8, metavar="P", help="data-parallel workers")
    ap.add_argument("--bandwidth", type=float, default=10.0, metavar="GBPS",
                    help="link bandwidth per worker, Gbit/s")  # fmt: skip
    ap.add_argument(
        "--hooks",
        default=DEFAULT_HOOKS,
        metavar="SPEC;SPEC",
        help="hook specs separated by ';' (fp16 and fp32 are always shown)",
    )
    ap.add_argument("--latency-us", type=float, default=10.0, help="latency per collective step")
    ap.add_argument("--compute-ms", type=float, default=None,
                    help="forward+backward ms per iteration on the target (default: measured "
                    "with --measure-compute, else a per-model assumption)")  # fmt: skip
    ap.add_argument(
        "--measure-compute",
        action="store_true",
        help="time forward+backward of the model on --device at --batch per GPU",
    )
    ap.add_argument("--batch", type=int, default=None,
                    help="per-GPU batch for --measure-compute and the default compute "
                    f"(default: {', '.join(f'{k} {v}' for k, v in DEFAULT_BATCH.items())}, "
                    f"{USER_BATCH} for a module:factory)")  # fmt: skip
    ap.add_argument("--speedup-compute", type=float, default=1.0, metavar="F",
                    help="the target computes F times faster than the given/measured/default "
                    "compute (divides compute only)")  # fmt: skip
    ap.add_argument("--device", default="auto",
                    help="where encode/decode and --measure-compute are timed: auto (cuda when "
                    "available), cpu, cuda, cuda:N")  # fmt: skip
    ap.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP's bucket_cap_mb (default: DDP's, 1 MiB first bucket then 25 MiB)",
    )
    ap.add_argument(
        "--codec-scale",
        type=float,
        default=1.0,
        help="multiply every measured encode/decode time by this factor",
    )
    ap.add_argument("--encode-ms", "--codec-ms", dest="encode_ms", default=None,
                    metavar="SPEC=MS;...|MS",
                    help="a hook's encode+decode ms per iteration, given instead of measured; one "
                    "number: every hook but the fp16/fp32 baselines")  # fmt: skip
    for name, (lo, hi) in DEFAULT_RANGES.items():
        ap.add_argument(
            f"--{name}-range",
            default=f"{lo:g},{hi:g}",
            metavar="LO,HI",
            help=f"the band's factor range for the {name} (default {lo:g},{hi:g})",
        )
    ap.add_argument("--json", default=None, metavar="FILE", help="write the numbers here")
    ap.add_argument("--remeasure", action="store_true", help="measure afresh, ignore the cache")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(";") if t.strip()]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _check(args) -> tuple[list[str], dict[str, float], dict[str, tuple[float, float]]]:
    """The hooks, the given codec seconds per hook and the band's ranges; ``BadInput`` else."""
    if not args.gpus >= 1:
        raise BadInput(f"--gpus must be an integer >= 1, got {args.gpus}")
    for flag, v in (("--bandwidth", args.bandwidth), ("--codec-scale", args.codec_scale),
                    ("--speedup-compute", args.speedup_compute)):  # fmt: skip
        if not (v > 0 and math.isfinite(v)):
            raise BadInput(f"{flag} must be a finite number > 0, got {v}")
    if not (args.latency_us >= 0 and math.isfinite(args.latency_us)):
        raise BadInput(f"--latency-us must be a finite number >= 0, got {args.latency_us}")
    if args.compute_ms is not None and not (args.compute_ms > 0 and math.isfinite(args.compute_ms)):
        raise BadInput(f"--compute-ms must be a finite number > 0, got {args.compute_ms}")
    if args.compute_ms is not None and args.measure_compute:
        raise BadInput("--compute-ms and --measure-compute: give one (compute given or measured)")
    if args.batch is not None and not args.batch >= 1:
        raise BadInput(f"--batch must be an integer >= 1, got {args.batch}")
    if args.bucket_cap_mb is not None and not args.bucket_cap_mb > 0:
        raise BadInput(f"--bucket-cap-mb must be > 0, got {args.bucket_cap_mb}")
    ranges = {}
    for name in DEFAULT_RANGES:
        raw = getattr(args, f"{name}_range")
        parts = [_number(x) for x in raw.split(",")]
        if (
            len(parts) != 2
            or not all(x > 0 and math.isfinite(x) for x in parts)
            or (parts[0] > parts[1])
        ):
            raise BadInput(f"--{name}-range must be LO,HI with 0 < LO <= HI, got {raw!r}")
        ranges[name] = (parts[0], parts[1])
    if ranges["bandwidth"][1] > 1:
        raise BadInput(f"--bandwidth-range is the share of the nominal bandwidth delivered, at "
                       f"most 1, got {args.bandwidth_range!r}")  # fmt: skip
    hooks = _split(args.hooks)
    if not hooks:
        raise BadInput(f"--hooks must name at least one hook spec, got {args.hooks!r}")
    codec: dict[str, float] = {}
    given = (args.encode_ms or "").strip()
    single = _number(given) if given else float("nan")
    if given and "=" not in given and math.isfinite(single):
        if single < 0:
            raise BadInput(f"--encode-ms must be >= 0, got {given!r}")
        codec = {s: single / 1e3 for s in hooks if s not in (BASELINE, FP32)}
    else:
        for item in _split(given):
            spec, eq, ms = item.rpartition("=")
            val = _number(ms)
            if not eq or not spec or not (val >= 0 and math.isfinite(val)):
                raise BadInput(f"--encode-ms must be one number MS >= 0 or items SPEC=MS, "
                               f"got {item!r}")  # fmt: skip
            if spec not in hooks and spec not in (BASELINE, FP32):
                raise BadInput(f"--encode-ms names {spec!r}, which is not among --hooks {hooks}")
            codec[spec] = val / 1e3
    return hooks, codec, ranges


def _device(text: str) -> torch.device:
    from systems.hookcodec import resolve_device

    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return resolve_device(text)
    except (ValueError, RuntimeError) as e:
        raise BadInput(f"--device {text!r}: {e}; allowed: auto, cpu, cuda, cuda:N") from None


def resolve_target(args) -> Target:
    """The built-in model or the user's ``module:factory`` (imported and built here)."""
    from systems.nets import InputSpec, load_module

    if ":" not in args.model:
        if args.model not in MODELS:
            raise BadInput(f"--model {args.model!r} is unknown; allowed: {', '.join(MODELS)}, "
                           "or package.module:factory")  # fmt: skip
        if args.input_shape or args.input_vocab is not None:
            raise BadInput(f"--input-shape/--input-vocab are for a module:factory model; "
                           f"{args.model} has its own input")  # fmt: skip
        return Target(args.model, [tuple(s) for s in model_shapes(args.model)])
    try:
        net = load_module(args.model)
    except ValueError as e:
        raise BadInput(f"--model {args.model!r}: {e}") from None
    if not args.input_shape:
        raise BadInput(
            f"--model {args.model!r}: give --input-shape (one sample's input shape, "
            "e.g. 3,32,32 or 128 with --input-vocab) for its backward profile"
        )
    try:
        dims = tuple(int(x) for x in args.input_shape.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise BadInput(f"--input-shape must be positive integers D,D,..., got "
                       f"{args.input_shape!r}")  # fmt: skip
    if args.input_vocab is not None and not args.input_vocab >= 1:
        raise BadInput(f"--input-vocab must be an integer >= 1, got {args.input_vocab}")
    shapes = [tuple(p.shape) for p in net.parameters() if p.requires_grad]
    spec = InputSpec(dims, args.input_vocab)
    digest = hashlib.sha1(repr((shapes, dims, args.input_vocab)).encode()).hexdigest()[:12]
    return Target(args.model, shapes, True, net, spec, f"{args.model}#{digest}")


def _cached(key: str, fn, remeasure: bool, notes: list[str]):
    from systems.measure import lookup_record, store_record

    hit = None if remeasure else lookup_record(key)
    if hit is not None:
        value, prov = hit
        notes.append(f"{key.split('|', 1)[1]}: cached, measured {prov['measured']} on host "
                     f"{prov['host']} ({prov['path']})")  # fmt: skip
        return value
    value = fn()
    try:
        store_record(key, value)
    except OSError as e:
        notes.append(f"could not write the measurement cache ({e.strerror or e})")
    return value


def _profile(target: Target) -> dict:
    from systems.nets import backward_profile, profile_module

    if not target.user:
        return backward_profile(target.name)
    gen = torch.Generator().manual_seed(0)
    x = target.input_spec.make(PROFILE_BATCH_USER, gen)
    try:
        out = profile_module(target.net, x)
    except Exception as e:  # the user's module on the input the user described
        raise BadInput(f"--model {target.name!r}: a forward/backward on "
                       f"{target.input_spec.describe(PROFILE_BATCH_USER)} failed: "
                       f"{type(e).__name__}: {e}") from None  # fmt: skip
    return {**out, "inputs": target.input_spec.describe(PROFILE_BATCH_USER)}


def _compute(target: Target, batch: int, dev: torch.device) -> dict:
    import copy

    from systems.nets import build, example_input, time_compute

    gen = torch.Generator().manual_seed(0)
    if target.user:
        net, x = copy.deepcopy(target.net), target.input_spec.make(batch, gen)
    else:
        net, x = build(target.name), example_input(target.name, batch, gen)
    return time_compute(net, x, dev)


def measure_all(args, target: Target, hooks: list[str], given: dict, buckets, dev) -> tuple:
    """The backward profile, every hook's codec not given, and the compute if asked; cached
    (see the module docstring). Returns ``(profile, codec records by spec, compute record or
    None, notes)``."""
    from systems.hookcodec import time_hook
    from systems.measure import device_key

    notes: list[str] = []
    cpu, here = device_key(torch.device("cpu")), device_key(dev)
    cap = "ddp" if args.bucket_cap_mb is None else f"{args.bucket_cap_mb:g}"
    specs = [s for s in dict.fromkeys([BASELINE, FP32, *hooks]) if s not in given]
    bar = tqdm(total=1 + len(specs) + args.measure_compute, desc="measuring", unit="step",
               file=sys.stderr, disable=args.quiet)  # fmt: skip
    bar.set_postfix_str("backward profile")
    prof = _cached(f"{cpu}|profile|{target.buckets_key}", lambda: _profile(target),
                   args.remeasure, notes)  # fmt: skip
    bar.update(1)
    codec = {}
    for spec in specs:
        bar.set_postfix_str(spec)
        key = f"{here}|hookcodec|{target.buckets_key}|cap={cap}|{spec}"
        rec = _cached(key, lambda s=spec: time_hook(s, target.shapes, args.bucket_cap_mb,
                                                    device=dev),
                      args.remeasure, notes)  # fmt: skip
        if [sorted(b) for b in rec["buckets"]] != [sorted(b) for b in buckets]:
            notes.append(f"{spec}: DDP's buckets here differ from the modelled assignment")
        codec[spec] = rec
        bar.update(1)
    comp = None
    if args.measure_compute:
        bar.set_postfix_str(f"compute at batch {args.batch}")
        comp = _cached(
            f"{here}|compute|{target.buckets_key}|batch={args.batch}",
            lambda: _compute(target, args.batch, dev),
            args.remeasure,
            notes,
        )
        bar.update(1)
    bar.close()
    return prof, codec, comp, notes


def terms(pipe: list[model.Bucket], compute_s: float, p: int, gbps: float, alpha: float) -> dict:
    """One iteration of ``pipe`` split into four terms (seconds) that add up to it:

    - ``compute``: forward+backward, ``compute_s``;
    - ``codec``: every bucket's encode and decode on the device (the device's own work);
    - ``communication``: the time the device waits for the link beyond its own work, at zero
      latency: ``T(alpha=0) - compute - codec`` (the exposed bandwidth term);
    - ``latency``: what the collectives' latencies add, ``T(alpha) - T(alpha=0)``.
    """
    t = float(model.pipeline_time(pipe, compute_s, p, gbps, alpha))
    t0 = float(model.pipeline_time(pipe, compute_s, p, gbps, 0.0))
    codec = sum(b.encode_s + b.decode_s for b in pipe)
    comm, lat = max(0.0, t0 - compute_s - codec), max(0.0, t - t0)
    return {"compute": compute_s, "codec": codec, "communication": comm, "latency": lat}


def dominant(parts: dict) -> str:
    """The largest of the four :func:`terms` (compute included: a compute-bound iteration
    has little for compression to win)."""
    return max(TERMS, key=lambda k: parts[k])


def _levels(lo: float, hi: float) -> list[float]:
    return sorted({lo, hi} | ({1.0} if lo <= 1.0 <= hi else set()))


def band(iteration, specs: list[str], ranges: dict[str, tuple[float, float]]) -> dict:
    """Each hook's lowest and highest speed-up over the fp16 baseline on the grid of the ranges'
    ends (and 1, where inside) of every uncertain input, all inputs varied together and both
    hooks seeing the same inputs. ``iteration(spec, bandwidth=, compute=, codec=, latency=)``
    is the iteration time with those factors. Returns ``{spec: (low, high)}``."""
    names = list(DEFAULT_RANGES)
    lows = {s: math.inf for s in specs}
    highs = {s: -math.inf for s in specs}
    for combo in itertools.product(*[_levels(*ranges[n]) for n in names]):
        f = dict(zip(names, combo, strict=True))
        t_base = iteration(BASELINE, **f)
        for s in specs:
            r = t_base / iteration(s, **f)
            lows[s], highs[s] = min(lows[s], r), max(highs[s], r)
    return {s: (lows[s], highs[s]) for s in specs}


def verdict(low: float, high: float) -> str:
    """``pays`` when the whole band is above 1, ``does not pay`` below 1, else ``uncertain``."""
    return "pays" if low > 1.0 else "does not pay" if high < 1.0 else "uncertain"


def _codec_lists(spec, rec, given_s, sizes_b, scale, workers, plan) -> tuple[list, list, str]:
    """Encode and decode seconds per bucket: given (split by bucket size, half and half) or
    measured (times ``--codec-scale``; an all-gathered payload's decode times the workers)."""
    if spec in given_s:
        share = [s / sum(sizes_b) for s in sizes_b]
        return [given_s[spec] * w / 2 for w in share], [given_s[spec] * w / 2 for w in share], \
            "given"  # fmt: skip
    enc = [scale * x for x in rec["encode_s"]]
    dec = [scale * x * (workers if any(c.kind == "allgather" for c in cols) else 1)
           for x, cols in zip(rec["decode_s"], plan, strict=True)]  # fmt: skip
    return enc, dec, "measured"


def predict(args, target, hooks, given_s, ranges, prof, codec, buckets, inputs: Inputs) -> dict:
    """Every number of the report, as a JSON-able dict."""
    sizes = [math.prod(s) for s in target.shapes]
    sizes_b = [sum(sizes[i] for i in b) for b in buckets]
    P, alpha, bw = args.gpus, args.latency_us * 1e-6, args.bandwidth
    compute = compute_s = inputs.compute_ms / 1e3 / args.speedup_compute
    bf = float(prof["backward_fraction"])
    ready = prof["ready"]
    shape = [(1 - bf) + bf * max(ready[i] for i in b) for b in buckets]  # ready / compute
    specs = list(dict.fromkeys([BASELINE, FP32, *hooks]))
    data = {}
    for spec in specs:
        plan = plan_hook(spec, target.shapes, buckets, P)
        enc, dec, src = _codec_lists(spec, codec.get(spec), given_s, sizes_b, args.codec_scale,
                                     P, plan)  # fmt: skip
        data[spec] = (plan, enc, dec, src)

    def pipe(spec: str, c: float, k: float) -> list[model.Bucket]:
        plan, enc, dec, _ = data[spec]
        return [model.Bucket(c * s, tuple((x.kind, float(x.nbytes)) for x in cols), k * e, k * d)
                for s, cols, e, d in zip(shape, plan, enc, dec, strict=True)]  # fmt: skip

    def iteration(spec, bandwidth=1.0, compute=1.0, codec=1.0, latency=1.0) -> float:
        c = compute_s * compute
        return float(model.pipeline_time(pipe(spec, c, codec), c, P, bw * bandwidth,
                                         alpha * latency))  # fmt: skip

    bands = band(iteration, specs, ranges)
    base = pipe(BASELINE, compute, 1.0)
    rows = {}
    for spec in specs:
        plan, _, _, src = data[spec]
        pp = pipe(spec, compute, 1.0)
        parts = terms(pp, compute, P, bw, alpha)
        t = sum(parts.values())
        lo, hi = bands[spec]
        be, how = (None, None) if spec == BASELINE else _break_even(base, pp, compute, P, alpha)
        rows[spec] = {
            "iter_ms": t * 1e3,
            "terms_ms": {k: v * 1e3 for k, v in parts.items()},
            "dominant": dominant(parts),
            "collectives_per_bucket": [[c.kind for c in cols] for cols in plan],
            "sent_MB": sum(c.nbytes for cols in plan for c in cols) / 1e6,
            "data_dependent": any(c.data_dependent for cols in plan for c in cols),
            "codec_source": src,
            "encode_ms": sum(b.encode_s for b in pp) * 1e3,
            "decode_ms": sum(b.decode_s for b in pp) * 1e3,
            "break_even_gbps": be,
            "beats_fp16": how,
            "band": [lo, hi],
        }
    t_base = rows[BASELINE]["iter_ms"]
    for spec, row in rows.items():
        row["speedup_vs_fp16"] = t_base / row["iter_ms"]
        row["verdict"] = "baseline" if spec == BASELINE else verdict(*row["band"])
    return {
        "baseline": BASELINE, "fp32": FP32, "model": target.name, "parameters": sum(sizes),
        "gpus": P, "bandwidth_gbps": bw,
        "latency_us": args.latency_us, "compute_ms": compute * 1e3,
        "compute_ms_before_speedup": inputs.compute_ms, "speedup_compute": args.speedup_compute,
        "compute_source": inputs.compute_source, "compute_detail": inputs.compute_detail,
        "device": inputs.device, "codec_scale": args.codec_scale,
        "ranges": {k: list(v) for k, v in ranges.items()},
        "bucket_cap_mb": args.bucket_cap_mb, "buckets": len(buckets),
        "bucket_MB": [4 * s / 1e6 for s in sizes_b],
        "bucket_ready_ms": [compute * s * 1e3 for s in shape], "backward_fraction": bf,
        "profile_inputs": inputs.profile_inputs, "hooks": rows,
    }  # fmt: skip


def _break_even(base, pipe, compute: float, P: int, alpha: float) -> tuple[float | None, str]:
    """Where the hook beats the baseline on 1e-3..1e5 Gbit/s: ``(bandwidth, "below")`` (it
    wins below the bandwidth), ``(bandwidth, "above")``, ``(None, "always")`` or
    ``(None, "never")``."""
    lo, hi = 1e-3, 1e5
    t = lambda pp, bw: model.pipeline_time(pp, compute, P, bw, alpha)  # noqa: E731
    win_lo, win_hi = t(pipe, lo) < t(base, lo), t(pipe, hi) < t(base, hi)
    if win_lo and win_hi:
        return None, "always"
    if win_lo:
        return model.pipeline_break_even(base, pipe, compute, P, alpha, lo, hi), "below"
    if win_hi:
        return model.pipeline_break_even(pipe, base, compute, P, alpha, lo, hi), "above"
    be = model.pipeline_break_even(base, pipe, compute, P, alpha, lo, hi)
    return (be, "below") if be > 0 else (None, "never")


def _resolve_compute(args, target: Target, comp: dict | None, dev: torch.device) -> tuple:
    """``(ms before --speedup-compute, source, detail)`` of the compute per iteration."""
    if args.compute_ms is not None:
        return args.compute_ms, "given", "--compute-ms"
    if comp is not None:
        ms = comp["compute_s"] * 1e3
        return ms, "measured", (f"forward+backward of {target.name} at batch {args.batch} on "
                                f"{_device_name(dev)}: {ms:.4g} ms (median of "
                                f"{len(comp['all_s'])})")  # fmt: skip
    base = DEFAULT_BATCH[target.name]
    ms = DEFAULT_COMPUTE_MS[target.name] * args.batch / base
    scaled = "" if args.batch == base else f", scaled linearly to batch {args.batch}"
    return ms, "assumed", (f"{ms:.4g} ms per iteration, the default for {target.name} at batch "
                           f"{base} (systems.pays.DEFAULT_COMPUTE_MS{scaled}): set "
                           "--compute-ms or --measure-compute")  # fmt: skip


def _device_name(dev: torch.device) -> str:
    return f"{dev} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "cpu"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        hooks, given_s, ranges = _check(args)
        dev = _device(args.device)
        target = resolve_target(args)
        if args.batch is None:
            args.batch = USER_BATCH if target.user else DEFAULT_BATCH[target.name]
        if target.user and args.compute_ms is None and not args.measure_compute:
            raise BadInput(f"--model {args.model!r} has no default compute time: give "
                           "--compute-ms MS or --measure-compute")  # fmt: skip
        sizes = [math.prod(s) for s in target.shapes]
        first = model.DEFAULT_FIRST_BUCKET_BYTES if args.bucket_cap_mb is None else None
        cap = (model.DEFAULT_BUCKET_BYTES if args.bucket_cap_mb is None
               else int(args.bucket_cap_mb * 2**20))  # fmt: skip
        buckets = model.ddp_buckets(sizes, cap, first)
        for spec in dict.fromkeys([BASELINE, FP32, *hooks]):
            plan_hook(spec, target.shapes, buckets, args.gpus)  # refuse before measuring
        prof, codec, comp, notes = measure_all(args, target, hooks, given_s, buckets, dev)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ms, src, detail = _resolve_compute(args, target, comp, dev)
    inputs = Inputs(ms, src, detail, _device_name(dev), prof.get("inputs", "?"))
    r = predict(args, target, hooks, given_s, ranges, prof, codec, buckets, inputs)
    print(report(r, notes))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(r, indent=1))
        except OSError as e:
            print(f"error: cannot write --json {args.json!r}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
