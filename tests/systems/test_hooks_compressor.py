"""The generic compressor hook on two gloo processes.

Every configuration trains the harness's tiny model for 4 steps twice, once under
:func:`comm.ddp_hook.register` and once under ``comp:SPEC@EF``, with a bucket cap of
300 bytes: DDP reduces one bucket of all 276 values on step 1, then rebuilds into two buckets
(``[b2, W2, b1]`` of 84 values and ``[W1]`` of 192). Checks: the two runs return the same
gradients bit for bit; deterministic Top-K matches a re-computation in parameter coordinates
from the stacked per-rank local gradients (independent of both hooks); bytes and bits follow the
payload formulas; the timings add up.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from comm.ddp_hook import CompressorHook, split_spec
from compressors.registry import parse_spec
from systems.hooks import make_hook
from tests.systems.ddp_harness import run_ddp, tiny_model

pytestmark = pytest.mark.dist

CAP_MB = 300 / 2**20
STEPS = 4
# (compressor spec, error feedback, layerwise)
CONFIGS = [
    ("topk:ratio=0.1", "none", False),
    ("topk:ratio=0.1", "ef14", False),
    ("topk:ratio=0.1", "ef21", False),
    ("topk:ratio=0.1", "ef14", True),
    ("randk:k=5,shared=true", "ef14", False),
    ("identity", "none", False),
    ("qsgd:levels=4", "none", False),
]


def _run(rank, world, spec, ef, layerwise, use_hook):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from comm.ddp_hook import register

    model = DDP(tiny_model(0), bucket_cap_mb=CAP_MB)
    params = list(model.parameters())
    ptr = {p.data_ptr(): j for j, p in enumerate(params)}
    calls: list[dict] = []
    if use_hook:
        hook = CompressorHook(spec=f"{spec}@{ef}", layerwise=layerwise).register(model)
        inner = hook.reduce

        def timed(bucket):
            t0 = time.perf_counter()
            fut = inner(bucket)
            fut.wait()
            calls.append(
                {
                    "params": [ptr[p.data_ptr()] for p in bucket.parameters()],
                    "wall": time.perf_counter() - t0,
                }
            )
            return fut

        hook.reduce = timed
    else:
        state = register(model, spec, error_feedback=ef, seed=0, layerwise=layerwise)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    local, avg = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model.module(X), y)
        local.append([t.detach().clone() for t in torch.autograd.grad(loss, params)])
        torch.nn.functional.cross_entropy(model(X), y).backward()
        avg.append([p.grad.detach().clone() for p in params])
        opt.step()
    out = {"local": local, "avg": avg}
    if use_hook:
        out.update(
            calls=calls,
            stats=vars(hook.stats).copy(),
            comm_s=hook.comm_s,
            ops=dict(hook.ops),
            bits=hook.bits_up(),
            wire=hook.state.wire_bytes(),
            allreducible=hook.allreducible,
        )
    else:
        out.update(bits=state.bits_up(), wire=state.wire_bytes())
    return out


def _all(rank, world):
    return [
        {"ref": _run(rank, world, s, ef, lw, False), "hook": _run(rank, world, s, ef, lw, True)}
        for s, ef, lw in CONFIGS
    ]


@pytest.fixture(scope="module")
def results():
    return run_ddp(2, _all)


def _topk_reference(hook_runs, ef, ratio=0.1):
    """Per step, per parameter: the averaged gradient under Top-K with ``ef``, recomputed from
    the ranks' local gradients in parameter coordinates, bucket by bucket as the hook saw them."""
    n = len(hook_runs)
    numels = [t.numel() for t in hook_runs[0]["local"][0]]
    e = [[torch.zeros(k) for k in numels] for _ in range(n)]
    gi = [[None] * len(numels) for _ in range(n)]
    gm = [None] * len(numels)
    calls = iter(hook_runs[0]["calls"])
    outs = []
    for step in range(STEPS):
        per_param: dict[int, torch.Tensor] = {}
        done: set[int] = set()
        while len(done) < len(numels):
            idx = next(calls)["params"]
            done.update(idx)
            x = [torch.cat([r["local"][step][j].flatten() for j in idx]) for r in hook_runs]
            d = x[0].numel()
            k = max(1, round(ratio * d))

            def topk(v, k=k):
                out = torch.zeros_like(v)
                pos = v.abs().topk(k).indices
                out[pos] = v[pos]
                return out

            def split(v, idx=idx):
                return dict(zip(idx, v.split([numels[j] for j in idx]), strict=True))

            if ef == "none":
                mean = sum(topk(v) for v in x) / n
            elif ef == "ef14":
                cs = []
                for i, v in enumerate(x):
                    p = torch.cat([e[i][j] for j in idx]) + v
                    c = topk(p)
                    for j, part in split(p - c).items():
                        e[i][j] = part
                    cs.append(c)
                mean = sum(cs) / n
            elif gm[idx[0]] is None:  # EF21's uncompressed first round
                mean = sum(x) / n
                for i, v in enumerate(x):
                    for j, part in split(v.clone()).items():
                        gi[i][j] = part
                for j, part in split(mean.clone()).items():
                    gm[j] = part
            else:
                g_old = torch.cat([gm[j] for j in idx])
                cs = []
                for i, v in enumerate(x):
                    gv = torch.cat([gi[i][j] for j in idx])
                    c = topk(v - gv)
                    for j, part in split(gv + c).items():
                        gi[i][j] = part
                    cs.append(c)
                mean = g_old + sum(cs) / n
                for j, part in split(mean).items():
                    gm[j] = part
            per_param.update(split(mean))
        outs.append([per_param[j] for j in range(len(numels))])
    return outs


