"""What :mod:`systems.netstudy` says about its own testbed: repeats, intervals, cores, links.

- :func:`interval`: the centre and 95 % interval of a (method, bandwidth, workers) cell over its
  independent repeats (separate launches: fresh processes, a fresh calibration). The centre is
  the **median of the repeat medians** (each repeat's value is already the median over its
  timed iterations); the interval is the **Student t-interval for the mean of the repeat
  medians**, ``mean ± t(0.975, R-1) s / sqrt(R)``. With one repeat there is no interval.
- :func:`merge_repeats`: one launch per (workers, bandwidth) from its repeats, every measured
  part the median over repeats, the repeats' iteration times kept for the interval.
- :func:`cores`: the CPUs this process may run on; a launch of ``W`` workers with ``T`` torch
  threads each **oversubscribes** them when ``W * T`` exceeds that count (the workers then
  time-share cores, which inflates compute and codec times and is flagged in every row).
- :func:`testbed_markdown`: the report's section on the links: per link, the nominal rate, what
  :mod:`systems.linkprobe` measured (alone and under the ring's load), the round trip, the
  all-reduce calibration, how latency was applied (netem, emulated in the workers, or not at
  all) and the cores.
"""

from __future__ import annotations

import math
import os
import statistics

__all__ = ["cores", "interval", "merge_repeats", "oversubscribed", "testbed_markdown"]

#: the parts of a measured method that are medians over its repeats
PARTS = ("compute_s", "iter_s", "encode_s", "decode_s", "sent_bytes", "comm_s")


def interval(values: list[float]) -> tuple[float, float, float]:
    """``(median, lo, hi)``: the median of ``values`` and the 95 % t-interval of their mean
    (``lo = hi = nan`` for fewer than two values)."""
    from scipy import stats

    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("interval needs at least one value, got none")
    med = float(statistics.median(vals))
    if len(vals) < 2:
        return med, float("nan"), float("nan")
    mean, sd = statistics.fmean(vals), statistics.stdev(vals)
    half = float(stats.t.ppf(0.975, len(vals) - 1)) * sd / math.sqrt(len(vals))
    return med, mean - half, mean + half


