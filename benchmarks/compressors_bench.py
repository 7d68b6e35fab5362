"""Encode+decode time of the registered compressors against what bounds them.

One row of ``N`` float32 elements (``N`` in 10^6 and 2.5 * 10^7; with ``--quick`` 10^6 only),
``k = N/100`` for the sparsifiers. Each compressor is set against its *bound*, the cost a
hand-written version could not avoid:

* Top-K: ``torch.topk`` of ``|x|`` plus a gather and a scatter into zeros;
* Rand-K, Perm-K, scaled Rand-K: ``randperm`` / ``index_select`` plus a scatter;
* the stochastic quantizers that draw one uniform per entry (natural, QSGD, natural dithering,
  TernGrad, and SSQ, MSQ, sparse dithering and GenNorm, whose quantizers are stochastic
  rounding too): that draw, ``Streams.uniform(N)`` in float32, or a plain copy if slower;
* count sketch: its hashes drawn (``randint`` of buckets and signs per hash row), the table
  summed (``scatter_add``) and the estimate read back (``gather``), as one would write it in
  torch;
* spherical compression: its ``K`` shared codewords drawn (``normal_``) and each one's product
  with the row, one codeword at a time;
* MLMC Top-K: a sort of ``|x|`` (the increments' norms need the magnitudes ranked);
* rank-r (PowerSGD's power step): the row viewed as its near-square matrix ``M``, the three
  products the step cannot avoid, ``p = M q`` (normalized), ``r = M^T p`` and the output
  ``p r^T``, as batched matrix products (a copy does none of them);
* FO-SGD and THC, which rotate the row by a randomized Walsh-Hadamard transform and the
  receiver back: the row zero-padded to ``n = 2^ceil(log2 N)`` and transformed twice, each
  transform written in torch as ``log2 n`` stages of adds and subtracts
  (:func:`compressors.fosgd.fwht_staged`). Their ``x copy`` column says how far they are
  from a copy, which does no transform;
* the deterministic dense ones: a plain copy.

``ratio`` is compressor seconds / bound seconds (1 = as fast as the bound), ``x copy`` the
compressor's seconds over a plain copy's of the same row, ``GB/s`` the input bytes (``4 N``) per
second. The target (issue 35): within 3x of a copy, or within 2x of the bound where the bound is
not the copy (a draw or the torch primitives above). ``python -m benchmarks.compressors_bench``
prints the table.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.clock import interleaved_medians
from benchmarks.progress import Tracker
from comm import SimulatedComm
from compressors import parse_spec
from compressors.fosgd import fwht_staged, padded_dim
from compressors.rank_r import matrix_shape
from compressors.registry import COMPRESSORS
from streams import Streams

__all__ = ["run", "SIZES", "QUICK_SIZES", "table"]

SIZES = (10**6, 25 * 10**6)
QUICK_SIZES = (10**6,)  # at 2.5 * 10^7 some quantizers take 10-20 s a call on 2 cores
SKIP = ("compose",)  # a container of other compressors: measured through its parts
# one uniform per entry, in the row's dtype
DRAWS = ("natural", "qsgd", "natural-dithering", "terngrad", "ssq", "msq", "sparse-dithering")
DRAWS += ("gennorm",)
#: a randomized Walsh-Hadamard rotation of the padded row there and back
ROTATIONS = ("fo-sgd", "thc")
TARGET_COPY = 3.0  # x a copy of the row
TARGET_RATIO = 2.0  # x the bound, where the bound is a draw or a primitive


def _spec(name: str, N: int) -> str:
    k = max(1, N // 100)
    if name in ("topk", "randk"):
        return f"{name}:k={k}"
    if name == "scaled":
        return f"scaled:randk:k={k}"
    return name


def _primitive(name: str, x: torch.Tensor, k: int, gen: torch.Generator):
    """What bounds the compressor's job on one row (see the module docstring)."""
    if name == "topk":

        def fn():
            idx = torch.topk(x.abs(), k, dim=1, sorted=False).indices
            return torch.zeros_like(x).scatter_(1, idx, x.gather(1, idx))

        return "torch.topk+scatter", fn
    if name in ("randk", "permk", "scaled"):
        kk = x.shape[1] if name == "permk" else k  # Perm-K with n = 1 keeps every entry

        def fn():
            idx = torch.randperm(x.shape[1], generator=gen, device=x.device)[:kk]
            vals = x.index_select(1, idx) * (x.shape[1] / kk)
            return torch.zeros_like(x).index_copy_(1, idx, vals)

        return "randperm+index_select+scatter", fn
    if name in DRAWS:
        streams = Streams.for_nodes(0, [0], device=x.device)
        return "uniform draw", lambda: streams.uniform(x.shape[1], dtype=torch.float32)
    if name == "countsketch":  # the hashes drawn, the table summed, the estimate read back
        C = parse_spec(name)
        rows, cols = C.rows, C.width(x.shape[1])

        def fn():
            b = torch.randint(cols, (rows, x.shape[1]), generator=gen, device=x.device)
            s = torch.randint(2, (rows, x.shape[1]), generator=gen, device=x.device)
            s = s.to(x.dtype).mul_(2).sub_(1)
            table = torch.zeros(rows, cols, dtype=x.dtype, device=x.device)
            table.scatter_add_(1, b, s * x)
            return (s * table.gather(1, b)).mean(dim=0)

        return "randint+scatter_add+gather", fn
    if name == "spherical":  # the shared codebook drawn and every codeword's product
        K = 1 << parse_spec(name).k
        word = torch.empty_like(x)

        def fn():
            best = (-1.0, 0)
            for j in range(K):
                word.normal_(generator=gen)
                cos = float((word * x).sum().abs() / word.norm())
                best = max(best, (cos, j))
            return best

        return f"{K} x (randn+dot)", fn
    if name in ROTATIONS:  # the padded row transformed there and back, stage by stage
        n = padded_dim(x.shape[1])

        def fn():
            y = torch.nn.functional.pad(x, (0, n - x.shape[1]))
            return fwht_staged(fwht_staged(y))

        return "2 x torch WHT", fn
    if name == "rank":  # one power step on the near-square view: M q, M^T p and p r^T
        m1, m2 = matrix_shape(x.shape[1])
        r = min(parse_spec(name).r, m2)
        mat = torch.nn.functional.pad(x, (0, m1 * m2 - x.shape[1])).view(1, m1, m2)
        q = torch.randn(1, m2, r, generator=gen, device=x.device)

        def fn():
            p = torch.bmm(mat, q)
            p = p / p.norm(dim=1, keepdim=True)  # r = 1 by default: one column to orthonormalize
            rt = torch.bmm(mat.transpose(1, 2), p)
            return torch.bmm(p, rt.transpose(1, 2)).reshape(1, -1)[:, : x.shape[1]]

        return "power step (3 x bmm)", fn
    if name == "mlmc":  # the increments' norms need the magnitudes ranked
        return "torch.sort", lambda: torch.sort(x.abs(), dim=1, descending=True)
    return "copy", lambda: x.clone()


