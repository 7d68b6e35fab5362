"""``python -m systems.netstudy``: when does compression pay, measured over throttled links.

For each worker count ``W`` (``--workers``) the study builds a star network of ``W`` network
namespaces (:class:`systems.netns.Testbed`: veth pairs to a bridge, ``tbf`` shaping both
directions of every link), and for each bandwidth (``--bandwidth``, Gbit/s; fastest first) it
runs ``torchrun`` in every namespace (static rendezvous at worker 0's address, gloo over the
throttled ``eth0``) with :mod:`systems.networker`, which trains the model with DDP under each
method in turn and times it: compute alone, the whole iteration, the hook's encode and decode,
and the payload bytes. The links are removed afterwards, also on failure or Ctrl-C.

The methods are sync SGD with DDP's fp32 all-reduce (``fp32``), PyTorch's fp16 compression hook
(``fp16``, the baseline every speed-up is relative to: Han, Vargaftik, Mitzenmacher, Karp & Ben
Basat, HotNets 2024, arXiv 2407.01378) and the hooks of :mod:`systems.hooks` (``--methods``;
by default every registered hook at its default parameters). Time to a target test accuracy is
``iterations to the target`` (one training run per method and worker count, on the fastest
link: the iterates do not depend on the link) times the measured seconds per iteration at each
bandwidth.

Beside each measured iteration time the performance model of :mod:`systems.model` predicts it
from the run's own measured compute, encode and decode times and payload bytes, and the link as
calibrated in the same launch (the fitted all-reduce bandwidth and latency; the nominal rate is
reported too, since on a small machine the veth links deliver less than their nominal rate at
high rates). Every method is the per-bucket pipeline of :func:`systems.model.pipeline_time`
(:func:`pipeline_of`): DDP's buckets under the explicit ``--bucket-mb`` cap, formed on the fp32
parameters, each ready as the backward pass produces its bytes; sync SGD (fp32, fp16) all-reduces
each bucket, a hook issues per bucket the collectives it declares in its plan (bytes scaled per
kind to what it measured it sent) after its share of the measured encode, overlapped with the
backward pass as the hooks issue them, and decodes after; one latency per collective.
``wire_s`` is what the step's collectives need on the (probed, else calibrated) link with
nothing hidden; a measured exposed communication ``comm_s`` (iteration - compute - encode -
decode) below it (``overlapped``) shows the backward pass hiding communication.

The testbed states its own limits (:mod:`systems.nettestbed`). Before the runs at each (workers,
bandwidth), :mod:`systems.linkprobe` measures what every link delivers (a TCP stream each way,
alone and with every link loaded as a ring, and a ping-pong), and the model predicts from that
probed link too (``predicted_probe_s``), beside the calibrated and the nominal one. Where the
kernel has no ``netem`` (checked at the start, said on stderr and in the report), the added
latency is emulated inside the workers (``--latency-emulation worker``, the default ``auto``
there; :func:`systems.networker.emulate_latency`: each collective completes its ring's number
of messages times the per-message delay late) or, with ``off``, not applied at all. Each cell is
timed in ``--repeats`` separate launches (median of the repeats' medians and a 95 % t-interval),
and a launch whose workers times threads exceed this machine's cores is flagged as
oversubscribed.

``--model mlp`` is the shipped task on which communication is a real share of a step
(:mod:`systems.teacher`: a 4.28 M-parameter MLP on a fixed random teacher's labels; target
test accuracy 0.75 by default, 0.9 for the digits models); the report gives each method's
iterations and seconds to the target per bandwidth, with the runs that do not reach it within
``--train-iters`` said to (the final accuracy beside), and the share of the step that is
communication.

Outputs in ``--out`` (a new or empty folder; never overwritten): ``measurements.json`` (every
launch's raw numbers, written as they arrive), ``table.csv`` and ``table.md`` (measured vs
predicted per method, bandwidth and worker count), ``speedup.png``/``.pdf`` (speed-up over fp16
vs bandwidth per compressor: measured points over the model's curves) and ``report.md`` (the
table and the paper's findings re-examined, with the numbers).

Exit status: 0 done; 2 bad input (or namespaces not permitted here, with the reason); 3 some
launch failed (the others are reported); 130 interrupted.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from streams import interrupts

__all__ = ["build_parser", "findings", "main", "predict", "table_rows"]

EXIT_OK, EXIT_BAD, EXIT_FAILED = 0, 2, 3
ROOT = Path(__file__).resolve().parent.parent
BASELINES = ("fp32", "fp16")


def _floats(text: str, what: str, lo: float, hi: float) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--{what} must be comma-separated numbers, got {text!r}") from None
    if not vals or any(not (lo <= v <= hi) for v in vals):
        raise ValueError(f"--{what} values must be in [{lo}, {hi}], got {text!r}")
    return vals


def _ints(text: str, what: str, lo: int, hi: int) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--{what} must be comma-separated integers, got {text!r}") from None
    if not vals or any(not (lo <= v <= hi) for v in vals):
        raise ValueError(f"--{what} values must be integers in [{lo}, {hi}], got {text!r}")
    return vals


def default_methods() -> list[str]:
    """fp32, fp16, then every registered hook but the uncompressed ones, at its defaults."""
    from systems.hooks import hook_names

    skip = {"allreduce", "fp16", "bf16", "comp"}
    extra = [n for n in hook_names() if n not in skip]
    comp = ["comp:topk:ratio=0.01"] if "comp" in hook_names() else []
    return ["fp32", "fp16", "bf16", *extra, *comp]


def _check_methods(methods: list[str]) -> None:
    from systems.hooks.registry import parse_hook_spec

    for m in methods:
        if m not in BASELINES:
            cls, kwargs = parse_hook_spec(m)  # raises ValueError naming what is wrong
            cls(None, **kwargs)  # and so do the parameters' values (no process group needed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m systems.netstudy",
        description="Measure DDP training with compression hooks over throttled links.",
    )
    ap.add_argument("--bandwidth", default="0.5,1,5,10", help="Gbit/s per link, comma-separated")
    ap.add_argument("--latency-us", type=float, default=50.0, help="added delay per link end")
    ap.add_argument("--workers", default="2,4", help="worker counts, comma-separated")
    ap.add_argument("--model", choices=("cnn", "resnet18", "mlp"), default="cnn")
    ap.add_argument(
        "--methods",
        default=None,
        help="';'-separated: fp32, fp16 and hook specs (default: all hooks at their defaults)",
    )
    ap.add_argument("--iters", type=int, default=10, help="timed iterations per method")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--timing",
        choices=("sequential", "interleaved"),
        default="interleaved",
        help="a compute step before each full step (same machine load), or all compute first",
    )
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket cap (MiB)")
    ap.add_argument(
        "--target-acc",
        type=float,
        default=None,
        help="test accuracy to reach (default 0.75 for mlp, 0.9 otherwise)",
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="separate launches per (workers, bandwidth)"
    )
    ap.add_argument(
        "--latency-emulation",
        choices=("auto", "netem", "worker", "off"),
        default="auto",
        help="how --latency-us is applied: netem on the links, a delay per collective inside "
        "the workers, or not at all (auto: netem where the kernel has it, else worker)",
    )
    ap.add_argument(
        "--probe-seconds", type=float, default=0.5, help="length of each link probe stream"
    )
    ap.add_argument(
        "--train-iters", type=int, default=300, help="cap of the accuracy run (0: skip it)"
    )
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per launch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/netstudy", help="a new or empty folder")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    return ap


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return 20000 + s.getsockname()[1] % 20000


def _launch(tb, args, methods: list[str], out: Path, accuracy: bool) -> dict:
    """One torchrun per worker namespace; returns rank 0's JSON (raises on failure)."""
    W = tb.workers
    port = _free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS=str(args.threads))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    worker = [
        "--model", args.model, "--iters", str(args.iters), "--warmup", str(args.warmup),
        "--timing", args.timing,
        "--batch", str(args.batch), "--bucket-mb", str(args.bucket_mb), "--seed", str(args.seed),
        "--train-iters", str(args.train_iters if accuracy else 0), "--eval-every",
        str(args.eval_every), "--target-acc", str(args.target_acc), "--timeout",
        str(args.timeout), "--out", str(out),
        "--emulate-latency-us", str(2 * args.latency_us if args.latency_mode == "worker" else 0),
    ]  # fmt: skip
    for m in methods:
        worker += ["--method", m]
    procs, logs = [], []
    for i in range(W):
        cmd = tb.exec_prefix(i) + [
            sys.executable, "-m", "torch.distributed.run", f"--nnodes={W}", f"--node_rank={i}",
            "--nproc_per_node=1", f"--master_addr={tb.address(0)}", f"--master_port={port}",
            "--module", "systems.networker", *worker,
        ]  # fmt: skip
        log = open(out.with_suffix(f".rank{i}.log"), "w")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=ROOT))  # fmt: skip
    deadline = time.monotonic() + args.timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise RuntimeError(f"launch timed out after {args.timeout} s") from None
    except BaseException:  # a signal: the workers must not outlive the study
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    finally:
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    if not out.is_file():
        tail = out.with_suffix(".rank0.log").read_text()[-2000:]
        raise RuntimeError(f"no result (exit codes {codes}); rank 0 log ends:\n{tail}")
    return json.loads(out.read_text())


