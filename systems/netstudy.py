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
high rates). Sync SGD (fp32, fp16) uses the bucketed, overlapped all-reduce model; a hook uses
``compute + encode + decode + collective``, all-reduce or all-gather by the hook's
``allreducible``.

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
    ap.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
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
    ap.add_argument("--target-acc", type=float, default=0.9, help="test accuracy to reach")
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
            speedup: float = 1.0) -> float:  # fmt: skip
    """The model's iteration time for a measured method ``m`` on a link of ``gbps``."""
    from systems.model import Setting, compressed_time, sync_sgd_time

    if m["method"] in BASELINES:
        s = Setting(tuple(m["sizes"]), workers, m["compute_s"], speedup, alpha,
                    bucket_bytes=int(bucket_mb * 2**20),
                    float_bytes=4 if m["method"] == "fp32" else 2)  # fmt: skip
        return float(sync_sgd_time(s, gbps))
    s = Setting(tuple(m["sizes"]), workers, m["compute_s"], speedup, alpha)
    coll = "allreduce" if m["allreducible"] else "allgather"
    decodes = 1 if m["allreducible"] else workers
    return float(compressed_time(s, gbps, bits=8 * m["sent_bytes"], encode_s=m["encode_s"],
                                 decode_s=m["decode_s"] / decodes, collective=coll))  # fmt: skip


def table_rows(measured: list[dict], bucket_mb: float) -> list[dict]:
    """One row per (workers, bandwidth, method): measured parts, prediction, speed-up."""
    rows = []
    for launch in measured:
        W, nominal = launch["workers"], launch["nominal_gbps"]
        cal = launch["calibration"]
        gbps, alpha = (cal["gbps"], cal["alpha_s"]) if cal["gbps"] > 0 else (nominal, 0.0)
        by = {m["method"]: m for m in launch["methods"]}
        base = by.get("fp16")
        base_pred = predict(base, W, gbps, alpha, bucket_mb) if base else float("nan")
        for m in launch["methods"]:
            pred = predict(m, W, gbps, alpha, bucket_mb)
            pred_nominal = predict(m, W, nominal, launch.get("latency_s", 0.0), bucket_mb)
            row = {
                "workers": W,
                "nominal_gbps": nominal,
                "calibrated_gbps": round(gbps, 4),
                "method": m["method"],
                "collective": "allreduce" if m["allreducible"] else "allgather",
                "sent_MB": m["sent_bytes"] / 1e6,
                "compute_s": m["compute_s"],
                "encode_decode_s": m["encode_s"] + m["decode_s"],
                "comm_s": m["comm_s"],
                "iter_s": m["iter_s"],
                "predicted_s": pred,
                "rel_error": (pred - m["iter_s"]) / m["iter_s"],
                "predicted_nominal_s": pred_nominal,
                "speedup_vs_fp16": base["iter_s"] / m["iter_s"] if base else float("nan"),
                "predicted_speedup": base_pred / pred if base else float("nan"),
                "iters_to_target": m.get("iters_to_target"),
                "time_to_target_s": None,
            }
            its = m.get("iters_to_target")
            if its is not None and its > 0:
                row["time_to_target_s"] = its * m["iter_s"]
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
                        bucket_bytes=int(bucket_mb * 2**20), float_bytes=2)  # fmt: skip
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
        b = predict(base, W, cal["gbps"], cal["alpha_s"], bucket_mb, speedup=factor)
        b1 = predict(base, W, cal["gbps"], cal["alpha_s"], bucket_mb)
        best = []
        for m in launch["methods"]:
            if m["method"] in BASELINES + ("bf16",):
                continue
            p1 = predict(m, W, cal["gbps"], cal["alpha_s"], bucket_mb)
            pf = predict(m, W, cal["gbps"], cal["alpha_s"], bucket_mb, speedup=factor)
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
    "workers", "nominal_gbps", "calibrated_gbps", "method", "collective", "sent_MB", "compute_s",
    "encode_decode_s", "comm_s", "iter_s", "predicted_s", "rel_error", "speedup_vs_fp16",
    "predicted_speedup", "iters_to_target", "time_to_target_s",
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
            curve = [predict(base, W, g, cal["alpha_s"], bucket_mb)
                     / predict(m, W, g, cal["alpha_s"], bucket_mb) for g in grid]  # fmt: skip
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


def report(rows, measured, args, notes: list[str]) -> str:
    lat = measured[0].get("latency_applied", False) if measured else False
    head = [
        f"# Measured study: {args.model}, workers {args.workers}, bandwidth {args.bandwidth} "
        f"Gbit/s",
        "",
        f"Command: `python -m systems.netstudy {' '.join(args.argv)}`",
        "",
        f"Added latency {args.latency_us} us per link end: "
        + ("applied (netem)." if lat or args.latency_us == 0 else
           "NOT applied: this kernel has no netem qdisc; the links keep their natural veth "
           "latency (the calibrated latency below is what the runs saw)."),  # fmt: skip
        "Calibration per launch (fitted ring all-reduce): "
        + "; ".join(f"W={x['workers']} nominal {x['nominal_gbps']} Gbit/s -> "
                    f"{x['calibration']['gbps']:.3g} Gbit/s, alpha "
                    f"{1e6 * x['calibration']['alpha_s']:.0f} us" for x in measured),
        "",
        *notes,
        "",
        markdown_table(rows),
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
                            ("threads", args.threads, 1)):  # fmt: skip
            if v < lo:
                raise ValueError(f"--{what} must be >= {lo}, got {v}")
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
    out.mkdir(parents=True, exist_ok=True)
    measured: list[dict] = []
    failures: list[str] = []
    bar = tqdm(total=len(workers) * len(bws), disable=args.quiet, desc="netstudy", unit="launch")
    try:
        for W in workers:
            with netns.Testbed(W, gbps=bws[0], latency_us=args.latency_us) as tb:
                for k, bw in enumerate(bws):
                    tb.set_links(bw)
                    bar.set_postfix_str(f"W={W} {bw} Gbit/s")
                    path = out / f"launch-W{W}-{bw:g}gbps.json"
                    try:
                        res = _launch(tb, args, methods, path, accuracy=(k == 0))
                        res.update(nominal_gbps=bw, latency_applied=tb.latency_applied,
                                   latency_s=2e-6 * args.latency_us if tb.latency_applied
                                   else 0.0)  # fmt: skip
                        measured.append(res)
                        (out / "measurements.json").write_text(json.dumps(measured, indent=1))
                    except RuntimeError as exc:
                        failures.append(f"W={W}, {bw} Gbit/s: {exc}")
                        sys.stderr.write(f"launch failed: W={W}, {bw} Gbit/s: {exc}\n")
                    bar.update(1)
    finally:
        bar.close()
    if not measured:
        sys.stderr.write("error: no launch succeeded\n")
        return EXIT_FAILED
    _fill_accuracy(measured)
    (out / "measurements.json").write_text(json.dumps(measured, indent=1))
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
