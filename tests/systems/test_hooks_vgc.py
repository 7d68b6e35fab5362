"""The ``vgc`` hook on two gloo processes against a one-process re-computation of variance-based
compression on the stacked per-rank bucket gradients: outputs, exact payload bytes, and the
accumulators ``r``, ``v`` that carry what was held back.

:func:`record_run` (also used by the other hooks' tests) trains the tiny model with a hook whose
``reduce`` is wrapped to record, per call, the bucket's layout, its local input, the hook's
output and the bytes it sent."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from tests.systems.ddp_harness import run_ddp, tiny_model

STEPS = 5  # ends on a step where entries are held back (they go every second step)
BUCKET_MB = 0.0002  # 209 bytes: the tiny model's 276 parameters take two buckets


def record_run(rank, world, specs, steps=STEPS, bucket_cap_mb=BUCKET_MB):
    """For each hook spec: ``{"calls": [...], "state": hook}``-like records of a short run."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    results = []
    for spec in specs:
        model = DDP(tiny_model(0), bucket_cap_mb=bucket_cap_mb)
        hook = make_hook(spec).register(model)
        pos = {id(p): i for i, p in enumerate(model.parameters())}
        calls, step = [], [0]
        inner = hook.reduce

        def recording(bucket, inner=inner, hook=hook, calls=calls, step=step, pos=pos):
            buf = bucket.buffer()
            layout = [
                (pos[id(p)], (g.data_ptr() - buf.data_ptr()) // buf.element_size(), tuple(g.shape))
                for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True)
            ]
            before = hook.stats.sent_bytes
            inp = buf.clone()
            out = inner(bucket).wait()
            calls.append(
                {
                    "step": step[0],
                    "index": bucket.index(),
                    "layout": layout,
                    "input": inp,
                    "output": out.clone(),
                    "bytes": hook.stats.sent_bytes - before,
                }
            )
            if bucket.is_last():
                step[0] += 1
            return hook.done(out)

        hook.reduce = recording
        g = torch.Generator().manual_seed(1000 + rank)
        X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(X), y).backward()
            opt.step()
        state = {
            k: {pos[i]: t.clone() for i, t in v.items() if i in pos}
            for k, v in vars(hook).items()
            if isinstance(v, dict) and all(isinstance(t, torch.Tensor) for t in v.values())
        }
        results.append({"calls": calls, "state": state})
    return results


def paired_calls(results, j):
    """The calls of config ``j`` as lists over ranks, checked to have the same layout."""
    per_rank = [r[j]["calls"] for r in results]
    assert len({len(c) for c in per_rank}) == 1
    for group in zip(*per_rank, strict=True):
        assert len({(c["step"], c["index"], str(c["layout"])) for c in group}) == 1
        yield list(group)


def flat(store, layout, like):
    """A bucket-shaped vector gathered from per-parameter state ``store[pos]``."""
    out = torch.zeros_like(like)
    for pos, off, shape in layout:
        n = torch.Size(shape).numel()
        out[off : off + n] = store.setdefault(pos, torch.zeros(n, dtype=like.dtype))
    return out


def scatter(store, layout, vec):
    for pos, off, shape in layout:
        store[pos] = vec[off : off + torch.Size(shape).numel()].clone()


def vgc_reference(calls_by_rank, alpha, zeta, exp_bits, world):
    """Per call: the averaged output and each rank's payload bytes; final r, v per rank."""
    r = [dict() for _ in range(world)]
    v = [dict() for _ in range(world)]
    outs, nbytes, kept = [], [], 0
    for group in calls_by_rank:
        layout, msgs, sizes = group[0]["layout"], [], []
        for w, call in enumerate(group):
            g = call["input"]
            rw = flat(r[w], layout, g) + g
            vw = flat(v[w], layout, g) + g * g
            send = rw**2 > alpha * vw
            vals = rw[send]
            top = vals.abs().max() if vals.numel() else torch.tensor(0.0)
            e = torch.log2(top / vals.abs()).round().clamp(0, 2**exp_bits - 1)
            msg = torch.zeros_like(g)
            msg[send] = torch.sign(vals) * top * 2.0**-e
            msgs.append(msg)
            sizes.append(8 + 4 * (1 + int(send.sum())))
            kept += int((~send).sum())
            rw[send] = 0
            vw = torch.where(send, 0.0, zeta * vw)
            scatter(r[w], layout, rw)
            scatter(v[w], layout, vw)
        outs.append(torch.stack(msgs).mean(0))
        nbytes.append(sizes)
    return outs, nbytes, r, v, kept


SPECS = [("vgc", 2.0, 0.999, 3), ("vgc:alpha=1.0,zeta=0.9,exp_bits=2", 1.0, 0.9, 2)]


@pytest.mark.dist
def test_vgc_matches_the_stacked_reference_bytes_and_accumulators():
    results = run_ddp(2, record_run, [s for s, *_ in SPECS])
    for j, (spec, alpha, zeta, eb) in enumerate(SPECS):
        groups = list(paired_calls(results, j))
        assert len({(c[0]["step"], c[0]["index"]) for c in groups}) == len(groups) > STEPS
        outs, nbytes, r, v, kept = vgc_reference(groups, alpha, zeta, eb, 2)
        sent = 0
        for group, out, sizes in zip(groups, outs, nbytes, strict=True):
            for w, call in enumerate(group):
                assert torch.allclose(call["output"], out, rtol=1e-6, atol=1e-9), spec
                assert call["bytes"] == sizes[w], spec
            sent += sum(sizes) - 2 * 12
        assert sent > 0 and kept > 0, "some entries sent and some held back"
        for w in range(2):
            hook_r, hook_v = results[w][j]["state"]["_r"], results[w][j]["state"]["_v"]
            assert set(hook_r) == set(r[w]) == set(range(4))
            for pos in r[w]:
                assert torch.allclose(hook_r[pos], r[w][pos], rtol=1e-6, atol=1e-9), spec
                assert torch.allclose(hook_v[pos], v[w][pos], rtol=1e-6, atol=1e-12), spec
            assert any(bool((t != 0).any()) for t in hook_r.values()), "a residual is carried"
    # nothing is sent from one step's gradient with alpha >= 1: r^2 == v at the first step
    first = [c for c in paired_calls(results, 0) if c[0]["step"] == 0]
    assert all((c[0]["output"] == 0).all() for c in first)


def test_words_round_trip_and_bad_parameters():
    from systems.hooks.vgc import pack_words, unpack_words

    idx = torch.tensor([0, 5, 2**28 - 1, 2**27])
    neg = torch.tensor([True, False, True, False])
    e = torch.tensor([0, 7, 3, 1])
    i2, n2, e2 = unpack_words(pack_words(idx, neg, e, 3), 3)
    assert torch.equal(i2, idx) and torch.equal(n2, neg) and torch.equal(e2, e)
    for spec, msg in (
        ("vgc:alpha=0", "alpha must be > 0, got alpha=0.0"),
        ("vgc:zeta=1.5", r"zeta must be in \(0, 1\], got zeta=1.5"),
        ("vgc:exp_bits=8", "exp_bits must be an integer from 1 to 7, got exp_bits=8"),
    ):
        with pytest.raises(ValueError, match=msg):
            make_hook(spec)