def _target(name: str, row: dict) -> str:
    ratio, copies = row["compzoo_s"] / row["primitive_s"], row["compzoo_s"] / row["copy_s"]
    if copies <= TARGET_COPY:
        return "ok"
    if row["primitive"] != "copy" and ratio <= TARGET_RATIO:
        return "ok (bound)"
    if row["primitive"] == "copy":
        return f"MISS (> {TARGET_COPY:g}x copy)"
    return f"MISS (> {TARGET_COPY:g}x copy and > {TARGET_RATIO:g}x bound)"


def run(quick: bool = False, device: str = "cpu", track=None) -> list[dict]:
    """One row per (compressor, size); ``track`` (:class:`benchmarks.progress.Tracker`) hears
    of each as a case."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    track = track or Tracker()
    sizes = QUICK_SIZES if quick else SIZES
    names = [name for name in COMPRESSORS if name not in SKIP]
    track.plan(len(sizes) * len(names))
    rows = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for N in sizes:
        x = torch.randn(1, N, generator=gen, device=dev)
        k = max(1, N // 100)
        repeats = 3 if quick else 5

        def copy(x=x):
            return x.clone()

        for name in names:
            spec = _spec(name, N)
            track.case(f"{spec}, {N:.3g} elements")
            row = {"compressor": spec, "elements": N}
            try:
                C = parse_spec(spec).bind(1)
                comm = SimulatedComm(1, seed=0)

                def ours(C=C, comm=comm, x=x):
                    return C.decode(C.encode(x, comm.rng_for(C, 0)))

                ours()
            except (ValueError, RuntimeError) as e:
                rows.append({**row, "error": str(e)})
                track.rows(rows[-1:])
                continue
            prim, pfn = _primitive(name, x, k, gen)
            # the copy, the compressor and its primitive in turn, round by round
            t_copy, t_ours, t_prim = interleaved_medians((copy, ours, pfn), repeats, sync)
            row["copy_s"] = t_copy
            if prim == "uniform draw" and t_copy > t_prim:
                prim, t_prim = "copy", t_copy
            row.update(compzoo_s=t_ours, primitive=prim, primitive_s=t_prim)
            row["gb_s"] = 4 * N / t_ours / 1e9
            row["target_speed"] = _target(name, row)
            rows.append(row)
            track.rows(rows[-1:])
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per compressor, ms at each size, GB/s, the bound and its ms, the ratio."""
    head = ["compressor", "elements", "ms", "GB/s", "x copy", "bound", "bound ms", "ratio",
            "target"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            cells = [r["compressor"], str(r["elements"]), "error: " + r["error"]] + [""] * 6
        else:
            cells = [
                r["compressor"],
                f"{r['elements']:.3g}",
                f"{1e3 * r['compzoo_s']:.3g}",
                f"{r['gb_s']:.2f}",
                f"{r['compzoo_s'] / r['copy_s']:.2f}",
                r["primitive"],
                f"{1e3 * r['primitive_s']:.3g}",
                f"{r['compzoo_s'] / r['primitive_s']:.2f}x",
                r["target_speed"],
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^6 elements only, fewer repeats")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args(argv)
    print(table(run(args.quick, args.device)))


if __name__ == "__main__":
    main()