# --- predictions ---------------------------------------------------------------------------
def predict(m: dict, workers: int, gbps: float, alpha: float, bucket_mb: float,
            speedup: float = 1.0, model: str | None = None) -> float:  # fmt: skip
    """The model's iteration time for a measured method ``m`` on a link of ``gbps`` (the
    per-bucket pipeline of :func:`systems.model.pipeline_time`, see :func:`pipeline_of`)."""
    from systems.model import pipeline_time

    compute, buckets = pipeline_of(m, workers, bucket_mb, speedup, model)
    return float(pipeline_time(buckets, compute, workers, gbps, alpha))


def wire_seconds(m: dict, workers: int, gbps: float, bucket_mb: float,
                 model: str | None = None) -> float:  # fmt: skip
    """Seconds the method's collectives of one step need on a link of ``gbps``, bandwidth term
    only (no latency, no overlap): what communication would add if nothing hid it."""
    from systems.model import collective_time

    _, buckets = pipeline_of(m, workers, bucket_mb, 1.0, model)
    return float(sum(collective_time(k, n, workers, gbps, 0.0)
                     for b in buckets for k, n in b.collectives))  # fmt: skip


def pipeline_of(m: dict, workers: int, bucket_mb: float, speedup: float = 1.0,
                model: str | None = None) -> tuple:  # fmt: skip
    """``(compute_s, buckets)`` of a measured method for :func:`systems.model.pipeline_time`.

    DDP's buckets under the explicit ``bucket_mb`` cap the workers pass (no 1 MiB first
    bucket), formed on the fp32 parameters, each ready when the share of the gradient bytes
    produced so far says (backward two thirds of the measured compute). Sync SGD: one
    all-reduce per bucket, 4 or 2 bytes per entry. A hook: per bucket the collectives it
    declares (:meth:`comm.hooks.CommHook.plan`, over the ``model``'s parameter shapes), their
    bytes scaled per kind of collective to what the run measured it sent (plans of
    data-dependent hooks are nominal), and the measured encode and decode split over the
    buckets by their share of the entries; the hook's collectives overlap the backward pass
    as the hooks issue them (:mod:`comm.hooks`). Without ``model`` (an older measurement), for a
    hook without a plan, or where the measured sizes are not the model's, one collective of the
    measured bytes in one bucket after the backward pass.
    """
    from systems.model import Bucket, Setting, buckets, sync_bucket_plan

    cap = int(bucket_mb * 2**20)
    if m["method"] in BASELINES:
        s = Setting(tuple(m["sizes"]), workers, m["compute_s"], speedup, 0.0,
                    bucket_bytes=cap, first_bucket_bytes=None,
                    wire_bytes=4 if m["method"] == "fp32" else 2)  # fmt: skip
        return s.compute, sync_bucket_plan(s)
    compute = m["compute_s"] / speedup
    fwd, bwd = compute / 3, 2 * compute / 3
    enc, dec = m["encode_s"], m["decode_s"]
    known = _hook_plans(m["method"], model, workers, bucket_mb) if model else None
    sizes, plans = known if known is not None else (None, None)
    if plans is None or sizes != tuple(m["sizes"]):
        kind = "allreduce" if m["allreducible"] else "allgather"
        return compute, [Bucket(compute, ((kind, float(m["sent_bytes"])),), enc, dec)]
    nbytes, ready = buckets(tuple(m["sizes"]), cap, 4, None, None)
    planned: dict[str, float] = {}
    for cols in plans:
        for k, n in cols:
            planned[k] = planned.get(k, 0.0) + n
    sent = {k: float(v.get("bytes") or 0) for k, v in (m.get("collectives") or {}).items()}
    scale = {k: (sent[k] / planned[k] if sent.get(k) and planned[k] > 0 else 1.0) for k in planned}
    share = nbytes / nbytes.sum()
    out = [Bucket(fwd + bwd * r, tuple((k, n * scale[k]) for k, n in cols), enc * w, dec * w)
           for cols, r, w in zip(plans, ready, share, strict=True)]  # fmt: skip
    return compute, out


