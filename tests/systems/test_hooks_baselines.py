"""The uncompressed DDP hooks: fp32 equals DDP's default, fp16/bf16 equal it to their rounding."""

from __future__ import annotations

import pytest
import torch

from systems.hooks import hook_names, make_hook
from systems.hooks.registry import parse_hook_spec
from tests.systems.ddp_harness import run_ddp, train_steps

pytestmark = pytest.mark.dist


def test_allreduce_fp16_bf16_match_ddp_default():
    ref = run_ddp(2, train_steps, None)
    for spec, tol in (("allreduce", 1e-6), ("fp16", 2e-3), ("bf16", 2e-2)):
        got = run_ddp(2, train_steps, spec)
        for r in range(2):
            for a, b in zip(got[r]["grads"], ref[r]["grads"], strict=False):
                assert torch.allclose(a, b, atol=tol * b.abs().max()), spec
        # every rank ends with the same parameters, and 16-bit payloads are half of fp32's
        assert torch.equal(got[0]["params"][-1], got[1]["params"][-1])
    full = run_ddp(2, train_steps, "allreduce")[0]["stats"]["sent_bytes"]
    half = run_ddp(2, train_steps, "fp16")[0]["stats"]["sent_bytes"]
    assert half * 2 == full > 0


def test_registry_names_and_refuses_bad_specs():
    assert {"allreduce", "fp16", "bf16"} <= set(hook_names())
    with pytest.raises(ValueError, match="unknown hook 'nope'; allowed: .*fp16"):
        parse_hook_spec("nope")
    with pytest.raises(ValueError, match="unknown parameter 'rank' for hook fp16; allowed: none"):
        parse_hook_spec("fp16:rank=2")
    with pytest.raises(ValueError, match="non-empty"):
        make_hook("")