def cores() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` without one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def oversubscribed(workers: int, threads: int, ncores: int) -> bool:
    """Whether ``workers`` processes of ``threads`` threads need more than ``ncores`` cores."""
    return workers * threads > ncores


def merge_repeats(measured: list[dict]) -> list[dict]:
    """One launch per (workers, nominal bandwidth), in first-seen order: each method's parts
    the median over the repeats that measured it, ``iter_s_runs`` its repeats' iteration
    times, the calibration's bandwidth and latency the medians of the repeats' fits."""
    groups: dict[tuple[int, float], list[dict]] = {}
    for launch in measured:
        groups.setdefault((launch["workers"], launch["nominal_gbps"]), []).append(launch)
    merged = []
    for runs in groups.values():
        first = runs[0]
        out = {k: v for k, v in first.items() if k not in ("methods", "calibration")}
        out["repeats"] = len(runs)
        cals = [r["calibration"] for r in runs]
        out["calibration"] = {
            "gbps": statistics.median(c["gbps"] for c in cals),
            "alpha_s": statistics.median(c["alpha_s"] for c in cals),
            "runs": [{"gbps": c["gbps"], "alpha_s": c["alpha_s"]} for c in cals],
        }
        names = list(dict.fromkeys(m["method"] for r in runs for m in r["methods"]))
        out["methods"] = []
        for name in names:
            ms = [m for r in runs for m in r["methods"] if m["method"] == name]
            m = dict(ms[0])
            for key in PARTS:
                m[key] = float(statistics.median(x[key] for x in ms))
            m["iter_s_runs"] = [x["iter_s"] for x in ms]
            acc = next((x for x in ms if "iters_to_target" in x), None)
            if acc is not None:
                for key in ("iters_to_target", "final_acc", "target_acc", "trained_iters"):
                    if key in acc:
                        m[key] = acc[key]
            out["methods"].append(m)
        merged.append(out)
    return merged


def _latency_line(launch: dict, latency_us: float) -> str:
    how = launch.get("latency_mode", "netem" if launch.get("latency_applied") else "off")
    if latency_us == 0:
        return "Added latency: none asked (`--latency-us 0`)."
    if how == "netem":
        return f"Added latency {latency_us:g} us per link end: applied by netem on every link end."
    if how == "worker":
        return (
            f"Added latency {latency_us:g} us per link end: **this kernel has no netem qdisc**, "
            f"so it was EMULATED inside the workers: every collective completes "
            f"`steps x {2 * latency_us:g} us` late (two link ends per worker-to-worker message; "
            "steps = 2(p-1) for all-reduce, p-1 for all-gather and broadcast), fp32 then runs "
            "PyTorch's Python allreduce_hook instead of DDP's C++ all-reduce, and the links "
            "themselves keep veth's own latency (measured below)."
        )
    return (
        f"Added latency {latency_us:g} us per link end: **NOT APPLIED** (this kernel has no "
        "netem qdisc and `--latency-emulation off` was given): the links keep veth's own "
        "latency, measured below."
    )


def testbed_markdown(merged: list[dict], latency_us: float, threads: int, ncores: int) -> str:
    """The report's testbed section (see the module docstring)."""
    lines = ["## Testbed", ""]
    if merged:
        lines.append(_latency_line(merged[0], latency_us))
        lines.append("")
    ws = sorted({x["workers"] for x in merged})
    over = [W for W in ws if oversubscribed(W, threads, ncores)]
    lines.append(
        f"Cores: {ncores} available to the study; each worker runs {threads} torch thread(s), so "
        + ", ".join(f"W={W} needs {W * threads}" for W in ws)
        + (
            f". **Oversubscribed** at W={', '.join(map(str, over))}: the workers time-share "
            "cores, which inflates compute and codec times (flagged in the table)."
            if over
            else ". No launch oversubscribes the cores."
        )
    )
    lines += [
        "",
        "Links as delivered (measured by `systems.linkprobe` before the runs: one TCP stream per "
        "direction, alone; `ring` = every worker streaming to its successor at once, the "
        "all-reduce's load (per link: the rate of the stream its worker sent); `rtt` = "
        "worker-switch ping-pong; `pair alpha` = half the "
        "worker 0-worker 1 round trip), beside the nominal rate and the all-reduce calibration "
        "(fitted ring model, median over repeats):",
        "",
        "| workers | nominal Gbit/s | link | up Gbit/s | down Gbit/s | rtt us | ring Gbit/s "
        "| pair alpha us | calibrated Gbit/s | calibrated alpha us |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in merged:
        cal, pr = x["calibration"], x.get("probe")
        if not pr:
            lines.append(f"| {x['workers']} | {x['nominal_gbps']:g} | (not probed) | | | | | | "
                         f"{cal['gbps']:.3g} | {1e6 * cal['alpha_s']:.0f} |")  # fmt: skip
            continue
        for link in pr["links"]:
            i = link["worker"]
            ring = pr["ring_gbps"][i] if i < len(pr["ring_gbps"]) else float("nan")
            tail = (f"{1e6 * pr['latency_s']:.0f} | {cal['gbps']:.3g} | "
                    f"{1e6 * cal['alpha_s']:.0f} |" if i == 0 else " | | |")  # fmt: skip
            lines.append(
                f"| {x['workers']} | {x['nominal_gbps']:g} | {i} | {link['up_gbps']:.3g} | "
                f"{link['down_gbps']:.3g} | {link['rtt_us']:.0f} | {ring:.3g} | {tail}"
            )
    lines += [
        "",
        "Predictions: `predicted_s` uses the calibrated link, `predicted_probe_s` the probed one "
        "(the slowest ring receiver's rate; the pair latency plus any emulated delay per "
        "message), `predicted_nominal_s` the nominal rate and the added latency. Repeats: each "
        "(method, bandwidth, workers) was timed in separate launches; `iter_s` is the median of "
        "the repeats' medians and `iter_ci_lo`-`iter_ci_hi` the 95 % Student t-interval of "
        "their mean (none with one repeat).",
    ]
    return "\n".join(lines) + "\n"
