"""Run a function on ``nproc`` gloo processes of this machine and collect what each returns.

``run_ddp(nproc, fn, *args)`` spawns ``nproc`` processes (``torch.multiprocessing``, spawn), each
of which joins a fresh gloo group on a free localhost port and calls ``fn(rank, world, *args)``;
the return values (picklable) come back in rank order. ``fn`` must be importable at module level.
A process that raises makes ``run_ddp`` raise with that traceback.

``train_steps(model_fn, hook_spec, steps, seed)`` is a ready-made ``fn`` body: a small model
wrapped in DDP with the hook, trained for a few SGD steps on per-rank data; it returns the
parameters after each step and the hook's statistics.
"""

from __future__ import annotations

import io
import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["free_port", "run_ddp", "tiny_model", "train_steps"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, fn, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        out = fn(rank, world, *args)
        buf = io.BytesIO()
        torch.save(out, buf)  # bytes, not shared-memory tensors: the worker may exit first
        queue.put((rank, True, buf.getvalue()))
    except BaseException:  # noqa: BLE001 - the traceback goes back to the parent
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ddp(nproc: int, fn, *args, timeout: float = 120.0) -> list:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, nproc, port, fn, args, queue)) for r in range(nproc)
    ]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(nproc):
            rank, ok, out = queue.get(timeout=timeout)
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{out}")
            results[rank] = torch.load(io.BytesIO(out), weights_only=False)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(nproc)]


def tiny_model(seed: int = 0) -> torch.nn.Module:
    """Two linear layers (matrices 16x12 and 4x16, with biases): small, with 2-D weights so
    low-rank hooks have matrices to factor."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def train_steps(rank, world, hook_spec, steps=3, seed=0, lr=0.1, bucket_cap_mb=25):
    """SGD steps of :func:`tiny_model` in DDP with ``hook_spec`` (None: DDP's default); each rank
    has its own data. Returns ``{"params": [flat params after each step], "grads": [...],
    "stats": hook stats dict}``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from systems.hooks import make_hook

    model = DDP(tiny_model(seed), bucket_cap_mb=bucket_cap_mb)
    hook = None
    if hook_spec is not None:
        hook = make_hook(hook_spec).register(model)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    params, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
        opt.step()
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]).clone())
    stats = vars(hook.stats).copy() if hook is not None else {}
    return {"params": params, "grads": grads, "stats": stats}


def record_steps(rank: int, spec: str, steps: int, track_order: bool = False):
    """SGD steps of :func:`tiny_model` in DDP with the hook ``spec``, recording per step this
    rank's raw local gradient (``raw``), the hook's decoded gradient (``dec``), the payload
    bytes (``sent``) and, with ``track_order``, the parameters' order in each bucket (``order``:
    DDP rebuilds its buckets after step 1). Returns ``(record, hook, params)`` so a test can add
    the hook's state."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from systems.hooks import make_hook

    model = DDP(tiny_model(0))
    hook = make_hook(spec).register(model)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    rec: dict[str, list] = {"raw": [], "dec": [], "sent": [], "order": []}
    if track_order:
        inner = hook.reduce

        def reduce(bucket):
            rec["order"].append(
                [next(i for i, p in enumerate(params) if p is q) for q in bucket.parameters()]
            )
            return inner(bucket)

        hook.reduce = reduce
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model.module(X), y)
        rec["raw"].append(torch.cat([q.flatten() for q in torch.autograd.grad(loss, params)]))
        opt.zero_grad()
        before = hook.stats.sent_bytes
        torch.nn.functional.cross_entropy(model(X), y).backward()
        rec["sent"].append(hook.stats.sent_bytes - before)
        rec["dec"].append(torch.cat([p.grad.flatten() for p in params]).clone())
        opt.step()
    return rec, hook, params