def test_hook_equals_ddp_hook_register_bitwise(results):
    for (spec, ef, lw), runs in zip(CONFIGS, zip(*results, strict=True), strict=True):
        for rank in runs:
            for a, b in zip(rank["hook"]["avg"], rank["ref"]["avg"], strict=True):
                for s, t in zip(a, b, strict=True):
                    assert torch.equal(s, t), (spec, ef, lw)
            assert rank["hook"]["bits"] == rank["ref"]["bits"] > 0, (spec, ef)
            assert rank["hook"]["wire"] == rank["ref"]["wire"] > 0, (spec, ef)
        # the averages are not the local gradients: the reduction happened
        assert not torch.equal(runs[0]["hook"]["avg"][0][0], runs[0]["hook"]["local"][0][0])


def test_topk_matches_the_independent_reference(results):
    for c, (spec, ef, lw) in enumerate(CONFIGS):
        if spec != "topk:ratio=0.1" or lw:
            continue
        hook_runs = [r[c]["hook"] for r in results]
        assert [len(x["params"]) for x in hook_runs[0]["calls"]] == [4] + [3, 1] * (STEPS - 1)
        ref = _topk_reference(hook_runs, ef)
        for run in hook_runs:
            for step in range(STEPS):
                for got, want in zip(run["avg"][step], ref[step], strict=True):
                    assert torch.allclose(got.flatten(), want, atol=1e-6), (ef, step)


def _sizes(run):
    numels = [t.numel() for t in run["local"][0]]
    return [sum(numels[j] for j in call["params"]) for call in run["calls"]]


def test_bytes_and_bits_follow_the_payload_formulas(results):
    for c, (spec, ef, lw) in enumerate(CONFIGS):
        if lw:
            continue
        C = parse_spec(spec)
        for r in results:
            run = r[c]["hook"]
            ds = _sizes(run)
            assert ds == [276] + [84, 192] * (STEPS - 1)
            if spec == "identity":  # a dense float32 all-reduce
                want_bits = [32 * d for d in ds]
                want_bytes = [4 * d for d in ds]
            elif spec.startswith("randk"):  # the shared support's 5 values, all-reduced
                want_bits = [32 * 5 for _ in ds]
                want_bytes = [4 * 5 for _ in ds]
            else:  # bit-packed (Top-K: k (32 + ceil(log2 d)) bits), padded to whole bytes
                assert C.fixed_size  # so no size headers travel
                want_bits = [C.bits(d) for d in ds]
                want_bytes = [math.ceil(C.bits(d) / 8) for d in ds]
            if ef == "ef21":  # the first round is the full float32 gradient
                want_bits[0], want_bytes[0] = 32 * ds[0], 4 * ds[0]
            assert run["bits"] == sum(want_bits), (spec, ef)
            assert run["stats"]["sent_bytes"] == run["wire"] == sum(want_bytes), (spec, ef)
    topk = parse_spec("topk:ratio=0.1")
    assert [topk.bits(d) for d in (276, 84, 192)] == [28 * 41, 8 * 39, 19 * 40]