@functools.cache
def _hook_plans(method: str, model: str, workers: int, bucket_mb: float):
    """``(sizes, plans)``: the parameter sizes of ``model`` (the workers' network) and per DDP
    bucket at ``bucket_mb``, in reduction order, the ``(kind, bytes)`` collectives the hook
    ``method`` declares; None when it declares none."""
    import torch

    from systems.hooks.registry import make_hook
    from systems.model import ddp_buckets
    from systems.networker import _model

    try:
        hook = make_hook(method)
        shapes = [tuple(p.shape) for p in _model(model, 0).parameters()]
        groups = ddp_buckets([math.prod(s) for s in shapes], int(bucket_mb * 2**20))
        plans = tuple(
            tuple((c.kind, float(c.nbytes)) for c in hook.plan([shapes[i] for i in g], workers,
                                                               torch.float32))
            for g in groups
        )  # fmt: skip
    except (NotImplementedError, ValueError):
        return None
    return tuple(math.prod(x) for x in shapes), plans


def table_rows(measured: list[dict], bucket_mb: float) -> list[dict]:
    """One row per (workers, bandwidth, method): measured parts, prediction, speed-up; a launch
    merged over its repeats (:func:`systems.nettestbed.merge_repeats`) gives its interval."""
    from systems.linkprobe import link_for_model
    from systems.nettestbed import cores, interval, oversubscribed

    ncores = cores()
    rows = []
    for launch in measured:
        W, nominal = launch["workers"], launch["nominal_gbps"]
        cal = launch["calibration"]
        gbps, alpha = (cal["gbps"], cal["alpha_s"]) if cal["gbps"] > 0 else (nominal, 0.0)
        by = {m["method"]: m for m in launch["methods"]}
        base = by.get("fp16")
        net = launch.get("model")
        base_pred = predict(base, W, gbps, alpha, bucket_mb, model=net) if base else float("nan")
        probe = launch.get("probe")
        if probe:
            probe_gbps, probe_alpha = link_for_model(probe)
            probe_alpha += launch.get("emulated_s", 0.0)  # the workers' delay, not on the wire
        threads = launch.get("threads", 1)
        for m in launch["methods"]:
            pred = predict(m, W, gbps, alpha, bucket_mb, model=net)
            pred_nominal = predict(m, W, nominal, launch.get("latency_s", 0.0), bucket_mb,
                                   model=net)  # fmt: skip
            pred_probe = (predict(m, W, probe_gbps, probe_alpha, bucket_mb, model=net)
                          if probe else None)  # fmt: skip
            wire = wire_seconds(m, W, probe_gbps if probe else gbps, bucket_mb, model=net)
            _, lo, hi = interval(m.get("iter_s_runs", [m["iter_s"]]))
            row = {
                "workers": W,
                "nominal_gbps": nominal,
                "probed_gbps": round(probe_gbps, 4) if probe else None,
                "calibrated_gbps": round(gbps, 4),
                "method": m["method"],
                "collective": "allreduce" if m["allreducible"] else "allgather",
                "sent_MB": m["sent_bytes"] / 1e6,
                "compute_s": m["compute_s"],
                "encode_decode_s": m["encode_s"] + m["decode_s"],
                "comm_s": m["comm_s"],
                "wire_s": wire,
                "overlapped": m["comm_s"] < wire,
                "comm_share": m["comm_s"] / m["iter_s"],
                "iter_s": m["iter_s"],
                "iter_ci_lo": lo,
                "iter_ci_hi": hi,
                "repeats": len(m.get("iter_s_runs", [m["iter_s"]])),
                "predicted_s": pred,
                "rel_error": (pred - m["iter_s"]) / m["iter_s"],
                "predicted_probe_s": pred_probe,
                "predicted_nominal_s": pred_nominal,
                "speedup_vs_fp16": base["iter_s"] / m["iter_s"] if base else float("nan"),
                "predicted_speedup": base_pred / pred if base else float("nan"),
                "cpus": f"{W}x{threads}/{ncores}",
                "oversubscribed": oversubscribed(W, threads, ncores),
                "target_reached": None,
                "iters_to_target": m.get("iters_to_target"),
                "time_to_target_s": None,
                "final_acc": m.get("final_acc"),
            }
            its = m.get("iters_to_target")
            if its is not None:
                row["target_reached"] = its > 0
                if its > 0:
                    row["time_to_target_s"] = its * m["iter_s"]
                else:  # not reached: said, never a number that reads as one
                    row["iters_to_target"] = f"not reached in {m.get('trained_iters', '?')}"
            rows.append(row)
    return rows


