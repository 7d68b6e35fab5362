"""The ``powersgd-plus`` hook on two gloo processes against a one-process re-computation on the
stacked per-rank bucket gradients: plain steps, refreshes (the bucket averaged uncompressed, the
query set to the top right singular vectors of each mean matrix, errors cleared) and PowerSGD
steps warm-started from the refreshed query, with error feedback: outputs and exact bytes."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from tests.systems.ddp_harness import run_ddp
from tests.systems.test_hooks_vgc import paired_calls, record_run

STEPS = 7
CONFIGS = [  # spec, rank, period, start, error feedback
    ("powersgd-plus:rank=1,period=3,start_iter=2,min_compression_rate=1.0", 1, 3, 2, True),
    ("powersgd-plus:rank=2,period=2,start_iter=2,min_compression_rate=1.0,error_feedback=false",
     2, 2, 2, False),
]  # fmt: skip


def _gs(a):
    a = a.clone()
    for j in range(a.shape[1]):
        a[:, j] /= a[:, j].norm() + 1e-8
        for k in range(j + 1, a.shape[1]):
            a[:, k] -= (a[:, j] @ a[:, k]) * a[:, j]
    return a


def reference(groups, rank, period, start, ef, world=2):
    Q, E = {}, [dict() for _ in range(world)]
    outs, nbytes = [], []
    for group in groups:
        t, layout = group[0]["step"], group[0]["layout"]
        G = torch.stack([c["input"] for c in group]).double()
        out = G.mean(0)
        if t < start:
            outs.append(out)
            nbytes.append(4 * G.shape[1])
            continue
        refresh = (t - start) % period == 0
        size = 0
        for pos, off, shape in layout:
            numel = torch.Size(shape).numel()
            n = shape[0]
            m = numel // n
            r = min(n, m, rank)
            if len(shape) < 2 or not (n + m) * r < n * m:
                size += numel
                continue
            Ms = [G[w, off : off + numel].view(n, m) + E[w].get(pos, 0) for w in range(world)]
            mean = torch.stack(Ms).mean(0)
            if refresh:
                Q[pos] = torch.linalg.svd(mean)[2][:r].T
                for w in range(world):
                    E[w].pop(pos, None)
                out[off : off + numel] = mean.reshape(-1)
                continue
            P = _gs(mean @ _gs(Q[pos]))
            Q[pos] = mean.T @ P
            approx = P @ Q[pos].T
            if ef:
                for w in range(world):
                    E[w][pos] = Ms[w] - approx
            out[off : off + numel] = approx.reshape(-1)
            size += (n + m) * r
        outs.append(out)
        nbytes.append(4 * (G.shape[1] if refresh else size))
    return outs, nbytes


@pytest.mark.dist
def test_powersgd_plus_matches_the_stacked_reference_and_bytes():
    results = run_ddp(2, record_run, [c[0] for c in CONFIGS], STEPS)
    for j, (spec, rank, period, start, ef) in enumerate(CONFIGS):
        groups = list(paired_calls(results, j))
        outs, nbytes = reference(groups, rank, period, start, ef)
        compressed = 0
        for group, out, size in zip(groups, outs, nbytes, strict=True):
            for call in group:
                got = call["output"].double()
                assert torch.allclose(got, out, rtol=1e-4, atol=1e-6), (spec, call["step"])
                assert call["bytes"] == size, (spec, call["step"])
            compressed += size < 4 * out.numel()
        assert compressed >= 2, spec


def test_refresh_schedule_and_bad_parameters():
    hook = make_hook("powersgd-plus:period=3,start_iter=2")
    assert [t for t in range(10) if hook.is_refresh(t)] == [2, 5, 8]
    assert not any(make_hook("powersgd-plus:period=0").is_refresh(t) for t in range(10))
    with pytest.raises(ValueError, match="period must be an integer >= 0, got -1"):
        make_hook("powersgd-plus:period=-1")
    with pytest.raises(ValueError, match="start_iter must be an integer >= 2"):
        make_hook("powersgd-plus:start_iter=1")
    assert make_hook("powersgd-plus:rank=3").describe()["params"]["rank"] == 3
