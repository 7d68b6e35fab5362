"""The text :mod:`systems.pays` prints: the table, one line per hook, and which inputs were
measured, given and assumed. It reads only the dict :func:`systems.pays.predict` returns (the
same numbers ``--json`` writes)."""

from __future__ import annotations

__all__ = ["TERM_NAMES", "report"]

TERM_NAMES = {"compute": "compute", "codec": "encode/decode",
              "communication": "exposed communication", "latency": "latency"}  # fmt: skip
SHORT_TERMS = {"compute": "compute", "codec": "codec", "communication": "comm",
               "latency": "latency"}  # fmt: skip


def _be(row: dict) -> str:
    how, v = row["beats_fp16"], row["break_even_gbps"]
    if how is None:
        return "-"
    if v is None:
        return how
    return f"{'<' if how == 'below' else '>'}{v:.3g}"


def _short(kind: str) -> str:
    return {"allreduce": "AR", "allgather": "AG", "broadcast": "BC"}.get(kind, kind)


def _range_text(r: dict) -> str:
    (b0, b1), (c0, c1) = r["ranges"]["bandwidth"], r["ranges"]["compute"]
    (k0, k1), (l0, l1) = r["ranges"]["codec"], r["ranges"]["latency"]
    return (f"bandwidth delivered {100 * b0:g}-{100 * b1:g}% of nominal (--bandwidth-range), "
            f"compute x{c0:g}-x{c1:g} (--compute-range), encode/decode x{k0:g}-x{k1:g} "
            f"(--codec-range), latency x{l0:g}-x{l1:g} (--latency-range)")  # fmt: skip


