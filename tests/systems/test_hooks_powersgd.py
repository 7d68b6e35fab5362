"""PowerSGD hook: equals PyTorch's ``powerSGD_hook`` with matching ``PowerSGDState`` on a real
2-process DDP run (same initial ``Q``, error feedback, warm start), and sends exactly
``4 (sum (n + m) r + uncompressed numel)`` bytes per compressed step."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import make_hook
from systems.hooks.powersgd import PowerSGD, gram_schmidt_
from tests.systems.ddp_harness import run_ddp, tiny_model, train_steps

STEPS = 5
# (our spec, PowerSGDState keywords): rank 1 (Gram-Schmidt in both), rank 3 (PyTorch: QR),
# rank 2 without warm start or error feedback, compression from step 3, and rank 1 with one
# bucket per parameter (state per bucket index, initial Q drawn bucket by bucket).
CONFIGS = [
    (
        "powersgd:rank=1,start_iter=2",
        dict(matrix_approximation_rank=1, start_powerSGD_iter=2, orthogonalization_epsilon=1e-8),
    ),
    (
        "powersgd:rank=3,start_iter=2,min_compression_rate=1.0,orthogonalization_epsilon=0.0,seed=7",
        dict(matrix_approximation_rank=3, start_powerSGD_iter=2, min_compression_rate=1,
             random_seed=7),
    ),
    (
        "powersgd:rank=2,start_iter=3,min_compression_rate=1.0,warm_start=false,"
        "error_feedback=false",
        dict(matrix_approximation_rank=2, start_powerSGD_iter=3, min_compression_rate=1,
             use_error_feedback=False, warm_start=False, orthogonalization_epsilon=1e-8),
    ),
    (
        "powersgd:rank=1,start_iter=2,min_compression_rate=1.0,seed=5",
        dict(matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=1,
             orthogonalization_epsilon=1e-8, random_seed=5),
        1e-5,
    ),
]  # fmt: skip


def _torch_powersgd(rank, world, state_kw, steps, bucket_cap_mb=25):
    """The loop of ``train_steps`` with PyTorch's own hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    from torch.nn.parallel import DistributedDataParallel as DDP

    def serial_hook(state, bucket):
        # gloo runs the hook's chained callbacks, each with a blocking all-reduce, on its own
        # threads: with several buckets in flight the ranks can interleave them differently
        # and deadlock. Waiting here keeps one bucket in flight, as our hook does.
        fut = ps.powerSGD_hook(state, bucket)
        fut.wait()
        return fut

    model = DDP(tiny_model(0), bucket_cap_mb=bucket_cap_mb)
    model.register_comm_hook(ps.PowerSGDState(None, **state_kw), serial_hook)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
        opt.step()
    return grads


def _both(rank, world, configs, steps):
    out = []
    for spec, state_kw, *cap in configs:
        cap = cap[0] if cap else 25
        ours = train_steps(rank, world, spec, steps, bucket_cap_mb=cap)
        out.append((ours, _torch_powersgd(rank, world, state_kw, steps, cap)))
    return out


def _expected_bytes(spec: str) -> int:
    """Payload of the tiny model from the formula (per layer, so for any bucketing), all steps."""
    hook = make_hook(spec)
    shapes = [p.shape for p in tiny_model(0).parameters()]
    numel = sum(s.numel() for s in shapes)
    compressed = 0
    for s in shapes:
        n, m = s[0], s.numel() // s[0]
        r = min(n, m, hook.rank_r)
        if len(s) > 1 and (n + m) * r * hook.min_compression_rate < n * m:
            compressed += (n + m) * r
        else:
            compressed += s.numel()
    plain = min(hook.start_iter, STEPS)
    return 4 * (plain * numel + (STEPS - plain) * compressed)


@pytest.mark.dist
def test_powersgd_equals_pytorch_hook_and_counts_bytes():
    res = run_ddp(2, _both, CONFIGS, STEPS)
    for c, (spec, *_) in enumerate(CONFIGS):
        for r in range(2):
            ours, ref = res[r][c]
            for t, (a, b) in enumerate(zip(ours["grads"], ref, strict=True)):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-6 * b.abs().max()), (spec, r, t)
            assert ours["stats"]["sent_bytes"] == _expected_bytes(spec), spec
        # both ranks apply the same averaged gradient
        assert torch.equal(res[0][c][0]["params"][-1], res[1][c][0]["params"][-1])
    # compression happened: from start_iter on, the 16x12 weight's mean gradient has rank r
    for c, r_max, start in ((0, 1, 2), (1, 3, 2), (2, 2, 3), (3, 1, 2)):
        grads = res[0][c][0]["grads"]
        ranks = [int(torch.linalg.matrix_rank(g[:192].view(16, 12))) for g in grads]
        assert ranks[:start] == [12] * start and ranks[start:] == [r_max] * (STEPS - start)


def test_gram_schmidt_orthonormal_and_matches_qr_up_to_signs():
    a = torch.randn(20, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q = gram_schmidt_(a.clone())
    assert torch.allclose(q.T @ q, torch.eye(4, dtype=torch.float64), atol=1e-12)
    qr = torch.linalg.qr(a).Q
    assert torch.allclose(q.abs(), qr.abs(), atol=1e-12)
    assert torch.allclose(q @ q.T, qr @ qr.T, atol=1e-12)


def test_powersgd_refuses_bad_parameters():
    with pytest.raises(ValueError, match="start_iter must be an integer >= 2"):
        PowerSGD(start_iter=1)
    with pytest.raises(ValueError, match="rank must be an integer >= 1, got 0"):
        PowerSGD(rank=0)
    with pytest.raises(ValueError, match="min_compression_rate must be > 0"):
        PowerSGD(min_compression_rate=0.0)
    assert make_hook("powersgd:rank=4").describe()["params"]["rank"] == 4
