"""Deep nets: batched per-node gradients (``vmap`` over nodes, the default) against a loop
over nodes (``batched=False``), for ``mlp`` and ``resnet18`` with 8 nodes.

Each side computes every node's minibatch gradient at its own point (``(8, d)`` rows) on the
same batch; the ratio is loop seconds / batched seconds (above 1: batching pays). With
``--quick``: one timed call after a warm-up, ResNet-18 on 1 image per node (16 otherwise).
"""

from __future__ import annotations

import torch

from benchmarks.clock import median_seconds
from benchmarks.progress import Tracker
from problems.registry import make_problem

__all__ = ["run", "NODES"]

NODES = 8


def run(quick: bool = False, device: str = "cpu", track=None) -> list[dict]:
    """One row per network: seconds of one all-node minibatch gradient, batched and looped;
    ``track`` (:class:`benchmarks.progress.Tracker`) hears of each network as a case."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    repeats = 1 if quick else 5
    track = track or Tracker()
    nets = (("mlp", 32), ("resnet18", 1 if quick else 16))
    track.plan(len(nets))
    rows = []
    for name, batch in nets:
        track.case(f"{name}, {NODES} nodes x {batch} per node")
        t = {}
        for batched in (True, False):
            p = make_problem(name, nodes=NODES, device=dev, batched=batched, samples=256)
            gen = torch.Generator(device=dev).manual_seed(0)
            X = 0.01 * torch.randn(NODES, p.d, generator=gen, device=dev, dtype=p.dtype)
            X = X + p.x0.to(dev, p.dtype)
            b = p.sample(torch.Generator().manual_seed(1), batch)
            t[batched] = median_seconds(lambda p=p, X=X, b=b: p.grad(X, b), repeats, sync)
        rows.append(
            {
                "net": name,
                "d": p.d,
                "nodes": NODES,
                "batch": batch,
                "batched_s": t[True],
                "loop_s": t[False],
            }
        )
        track.rows(rows[-1:])
    return rows