def report(r: dict, notes: list[str]) -> str:
    lines = [
        f"{r['model']} ({r['parameters']:,} parameters) on {r['gpus']} GPUs at "
        f"{r['bandwidth_gbps']:g} Gbit/s, latency {r['latency_us']:g} us per collective step, "
        f"compute {r['compute_ms']:.4g} ms per iteration ({r['compute_source']}), "
        f"{r['buckets']} DDP buckets",
        "",
    ]
    head = (f"{'hook':<22} {'collectives':<12} {'MB sent':>8} {'codec':>7} {'comm':>7} "
            f"{'lat':>6} {'iter ms':>8}  {'speed-up [low, high]':<22} {'break-even':>10}  "
            f"{'dominant':<8} verdict")  # fmt: skip
    lines += [head, "-" * len(head)]
    for spec, row in r["hooks"].items():
        kinds = sorted({tuple(k) for k in row["collectives_per_bucket"]}, key=len)
        per = "/".join("+".join(_short(x) for x in k) for k in kinds)
        name = spec + (" (fp32)" if spec == r["fp32"] else "")
        tm = row["terms_ms"]
        lo, hi = row["band"]
        sp = f"{row['speedup_vs_fp16']:.3f} [{lo:.3g}, {hi:.3g}]"
        lines.append(
            f"{name:<22} {per:<12} {row['sent_MB']:>8.2f}{'~' if row['data_dependent'] else ' '}"
            f"{tm['codec']:>6.1f}{'*' if row['codec_source'] == 'given' else ' '}"
            f"{tm['communication']:>7.1f} {tm['latency']:>6.1f} {row['iter_ms']:>8.1f}  "
            f"{sp:<22} {_be(row):>10}  {SHORT_TERMS[row['dominant']]:<8} {row['verdict']}"
        )
    lines += [
        "",
        "ms per iteration: codec = encode+decode on the device ('*' given by --encode-ms), comm ="
        " exposed communication at zero latency, lat = what latency adds; iter = compute + "
        "codec + comm + lat. dominant: the largest of those four terms. speed-up: fp16's "
        "iteration over the hook's, [low, high] over the band below. break-even: the bandwidth "
        "(Gbit/s) below ('<') or above ('>') which the hook beats fp16. verdict: pays (low > 1),"
        " does not pay (high < 1), uncertain (the band straddles 1).",
        f"Band: {_range_text(r)}; every combination of each range's ends (and x1 inside).",
        "",
    ]
    for spec, row in r["hooks"].items():
        if spec == r["baseline"]:
            continue
        how, be = row["beats_fp16"], row["break_even_gbps"]
        where = {"never": "at no bandwidth in 1e-3..1e5 Gbit/s",
                 "always": "at every bandwidth in 1e-3..1e5 Gbit/s"}.get(how)  # fmt: skip
        where = where or f"{how} {be:.3g} Gbit/s"
        lo, hi = row["band"]
        dom = row["dominant"]
        lines.append(
            f"{spec}: {row['verdict']} at {r['bandwidth_gbps']:g} Gbit/s: speed-up "
            f"{row['speedup_vs_fp16']:.2f} [{lo:.2f}, {hi:.2f}] over fp16; dominant term "
            f"{TERM_NAMES[dom]} ({row['terms_ms'][dom]:.1f} of {row['iter_ms']:.1f} ms); beats "
            f"fp16 {where}"
        )
    lines += ["", "Measured on this machine:"]
    lines.append(
        f"- the backward profile of {r['model']} on the CPU ({r['profile_inputs']}): when each "
        f"gradient is ready and the backward share of compute ({r['backward_fraction']:.2f}); "
        "only its shape is used, scaled to the compute time"
    )
    measured = [s for s, row in r["hooks"].items() if row["codec_source"] == "measured"]
    given = [s for s, row in r["hooks"].items() if row["codec_source"] == "given"]
    if measured:
        scale = "" if r["codec_scale"] == 1 else f", times --codec-scale {r['codec_scale']:g}"
        lines.append(f"- encode/decode on {r['device']} on the model's DDP buckets for "
                     f"{', '.join(measured)}{scale}")  # fmt: skip
    if r["compute_source"] == "measured":
        lines.append(f"- compute: {r['compute_detail']}")
    lines += [f"  ({n})" for n in notes]
    lines.append("Given:")
    if r["compute_source"] == "given":
        lines.append(f"- compute {r['compute_ms_before_speedup']:g} ms per iteration "
                     "(--compute-ms)")  # fmt: skip
    if r["speedup_compute"] != 1:
        lines.append(f"- compute {r['speedup_compute']:g}x faster on the target "
                     f"(--speedup-compute): {r['compute_ms_before_speedup']:.4g} -> "
                     f"{r['compute_ms']:.4g} ms; encode/decode not scaled by it")  # fmt: skip
    if given:
        lines.append(f"- encode+decode per iteration for {', '.join(given)} (--encode-ms), "
                     "split over buckets by size, half encode, half decode")  # fmt: skip
    lines.append(f"- {r['gpus']} GPUs, {r['bandwidth_gbps']:g} Gbit/s, {r['latency_us']:g} us")
    lines.append("Assumed:")
    if r["compute_source"] == "assumed":
        lines.append(f"- compute: {r['compute_detail']}")
    if measured:
        lines.append(
            f"- encode/decode times measured on {r['device']} stand for the target's unless "
            "--codec-scale/--encode-ms say otherwise"
            + (" (a GPU is usually far faster at them)" if r["device"] == "cpu" else "")
        )
    lines += [
        "- the uncertain inputs vary within the band's ranges above",
        "- one link per worker of the given bandwidth; ring all-reduce 2(p-1)/p M/B, ring "
        "all-gather (p-1) M/B, each collective with its own latency 2(p-1) or (p-1) x latency",
        "- collectives as each hook declares them (plan); '~' marks sizes that depend on the "
        "gradient (the hook's nominal size)",
        "- a bucket's encode delays the rest of the backward pass; its collectives start once "
        "encoded and the link is free; decodes run on the device after them",
        "- a measured all-gathered payload is decoded from every worker: measured decode x workers",
        "- DDP's buckets in reverse parameter order; the fp16 baseline is fp16 all-reduce per "
        "bucket, overlapped; fp32 all-reduce shown beside it",
    ]
    return "\n".join(lines)
