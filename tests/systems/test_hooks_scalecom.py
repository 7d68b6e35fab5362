"""ScaleCom hook: on a real 2-process DDP run, the averaged gradients equal a single-process
re-computation of cyclic local top-k with the low-pass filtered memory on the stacked per-rank
gradients; the indices are the leader's, and the leader rotates with the step; bytes exact."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from systems.hooks.scalecom import ScaleCom
from tests.systems.ddp_harness import run_ddp
from tests.systems.test_hooks_acpsgd import record_many

STEPS = 6


def _topk(v: torch.Tensor, k: int) -> set[int]:
    """Indices of the k largest |v|, ties toward the lower index (a stable sort)."""
    order = torch.sort(v.abs(), descending=True, stable=True).indices
    return set(order[:k].tolist())


def _reference(local, layouts, ratio, beta, start_iter, ef=True):
    """ScaleCom on stacked gradients ``local[t][worker][param]``, bucket by bucket.

    Returns per step and bucket ``(flat mean, leader's support, other workers' supports,
    bytes)``; the supports are ``None`` on plain steps."""
    W = len(local[0])
    memory: dict[int, torch.Tensor] = {}
    out = []
    for t, grads in enumerate(local):
        step = []
        for b, pos in layouts[t]:
            g = torch.stack([torch.cat([grads[w][j].reshape(-1) for j in pos]) for w in range(W)])
            d = g.shape[1]
            if t < start_iter:
                step.append((g.mean(0), None, None, 4 * d))
                continue
            k = max(1, round(ratio * d))
            m = memory.get(b, torch.zeros_like(g))
            v = m + g
            leader = t % W
            sel = _topk(v[leader], k)
            mask = torch.zeros(d, dtype=torch.bool)
            mask[sorted(sel)] = True
            mean = torch.where(mask, v.mean(0), torch.zeros(()))
            resid = torch.where(mask, torch.zeros(()), v)
            memory[b] = (1 - beta) * m + beta * resid if ef else torch.zeros_like(g)
            others = [_topk(v[w], k) for w in range(W) if w != leader]
            step.append((mean, sel, others, 8 * k))
        out.append(step)
    return out


def _flat(grads, pos):
    return torch.cat([grads[j].reshape(-1) for j in pos])


@pytest.mark.dist
def test_scalecom_equals_reference_leader_rotates_and_counts_bytes():
    ratio, beta = 0.05, 0.3
    spec = f"scalecom:ratio={ratio},beta={beta},start_iter=2"
    # one bucket of 276 entries (k = 14), and one bucket per parameter (k = 10, 1, 3, 1)
    results = run_ddp(2, record_many, [(spec, 25), (spec, 1e-5)], STEPS)
    for c, ks in enumerate(([14], [1, 3, 1, 10])):
        res = [results[0][c], results[1][c]]
        local = [[res[w]["local"][t] for w in range(2)] for t in range(STEPS)]
        layouts = res[0]["layouts"]
        assert layouts == res[1]["layouts"] and {len(lay) for lay in layouts[1:]} == {len(ks)}
        want = _reference(local, layouts, ratio, beta, start_iter=2)
        for t, step in enumerate(want):
            for (_, pos), (mean, sel, others, _) in zip(layouts[t], step, strict=True):
                for w in range(2):
                    got = _flat(res[w]["mean"][t], pos)
                    assert torch.allclose(got, mean, rtol=1e-5, atol=1e-7), (c, w, t)
                if sel is not None and len(sel) > 1:
                    # the support sent is the leader's top-k (leader t mod 2), not the other's
                    support = set(torch.nonzero(_flat(res[0]["mean"][t], pos)).view(-1).tolist())
                    assert support == sel and all(o != sel for o in others), (c, t)
            nbytes = sum(x[3] for x in step)
            assert nbytes == (4 * 276 if t < 2 else 8 * sum(ks))
            assert res[0]["sent"][t] == res[1]["sent"][t] == nbytes
        # the comparison sees the memory and its filter
        for other in (
            _reference(local, layouts, ratio, beta, start_iter=2, ef=False),
            _reference(local, layouts, ratio, 1.0, start_iter=2),
        ):
            assert any(
                not torch.allclose(a[0], b[0], atol=1e-6)
                for sa, sb in zip(other, want, strict=True)
                for a, b in zip(sa, sb, strict=True)
            )


def test_scalecom_parameters():
    hook = ScaleCom()
    assert (hook.ratio, hook.beta, hook.start_iter) == (0.01, 0.1, 2)
    assert hook.k_of(276) == 3 and hook.k_of(10) == 1
    assert make_hook("scalecom:ratio=0.1,beta=1.0").describe()["params"]["beta"] == 1.0
    for bad, match in (
        (dict(ratio=0.0), "ratio must be in"),
        (dict(beta=1.5), "beta must be in"),
        (dict(start_iter=0), "start_iter must be an integer >= 2"),
    ):
        with pytest.raises(ValueError, match=match):
            ScaleCom(**bad)
