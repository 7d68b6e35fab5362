"""The compiled Top-K selection picks the same entries, in the same order, as the torch form,
ties at the threshold included (they go to the lower index)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import compiled
from compressors.top_k import top_k_indices

pytestmark = pytest.mark.skipif(not compiled.ENABLED, reason="numba is not installed")


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 6),
    d=st.integers(1, 70),
    frac=st.floats(0.0, 1.0),
    levels=st.sampled_from([0, 1, 3]),  # 0: continuous values; else few distinct values: ties
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_compiled_top_k_equals_the_torch_form(m, d, frac, levels, seed, dtype):
    k = max(1, round(frac * d))
    gen = torch.Generator().manual_seed(seed)
    if levels:
        x = torch.randint(-levels, levels + 1, (m, d), generator=gen).to(dtype)
    else:
        x = torch.randn(m, d, generator=gen, dtype=torch.float64).to(dtype)
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want)
    assert torch.equal(values, torch.gather(x, 1, want))


@pytest.mark.parametrize("k", [1, 7])
def test_the_parallel_kernel_and_its_serial_twin_agree(k):
    """Blocks of fewer than ``SERIAL_BELOW`` entries take the one-thread twin, larger ones the
    parallel kernel (the test above only sees the twin): both equal the torch form."""
    from streams.compiled import SERIAL_BELOW

    gen = torch.Generator().manual_seed(k)
    x = torch.randint(-3, 4, (200, 300), generator=gen).to(torch.float64)  # ties
    assert x.numel() >= SERIAL_BELOW
    idx, values = compiled.top_k(x, k)
    want = top_k_indices(x.abs(), k)
    assert torch.equal(idx, want) and torch.equal(values, torch.gather(x, 1, want))
    small = [compiled.top_k(x[i : i + 50], k) for i in range(0, 200, 50)]
    assert torch.equal(torch.cat([s[0] for s in small]), idx)
