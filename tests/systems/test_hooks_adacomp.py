"""The AdaComp hook against a bin-by-bin single-process re-computation on the stacked per-rank
gradients: decoded gradients, the residues (error feedback), payload bytes; and the sign
packing and selection rule on their own."""

from __future__ import annotations

import math

import pytest
import torch

from systems.hooks.adacomp import adacomp_select, pack_signs, unpack_signs
from tests.systems.ddp_harness import record_steps, run_ddp, tiny_model

SPEC = "adacomp:bin_fc=20,bin_conv=5"


def _record(rank, world, spec, steps):
    """Per step: raw local gradient, decoded gradient, payload bytes; then the residues."""
    rec, hook, params = record_steps(rank, spec, steps)
    return {**rec, "res": [hook._residue[id(p)] for p in params]}


def _reference(raw, sizes, bin_len):
    """AdaComp per rank and parameter, one bin at a time: the mean decoded gradient per step,
    how many entries each rank sent per step, the final residues and what each rank sent in
    total."""
    world = raw[0].shape[0]
    res = [torch.zeros(world, n) for n in sizes]
    total_sent = torch.zeros(world, sum(sizes))
    outs, ks = [], []
    for G_all in raw:
        out = torch.zeros(G_all.shape[1])
        k_rank, off = [0] * world, 0
        for j, n in enumerate(sizes):
            for r in range(world):
                grad = G_all[r, off : off + n]
                G = res[j][r] + grad
                H = G + grad
                maxes, chosen = [], []
                for b in range(0, n, bin_len):
                    gmax = G[b : b + bin_len].abs().max()
                    maxes.append(gmax)
                    chosen += [i for i in range(b, min(b + bin_len, n)) if H[i].abs() >= gmax > 0]
                scale = torch.stack(maxes).mean()
                sent = torch.zeros(n)
                for i in chosen:
                    sent[i] = scale if G[i] > 0 else -scale
                res[j][r] = G - sent
                out[off : off + n] += sent / world
                total_sent[r, off : off + n] += sent
                k_rank[r] += len(chosen)
            off += n
        outs.append(out)
        ks.append(k_rank)
    return outs, ks, res, total_sent


@pytest.mark.dist
def test_adacomp_matches_reference_residue_and_bytes():
    steps = 3
    got = run_ddp(2, _record, SPEC, steps)
    sizes = [p.numel() for p in tiny_model(0).parameters()]
    raw = [torch.stack([got[0]["raw"][t], got[1]["raw"][t]]) for t in range(steps)]
    outs, ks, res, total_sent = _reference(raw, sizes, 20)
    for t in range(steps):
        for r in range(2):
            assert torch.allclose(got[r]["dec"][t], outs[t], atol=1e-6), (t, r)
            # bytes: 8 (length) + 4 P scales + 4 k indices + ceil(k / 8) sign bytes
            k = ks[t][r]
            assert got[r]["sent"][t] == 8 + 4 * len(sizes) + 4 * k + math.ceil(k / 8)
    for r in range(2):
        hook_res = torch.cat(got[r]["res"])
        assert torch.allclose(hook_res, torch.cat([res_j[r] for res_j in res]), atol=1e-6)
        # error feedback: the residue is everything computed and not yet sent
        assert torch.count_nonzero(hook_res) > 0
        assert torch.allclose(hook_res, sum(got[r]["raw"]) - total_sent[r], atol=1e-5)


def test_select_rule_doubles_the_latest_gradient():
    # bin [1, -4 | 3]: g_max = 4 and 3; H = G + grad
    residue = torch.tensor([3.0, -2.0, 0.0])
    grad = torch.tensor([-2.0, -2.0, 3.0])  # G = [1, -4, 3], H = [-1, -6, 6]
    idx, pos, new_res, scale = adacomp_select(residue, grad, 2)
    assert idx.tolist() == [1, 2] and pos.tolist() == [False, True]
    assert scale == 3.5
    assert torch.allclose(new_res, torch.tensor([1.0, -0.5, -0.5]))
    # an entry whose G alone is below the bin max but whose H reaches it is sent
    idx, *_ = adacomp_select(torch.tensor([1.0, -3.0]), torch.tensor([1.5, 0.0]), 2)
    assert idx.tolist() == [0, 1]  # G = [2.5, -3], H = [4, -3]
    # an all-zero bin sends nothing
    idx, *_ = adacomp_select(torch.zeros(4), torch.zeros(4), 2)
    assert idx.numel() == 0


def test_sign_packing_round_trips():
    gen = torch.Generator().manual_seed(0)
    for k in (0, 1, 7, 8, 9, 33):
        bits = torch.rand(k, generator=gen) > 0.5
        packed = pack_signs(bits)
        assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(k / 8)
        assert torch.equal(unpack_signs(packed, k), bits)
    assert pack_signs(torch.tensor([True, False, True])).tolist() == [5]


def test_bad_bins_are_refused():
    from systems.hooks.adacomp import AdaComp

    with pytest.raises(ValueError, match="bin_fc must be an integer >= 1"):
        AdaComp(bin_fc=0)
