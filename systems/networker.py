"""One worker of :mod:`systems.netstudy`: DDP training over gloo, timed, for each method in turn.

Launched by ``torchrun`` inside a worker's network namespace (``GLOO_SOCKET_IFNAME=eth0``); the
study's driver passes the arguments. For each method (``fp32``: DDP's own C++ all-reduce;
``fp16``: PyTorch's ``fp16_compress_hook``, the 16-bit baseline; anything else: a
:mod:`systems.hooks` spec), with the same seed and initial model:

1. ``--warmup`` iterations, or more for a hook that sends uncompressed before its
   ``start_iter`` (DDP rebuilds its buckets after the first; the timed steps are the steady
   state; a hook's periodic refreshes, such as GreedyLore's every 200 steps, fall outside them);
2. **compute**: ``--iters`` iterations of forward, backward and optimizer step under
   ``model.no_sync()`` (no communication, no hook), the median kept; with ``--timing
   interleaved`` (the default) one before each full iteration, so that both see the same machine
   load, with ``sequential`` all of them before the full iterations (the local steps let the
   replicas drift apart by a few local updates, which changes no timing);
3. **iteration**: ``--iters`` full iterations, each started after a barrier (so workers start
   together and a slow one's wait is not counted as its compute); the median over iterations of
   the slowest worker's time is kept; the hook's encode/decode seconds and payload bytes per
   iteration, and its collectives per kind with their bytes (``collectives``; see
   ``collectives_counted``), come from :class:`systems.hooks.HookStats` (also the slowest
   worker's);
   communication is ``iteration - compute - encode - decode`` (the part not hidden behind
   compute), floored at zero;
4. with ``--train-iters``: a fresh model trained for up to that many iterations, the test
   accuracy (rank 0) evaluated every ``--eval-every`` iterations, the first iteration at which it
   reaches ``--target-acc`` recorded.

Before the methods it calibrates the link: the median time of all-reducing ``2^k`` float32
entries for several ``k`` is fitted to the ring model (:func:`fit_link`) to give the effective
bandwidth and latency. Rank 0 writes everything as JSON to ``--out``.

Data: for ``cnn`` and ``resnet18``, scikit-learn's digits (1,797 8x8 images; a seeded 80/20
split), each worker a contiguous block of the training part. ``cnn`` is
:func:`problems.nets.cnn` on the 8x8 images; ``resnet18`` is :class:`problems.nets.ResNet18` on
the images repeated to 3 channels and scaled up to 32x32 (nearest). ``mlp`` is
:func:`systems.teacher.wide_mlp` (4.28 M parameters) on :func:`systems.teacher.teacher_data`
(labels of a fixed random teacher network, generated from the seed), each worker a contiguous
block of the 16,384 training samples, tested on the 2,048 held-out ones.

Emulated latency (``--emulate-latency-us D``, for kernels without netem): every collective the
workers issue through ``torch.distributed`` (all-reduce, all-gather, broadcast, reduce-scatter)
completes ``steps * D`` later than the network delivers it, ``steps`` being the sequential
messages of its ring algorithm, as in :mod:`systems.model`'s costs (``2(p-1)`` for all-reduce,
``p-1`` for the others): a synchronous call sleeps after it returns, an asynchronous one's
``wait()`` and future complete that much later (the sleep runs on the thread that completes
it, so the next collective queued behind it waits too, as a ring's next message would). The
issuing thread is not held, so compute still overlaps the delayed collective. DDP's own C++
all-reduce cannot be reached from Python, so under emulation ``fp32`` runs PyTorch's
``allreduce_hook`` (the same all-reduce, issued from Python). Barriers are not delayed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["main"]


def _data(model: str, rank: int, world: int, seed: int):
    from sklearn.datasets import load_digits

    if model == "mlp":
        from systems.teacher import teacher_data

        (X, y), test = teacher_data(seed)
        lo, hi = rank * len(y) // world, (rank + 1) * len(y) // world
        return (X[lo:hi], y[lo:hi]), test

    X, y = load_digits(return_X_y=True)
    perm = np.random.RandomState(seed).permutation(len(y))
    X, y = X[perm] / 16.0, y[perm]
    cut = int(0.8 * len(y))
    X = torch.tensor(X, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y, dtype=torch.long)
    if model == "resnet18":
        X = X.repeat(1, 3, 1, 1).repeat_interleave(4, 2).repeat_interleave(4, 3)
    lo, hi = rank * cut // world, (rank + 1) * cut // world
    return (X[lo:hi], y[lo:hi]), (X[cut:], y[cut:])


def _model(name: str, seed: int) -> torch.nn.Module:
    from problems.nets import ResNet18, cnn
    from systems.teacher import wide_mlp

    torch.manual_seed(seed)
    m = {"cnn": lambda: cnn(1, 10), "mlp": wide_mlp}.get(name, lambda: ResNet18(10, 32, 3))()
    m = m.to_empty(device="cpu")
    torch.manual_seed(seed)
    for mod in m.modules():
        if hasattr(mod, "reset_parameters"):
            mod.reset_parameters()
    return m


def _batches(X, y, batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y) - batch + 1, batch):
            idx = perm[i : i + batch]
            yield X[idx], y[idx]


def _ddp(args, spec: str):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from systems.hooks import make_hook

    model = DDP(_model(args.model, args.seed), bucket_cap_mb=args.bucket_mb)
    hook = None
    if spec == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif spec == "fp32" and args.emulate_latency_us > 0:  # the C++ all-reduce is out of reach
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif spec != "fp32":
        hook = make_hook(spec).register(model)
    momentum = 0.0 if getattr(hook, "momentum_in_hook", False) else args.momentum
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=momentum)
    return model, hook, opt


#: sequential messages of each collective's ring algorithm on ``p`` workers
LATENCY_STEPS = {
    "all_reduce": lambda p: 2 * (p - 1),
    "all_gather": lambda p: p - 1,
    "all_gather_into_tensor": lambda p: p - 1,
    "broadcast": lambda p: p - 1,
    "reduce_scatter": lambda p: p - 1,
    "reduce_scatter_tensor": lambda p: p - 1,
}


class _Delayed:
    """A collective's work handle whose completion comes ``delay`` seconds late."""

    def __init__(self, work, delay: float) -> None:
        self._work, self._delay = work, delay

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        time.sleep(self._delay)
        return out

    def get_future(self) -> torch.futures.Future:
        delay = self._delay

        def late(fut):
            time.sleep(delay)
            return fut.value()

        return self._work.get_future().then(late)

    def __getattr__(self, name: str):
        return getattr(self._work, name)


