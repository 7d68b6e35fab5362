"""Scale: 10^4 and 10^5 simulated nodes sharded over W = 1, 2, 4 processes of this machine.

``python -m benchmarks --only scale [--quick]``. EF21 + Top-1 on the tridiagonal quadratic of the
PermK, 3PC and DASHA experiments (``--problem quadratic --problem-opt family=tridiagonal``: the
problem itself holds O(n + d) numbers, so the per-node state is what grows with n), float64:
``n = 10^4, d = 1000``, ``n = 10^5, d = 100`` and ``n = 10^5, d = 1000`` (with ``--quick``:
``n = 10^5, d = 100`` on W = 1 and 2 only, 3 steps). W = 1 is a plain simulated run; W > 1
starts W ranks of ``python -m algorithms.run`` over gloo on this machine (what torchrun does),
each holding a block of about n/W nodes. Each process gets ``max(1, cores // W)`` threads.

Per case: seconds per step (the runner's ``seconds_per_iter``, rank 0) and the peak resident
memory of every process (``VmHWM``, read every 50 ms while it runs), max and mean over the
ranks. A 100-node run of the same ``d`` and W is the base (interpreter, libraries, the process
group's buffers); the nodes' memory is the peak above it, which should fall as 1/W. The
per-node cost is the W = 1 nodes' memory over the extra nodes; from it, the memory per process
of a 10^6-node run on W processes is ``base + cost * 10^6 / W``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import interrupt
from benchmarks.progress import Tracker

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
CASES = ((10_000, 1000), (100_000, 100), (100_000, 1000))
QUICK_CASES = ((100_000, 100),)
WORLDS = (1, 2, 4)
QUICK_WORLDS = (1, 2)
BASE_NODES = 100
MILLION = 10**6


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hwm_mib(pid: int) -> float:
    """The process's peak resident memory so far (``VmHWM``), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return 0.0


def _drain(p: subprocess.Popen) -> None:
    """Read a process's stderr to its end (so it never blocks on a full pipe); keep its last
    line."""
    text = p.stderr.read()
    p.err = text.strip().splitlines()[-1] if text.strip() else ""


def launch(n: int, d: int, world: int, iters: int, folder: Path) -> dict:
    """One run of ``n`` nodes on ``world`` processes: seconds per step and peak MiB per rank."""
    out = folder / f"n{n}_d{d}_w{world}"
    argv = ["ef21", "--compressor", "topk:k=1", "--problem", "quadratic",
            "--problem-opt", "family=tridiagonal", "--problem-opt", f"dim={d}",
            "--nodes", str(n), "--iters", str(iters), "--log-every", str(iters), "--quiet",
            "--out", str(out)]  # fmt: skip
    threads = str(max(1, (os.cpu_count() or 1) // world))
    base = dict(os.environ, OMP_NUM_THREADS=threads, PYTHONPATH=str(ROOT))
    port = _port()
    procs: list[subprocess.Popen] = []
    errs: list[threading.Thread] = []
    try:
        for rank in range(world):
            env = dict(base)
            if world > 1:
                env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                           LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port))  # fmt: skip
            # A session of its own: a terminal's Ctrl-C reaches the benchmark, which stops
            # the ranks itself (interrupt.stop), also on SIGTERM.
            with interrupt.shielded():
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "algorithms.run", *argv],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                        text=True,
                        start_new_session=True,
                    )  # fmt: skip
                )
        # VmHWM of each process's own address space, read until it exits (a high-water mark,
        # so the last reading is the peak; wait4's ru_maxrss would include the parent's
        # memory, which the kernel carries over the fork and exec of a child).
        peaks = [0.0] * world
        errs = [threading.Thread(target=_drain, args=(p,)) for p in procs]
        for t in errs:
            t.start()
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                peaks[i] = max(peaks[i], _hwm_mib(p.pid))
            time.sleep(0.05)
    finally:
        for p in procs:
            interrupt.stop(p)
        for t in errs:
            if t.ident is not None:  # started
                t.join()
    errors = [p.err or f"exit {p.returncode}" for p in procs if p.returncode != 0]
    row = {"n": n, "d": d, "world": world, "iters": iters}
    if errors:
        return {**row, "error": errors[0]}
    summary = json.loads((out / "summary.json").read_text())
    return {
        **row,
        "s_per_step": float(summary["seconds_per_iter"]["total"]),
        "peak_mib_max": max(peaks),
        "peak_mib_mean": sum(peaks) / len(peaks),
    }