def _fill_accuracy(measured: list[dict]) -> None:
    """Copy each (workers, method)'s iterations-to-target to its launches at other bandwidths."""
    known: dict[tuple[int, str], dict] = {}
    for launch in measured:
        for m in launch["methods"]:
            if "iters_to_target" in m:
                known[(launch["workers"], m["method"])] = m
    for launch in measured:
        for m in launch["methods"]:
            src = known.get((launch["workers"], m["method"]))
            if src is not None and "iters_to_target" not in m:
                m["iters_to_target"] = src["iters_to_target"]
                m["final_acc"] = src["final_acc"]


# --- findings ------------------------------------------------------------------------------
def _crossover(bws: list[float], speedups: list[float]) -> float | None:
    """The bandwidth (log-interpolated) where the speed-up falls through 1, if it does."""
    pts = sorted(zip(bws, speedups, strict=False))
    for (b0, s0), (b1, s1) in zip(pts, pts[1:], strict=False):
        if s0 > 1 >= s1:
            t = (math.log(s0)) / (math.log(s0) - math.log(s1)) if s1 > 0 else 0.0
            return float(math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0))))
    return None


def findings(rows: list[dict], measured: list[dict], bucket_mb: float) -> list[str]:
    """The paper's findings re-examined on the measurements, one paragraph each."""
    from systems.model import Setting, break_even_bandwidth

    out = []
    comp = [r for r in rows if r["method"] not in BASELINES + ("bf16",)]
    if not comp:
        return ["No compressed method was measured."]
    # 1. encode/decode window
    win = []
    for r in comp:
        base = next((b for b in rows if b["method"] == "fp16" and b["workers"] == r["workers"]
                     and b["nominal_gbps"] == r["nominal_gbps"]), None)  # fmt: skip
        if base:
            win.append((r["encode_decode_s"] / base["iter_s"], r))
    win.sort(key=lambda t: -t[0])
    hi = win[0]
    lines = ", ".join(f"{r['method']} {100 * f:.0f}%" for f, r in win if r["workers"] ==
                      hi[1]["workers"] and r["nominal_gbps"] == hi[1]["nominal_gbps"])  # fmt: skip
    out.append(
        "**Encode/decode window.** Paper: compression's encode and decode sit on the critical "
        "path and can take as long as the communication they save. Measured (encode+decode as a "
        f"share of the fp16 iteration, W={hi[1]['workers']}, {hi[1]['nominal_gbps']} Gbit/s): "
        f"{lines}. "
        + (
            "Held: at least one hook's codec alone costs more than a tenth of the baseline's "
            "iteration."
            if hi[0] > 0.1
            else "Not seen here: every codec is under a tenth of the baseline's iteration."
        )  # fmt: skip
    )
    # 2. all-gather vs all-reduce scaling
    ws = sorted({r["workers"] for r in rows})
    if len(ws) >= 2:
        lo_w, hi_w = ws[0], ws[-1]
        growth: dict[str, list[float]] = {"allgather": [], "allreduce": []}
        for r in comp:
            if r["workers"] != hi_w:
                continue
            twin = next((x for x in comp if x["workers"] == lo_w and x["method"] == r["method"]
                         and x["nominal_gbps"] == r["nominal_gbps"]), None)  # fmt: skip
            if twin and twin["comm_s"] > 0:
                growth[r["collective"]].append(r["comm_s"] / twin["comm_s"])
        med = {k: float(np.median(v)) if v else float("nan") for k, v in growth.items()}
        ring_ar = (2 * (hi_w - 1) / hi_w) / (2 * (lo_w - 1) / lo_w)
        out.append(
            f"**All-gather vs all-reduce with workers.** Paper: all-gathered payloads scale "
            f"linearly with workers, all-reduced ones do not. Measured median growth of exposed "
            f"communication from W={lo_w} to W={hi_w}: all-gather x{med['allgather']:.2f}, "
            f"all-reduce x{med['allreduce']:.2f} (ring models: x{(hi_w - 1) / (lo_w - 1):.2f} "
            f"and x{ring_ar:.2f}). "
            + (
                "Held."
                if med["allgather"] > med["allreduce"]
                else "Not held here (or not resolved by these measurements)."
            )  # fmt: skip
        )
    # 3. crossover bandwidth, measured vs model
    parts = []
    held = 0
    for W in ws:
        for name in sorted({r["method"] for r in comp if r["workers"] == W}):
            pts = [r for r in comp if r["workers"] == W and r["method"] == name]
            bws = [r["calibrated_gbps"] for r in pts]
            cross = _crossover(bws, [r["speedup_vs_fp16"] for r in pts])
            launch = next(x for x in measured if x["workers"] == W)
            m = next(x for x in launch["methods"] if x["method"] == name)
            base = next(x for x in launch["methods"] if x["method"] == "fp16")
            s = Setting(tuple(base["sizes"]), W, base["compute_s"],
                        alpha=launch["calibration"]["alpha_s"],
                        bucket_bytes=int(bucket_mb * 2**20), first_bucket_bytes=None,
                        wire_bytes=2)  # fmt: skip
            model_be = break_even_bandwidth(
                s, bits=8 * m["sent_bytes"], encode_s=m["encode_s"],
                decode_s=m["decode_s"] / (1 if m["allreducible"] else W),
                collective="allreduce" if m["allreducible"] else "allgather",
            )  # fmt: skip
            wins = [r["nominal_gbps"] for r in pts if r["speedup_vs_fp16"] > 1]
            held += bool(wins)
            meas = (f"{cross:.2f}" if cross is not None else
                    ("above the range" if len(wins) == len(pts) else
                     "below the range" if not wins else "not monotone"))  # fmt: skip
            parts.append(f"{name} (W={W}): measured {meas}, model {model_be:.3g} Gbit/s")
    out.append(
        "**Crossover bandwidth** (above it compression loses to fp16 all-reduce). "
        + "; ".join(parts)
        + f". {held} of {len(parts)} (method, W) pairs beat fp16 at some "
        "measured bandwidth."
    )
    # 4. faster compute (the model, from the measured parts)
    fast = []
    for factor in (2.0, 4.0):
        W = ws[-1]
        launch = min((x for x in measured if x["workers"] == W), key=lambda x: x["nominal_gbps"])
        cal = launch["calibration"]
        base = next(x for x in launch["methods"] if x["method"] == "fp16")
        net = launch.get("model")
        b = predict(base, W, cal["gbps"], cal["alpha_s"], bucket_mb, speedup=factor, model=net)
        b1 = predict(base, W, cal["gbps"], cal["alpha_s"], bucket_mb, model=net)
        best = []
        for m in launch["methods"]:
            if m["method"] in BASELINES + ("bf16",):
                continue
            p1 = predict(m, W, cal["gbps"], cal["alpha_s"], bucket_mb, model=net)
            pf = predict(m, W, cal["gbps"], cal["alpha_s"], bucket_mb, speedup=factor, model=net)
            best.append((b / pf, b1 / p1, m["method"]))
        best.sort(reverse=True)
        sf, s1, name = best[0]
        fast.append(f"compute x{factor:g} faster: best {name} x{sf:.2f} over fp16 (x{s1:.2f} "
                    f"at measured compute), at {launch['nominal_gbps']} Gbit/s, W={W}")  # fmt: skip
    out.append(
        "**Faster compute** (the measured backward pass shortened in the model; not measured): "
        + "; ".join(fast)
        + ". Paper: faster accelerators shrink the window in which "
        "communication hides behind compute, so compression's gains grow only when "
        "communication is exposed and its codec is cheap."
    )
    return out


