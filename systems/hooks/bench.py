"""Codec cost of the hooks on one device: ``python -m systems.hooks.bench``.

::

    python -m systems.hooks.bench --device cuda --model resnet18 \\
        --hooks powersgd:rank=4,fp16,comp:topk:ratio=0.01,torch-powersgd:rank=4,torch-fp16
    python -m systems.hooks.bench --device cpu --model cnn --repeats 3 --out bench.json

One process, a process group of world size 1 (gloo on CPU, NCCL on CUDA, over an in-memory
``HashStore``), so every hook runs its real code path on the model's real gradient buckets
while its collectives cost next to nothing: what is left is the hook's local work (plus a
world-size-1 collective's copy). For each hook, the model (``problems.nets``: ``mlp``, ``cnn``,
``resnet18``, initialised by :func:`problems.torch_model.init_flat` from ``--seed``) is wrapped in
DDP (optionally in ``--groups`` fusion buckets, :mod:`systems.hooks.fusion`) and trained on one
fixed random batch for ``--warmup`` iterations, whose timings are dropped (DDP rebuilds its
buckets after the first, and stateful hooks start compressing later: PyTorch's PowerSGD here
starts at iteration 2), then ``--repeats`` timed ones. Each bucket's hook call is timed from the
call to its future's completion, the device synchronised at both ends; an iteration's hook time
is the sum over its buckets, and the table gives the median and the minimum over the repeats
(the JSON also per bucket and per repeat), with the median encode/decode seconds and payload
bytes a :class:`CommHook` reports. On a loaded CPU a world-size-1 gloo collective now and then
waits milliseconds for its worker thread; the minimum is then the steadier figure.

Hooks are registry specs (:func:`systems.hooks.registry.make_hook`); a name the registry does
not know (a hook not written yet) is skipped with a message. PyTorch's own hooks are timed the
same way: ``torch-allreduce`` (``default_hooks.allreduce_hook``), ``torch-fp16``
(``fp16_compress_hook``), ``torch-bf16`` (``bf16_compress_hook``) and
``torch-powersgd:rank=R[,start=S,min_rate=M]`` (``powerSGD_hook`` with a ``PowerSGDState`` of
``matrix_approximation_rank=R``, ``start_powerSGD_iter=S`` (default 2, the smallest it accepts
with error feedback), ``min_compression_rate=M`` (PyTorch's default 2), error feedback and warm
start on). ``--hooks`` is a comma-separated list in which a piece that continues the previous
spec's parameters (``rank=4`` in ``powersgd:rank=4,fp16``) is joined to it; ``;`` always
separates.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

__all__ = ["bench", "main", "resolve_device", "split_hooks"]

log = logging.getLogger("compzoo.hooks.bench")

DEFAULT_HOOKS = (
    "allreduce,fp16,bf16,comp:topk:ratio=0.01,powersgd:rank=4,"
    "torch-allreduce,torch-fp16,torch-powersgd:rank=4"
)
TORCH_HOOKS = ("torch-allreduce", "torch-fp16", "torch-bf16", "torch-powersgd")
MODELS = ("mlp", "cnn", "resnet18")


def resolve_device(device: torch.device | str) -> torch.device:
    """``device`` with a CUDA index filled in; ``ValueError`` for CUDA without a CUDA device."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise ValueError(f"--device {device}: allowed: cpu, cuda, cuda:N")
    return dev


def split_hooks(text: str) -> list[str]:
    """``"powersgd:rank=4,start=2,fp16"`` -> ``["powersgd:rank=4,start=2", "fp16"]``.

    A comma-separated piece starts a new spec unless it is ``key=value`` with no ``:`` before
    its ``=`` (then it is one more parameter of the spec before it); ``;`` always separates.
    """
    specs: list[str] = []
    for group in text.split(";"):
        current: list[str] = []
        for piece in (p.strip() for p in group.split(",")):
            if not piece:
                continue
            key, eq, _ = piece.partition("=")
            if current and eq and ":" not in key:
                current.append(piece)
                continue
            if current:
                specs.append(",".join(current))
            current = [piece]
        if current:
            specs.append(",".join(current))
    return specs


