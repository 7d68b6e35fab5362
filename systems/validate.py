"""Check the performance model against measured runs of the torch.distributed executor.

``python -m systems.validate --nproc 2 --out DIR`` does three things on this machine (with a
progress bar on stderr, off with ``--quiet``):

1. calibrates the network: under ``torchrun`` (gloo on loopback) it times the comm layer's
   all-reduce of ``d`` floats for several ``d`` and fits the ring all-reduce model
   ``2 (p-1)/p * M/B + 2 (p-1) alpha`` (:mod:`systems.model`) by least squares, giving ``B``
   and ``alpha``; it also times all-gathers, which the fit has not seen, as a first check;
2. runs ``python -m algorithms.run`` under ``torchrun`` for each compressor;
3. predicts each run's seconds per iteration from the model: the run's measured compute, this
   machine's measured encode/decode of one row (:mod:`systems.measure`; all-gather decodes
   ``p`` rows) and the modeled collective for the run's bits per iteration, and prints
   predicted against measured totals and parts with the relative error.

The executor runs compute and communication one after the other (no bucketed overlap), so the
prediction uses the compressed-method formula for every run, the identity included. Several
processes share the machine's cores, so the numbers carry that contention; the report says so.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

__all__ = ["fit_collective", "main", "predict_run"]


def fit_collective(nbytes, seconds, p: int, collective: str = "allreduce"):
    """Least-squares ``(B in Gbit/s, alpha in s)`` of the model of ``collective``:
    ``t = 2(p-1)/p M/B + 2(p-1) alpha`` (all-reduce) or ``t = (p-1) M/B + (p-1) alpha``
    (all-gather of ``M`` bytes per worker)."""
    nbytes, seconds = np.asarray(nbytes, float), np.asarray(seconds, float)
    if collective == "allreduce":
        slope, hops = 2 * (p - 1) / p, 2 * (p - 1)
    elif collective == "allgather":
        slope, hops = p - 1, p - 1
    else:
        raise ValueError(f"unknown collective {collective!r}; allowed: allreduce, allgather")
    if p < 2:
        raise ValueError(f"fitting a collective needs p >= 2 workers, got {p}")
    a = np.stack([slope * nbytes, np.full_like(nbytes, hops)], axis=1)
    (inv_b, alpha), *_ = np.linalg.lstsq(a, seconds, rcond=None)
    if not inv_b > 0:
        raise ValueError(f"the {collective} times do not grow with size: fitted 1/B = {inv_b}")
    return 8 / inv_b / 1e9, max(0.0, float(alpha))


def _bench(out: Path, sizes, repeats: int) -> None:
    """Under torchrun: time the comm layer's dense all-reduce and bit-packed all-gather."""
    from comm.torch_dist import TorchDistComm, start_group, stop_group
    from compressors import timing
    from compressors.registry import parse_spec

    start_group("gloo", 120)
    comm = TorchDistComm(seed=0)
    sign = parse_spec("sign")
    res = {"p": comm.n, "sizes": list(sizes), "allreduce_s": [], "allgather_s": []}
    for d in sizes:
        x = torch.randn(1, d)
        packet = sign.encode(x, 0)
        for key, fn in (
            ("allreduce_s", lambda x=x, d=d: comm.reduce_rows(x, torch.tensor([32 * d]))),
            ("allgather_s", lambda p=packet: comm.reduce(p, sign)),
        ):
            times = []
            for _ in range(repeats + 1):
                comm.barrier()
                with timing.recording(timing.Stopwatch()) as w:
                    fn()
                times.append(w.totals["communicate"])
            res[key].append(float(np.median(times[1:])))
    if comm.rank == 0:
        out.write_text(json.dumps(res))
    stop_group()