def emulate_latency(delay_s: float, world: int) -> dict[str, float]:
    """Delay every collective of :data:`LATENCY_STEPS` by ``steps(world) * delay_s`` (see the
    module docstring); returns the delay applied per kind. Undone only by a new process."""
    applied = {}
    for name, steps in LATENCY_STEPS.items():
        orig = getattr(dist, name, None)
        if orig is None or delay_s <= 0 or world < 2:
            continue
        d = steps(world) * delay_s
        applied[name] = d

        def delayed(*args, _orig=orig, _d=d, **kwargs):
            work = _orig(*args, **kwargs)
            if kwargs.get("async_op", False):
                return _Delayed(work, _d)
            time.sleep(_d)
            return work

        setattr(dist, name, delayed)
    return applied


def _step(model, opt, batch) -> None:
    x, y = batch
    opt.zero_grad(set_to_none=False)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def _collectives(hook, stats: dict, n: int, sent: float) -> dict[str, dict[str, float | None]]:
    """Per kind of collective (``comm.hooks.KINDS``), how many the hook issued and the payload
    bytes it handed them, per iteration (the slowest worker's, as ``sent_bytes``). Without a
    hook (fp32, PyTorch's fp16 hook) DDP's all-reduces are not counted, their bytes are the
    model's size (declared)."""
    from comm.hooks import KINDS

    if hook is None:
        return {"allreduce": {"count": None, "bytes": _slowest([sent])}}
    return {
        kind: {
            "count": _slowest([stats.get(f"{kind}_count", 0) / n]),
            "bytes": _slowest([stats.get(f"{kind}_bytes", 0) / n]),
        }
        for kind in KINDS
    }


