"""Encode+decode time of the registered compressors against torch's own primitive for the job.

One row of ``N`` float32 elements (``N`` in 10^6 and 2.5 * 10^7), ``k = N/100`` for the
sparsifiers. The primitive is what a hand-written version would call: ``torch.topk`` of
``|x|`` plus a gather and a scatter into zeros for Top-K; ``randperm`` / ``index_select``
plus a scatter for Rand-K (and Perm-K); a plain copy for the dense quantizers. The ratio is
compressor seconds / primitive seconds (1 = as fast as the bare primitive).
"""

from __future__ import annotations

import torch

from algorithms.comm import SimulatedComm
from benchmarks.clock import median_seconds
from compressors import parse_spec
from compressors.registry import COMPRESSORS

__all__ = ["run", "SIZES"]

SIZES = (10**6, 25 * 10**6)
SKIP = ("compose",)  # a container of other compressors: measured through its parts


def _spec(name: str, N: int) -> str:
    k = max(1, N // 100)
    if name in ("topk", "randk"):
        return f"{name}:k={k}"
    if name == "scaled":
        return f"scaled:randk:k={k}"
    return name


def _primitive(name: str, x: torch.Tensor, k: int, gen: torch.Generator):
    """Torch's own version of the compressor's job on one row."""
    if name == "topk":

        def fn():
            idx = torch.topk(x.abs(), k, dim=1, sorted=False).indices
            return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

        return "torch.topk+scatter", fn
    if name in ("randk", "permk", "scaled"):

        def fn():
            idx = torch.randperm(x.shape[1], generator=gen, device=x.device)[:k]
            vals = x.index_select(1, idx) * (x.shape[1] / k)
            return torch.zeros_like(x).index_copy_(1, idx, vals)

        return "randperm+index_select+scatter", fn
    return "copy", lambda: x.clone()


def run(quick: bool = False, device: str = "cpu") -> list[dict]:
    """One row per (compressor, size); big sizes only for Top-K, Rand-K and the copy-like ones
    that are cheap enough in quick mode."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    rows = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for N in SIZES:
        x = torch.randn(1, N, generator=gen, device=dev)
        k = max(1, N // 100)
        big = N > 10**6
        repeats = (1 if big else 3) if quick else 5
        for name in COMPRESSORS:
            if name in SKIP or (big and quick and name not in ("topk", "randk")):
                continue
            spec = _spec(name, N)
            row = {"compressor": spec, "elements": N}
            try:
                C = parse_spec(spec).bind(1)
                comm = SimulatedComm(1, seed=0)

                def ours(C=C, comm=comm, x=x):
                    return C.decode(C.encode(x, comm.rng_for(C, 0)))

                t_ours = median_seconds(ours, repeats, sync)
            except (ValueError, RuntimeError) as e:
                rows.append({**row, "error": str(e)})
                continue
            prim, pfn = _primitive(name, x, k, gen)
            t_prim = median_seconds(pfn, repeats, sync)
            rows.append({**row, "compzoo_s": t_ours, "primitive": prim, "primitive_s": t_prim})
    return rows
