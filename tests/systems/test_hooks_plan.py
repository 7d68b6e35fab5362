"""Every registered hook's :meth:`~comm.hooks.CommHook.plan` is what it issues.

A 2-worker gloo DDP run of the tiny model per hook, with one bucket and with one bucket per
parameter. ``torch.distributed``'s ``all_reduce``/``all_gather``/``broadcast`` are wrapped in the
workers, so what is recorded is every collective actually issued (PyTorch's own hooks included),
whoever counts it. Per step, the collectives issued equal the concatenation, over the buckets in
the order DDP handed them over, of ``hook.plan(bucket's gradient shapes, 2, dtype, step=t)``:
the same kinds in the same order, and the same bytes unless the plan marks them data-dependent.
Negative controls: a plan with one byte too many, a compressor-hook plan without the size header
of a variable-size payload or with EF21's first round compressed, must be caught.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from comm.hooks import Collective
from systems.hooks import hook_names, make_hook
from tests.systems.ddp_harness import run_ddp, tiny_model

pytestmark = pytest.mark.dist

STEPS = 6
# parameters that reach the compressed, the refresh and the alternating steps within STEPS
SPECS = {
    "greedylore": "greedylore:start_iter=2,update_proj_gap=2,rank=2",
    "powersgd-plus": "powersgd-plus:period=2",
    "dgc": "dgc:ratio=0.1,warmup_steps=2",
}
# The compressor hook's collectives are the comm layer's, chosen per packet: beside its default
# (Top-K, all-gathered, EF14), a variant for each other path: EF21's uncompressed first round, a
# shared support all-reduced, a dense all-reduce, a sketch's table all-reduced, a variable-size
# payload (size header, then the data).
COMP_VARIANTS = [
    "comp:topk:ratio=0.1@ef21",
    "comp:randk:ratio=0.2,shared=true@none",
    "comp:identity@none",
    "comp:countsketch:rows=1,cols=4@none",
    "comp:threshold:lam=0.05@ef14",
    "comp:qsgd:levels=4@ef14",
]
_KIND = {"all_reduce": "allreduce", "all_gather": "allgather", "broadcast": "broadcast"}


def _nbytes(name: str, args) -> int:
    t = args[1] if name == "all_gather" else args[0]
    return t.numel() * t.element_size()


def _record(rank, world, specs, steps):
    from torch.nn.parallel import DistributedDataParallel as DDP

    issued: list[tuple[str, int]] = []
    for name in _KIND:
        inner = getattr(dist, name)

        def wrapped(*args, _inner=inner, _name=name, **kwargs):
            issued.append((_KIND[_name], _nbytes(_name, args)))
            return _inner(*args, **kwargs)

        setattr(dist, name, wrapped)
    out = {}
    for spec, cap in specs:
        model = DDP(tiny_model(0), bucket_cap_mb=cap)
        hook = make_hook(spec).register(model)
        calls: list[list] = []
        inner_reduce = hook.reduce

        def reduce(bucket, _inner=inner_reduce, _calls=calls):
            _calls[-1].append(([tuple(g.shape) for g in bucket.gradients()], bucket.buffer().dtype))
            return _inner(bucket)

        hook.reduce = reduce
        g = torch.Generator().manual_seed(1000 + rank)
        X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        per_step = []
        for _ in range(steps):
            calls.append([])
            start = len(issued)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(X), y).backward()
            opt.step()
            per_step.append(issued[start:])
        out[(spec, cap)] = {"buckets": calls, "issued": per_step}
    return out


def _mismatch(spec: str, buckets, issued, t: int, plan=None) -> str | None:
    """Why step ``t``'s issued collectives differ from the plans, or None."""
    hook = make_hook(spec)
    plan = plan or hook.plan
    want: list[Collective] = [c for shapes, dtype in buckets for c in plan(shapes, 2, dtype, t)]
    if [c.kind for c in want] != [k for k, _ in issued]:
        return f"step {t}: issued {issued}, planned {want}"
    for c, (_, nbytes) in zip(want, issued, strict=True):
        if not c.data_dependent and c.nbytes != nbytes:
            return f"step {t}: issued {issued}, planned {want}"
    return None


@pytest.fixture(scope="module")
def recorded():
    names = [*(SPECS.get(n, n) for n in hook_names()), *COMP_VARIANTS]
    specs = [(spec, cap) for spec in names for cap in (25, 1e-6)]
    return run_ddp(2, _record, specs, STEPS, timeout=600)


def test_every_hook_issues_its_plan(recorded):
    assert {spec.partition(":")[0] for spec, _ in recorded[0]} == set(hook_names())
    for r in range(2):
        for (spec, cap), rec in recorded[r].items():
            for t, (buckets, issued) in enumerate(zip(rec["buckets"], rec["issued"], strict=True)):
                assert buckets and issued, (spec, cap, t)
                why = _mismatch(spec, buckets, issued, t)
                assert why is None, f"{spec} (bucket_cap_mb={cap}, rank {r}): {why}"


def test_a_wrong_plan_is_caught(recorded):
    """A plan one byte off on its last exact collective fails the comparison."""
    spec, cap = "powersgd", 1e-6
    rec = recorded[0][(spec, cap)]

    def off_by_one(shapes, world, dtype, step):
        out = make_hook(spec).plan(shapes, world, dtype, step)
        return out[:-1] + [Collective(out[-1].kind, out[-1].nbytes + 1)]

    t = STEPS - 1
    assert _mismatch(spec, rec["buckets"][t], rec["issued"][t], t) is None
    assert _mismatch(spec, rec["buckets"][t], rec["issued"][t], t, off_by_one) is not None


def test_a_wrong_comp_plan_is_caught(recorded):
    """The compressor hook's plan without the size header of a variable-size payload, or with
    EF21's first round compressed, fails the comparison."""
    t = STEPS - 1
    spec = "comp:threshold:lam=0.05@ef14"
    rec = recorded[0][(spec, 1e-6)]

    def no_header(shapes, world, dtype, step):
        return [c for c in make_hook(spec).plan(shapes, world, dtype, step) if c.data_dependent]

    assert _mismatch(spec, rec["buckets"][t], rec["issued"][t], t) is None
    assert _mismatch(spec, rec["buckets"][t], rec["issued"][t], t, no_header) is not None
    spec = "comp:topk:ratio=0.1@ef21"
    rec = recorded[0][(spec, 25)]

    def always_compressed(shapes, world, dtype, step):
        return make_hook(spec).plan(shapes, world, dtype, None)

    assert _mismatch(spec, rec["buckets"][0], rec["issued"][0], 0) is None
    assert _mismatch(spec, rec["buckets"][0], rec["issued"][0], 0, always_compressed) is not None
