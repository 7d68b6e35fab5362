"""The DGC hook against a single-process re-computation on the stacked per-rank gradients:
decoded gradients, momentum/velocity state (masking clears), payload bytes; and its
threshold selection and warm-up schedule on their own."""

from __future__ import annotations

import math

import pytest
import torch

from systems.hooks.dgc import dgc_select, warmup_ratio
from tests.systems.ddp_harness import record_steps, run_ddp, tiny_model

SPEC = "dgc:ratio=0.05,momentum=0.9,warmup_steps=2,sample_ratio=1.0,clip_norm=0.5"


def _record(rank, world, spec, steps):
    """Per step: this rank's raw local gradient, the hook's decoded gradient and the payload
    bytes; at the end the hook's u and v per parameter."""
    rec, hook, params = record_steps(rank, spec, steps)
    state = [
        (hook._u[id(p)].clone(), hook._v[id(p)].clone() if id(p) in hook._v else None)
        for p in params
    ]
    return {**rec, "state": state}


def _reference(raw, shapes, ratio, m, warmup, clip):
    """DGC on rows (one per rank), written from the paper's description."""
    world = raw[0].shape[0]
    sizes = [math.prod(s) for s in shapes]
    u = [
        torch.zeros(world, n) if len(s) > 1 else torch.zeros(n)
        for s, n in zip(shapes, sizes, strict=True)
    ]
    v = [torch.zeros(world, n) for n in sizes]
    outs, nbytes = [], []
    for t, G in enumerate(raw):
        r = ratio ** ((t + 1) / (warmup + 1)) if t < warmup else ratio
        parts, k_total, dense = [], 0, 0
        for j, G_j in enumerate(torch.split(G, sizes, dim=1)):
            norms = G_j.norm(dim=1, keepdim=True)
            G_j = G_j * torch.clamp(clip / math.sqrt(world) / (norms + 1e-6), max=1.0)
            if len(shapes[j]) < 2:
                u[j] = m * u[j] + G_j.mean(0)
                parts.append(u[j].clone())
                dense += sizes[j]
                continue
            u[j] = m * u[j] + G_j
            v[j] = v[j] + u[j]
            k = math.ceil(r * sizes[j])
            top = torch.argsort(v[j].abs(), dim=1, descending=True, stable=True)[:, :k]
            mask = torch.zeros_like(v[j], dtype=torch.bool).scatter_(1, top, True)
            parts.append(torch.where(mask, v[j], 0.0).sum(0) / world)
            v[j] = torch.where(mask, 0.0, v[j])
            u[j] = torch.where(mask, 0.0, u[j])
            k_total += k
        outs.append(torch.cat(parts))
        nbytes.append(8 + 8 * k_total + 4 * dense)
    return outs, nbytes, u, v


@pytest.mark.dist
def test_dgc_matches_reference_state_and_bytes():
    steps = 4
    got = run_ddp(2, _record, SPEC, steps)
    shapes = [tuple(p.shape) for p in tiny_model(0).parameters()]
    raw = [torch.stack([got[0]["raw"][t], got[1]["raw"][t]]) for t in range(steps)]
    outs, nbytes, u, v = _reference(raw, shapes, 0.05, 0.9, 2, 0.5)
    for t in range(steps):
        for r in range(2):
            assert torch.allclose(got[r]["dec"][t], outs[t], atol=1e-6), (t, r)
        assert got[0]["sent"][t] == got[1]["sent"][t] == nbytes[t]
    assert nbytes[0] > nbytes[-1]  # the warm-up sends more at first
    for r in range(2):
        for j, (u_hook, v_hook) in enumerate(got[r]["state"]):
            if len(shapes[j]) > 1:
                # momentum masking: u and v are zero where the last step sent
                assert torch.allclose(u_hook, u[j][r], atol=1e-6)
                assert torch.allclose(v_hook, v[j][r], atol=1e-6)
                assert ((u_hook == 0) == (v_hook == 0)).all()
                assert (v_hook == 0).sum() >= math.ceil(0.05 * u_hook.numel())
            else:
                assert v_hook is None and torch.allclose(u_hook, u[j], atol=1e-6)


def test_warmup_ratio_schedule():
    rs = [warmup_ratio(t, 0.001, 5) for t in range(7)]
    assert rs[-2:] == [0.001, 0.001]
    assert all(a > b for a, b in zip(rs[:5], rs[1:6], strict=True))
    assert math.isclose(rs[0], 0.001 ** (1 / 6)) and math.isclose(rs[1] / rs[0], rs[0])
    assert warmup_ratio(0, 0.01, 0) == 0.01


def test_select_exact_is_topk_and_sampled_stays_within_bounds():
    x = torch.tensor([0.5, 3.0, 3.0, -1.0, 3.0, 0.1])
    assert dgc_select(x.abs(), 0.5, sample_ratio=1.0).tolist() == [1, 2, 4]
    assert dgc_select(x.abs(), 0.34, sample_ratio=1.0).tolist() == [1, 2, 4]
    assert dgc_select(x.abs(), 0.3, sample_ratio=1.0).tolist() == [1, 2]
    gen = torch.Generator().manual_seed(0)
    imp = torch.randn(200_000, generator=gen).abs()
    for ratio in (0.001, 0.01):
        k = math.ceil(ratio * imp.numel())
        sel = dgc_select(imp, ratio, 0.01, gen)
        assert 0.8 * k <= sel.numel() <= k
        assert torch.equal(sel, torch.sort(sel).values)
        # the sent entries are the large ones: all above the (2k)-th largest magnitude
        assert imp[sel].min() >= torch.topk(imp, 2 * k).values[-1]


def test_bad_parameters_are_refused():
    from systems.hooks.dgc import DGC

    with pytest.raises(ValueError, match="ratio must be in"):
        DGC(ratio=0.0)
    with pytest.raises(ValueError, match="momentum must be in"):
        DGC(momentum=1.0)