def _torchrun(nproc: int, args: list[str], env: dict) -> subprocess.CompletedProcess:
    cmd = ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "-m", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def predict_run(run_dir: Path, net: dict, skip: int = 1) -> dict:
    """Predicted and measured seconds per iteration of one executor run.

    Args:
        run_dir: the run's folder.
        net: ``{collective: (gbps, alpha)}``, the fitted network of each collective.
        skip: iterations before this one (start-up, the first full gradient) are left out.
    """
    from compressors.registry import parse_spec
    from systems import model
    from systems.measure import collective_of, measure

    cfg = json.loads((run_dir / "config.json").read_text())
    with open(run_dir / "history.csv") as f:
        rows = list(csv.DictReader(f))
    first, last = rows[skip], rows[-1]
    iters = int(last["iter"]) - int(first["iter"])

    def per_iter(col: str) -> float:
        return (float(last[col]) - float(first[col])) / iters

    p = int(cfg["world_size"])
    spec = cfg["compressor"]["spec"]
    c = parse_spec(spec)
    d = int(cfg["problem"]["d"])
    m = measure(spec, (d,), repeats=5, budget_s=1.0, workers=p)
    collective = collective_of(c)
    gbps, alpha = net[collective]
    s = model.Setting((d,), p, per_iter("t_compute"), alpha=alpha)
    bits = per_iter("bits_up")
    decodes = p if collective == "allgather" else 1
    comm = float(model.compressed_time(s, gbps, bits, 0.0, 0.0, collective)) - s.compute
    measured = {k: per_iter(f"t_{k}") for k in ("compute", "encode", "communicate", "decode")}
    measured["total"] = per_iter("wall_s")
    predicted = {
        "compute": s.compute,
        "encode": m.encode_s,
        "communicate": comm,
        "decode": decodes * m.decode_s,
    }
    predicted["total"] = sum(predicted.values())
    return dict(spec=spec, p=p, d=d, bits=bits, collective=collective,
                measured=measured, predicted=predicted)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systems.validate", description=__doc__)
    ap.add_argument("--nproc", type=int, nargs="+", default=[2])
    ap.add_argument("--out", required=True)
    ap.add_argument("--compressors", nargs="+",
                    default=["identity", "topk:ratio=0.01", "scaled:randk:ratio=0.01,shared=true",
                             "scaled-sign", "rank:r=4"])  # fmt: skip
    ap.add_argument("--algorithm", default="ef21")
    ap.add_argument("--problem", default="mlp")
    ap.add_argument("--problem-opt", nargs="*", default=["hidden=1024"])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--bench", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--bench-sizes", default="1000,100000,1000000,4000000")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    bad = _check(args)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    sizes = [int(v) for v in args.bench_sizes.split(",")]
    if args.bench:
        _bench(Path(args.bench), sizes, repeats=10)
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot create --out {args.out!r}: {e.strerror or e}", file=sys.stderr)
        return 2
    bar = tqdm(total=len(args.nproc) * (1 + len(args.compressors)), desc="validate",
               unit="step", file=sys.stderr, disable=args.quiet)  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torch.set_num_threads(1)  # encode/decode are measured as the runs' ranks run them
    from systems import model

    lines, failed = [], 0
    for n in args.nproc:
        bench = out / f"bench_p{n}.json"
        bar.set_postfix_str(f"p={n} network")
        r = _torchrun(n, ["systems.validate", "--out", str(out), "--bench", str(bench),
                          "--bench-sizes", args.bench_sizes], env)  # fmt: skip
        bar.update(1)
        if r.returncode:
            bar.close()
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        b = json.loads(bench.read_text())
        d_arr = np.asarray(sizes)
        net = {
            "allreduce": fit_collective(4 * d_arr, b["allreduce_s"], n, "allreduce"),
            "allgather": fit_collective(d_arr / 8, b["allgather_s"], n, "allgather"),
        }
        (gbps, alpha), (gbps_g, alpha_g) = net["allreduce"], net["allgather"]
        lines.append(f"p={n}: fitted loopback all-reduce {gbps:.2f} Gbit/s, {alpha * 1e6:.1f} us;"
                     f" all-gather {gbps_g:.2f} Gbit/s, {alpha_g * 1e6:.1f} us"
                     f" (from {sizes} floats / sign bits)")  # fmt: skip
        for d, t_ar, t_ag in zip(sizes, b["allreduce_s"], b["allgather_s"], strict=True):
            t_arm = float(model.ring_allreduce_time(4 * d, n, gbps, alpha))
            t_agm = float(model.allgather_time(d / 8, n, gbps_g, alpha_g))
            t_agx = float(model.allgather_time(d / 8, n, gbps, alpha))
            lines.append(f"  d={d:>8}: all-reduce measured {t_ar * 1e3:8.3f} ms, model "
                         f"{t_arm * 1e3:8.3f} ms; all-gather of signs measured "
                         f"{t_ag * 1e3:8.3f} ms, model {t_agm * 1e3:8.3f} ms "
                         f"(with the all-reduce fit: {t_agx * 1e3:.3f} ms)")  # fmt: skip
        for spec in args.compressors:
            run = out / f"run_p{n}_{spec.replace(':', '_').replace(',', '_').replace('=', '')}"
            t0 = time.perf_counter()
            bar.set_postfix_str(f"p={n} {spec}")
            r = _torchrun(n, ["algorithms.run", args.algorithm, "--compressor", spec,
                              "--problem", args.problem,
                              *[a for o in args.problem_opt for a in ("--problem-opt", o)],
                              "--backend", "gloo", "--iters", str(args.iters),
                              "--out", str(run), "--overwrite"], env)  # fmt: skip
            bar.update(1)
            if r.returncode:  # report it and go on: one flaky run should not hide the rest
                tail = [ln for ln in r.stderr.splitlines() if ln.strip()][-1:]
                lines.append(f"  {spec:<28} p={n}: run failed (exit {r.returncode}): {tail}")
                failed += 1
                continue
            res = predict_run(run, net)
            res["run_s"] = time.perf_counter() - t0
            (run / "model_vs_measured.json").write_text(json.dumps(res, indent=1))
            lines.append(_row(res))
    bar.close()
    print("\n".join(lines))
    return 1 if failed else 0