def run(quick: bool = False, cases=None, worlds=None, track=None) -> list[dict]:
    """Every case on every W, plus a 100-node base run for each ``d`` and W (a process's memory
    without the nodes: interpreter, libraries, the process group's buffers). ``track``
    (:class:`benchmarks.progress.Tracker`) hears of each launch as a case."""
    iters = 3 if quick else 20
    cases = (QUICK_CASES if quick else CASES) if cases is None else cases
    worlds = (QUICK_WORLDS if quick else WORLDS) if worlds is None else worlds
    track = track or Tracker()
    runs = [(BASE_NODES, d, w, True) for d in sorted({d for _, d in cases}) for w in worlds]
    runs += [(n, d, w, False) for n, d in cases for w in worlds]
    track.plan(len(runs))
    rows = []
    with tempfile.TemporaryDirectory(prefix="compzoo-scale-") as tmp:
        for n, d, w, is_base in runs:
            track.case(f"n={n}{' (base)' if is_base else ''} d={d} W={w}")
            row = launch(n, d, w, iters, Path(tmp))
            rows.append({**row, "base": True} if is_base else row)
            track.rows(rows[-1:])
            log.debug("scale n=%d d=%d W=%d: %s", n, d, w, rows[-1])
    return rows


def derive(rows: list[dict]) -> list[dict]:
    """Add, per case: ``nodes_mib``, the peak above the base run of the same ``d`` and W (the
    memory the nodes take in the busiest process); ``rel_w1``, that against W = 1 (ideal
    ``1/W``); the per-node cost (W = 1, MiB) and the predicted MiB per process of a
    10^6-node run on W processes (base + cost * 10^6 / W)."""
    base = {(r["d"], r["world"]): r for r in rows if r.get("base") and "error" not in r}
    out = []
    for r in rows:
        r = dict(r)
        if not r.get("base") and "error" not in r and (r["d"], r["world"]) in base:
            r["nodes_mib"] = r["peak_mib_max"] - base[(r["d"], r["world"])]["peak_mib_max"]
        out.append(r)
    single = {(r["n"], r["d"]): r for r in out if r["world"] == 1 and "nodes_mib" in r}
    for r in out:
        one = single.get((r.get("n"), r.get("d")))
        if "nodes_mib" in r and one is not None:
            cost = one["nodes_mib"] / (r["n"] - BASE_NODES)
            r["rel_w1"] = r["nodes_mib"] / one["nodes_mib"]
            r["per_node_mib"] = cost
            b = base[(r["d"], r["world"])]["peak_mib_max"]
            r["million_mib"] = b + cost * MILLION / r["world"]
    return out


def markdown(rows: list[dict]) -> str:
    head = ["n", "d", "W", "s/step", "peak MiB (max rank)", "peak MiB (mean)",
            "nodes' MiB (peak - base)", "vs W=1", "ideal 1/W", "per-node KiB",
            "10^6 nodes: MiB per process"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("base"):
            what = r.get("error") or f"{r['peak_mib_max']:.0f}"
            lines.append(f"| {r['n']} (base) | {r['d']} | {r['world']} | | {what} |" + " |" * 6)
            continue
        if "error" in r:
            lines.append(f"| {r['n']} | {r['d']} | {r['world']} | error: {r['error']} |" + " |" * 7)
            continue
        nodes = f"{r['nodes_mib']:.0f}" if "nodes_mib" in r else "-"
        rel = f"{r['rel_w1']:.2f}" if "rel_w1" in r else "-"
        cost = f"{1024 * r['per_node_mib']:.1f}" if "per_node_mib" in r else "-"
        mil = f"{r['million_mib']:.0f}" if "million_mib" in r else "-"
        lines.append(
            f"| {r['n']} | {r['d']} | {r['world']} | {r['s_per_step']:.4g} | "
            f"{r['peak_mib_max']:.0f} | {r['peak_mib_mean']:.0f} | {nodes} | {rel} | "
            f"{1 / r['world']:.2f} | {cost} | {mil} |"
        )
    return "\n".join(lines) + "\n"
