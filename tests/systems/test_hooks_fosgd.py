"""The ``fo-sgd`` hook on two gloo processes against a one-process re-computation on the stacked
per-rank bucket gradients, with the Hadamard matrix written out (not the fast transform): the
averaged output, the exact payload bytes, signs shared and fresh each step; and the randomized
transform's inverse exact to rounding on a bucket-sized vector."""

from __future__ import annotations

import math

import pytest
import torch

from compressors.fosgd import irwht, padded_dim, rwht
from streams import Streams, tags
from systems.hooks import make_hook
from tests.systems.ddp_harness import run_ddp
from tests.systems.test_hooks_vgc import paired_calls, record_run

STEPS = 3


def hadamard(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def fosgd_reference(group, seed: int):
    """The averaged output of one bucket call and the sign vector it used."""
    call = group[0]
    d = call["input"].numel()
    n = padded_dim(d)
    H = hadamard(n) / math.sqrt(n)
    step, index = call["step"], call["index"]
    words = Streams.shared(seed, 1, step, index, tags.FOSGD_SIGNS).bits64(n)[0]
    s = 1.0 - 2.0 * (words & 1).double()
    qs = []
    for w, c in enumerate(group):
        x = torch.zeros(n, dtype=torch.float64)
        x[:d] = c["input"].double()
        y = H @ (s * x)
        lam = y.abs().max()
        dither = Streams.for_nodes(seed, [w], step, index, tags.FOSGD_DITHER)
        u = dither.uniform(n, dtype=torch.float32)[0]
        b = u.double() < 0.5 * (1 + y / lam)
        qs.append(lam * (2.0 * b.double() - 1.0))
    return (s * (H @ torch.stack(qs).mean(0)))[:d], s


@pytest.mark.dist
def test_fosgd_matches_the_stacked_reference_and_counts_bytes():
    specs = [("fo-sgd", 0), ("fo-sgd:seed=7", 7)]
    results = run_ddp(2, record_run, [s for s, _ in specs], STEPS)
    for j, (spec, seed) in enumerate(specs):
        groups = list(paired_calls(results, j))
        assert len(groups) > STEPS  # several buckets
        signs = set()
        for group in groups:
            ref, s = fosgd_reference(group, seed)
            signs.add(tuple(s[:8].tolist()))
            n = padded_dim(group[0]["input"].numel())
            for call in group:
                assert torch.allclose(call["output"].double(), ref, rtol=1e-4, atol=1e-6), spec
                assert call["bytes"] == math.ceil(n / 8) + 4, spec
        assert len(signs) == len(groups), "fresh signs per step and bucket"
    # the output is the decoded average, not one rank's gradient: it differs from both inputs
    g = groups[-1]
    assert not torch.allclose(g[0]["output"], g[0]["input"], atol=1e-4)


def test_inverse_transform_exact_to_rounding_on_a_bucket():
    hook = make_hook("fo-sgd:seed=3")
    d = 100_003  # padded to 131072
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    s = hook.signs(padded_dim(d), step=4, index=1)
    assert torch.equal(s, hook.signs(padded_dim(d), step=4, index=1))
    assert not torch.equal(s, hook.signs(padded_dim(d), step=5, index=1))
    back = irwht(rwht(x[None], s), s, d)[0]
    assert (back - x).abs().max() < 1e-5 * x.abs().max()
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got seed=-1"):
        make_hook("fo-sgd:seed=-1")
