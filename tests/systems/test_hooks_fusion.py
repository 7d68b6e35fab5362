"""Fusion groups: the bucket cap that gives DDP ``groups`` buckets, checked on real DDP."""

from __future__ import annotations

import pytest
import torch

from problems.nets import cnn, resnet18
from systems.hooks.fusion import bucket_count, fusion_bucket_cap_mb, wrap_ddp
from tests.systems.ddp_harness import run_ddp

MB = 2**20


def mlp3(seed: int = 0) -> torch.nn.Module:
    """Six tensors of 16, 512, 128, 4096, 128 and 1536 bytes (in reverse parameter order)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4),
    )  # fmt: skip


@pytest.mark.parametrize("make", [lambda: cnn(3, 10), lambda: resnet18()])
def test_nets_get_exactly_the_groups_asked_for(make):
    model = make()
    tensors = len(list(model.parameters()))
    for groups in sorted({1, 2, 3, 5, 8, tensors} & set(range(1, tensors + 1))):
        cap = fusion_bucket_cap_mb(model, groups) * MB
        assert cap == int(cap)  # a whole number of bytes
        assert bucket_count(model, int(cap)) == groups
    assert bucket_count(model, int(fusion_bucket_cap_mb(model, 0) * MB)) == tensors


def _largest(model, cap):
    params = list(reversed(list(model.parameters())))
    buckets, _ = torch.distributed._compute_bucket_assignment_by_size(params, [cap])
    return max(sum(params[i].numel() * 4 for i in b) for b in buckets)


def test_mlp_cap_is_the_most_even_against_every_cap():
    m = mlp3()
    total = 6416
    every = {c: (bucket_count(m, c), _largest(m, c)) for c in range(1, total + 1)}
    for groups in range(1, 7):
        cap = int(fusion_bucket_cap_mb(m, groups) * MB)
        count = max(k for k, _ in every.values() if k <= groups)
        assert every[cap][0] == count == (3 if groups == 4 else groups)  # no cap gives 4
        best = min(big for k, big in every.values() if k == count)
        assert every[cap][1] == best
        assert cap == min(c for c, (k, big) in every.items() if (k, big) == (count, best))
    # reversed sizes 16, 512, 128, 4096, 128, 1536; a bucket closes once it reaches the cap
    by_hand = {1: 4881, 2: 657, 3: 529, 6: 1}  # 3: [16 512 128] [4096] [128 1536]
    for groups, cap in by_hand.items():
        assert fusion_bucket_cap_mb(m, groups) * MB == cap


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match=r"groups must be an integer in \[0, 6\].*got 7"):
        fusion_bucket_cap_mb(mlp3(), 7)
    with pytest.raises(ValueError, match="got -1"):
        fusion_bucket_cap_mb(mlp3(), -1)
    with pytest.raises(ValueError, match="got 2.0"):
        fusion_bucket_cap_mb(mlp3(), 2.0)
    with pytest.raises(ValueError, match="no parameter"):
        fusion_bucket_cap_mb(torch.nn.ReLU(), 1)


GROUPS = ((1, 1), (2, 2), (3, 3), (4, 3), (0, 6), (6, 6))  # (asked, buckets: no cap gives 4)


def _buckets_per_step(model, hook, X, y, steps=3):
    counts, grads = [], []
    for _ in range(steps):
        model.zero_grad()
        before = hook.stats.buckets
        torch.nn.functional.cross_entropy(model(X), y).backward()
        counts.append(hook.stats.buckets - before)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return counts, grads[0]


def _fusion_worker(rank, world):
    g = torch.Generator().manual_seed(7 + rank)
    X, y = torch.randn(16, 12, generator=g), torch.randint(0, 4, (16,), generator=g)
    plain, none = wrap_ddp(mlp3(0), None)
    torch.nn.functional.cross_entropy(plain(X), y).backward()
    out = {"ref": torch.cat([p.grad.flatten() for p in plain.parameters()]), "none": none}
    for groups, _ in GROUPS:
        out[groups] = _buckets_per_step(*wrap_ddp(mlp3(0), "allreduce", groups), X, y)
    out["comp"] = _buckets_per_step(*wrap_ddp(mlp3(0), "comp:topk:ratio=0.5@none", 2), X, y)
    return out


@pytest.mark.dist
def test_ddp_forms_the_predicted_buckets_after_its_rebuild():
    for r in run_ddp(2, _fusion_worker):
        assert r["none"] is None
        for groups, want in GROUPS:
            counts, grad0 = r[groups]
            # one bucket before the rebuild, the fusion groups from the second step on
            assert counts == [1, want, want], (groups, counts)
            assert bucket_count(mlp3(), int(fusion_bucket_cap_mb(mlp3(), groups) * MB)) == want
            assert torch.allclose(grad0, r["ref"], atol=1e-7)
        assert r["comp"][0] == [1, 2, 2]  # any hook reduces each fusion group


def test_wrap_ddp_refuses_groups_with_a_cap():
    with pytest.raises(ValueError, match="groups or bucket_cap_mb, not both"):
        wrap_ddp(mlp3(), "allreduce", 2, bucket_cap_mb=1)
