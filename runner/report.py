"""The summary a run prints and writes to ``summary.json``."""

from __future__ import annotations

import shlex
from pathlib import Path


def resume_command(out: Path, world: int | None) -> str:
    """The exact command that continues the run in ``out``."""
    launcher = f"torchrun --nproc_per_node={world}" if world else "python"
    return f"{launcher} -m algorithms.run --resume {shlex.quote(str(out))}"


def step_text(config: dict, gamma: float) -> str:
    """The step and where it came from: the user's ``--step``, the theory (with the
    provenance the method declares for it), a method's labelled practical default, or the
    problem's documented default (deep nets, which have no smoothness constants)."""
    step = config["step"]
    th, mult = step.get("theory") or {}, step.get("step_mult", 1.0)
    given = config["args"].get("step", "theory")
    times = f" x --step-mult {mult:g}" if mult != 1 else ""
    prov = step.get("provenance")
    origin = f"; provenance {prov['kind']}: {prov['ref']}" if prov else ""
    if given not in ("theory", "default"):
        return f"  step {gamma:.6g} (given: --step {given}{times})"
    if step.get("step_origin") == "practical":
        pr = step["practical"]
        return (
            f"  step {gamma:.6g} = {mult:g} x {pr['formula']}{origin}; the theorem's step: "
            "--step theory"
        )
    if th:
        src = f" [{th['source']}]" if th.get("source") and not prov else ""
        return f"  step {gamma:.6g} = {mult:g} x theory {th['formula']}{src}{origin}"
    source = step.get("step_source") or "no theory step"
    return f"  step {gamma:.6g} = {mult:g} x {source}"


def summary_text(config: dict, s: dict) -> str:
    fin = s["final"]
    lines = [
        f"{config['algorithm']} with {config['compressor']['spec']} on {config['problem']['name']}"
        f" (n={config['problem']['n']}, d={config['problem']['d']}): {s['reason']} after "
        f"{s['iters']} iterations" + (f" ({s['unstable']})" if s.get("unstable") else ""),
        f"  f = {fin['f']:.6g}"
        + (f", f - f* = {fin['f_gap']:.3e}" if fin.get("f_gap") is not None else "")
        + f", ||grad f||^2 = {fin['grad_norm_sq']:.3e}"
        + (f" (logged at iteration {fin['iter']})" if fin.get("iter") != s["iters"] else ""),
        f"  bits per node: up {fin['bits_up']:.6g} (max {fin['bits_up_max']:.6g}), "
        f"down {fin['bits_down']:.6g}",
        step_text(config, s["gamma"]),
    ]
    if s.get("stalled"):
        lines.append(
            f"  stalled: {s['stalled']}; the step {s['gamma']:.6g} is too small for this "
            "run: raise it with --step-mult (e.g. --step-mult 10) or give --step FLOAT"
        )
    lines += [
        f"  results in {s['out']}",
    ]
    return "\n".join(lines)
