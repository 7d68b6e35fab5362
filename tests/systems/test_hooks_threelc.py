"""The 3LC hook against a single-process re-computation (plain-Python encoders) on the stacked
per-rank gradients: decoded gradients, error buffers, and the bytes of the encoded stream. The
quantizer and encoders alone: tests/compressors/test_threelc.py."""

from __future__ import annotations

import pytest
import torch

from tests.systems.ddp_harness import record_steps, run_ddp, tiny_model


def _record(rank, world, spec, steps):
    """Per step: raw local gradient, decoded gradient, payload bytes; then the error buffers."""
    rec, hook, params = record_steps(rank, spec, steps, track_order=True)
    return {**rec, "err": [hook._error[id(p)] for p in params]}


def _py_quartic(q: list[int]) -> list[int]:
    q = q + [0] * (-len(q) % 5)
    return [sum((q[i + j] + 1) * 3 ** (4 - j) for j in range(5)) for i in range(0, len(q), 5)]


def _py_zre(b: list[int]) -> list[int]:
    out, i = [], 0
    while i < len(b):
        if b[i] != 121:
            out.append(b[i])
            i += 1
            continue
        run = 1
        while i + run < len(b) and b[i + run] == 121 and run < 14:
            run += 1
        out.append(121 if run == 1 else 241 + run)
        i += run
    return out


def _reference(raw, sizes, s, orders):
    """3LC per rank; the stream of a step concatenates the parameters in ``orders[t]``."""
    world = raw[0].shape[0]
    err = [torch.zeros(world, n) for n in sizes]
    outs, nbytes = [], []
    for t, G in enumerate(raw):
        out = torch.zeros(G.shape[1])
        step_bytes = []
        for r in range(world):
            streams, parts = {}, []
            for j, x in enumerate(torch.split(G[r], sizes)):
                x = x + err[j][r]
                amax = x.abs().max()
                q = torch.round(x / amax / s)  # round(x / M), M = s max|x|
                err[j][r] = x - q * amax * s
                parts.append(q * amax * s)
                streams[j] = _py_quartic([int(v) for v in q])
            stream = sum((streams[j] for j in orders[t]), [])
            out += torch.cat(parts) / world
            step_bytes.append(8 + 4 * len(sizes) + len(_py_zre(stream)))
        outs.append(out)
        nbytes.append(step_bytes)
    return outs, nbytes, err


@pytest.mark.dist
@pytest.mark.parametrize("s", [1.0, 1.75])
def test_threelc_matches_reference_error_feedback_and_bytes(s):
    steps = 3
    got = run_ddp(2, _record, f"3lc:s={s}", steps)
    sizes = [p.numel() for p in tiny_model(0).parameters()]
    raw = [torch.stack([got[0]["raw"][t], got[1]["raw"][t]]) for t in range(steps)]
    assert got[0]["order"] == got[1]["order"] and len(got[0]["order"]) == steps  # one bucket
    outs, nbytes, err = _reference(raw, sizes, s, got[0]["order"])
    for t in range(steps):
        for r in range(2):
            assert torch.allclose(got[r]["dec"][t], outs[t], atol=1e-6), (t, r)
            assert got[r]["sent"][t] == nbytes[t][r], (t, r)
    for r in range(2):
        e = torch.cat(got[r]["err"])
        assert torch.count_nonzero(e) > 0
        assert torch.allclose(e, torch.cat([e_j[r] for e_j in err]), atol=1e-6)
    # the quantized stream is smaller than one byte per five values
    assert max(max(b) for b in nbytes) < 8 + 16 + sum(-(-n // 5) for n in sizes)


def test_bad_s_is_refused():
    from systems.hooks.threelc import ThreeLC

    with pytest.raises(ValueError, match=r"s must be in \[1, 2\)"):
        ThreeLC(s=2.0)