def _slowest(values: list[float]) -> float:
    t = torch.tensor([statistics.median(values)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def fit_link(nbytes, seconds, p: int) -> tuple[float, float]:
    """``(B in Gbit/s, alpha in s)`` of the ring all-reduce model ``2(p-1)/p M/B + 2(p-1)
    alpha``: ``B`` by least squares on the messages of at least 1 MiB (the bandwidth-bound
    ones, the size of gradient buckets; below that the shaper's token bucket lets a burst pass
    at line rate), ``alpha`` from the messages under 64 KiB, the fastest of them with its
    bandwidth term removed (the others carry scheduling noise), floored at zero."""
    from systems.validate import fit_collective

    m, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    big = m >= 2**20
    if big.sum() < 2:
        raise ValueError("fit_link needs two or more messages of at least 1 MiB")
    gbps, _ = fit_collective(m[big], t[big], p)
    small = m < 2**16
    if not small.any():
        small = m == m.min()
    rest = t[small] - 2 * (p - 1) / p * m[small] / (gbps * 1e9 / 8)
    return gbps, max(0.0, float(rest.min()) / (2 * (p - 1)))


def _calibrate(repeats: int = 5) -> dict:
    sizes = [2**k for k in (4, 12, 16, 18, 20, 22)]
    secs = []
    for n in sizes:
        x = torch.ones(n)
        dist.all_reduce(x)
        ts = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            ts.append(time.perf_counter() - t0)
        secs.append(_slowest(ts))
    p = dist.get_world_size()
    gbps, alpha = fit_link([4 * n for n in sizes], secs, p) if p > 1 else (0.0, 0.0)
    return {"sizes": sizes, "seconds": secs, "gbps": gbps, "alpha_s": alpha}


def _measure(args, spec: str, train, test) -> dict:
    model, hook, opt = _ddp(args, spec)
    rank = dist.get_rank()
    batches = _batches(*train, args.batch, args.seed + rank)
    # steady state: past DDP's bucket rebuild and the hook's uncompressed start (start_iter)
    warmup = max(args.warmup, int(getattr(hook, "start_iter", 0)) + 1)
    for _ in range(warmup):
        _step(model, opt, next(batches))
    compute: list[float] = []
    iters: list[float] = []

    def local_step() -> None:  # forward, backward and step without communication or hook
        dist.barrier()
        t0 = time.perf_counter()
        with model.no_sync():
            _step(model, opt, next(batches))
        compute.append(time.perf_counter() - t0)

    def full_step() -> None:
        dist.barrier()
        t0 = time.perf_counter()
        _step(model, opt, next(batches))
        iters.append(time.perf_counter() - t0)

    if args.timing == "sequential":  # all compute steps, then all full steps
        for _ in range(args.iters):
            local_step()
        if hook is not None:
            hook.stats.reset()
        for _ in range(args.iters):
            full_step()
    else:  # interleaved: each full step right after a compute step, under the same load
        if hook is not None:
            hook.stats.reset()
        for _ in range(args.iters):
            local_step()
            full_step()
    n = args.iters
    stats = vars(hook.stats) if hook is not None else {}
    enc = stats.get("encode_s", 0.0) / n
    dec = stats.get("decode_s", 0.0) / n
    sizes = [p.numel() for p in model.parameters()]
    if spec in ("fp32", "fp16"):
        sent = sum(sizes) * (4 if spec == "fp32" else 2)
    else:
        sent = stats.get("sent_bytes", 0) / n
    out = {
        "method": spec,
        "allreducible": True if hook is None else bool(hook.allreducible),
        "compute_s": _slowest(compute),
        "iter_s": _slowest(iters),
        "encode_s": _slowest([enc]),
        "decode_s": _slowest([dec]),
        "sent_bytes": _slowest([float(sent)]),
        "collectives": _collectives(hook, stats, n, float(sent)),
        "collectives_counted": "declared" if hook is None else str(stats.get("counted")),
        "sizes": sizes,
    }
    out["comm_s"] = max(0.0, out["iter_s"] - out["compute_s"] - out["encode_s"] - out["decode_s"])
    if args.train_iters > 0:
        out.update(_accuracy(args, spec, train, test))
    return out


def _accuracy(args, spec: str, train, test) -> dict:
    model, hook, opt = _ddp(args, spec)
    rank = dist.get_rank()
    batches = _batches(*train, args.batch, args.seed + rank)
    reached, acc = -1, 0.0
    for it in range(1, args.train_iters + 1):
        model.train()
        _step(model, opt, next(batches))
        if it % args.eval_every == 0:
            with torch.no_grad():
                model.eval()
                acc = float((model.module(test[0]).argmax(1) == test[1]).float().mean())
            flag = torch.tensor([acc >= args.target_acc], dtype=torch.int32)
            dist.broadcast(flag, 0)
            if flag.item():
                reached = it
                break
    return {"iters_to_target": reached, "final_acc": acc, "target_acc": args.target_acc,
            "trained_iters": it}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m systems.networker")
    ap.add_argument("--model", choices=("cnn", "resnet18", "mlp"), default="cnn")
    ap.add_argument("--method", action="append", required=True, help="fp32, fp16 or a hook spec")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--timing", choices=("sequential", "interleaved"), default="interleaved")
    ap.add_argument("--train-iters", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--target-acc", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--emulate-latency-us", type=float, default=0.0, help="delay per worker-to-worker message"
    )
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    import datetime

    args = build_parser().parse_args(argv)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    train, test = _data(args.model, rank, world, args.seed)
    emulated = emulate_latency(1e-6 * args.emulate_latency_us, world)
    result = {"workers": world, "model": args.model, "threads": torch.get_num_threads(),
              "emulated_latency_s": emulated, "calibration": _calibrate(),
              "methods": []}  # fmt: skip
    for spec in args.method:
        result["methods"].append(_measure(args, spec, train, test))
        if rank == 0:  # written after each method: a failure later keeps what was measured
            tmp = args.out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(result, fh, indent=1)
            os.replace(tmp, args.out)
    dist.barrier()
    dist.destroy_process_group()
    # gloo with Python comm hooks may abort at interpreter teardown: leave without it
    os._exit(0)


if __name__ == "__main__":
    main()