def test_collective_and_timings_are_consistent(results):
    for c, (spec, ef, _) in enumerate(CONFIGS):
        for r in results:
            run = r[c]["hook"]
            st = run["stats"]
            assert st["buckets"] == len(run["calls"]) == 1 + 2 * (STEPS - 1)
            assert st["collectives"] == sum(run["ops"].values()) >= st["buckets"]
            # per kind: as many as the comm layer called, the ledger's bytes split between them
            assert st["allreduce_count"] == run["ops"].get("all_reduce", 0), (spec, ef)
            assert st["allgather_count"] == run["ops"].get("all_gather", 0), (spec, ef)
            assert st["allreduce_count"] + st["allgather_count"] == st["collectives"]
            assert st["allreduce_bytes"] + st["allgather_bytes"] == st["sent_bytes"], (spec, ef)
            assert st["broadcast_count"] == st["broadcast_bytes"] == 0
            gathered = "all_gather" in run["ops"]
            assert run["allreducible"] == (not gathered), (spec, ef, run["ops"])
            wall = sum(call["wall"] for call in run["calls"])
            assert st["encode_s"] > 0 and st["decode_s"] > 0 and run["comm_s"] > 0
            assert st["encode_s"] + st["decode_s"] + run["comm_s"] <= wall, (spec, ef)
    by_spec = {
        (s, ef): results[0][c]["hook"]["allreducible"] for c, (s, ef, _) in enumerate(CONFIGS)
    }
    assert by_spec[("identity", "none")] and by_spec[("randk:k=5,shared=true", "ef14")]
    assert not by_spec[("topk:ratio=0.1", "ef14")] and not by_spec[("qsgd:levels=4", "none")]


class _Bucket:
    """A bucket of ``d`` values of one parameter, as the hook reads a ``GradBucket``."""

    def __init__(self, d: int, rank: int) -> None:
        self.param = torch.zeros(d)
        self.flat = torch.arange(d, dtype=torch.float32) * (rank + 1)

    def buffer(self):
        return self.flat

    def parameters(self):
        return [self.param]

    def index(self):
        return 0

    def is_last(self):
        return True


def _worker_thread(rank, world):
    """A bucket the compressor refuses (Top-K's k = 5 of 4 values), then one it takes; then
    the worker threads of a collected hook and of a closed one."""
    import gc

    hook = make_hook("comp:topk:k=5@none")
    bad = hook.reduce(_Bucket(4, rank))
    good = hook.reduce(_Bucket(20, rank))
    try:
        bad.wait()
        error = None
    except Exception as exc:  # noqa: BLE001 - what the waiter sees
        error = f"{type(exc).__name__}: {exc}"
    avg = good.wait().clone()
    thread = hook._thread
    alive = thread.is_alive()
    del hook, bad, good
    gc.collect()
    thread.join(10)
    closed = make_hook("comp:topk:k=5@none")
    closed.reduce(_Bucket(20, rank)).wait()
    other = closed._thread
    closed.close()
    other.join(10)
    return {
        "error": error,
        "avg": avg,
        "alive_before": alive,
        "alive_after_gc": thread.is_alive(),
        "alive_after_close": other.is_alive(),
    }