# --- output --------------------------------------------------------------------------------
COLUMNS = (
    "workers", "nominal_gbps", "probed_gbps", "calibrated_gbps", "method", "collective",
    "sent_MB", "compute_s", "encode_decode_s", "comm_s", "wire_s", "overlapped", "comm_share",
    "iter_s", "iter_ci_lo",
    "iter_ci_hi", "repeats", "predicted_s", "rel_error", "predicted_probe_s",
    "predicted_nominal_s", "speedup_vs_fp16", "predicted_speedup", "cpus", "oversubscribed",
    "target_reached", "iters_to_target", "time_to_target_s", "final_acc",
)  # fmt: skip


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}"
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |\n" for r in rows)


def plot(rows: list[dict], measured: list[dict], bucket_mb: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = sorted({r["workers"] for r in rows})
    fig, axes = plt.subplots(1, len(ws), figsize=(6 * len(ws), 4.5), squeeze=False)
    for ax, W in zip(axes[0], ws, strict=False):
        launch = min((x for x in measured if x["workers"] == W), key=lambda x: x["nominal_gbps"])
        cal = launch["calibration"]
        grid = np.geomspace(0.05, 50, 60)
        base = next(x for x in launch["methods"] if x["method"] == "fp16")
        names = [m["method"] for m in launch["methods"] if m["method"] != "fp16"]
        colors = plt.cm.tab20(np.linspace(0, 1, max(len(names), 2)))
        for name, color in zip(names, colors, strict=False):
            m = next(x for x in launch["methods"] if x["method"] == name)
            net = launch.get("model")
            curve = [predict(base, W, g, cal["alpha_s"], bucket_mb, model=net)
                     / predict(m, W, g, cal["alpha_s"], bucket_mb, model=net)
                     for g in grid]  # fmt: skip
            ax.plot(grid, curve, color=color, lw=1)
            pts = [r for r in rows if r["workers"] == W and r["method"] == name]
            ax.plot([r["calibrated_gbps"] for r in pts], [r["speedup_vs_fp16"] for r in pts],
                    "o", color=color, label=name)  # fmt: skip
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("link bandwidth, Gbit/s (points at the calibrated bandwidth)")
        ax.set_ylabel("speed-up over fp16 all-reduce")
        ax.set_title(f"{launch['model']}, {W} workers: measured (points), model (lines)")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"speedup.{ext}", dpi=120)
    plt.close(fig)