def build_model(name: str, device: torch.device, seed: int) -> tuple[torch.nn.Module, tuple]:
    """The network on ``device``, initialised from ``seed``, and its input shape (no batch)."""
    from problems import nets
    from problems.torch_model import init_flat

    if name == "mlp":
        net, shape = nets.mlp(3 * 32 * 32, 256, 10), (3, 32, 32)
    elif name == "cnn":
        net, shape = nets.cnn(3, 10, side=32), (3, 32, 32)
    elif name == "resnet18":
        net, shape = nets.resnet18(10), (3, 32, 32)
    else:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    flat = init_flat(net, seed)
    net = net.to_empty(device=device)
    torch.nn.utils.vector_to_parameters(flat.to(device, torch.float32), net.parameters())
    return net, shape


def _torch_hook(spec: str) -> tuple[Callable, object]:
    """PyTorch's hook and its state for a ``torch-...`` spec."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    name, _, rest = spec.partition(":")
    kwargs: dict[str, int] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq or name != "torch-powersgd" or key not in ("rank", "start", "min_rate"):
            raise ValueError(
                f"bad parameter {item!r} in {spec!r}; torch-powersgd takes rank, start and "
                "min_rate, the other torch- hooks nothing"
            )
        kwargs[key] = int(raw)
    if name == "torch-allreduce":
        return default_hooks.allreduce_hook, None
    if name == "torch-fp16":
        return default_hooks.fp16_compress_hook, None
    if name == "torch-bf16":
        return default_hooks.bf16_compress_hook, None
    state = psgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=kwargs.get("rank", 1),
        start_powerSGD_iter=kwargs.get("start", 2),
        min_compression_rate=kwargs.get("min_rate", 2),
    )
    return psgd.powerSGD_hook, state


def _resolve(spec: str):
    """``(fn, state, None)`` for PyTorch's hooks, ``(None, None, hook)`` for a registry hook,
    or a reason string when the hook is not available."""
    from systems.hooks.registry import hook_names, make_hook

    name = spec.partition(":")[0]
    if name in TORCH_HOOKS:
        fn, state = _torch_hook(spec)
        return fn, state, None
    if name not in hook_names():
        return f"hook {name!r} is not available (known: {', '.join(hook_names())})"
    return None, None, make_hook(spec)


def bench_one(
    spec: str,
    model_name: str,
    device: torch.device,
    *,
    batch: int,
    warmup: int,
    repeats: int,
    seed: int,
    groups: int | None,
) -> dict:
    """Time one hook (see the module docstring); a dict for the JSON record."""
    from comm.hooks import settle
    from systems.hooks.fusion import wrap_ddp

    got = _resolve(spec)
    if isinstance(got, str):
        log.warning("skipping %s: %s", spec, got)
        return {"spec": spec, "status": "skipped", "reason": got}
    fn, state, hook = got
    net, shape = build_model(model_name, device, seed)
    ddp_kwargs = {"device_ids": [device.index or 0]} if device.type == "cuda" else {}
    model, _ = wrap_ddp(net, None, groups, **ddp_kwargs)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    calls: list[tuple[int, int, float]] = []

    def timing(call: Callable) -> Callable:
        def timed(*args):
            bucket = args[-1]
            sync()
            t0 = time.perf_counter()
            fut = call(*args)
            fut.wait()
            sync()
            calls.append((bucket.index(), bucket.buffer().numel(), time.perf_counter() - t0))
            return fut

        return timed

    if hook is None:
        torch_fn = timing(fn)

        def torch_hook(state, bucket):  # DDP reads the parameter's name
            return torch_fn(state, bucket)

        model.register_comm_hook(state, torch_hook)
    else:
        hook.register(model)
        hook.reduce = timing(hook.reduce)  # what the registered dispatcher calls
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(batch, *shape, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    iters: list[dict] = []
    for it in range(warmup + repeats):
        calls.clear()
        before = (0.0, 0.0, 0) if hook is None else _stats(hook)
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(X), y).backward()
        sync()
        if it < warmup:
            continue
        after = (0.0, 0.0, 0) if hook is None else _stats(hook)
        iters.append(
            {
                "hook_s": sum(c[2] for c in calls),
                "buckets": sorted(calls),
                "encode_s": after[0] - before[0],
                "decode_s": after[1] - before[1],
                "sent_bytes": after[2] - before[2],
            }
        )
    settle()  # the group's thread done with the last bucket before the model goes
    del model, net
    gc.collect()
    per_bucket = list(zip(*[[c[2] for c in i["buckets"]] for i in iters], strict=True))
    out = {
        "spec": spec,
        "status": "ok",
        "buckets": len(iters[-1]["buckets"]),
        "bucket_numel": [c[1] for c in iters[-1]["buckets"]],
        "hook_s": statistics.median(i["hook_s"] for i in iters),
        "hook_s_min": min(i["hook_s"] for i in iters),
        "hook_s_all": [i["hook_s"] for i in iters],
        "per_bucket_s": [statistics.median(b) for b in per_bucket],
    }
    if hook is not None:
        out.update(
            encode_s=statistics.median(i["encode_s"] for i in iters),
            decode_s=statistics.median(i["decode_s"] for i in iters),
            encode_s_all=[i["encode_s"] for i in iters],
            decode_s_all=[i["decode_s"] for i in iters],
            sent_bytes=iters[-1]["sent_bytes"],
            allreducible=hook.allreducible,
        )
    return out


def _stats(hook) -> tuple[float, float, int]:
    return hook.stats.encode_s, hook.stats.decode_s, hook.stats.sent_bytes


def bench(
    hooks: Sequence[str],
    model: str = "cnn",
    device: str = "cpu",
    *,
    batch: int = 8,
    warmup: int = 3,
    repeats: int = 5,
    seed: int = 0,
    groups: int | None = None,
) -> dict:
    """Time every hook of ``hooks`` on ``model`` (see the module docstring); the JSON record.

    Starts (and ends) a world-size-1 process group unless one is already initialised.
    """
    if warmup < 2:
        raise ValueError(f"warmup must be >= 2 (DDP rebuilds its buckets after one), got {warmup}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")
    dev = resolve_device(device)
    own = not dist.is_initialized()
    if own:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    elif dist.get_world_size() != 1:
        raise ValueError(f"the bench runs in one process; the group has {dist.get_world_size()}")
    try:
        kw = dict(batch=batch, warmup=warmup, repeats=repeats, seed=seed, groups=groups)
        results = [bench_one(spec, model, dev, **kw) for spec in hooks]
    finally:
        if own:
            dist.destroy_process_group()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return {
        "device": str(dev),
        "device_name": name,
        "model": model,
        "batch": batch,
        "warmup": warmup,
        "repeats": repeats,
        "seed": seed,
        "groups": groups,
        "torch": torch.__version__,
        "results": results,
    }


def table(record: dict) -> str:
    """The record as a fixed-width text table (milliseconds per iteration, medians)."""
    head = f"{'hook':<34} {'buckets':>7} {'hook ms':>9} {'min ms':>8} {'encode ms':>10} "
    head += f"{'decode ms':>10} "
    lines = [head + f"{'sent KiB':>10}", "-" * (len(head) + 10)]
    for r in record["results"]:
        if r["status"] != "ok":
            lines.append(f"{r['spec']:<34} skipped: {r['reason']}")
            continue

        def ms(key: str, r=r) -> str:
            return f"{1e3 * r[key]:.3f}" if key in r else "-"

        kib = f"{r['sent_bytes'] / 1024:.1f}" if "sent_bytes" in r else "-"
        lines.append(
            f"{r['spec']:<34} {r['buckets']:>7} {ms('hook_s'):>9} {ms('hook_s_min'):>8} "
            f"{ms('encode_s'):>10} {ms('decode_s'):>10} {kib:>10}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systems.hooks.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    ap.add_argument("--model", default="cnn", choices=MODELS)
    ap.add_argument("--hooks", default=DEFAULT_HOOKS, help=f"specs (default {DEFAULT_HOOKS})")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", type=int, default=None, help="fusion groups (default: DDP's)")
    ap.add_argument("--out", default=None, help="write the JSON record here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        record = bench(
            split_hooks(args.hooks),
            args.model,
            args.device,
            batch=args.batch,
            warmup=args.warmup,
            repeats=args.repeats,
            seed=args.seed,
            groups=args.groups,
        )
    except ValueError as exc:  # bad input: the message names the value and what is allowed
        sys.stderr.write(f"error: {exc}\n")
        return 2
    sys.stdout.write(table(record) + "\n")
    if args.out:
        try:
            with open(args.out, "w") as f:
                json.dump(record, f, indent=1)
        except OSError as exc:
            sys.stderr.write(f"error: cannot write --out {args.out!r}: {exc.strerror or exc}\n")
            return 2
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # gloo with Python comm hooks may abort at interpreter teardown after the work is done
    # (see comm.ddp_hook); the results are written by now
    os._exit(rc)
