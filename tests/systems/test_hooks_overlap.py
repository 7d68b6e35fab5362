"""No hook waits for its collectives inside ``reduce``.

Two gloo ranks, two buckets. Rank 0 hands both buckets to the hook, checks that ``reduce``
returned and that neither future is done, and only then signals rank 1 through the store; rank 1
waits for the signal before it hands over its buckets. A hook that waits inside ``reduce`` for a
collective (which cannot complete before rank 1 joins) never returns on rank 0: the test gives it
``BLOCK_S`` seconds, then signals anyway so the ranks finish, and reports it as blocking. Both
ranks must end with the same averaged gradients. The negative control wraps one hook so that it
waits for its future inside ``reduce`` (what the hooks did before), and must be reported
blocking.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist

from comm.hooks import CommHook
from systems.hooks import hook_names, make_hook
from tests.systems.ddp_harness import run_ddp, tiny_model

pytestmark = pytest.mark.dist

BLOCK_S = 10.0
BLOCKING_CONTROL = "blocking:fo-sgd"


class FakeBucket:
    """What the hooks read of a ``GradBucket``: a flat buffer, per-parameter views of it, the
    parameters, the index and whether it is the step's last bucket."""

    def __init__(self, index: int, params: list[torch.Tensor], flat: torch.Tensor, last: bool):
        self._index, self._params, self._flat, self._last = index, params, flat, last

    def buffer(self) -> torch.Tensor:
        return self._flat

    def gradients(self) -> list[torch.Tensor]:
        out, off = [], 0
        for p in self._params:
            out.append(self._flat[off : off + p.numel()].view_as(p))
            off += p.numel()
        return out

    def parameters(self) -> list[torch.Tensor]:
        return self._params

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last


def _buckets(params, rank: int, step: int) -> list[FakeBucket]:
    """Bucket 0: the last layer's parameters, bucket 1 (last): the first layer's (DDP's order)."""
    g = torch.Generator().manual_seed(100 * step + rank)
    groups = [params[2:], params[:2]]
    return [
        FakeBucket(i, ps, torch.randn(sum(p.numel() for p in ps), generator=g), i == 1)
        for i, ps in enumerate(groups)
    ]


def _make(spec: str) -> CommHook:
    if not spec.startswith("blocking:"):
        return make_hook(spec)
    hook = make_hook(spec.removeprefix("blocking:"))
    inner = hook.reduce
    hook.reduce = lambda bucket: CommHook.done(inner(bucket).wait())  # waits inside reduce
    return hook


def _probe(rank, world, specs):
    store = dist.distributed_c10d._get_default_store()
    params = [p.detach() for p in tiny_model(0).parameters()]
    out = {}
    for spec in specs:
        hook = _make(spec)
        warm = int(getattr(hook, "start_iter", 0)) + 1  # past warm-up and a first refresh
        for step in range(warm):
            for fut in [hook.reduce(b) for b in _buckets(params, rank, step)]:
                fut.wait()
        buckets = _buckets(params, rank, warm)
        key = f"go:{spec}"
        if rank == 0:
            box: dict[str, list] = {}
            th = threading.Thread(
                target=lambda box=box, hook=hook, buckets=buckets: box.setdefault(
                    "futs", [hook.reduce(b) for b in buckets]
                ),
                daemon=True,
            )
            th.start()
            th.join(BLOCK_S)
            blocked = th.is_alive()
            pending = None if blocked else [not f.done() for f in box["futs"]]
            store.set(key, "1")
            th.join()
            futs = box["futs"]
        else:
            store.wait([key])
            futs = [hook.reduce(b) for b in buckets]
            blocked = pending = None
        outs = [f.wait().clone() for f in futs]
        out[spec] = {"blocked": blocked, "pending": pending, "out": outs}
    return out


def test_no_hook_waits_inside_reduce():
    specs = [*hook_names(), BLOCKING_CONTROL]
    res = run_ddp(2, _probe, specs, timeout=300)
    for spec in specs:
        r0, r1 = res[0][spec], res[1][spec]
        for a, b in zip(r0["out"], r1["out"], strict=True):
            assert torch.equal(a, b), spec
        if spec == BLOCKING_CONTROL:
            assert r0["blocked"], "the blocking control was not detected"
            continue
        assert not r0["blocked"], f"{spec}: reduce waited for its collectives"
        assert r0["pending"] == [True, True], f"{spec}: a future was done before rank 1 joined"