def _check(args) -> str | None:
    """The first bad argument, named with what is allowed, or ``None``."""
    from compressors.registry import parse_spec

    try:
        sizes = [int(v) for v in args.bench_sizes.split(",")]
    except ValueError:
        return f"--bench-sizes must be integers joined by commas, got {args.bench_sizes!r}"
    if len(sizes) < 2 or min(sizes) < 1:
        return f"--bench-sizes needs two or more sizes >= 1 (for the fit), got {args.bench_sizes!r}"
    if args.bench:
        return None
    if any(n < 2 for n in args.nproc):
        return f"--nproc values must be >= 2 (a collective needs two ranks), got {args.nproc}"
    if args.iters < 2:
        return f"--iters must be >= 2 (the first iteration is not timed), got {args.iters}"
    for spec in args.compressors:
        try:
            parse_spec(spec)
        except ValueError as e:
            return f"--compressors {spec!r}: {e}"
    if shutil.which("torchrun") is None:
        return "torchrun is not on PATH: it comes with torch (activate the environment that has it)"
    return None


def _row(res: dict) -> str:
    m, p = res["measured"], res["predicted"]
    parts = " ".join(
        f"{k[:4]} {m[k] * 1e3:.2f}/{p[k] * 1e3:.2f}"
        for k in ("compute", "encode", "communicate", "decode")
    )
    err = (p["total"] - m["total"]) / m["total"]
    return (f"  {res['spec']:<28} p={res['p']} d={res['d']} {res['collective']:<9} "
            f"total ms measured {m['total'] * 1e3:7.2f} predicted {p['total'] * 1e3:7.2f} "
            f"({err:+.0%}); measured/predicted ms: {parts}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
