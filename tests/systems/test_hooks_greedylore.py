"""The ``greedylore`` hook on two gloo processes against a one-process re-computation on the
stacked per-rank bucket gradients (warm-up, refreshes of ``P`` from the SVD of the mean gradient,
EF14 and EF21 steps): outputs, exact payload bytes, and the error-feedback state, which carries
the residual ``M - P P^T M``."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from tests.systems.ddp_harness import run_ddp
from tests.systems.test_hooks_vgc import paired_calls, record_run

STEPS = 7
CONFIGS = [  # spec, rank, gap, start, ef
    ("greedylore:rank=1,update_proj_gap=3,start_iter=1", 1, 3, 1, "ef14"),
    ("greedylore:rank=2,update_proj_gap=3,start_iter=1,ef=ef21", 2, 3, 1, "ef21"),
    ("greedylore:rank=1,update_proj_gap=2,start_iter=0,ef=ef21", 1, 2, 0, "ef21"),
]


def lore_reference(groups, rank, gap, start, ef, world=2):
    P, E, E_mean = {}, [dict() for _ in range(world)], {}
    outs, nbytes = [], []
    for group in groups:
        t, layout = group[0]["step"], group[0]["layout"]
        G = torch.stack([c["input"] for c in group]).double()
        out = G.mean(0)
        if t < start or (t - start) % gap == 0:
            nbytes.append(4 * G.shape[1])
            if t >= start:
                for pos, off, shape in layout:
                    n, m = shape[0], torch.Size(shape[1:]).numel()
                    r = min(n, m, rank)
                    if len(shape) < 2 or not (n + m) * r * 2 < n * m:
                        continue
                    mean = out[off : off + n * m].view(n, m)
                    P[pos] = torch.linalg.svd(mean)[0][:, :r]
                    for w in range(world):
                        local = G[w, off : off + n * m].view(n, m)
                        if ef == "ef14":
                            E[w][pos] = torch.zeros(n, m, dtype=torch.float64)
                        elif t == start:
                            E[w][pos] = local.clone()
                    if ef == "ef21" and t == start:
                        E_mean[pos] = mean.clone()
            outs.append(out)
            continue
        size = 0
        for pos, off, shape in layout:
            numel = torch.Size(shape).numel()
            if pos not in P:
                size += numel
                continue
            n = shape[0]
            p = P[pos]
            rs = []
            for w in range(world):
                g = G[w, off : off + numel].view(n, -1)
                if ef == "ef14":
                    mw = g + E[w][pos]
                    rs.append(p.T @ mw)
                    E[w][pos] = mw - p @ p.T @ mw
                else:
                    rs.append(p.T @ (g - E[w][pos]))
                    E[w][pos] = E[w][pos] + p @ rs[-1]
            size += rs[0].numel()
            dec = p @ torch.stack(rs).mean(0)
            if ef == "ef21":
                dec = E_mean[pos] = E_mean[pos] + dec
            out[off : off + numel] = dec.reshape(-1)
        outs.append(out)
        nbytes.append(4 * size)
    return outs, nbytes, E


@pytest.mark.dist
def test_greedylore_matches_the_stacked_reference_bytes_and_error_feedback():
    results = run_ddp(2, record_run, [c[0] for c in CONFIGS], STEPS)
    for j, (spec, rank, gap, start, ef) in enumerate(CONFIGS):
        groups = list(paired_calls(results, j))
        outs, nbytes, E = lore_reference(groups, rank, gap, start, ef)
        compressed = 0
        for group, out, size in zip(groups, outs, nbytes, strict=True):
            for call in group:
                got = call["output"].double()
                assert torch.allclose(got, out, rtol=1e-4, atol=1e-6), (spec, call["step"])
                assert call["bytes"] == size, (spec, call["step"])
            compressed += size < 4 * out.numel()
        assert compressed >= 2, spec
        for w in range(2):
            hook_E = results[w][j]["state"]["E"]
            assert set(hook_E) == set(E[w]) and E[w], spec
            for pos in E[w]:
                assert torch.allclose(hook_E[pos].double(), E[w][pos], rtol=1e-4, atol=1e-6)
            assert any(float(e.abs().max()) > 1e-6 for e in hook_E.values()), "EF carries"
        if ef == "ef14":  # the residual is orthogonal to the shared projection
            P = results[0][j]["state"]["P"]
            for pos, e in results[0][j]["state"]["E"].items():
                assert float((P[pos].T @ e).abs().max()) < 1e-5


def test_bad_parameters_name_value_and_allowed():
    for spec, msg in (
        ("greedylore:rank=0", "rank must be an integer >= 1, got rank=0"),
        ("greedylore:update_proj_gap=0", "update_proj_gap must be an integer >= 1"),
        ("greedylore:start_iter=-1", "start_iter must be an integer >= 0"),
        ("greedylore:min_compression_rate=0", "min_compression_rate must be > 0"),
        ("greedylore:ef=noef", "ef must be one of ef14, ef21, got ef='noef'"),
    ):
        with pytest.raises(ValueError, match=msg):
            make_hook(spec)