def accuracy_markdown(rows: list[dict], target: float) -> str:
    """Iterations and seconds to the target per method, worker count and bandwidth (runs that
    did not reach it said so), and the share of the step that is communication."""
    acc = [r for r in rows if r["target_reached"] is not None]
    lines = ["## Time to target accuracy", ""]
    bws = sorted({r["nominal_gbps"] for r in rows}, reverse=True)
    share = [f"W={r['workers']} {r['nominal_gbps']:g} Gbit/s {r['method']} "
             f"{100 * r['comm_share']:.0f}%" for r in rows
             if r["method"] in BASELINES]  # fmt: skip
    lines.append(
        "Exposed communication as a share of the baselines' measured step (`comm_s / iter_s`): "
        + ("; ".join(share) if share else "no baseline measured")
        + "."
    )
    lines.append("")
    if not acc:
        lines.append("No accuracy run (`--train-iters 0`).")
        return "\n".join(lines) + "\n"
    lines += [
        f"Target test accuracy {target:g}. One training run per (method, workers) on the "
        "fastest link (the iterates do not depend on the link); seconds to target = iterations "
        "x the median iteration time measured at each bandwidth (in brackets: the same times "
        "the ends of the iteration time's 95 % interval). A run that did not reach the target "
        "within `--train-iters` is listed as such, with its final accuracy.",
        "",
        "| workers | method | iterations to target | final acc | "
        + " | ".join(f"s at {b:g} Gbit/s" for b in bws)
        + " |",
        "|---|---|---|---|" + "---|" * len(bws),
    ]
    for W in sorted({r["workers"] for r in acc}):
        for name in dict.fromkeys(r["method"] for r in acc if r["workers"] == W):
            cell = {r["nominal_gbps"]: r for r in acc if r["workers"] == W and r["method"] == name}
            first = next(iter(cell.values()))
            secs = []
            for b in bws:
                r = cell.get(b)
                if r is None:
                    secs.append("-")
                elif not r["target_reached"]:
                    secs.append("not reached")
                else:
                    its = r["iters_to_target"]
                    lo, hi = r["iter_ci_lo"], r["iter_ci_hi"]
                    ci = "" if math.isnan(lo) else f" [{its * lo:.3g}, {its * hi:.3g}]"
                    secs.append(f"{r['time_to_target_s']:.3g}{ci}")
            lines.append(f"| {W} | {name} | {first['iters_to_target']} | "
                         f"{_fmt(first['final_acc'])} | " + " | ".join(secs) + " |")  # fmt: skip
    missed = sorted({(r["workers"], r["method"]) for r in acc if not r["target_reached"]})
    lines += ["", "Not reaching the target: " + (", ".join(f"{m} (W={w})" for w, m in missed)
                                                 if missed else "none") + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def report(rows, measured, args, notes: list[str]) -> str:
    from systems.nettestbed import cores, testbed_markdown

    head = [
        f"# Measured study: {args.model}, workers {args.workers}, bandwidth {args.bandwidth} "
        f"Gbit/s",
        "",
        f"Command: `python -m systems.netstudy {' '.join(args.argv)}`",
        "",
        testbed_markdown(measured, args.latency_us, args.threads, cores()),
        "Calibration per launch (fitted ring all-reduce): "
        + "; ".join(f"W={x['workers']} nominal {x['nominal_gbps']} Gbit/s -> "
                    f"{x['calibration']['gbps']:.3g} Gbit/s, alpha "
                    f"{1e6 * x['calibration']['alpha_s']:.0f} us" for x in measured),
        "",
        *notes,
        "",
        markdown_table(rows),
        "",
        accuracy_markdown(rows, args.target_acc),
        "",
        "## The paper's findings, re-examined",
        "",
    ]  # fmt: skip
    return "\n".join(head) + "\n\n".join(findings(rows, measured, args.bucket_mb)) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command line. SIGINT or SIGTERM at any moment stops it without a traceback: the
    launches in flight are stopped, the links removed, what was measured is kept in
    ``measurements.json``, and the exit status is 130 or 143."""
    try:
        with interrupts.raising():
            return _main(argv)
    except interrupts.Stopped as exc:
        sys.stderr.write(
            f"interrupted by {exc}: the launches were stopped and the links removed; what was "
            "measured so far is in measurements.json of --out\n"
        )
        return exc.code


def _main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    from systems import netns

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        bws = sorted(_floats(args.bandwidth, "bandwidth", 0.001, 100), reverse=True)
        workers = _ints(args.workers, "workers", 2, 16)
        methods = args.methods.split(";") if args.methods else default_methods()
        methods = [m.strip() for m in methods if m.strip()]
        if "fp16" not in methods:
            methods.insert(0, "fp16")
        _check_methods(methods)
        for what, v, lo in (("iters", args.iters, 1), ("warmup", args.warmup, 2),
                            ("batch", args.batch, 1), ("eval-every", args.eval_every, 1),
                            ("threads", args.threads, 1),
                            ("repeats", args.repeats, 1)):  # fmt: skip
            if v < lo:
                raise ValueError(f"--{what} must be >= {lo}, got {v}")
        if args.target_acc is None:
            args.target_acc = 0.75 if args.model == "mlp" else 0.9
        if not 0 < args.probe_seconds <= 10:
            raise ValueError(f"--probe-seconds must be in (0, 10], got {args.probe_seconds}")
        if not 0 < args.target_acc <= 1:
            raise ValueError(f"--target-acc must be in (0, 1], got {args.target_acc}")
        if args.latency_us < 0:
            raise ValueError(f"--latency-us must be >= 0, got {args.latency_us}")
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_BAD
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        sys.stderr.write(f"error: --out {out} exists and is not empty; give a new folder\n")
        return EXIT_BAD
    ok, why = netns.available()
    if not ok:
        sys.stderr.write(f"error: network namespaces are not usable here: {why}\n")
        return EXIT_BAD
    netns.cleanup_stale()
    args.latency_mode = "off" if args.latency_us == 0 else args.latency_emulation
    if args.latency_us > 0 and args.latency_emulation != "off":
        has_netem, why = netem_ok = netns.netem_available()
        if args.latency_emulation == "netem" and not has_netem:
            sys.stderr.write(f"error: --latency-emulation netem: {why}; use worker, auto or off\n")
            return EXIT_BAD
        if args.latency_emulation == "auto":
            args.latency_mode = "netem" if netem_ok[0] else "worker"
        if not has_netem:
            sys.stderr.write(
                f"WARNING: NO NETEM on this kernel ({why}): --latency-us {args.latency_us:g} is "
                + ("EMULATED inside the workers (each collective completes its ring's messages "
                   f"x {2 * args.latency_us:g} us late; fp32 runs as a Python all-reduce hook)"
                   if args.latency_mode == "worker" else "NOT APPLIED")
                + "; the report says so.\n"
            )  # fmt: skip
    from systems import linkprobe
    from systems.nettestbed import cores, merge_repeats, oversubscribed

    over = [W for W in workers if oversubscribed(W, args.threads, cores())]
    if over:
        sys.stderr.write(
            f"warning: W={','.join(map(str, over))} x {args.threads} thread(s) oversubscribes "
            f"the {cores()} cores here; those rows are flagged\n"
        )
    out.mkdir(parents=True, exist_ok=True)
    measured: list[dict] = []
    failures: list[str] = []
    bar = tqdm(total=len(workers) * len(bws) * args.repeats, disable=args.quiet, desc="netstudy",
               unit="launch")  # fmt: skip
    netem_us = args.latency_us if args.latency_mode == "netem" else 0.0
    emulated_s = 2e-6 * args.latency_us if args.latency_mode == "worker" else 0.0
    try:
        for W in workers:
            with netns.Testbed(W, gbps=bws[0], latency_us=netem_us) as tb:
                for k, bw in enumerate(bws):
                    tb.set_links(bw)
                    bar.set_postfix_str(f"W={W} {bw} Gbit/s probe")
                    try:
                        probe = linkprobe.probe(tb, seconds=args.probe_seconds)
                    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                        probe = None
                        failures.append(f"W={W}, {bw} Gbit/s: link probe: {exc}")
                        sys.stderr.write(f"link probe failed: W={W}, {bw} Gbit/s: {exc}\n")
                    for rep in range(args.repeats):
                        bar.set_postfix_str(f"W={W} {bw} Gbit/s repeat {rep + 1}")
                        path = out / f"launch-W{W}-{bw:g}gbps-r{rep}.json"
                        try:
                            res = _launch(tb, args, methods, path, accuracy=(k == 0 and rep == 0))
                            res.update(nominal_gbps=bw, repeat=rep, probe=probe,
                                       latency_mode=args.latency_mode,
                                       latency_applied=args.latency_mode in ("netem", "worker"),
                                       latency_s=2e-6 * args.latency_us
                                       if args.latency_mode in ("netem", "worker") else 0.0,
                                       emulated_s=emulated_s, cores=cores())  # fmt: skip
                            measured.append(res)
                            (out / "measurements.json").write_text(json.dumps(measured, indent=1))
                        except RuntimeError as exc:
                            failures.append(f"W={W}, {bw} Gbit/s, repeat {rep}: {exc}")
                            sys.stderr.write(f"launch failed: W={W}, {bw} Gbit/s: {exc}\n")
                        bar.update(1)
    finally:
        bar.close()
    if not measured:
        sys.stderr.write("error: no launch succeeded\n")
        return EXIT_FAILED
    (out / "measurements.json").write_text(json.dumps(measured, indent=1))
    measured = merge_repeats(measured)
    _fill_accuracy(measured)
    rows = table_rows(measured, args.bucket_mb)
    with open(out / "table.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / "table.md").write_text(markdown_table(rows))
    plot(rows, measured, args.bucket_mb, out)
    notes = [f"Failed launches: {'; '.join(failures)}"] if failures else []
    (out / "report.md").write_text(report(rows, measured, args, notes))
    sys.stdout.write(markdown_table(rows) + "\n")
    sys.stdout.write("\n\n".join(findings(rows, measured, args.bucket_mb)) + "\n")
    sys.stdout.write(f"\nreport: {out / 'report.md'}\nplot:   {out / 'speedup.png'}\n")
    return EXIT_FAILED if failures else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