def test_worker_thread_errors_and_lifetime():
    """A bucket's exception is set on its future and the thread goes on with the next bucket;
    the thread stops when the hook is collected or closed."""
    res = run_ddp(2, _worker_thread)
    want = torch.zeros(20)
    top = torch.arange(15, 20, dtype=torch.float32)
    want[15:] = (top * 1 + top * 2) / 2
    for r in res:
        assert r["error"] is not None and "k must be <= d" in r["error"], r["error"]
        assert "bucket 0, segment 0 of 4 values" in r["error"]
        assert torch.equal(r["avg"], want)
        assert r["alive_before"] and not r["alive_after_gc"] and not r["alive_after_close"], r


def test_plan_of_each_path():
    """The declared collectives per bucket (the DDP runs of tests/systems/test_hooks_plan.py
    hold them to what is issued): Top-K all-gathers k (32 + ceil(log2 d)) bits in whole bytes,
    layerwise one message per parameter, EF21's first round all-reduces the bucket, a shared
    support all-reduces its k float32 values, a variable-size payload sends a 16-byte header
    first and its nominal size from expected_bits (max_bits where no mean is declared)."""
    shapes = [(16, 12), (16,)]
    gather = make_hook("comp:topk:ratio=0.1@ef14").plan(shapes, 2)
    assert [(c.kind, c.nbytes, c.data_dependent) for c in gather] == [
        ("allgather", math.ceil(parse_spec("topk:ratio=0.1").bits(208) / 8), False)
    ]
    per_layer = CompressorHook(spec="topk:ratio=0.1@ef14", layerwise=True).plan(shapes, 2)
    assert [c.nbytes for c in per_layer] == [math.ceil(19 * (32 + 8) / 8), math.ceil(2 * 36 / 8)]
    ef21 = make_hook("comp:topk:ratio=0.1@ef21")
    assert [(c.kind, c.nbytes) for c in ef21.plan(shapes, 2, step=0)] == [("allreduce", 4 * 208)]
    assert ef21.plan(shapes, 2, step=1) == ef21.plan(shapes, 2) == gather
    shared = make_hook("comp:randk:k=5,shared=true@none").plan(shapes, 2, torch.float64)
    assert [(c.kind, c.nbytes) for c in shared] == [("allreduce", 5 * 8)]
    head, data = make_hook("comp:bernoulli:p=0.1@none").plan(shapes, 2)
    assert (head.kind, head.nbytes, head.data_dependent) == ("allgather", 16, False)
    expected = parse_spec("bernoulli:p=0.1").expected_bits(208)
    assert data.data_dependent and data.nbytes == math.ceil(expected / 8)
    thr = parse_spec("threshold:lam=0.05")
    assert thr.expected_bits(208) is None
    _, data = make_hook("comp:threshold:lam=0.05@none").plan(shapes, 2)
    assert data.data_dependent and data.nbytes == math.ceil(thr.max_bits(208) / 8)
    with pytest.raises(ValueError, match="segment 1 of 16 values: k must be <= d"):
        CompressorHook(spec="topk:k=20@none", layerwise=True).plan(shapes, 2)


def test_spec_parsing_and_refusals():
    assert split_spec("topk:ratio=0.01") == ("topk:ratio=0.01", "ef14")
    assert split_spec("topk:ratio=0.01@ef21") == ("topk:ratio=0.01", "ef21")
    assert split_spec("compose:topk:k=10+qsgd:levels=4@none") == (
        "compose:topk:k=10+qsgd:levels=4",
        "none",
    )
    h = make_hook("comp")
    assert (h.spec, h.error_feedback, h.name) == ("topk:ratio=0.01", "ef14", "comp")
    assert make_hook("comp:randk:k=4").allreducible is False  # linear, but private supports
    assert make_hook("comp:randk:k=4,shared=true@none").allreducible is True
    with pytest.raises(ValueError, match=r"suffix must be one of @none, @ef14, @ef21, got @ef3"):
        make_hook("comp:topk:k=3@ef3")
    with pytest.raises(ValueError, match="unknown compressor 'nope'"):
        make_hook("comp:nope")
    with pytest.raises(ValueError, match="expected a compressor spec"):
        make_hook("comp:")
    with pytest.raises(ValueError, match="no compressor spec before @ef21"):
        make_hook("comp:@ef21")
