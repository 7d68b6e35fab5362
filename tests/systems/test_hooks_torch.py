"""PyTorch's own hooks as comparators: ``torch-powersgd`` gives the library ``powersgd`` hook's
averaged gradients to rounding on a 2-worker DDP run (one bucket and one bucket per parameter),
with the same payload bytes; ``torch-fp16``/``torch-bf16`` equal the library's ``fp16``/``bf16``;
their statistics are declared from their plans."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import hook_names, make_hook
from systems.hooks.torch_hooks import TorchPowerSGD
from tests.systems.ddp_harness import run_ddp, train_steps

PAIRS = [
    ("powersgd", "torch-powersgd", 25),
    ("powersgd", "torch-powersgd", 1e-6),
    ("powersgd:rank=3,min_compression_rate=1.0,seed=7", "torch-powersgd:rank=3,"
     "min_compression_rate=1.0,seed=7", 25),
    ("powersgd:rank=2,start_iter=3,warm_start=false,error_feedback=false", "torch-powersgd:"
     "rank=2,start_iter=3,warm_start=false,use_error_feedback=false", 1e-6),
    ("fp16", "torch-fp16", 25),
    ("bf16", "torch-bf16", 1e-6),
]  # fmt: skip


def _pairs(rank, world, pairs, steps):
    return [
        (train_steps(rank, world, a, steps, bucket_cap_mb=cap),
         train_steps(rank, world, b, steps, bucket_cap_mb=cap))
        for a, b, cap in pairs
    ]  # fmt: skip


@pytest.mark.dist
def test_torch_hooks_match_the_library_hooks():
    res = run_ddp(2, _pairs, PAIRS, 5)
    for j, (_, b, cap) in enumerate(PAIRS):
        for r in range(2):
            ours, ref = res[r][j]
            for t, (x, y) in enumerate(zip(ours["grads"], ref["grads"], strict=True)):
                assert torch.allclose(x, y, rtol=1e-4, atol=1e-6 * y.abs().max()), (b, cap, r, t)
            # the declared bytes of PyTorch's hook equal what the library hook sent
            assert ref["stats"]["sent_bytes"] == ours["stats"]["sent_bytes"], (b, cap)
            assert ref["stats"]["counted"] == "declared" and ours["stats"]["counted"] == "observed"
            assert ref["stats"]["decode_s"] == 0.0 < ref["stats"]["encode_s"]
        # compression happened: after start_iter the 16x12 weight's mean gradient is low-rank
        if "powersgd" in b:
            g = res[0][j][1]["grads"][-1][:192].view(16, 12)
            assert int(torch.linalg.matrix_rank(g)) <= 3


def test_torch_hooks_registered_with_parameters_and_plans():
    assert {"torch-powersgd", "torch-fp16", "torch-bf16"} <= set(hook_names())
    hook = make_hook("torch-powersgd:rank=4,use_error_feedback=false")
    assert isinstance(hook, TorchPowerSGD)
    assert hook.describe()["params"]["rank"] == 4 and hook._state.matrix_approximation_rank == 4
    assert hook._state.orthogonalization_epsilon == 1e-8 and hook._state.start_powerSGD_iter == 2
    shapes = [(16, 12), (16,), (4, 16), (4,)]
    # rank 4 compresses neither matrix ((n + m) 4 * 2 >= n m): three all-reduces, two empty
    assert [c.nbytes for c in hook.plan(shapes, 2)] == [4 * 276, 0, 0]
    one = make_hook("torch-powersgd")
    assert [c.nbytes for c in one.plan(shapes, 2)] == [4 * 20, 4 * (16 + 4), 4 * (12 + 16)]
    assert one.plan(shapes, 2) == make_hook("powersgd").plan(shapes, 2)
    assert [c.nbytes for c in hook.plan(shapes, 2, step=1)] == [4 * 276]
    assert [c.nbytes for c in make_hook("torch-bf16").plan(shapes, 2)] == [2 * 276]
    with pytest.raises(ValueError, match="start_iter must be an integer >= 2"):
        make_hook("torch-powersgd:start_iter=1")
    with pytest.raises(ValueError, match="unknown parameter 'warm' for hook torch-powersgd"):
        make_hook("torch-powersgd:warm=1")
