"""3LC's quantizer and encoders: known bytes, plain-Python re-counts of the stream, the
declared contraction and where it is attained, and the wire bytes being the encoded stream."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import make_vector, vectors

from compressors import parse_spec
from compressors.threelc import (
    ZERO_BYTE,
    ThreeLC,
    quartic_decode,
    quartic_encode,
    ternarize,
    zre_decode,
    zre_encode,
    zre_lengths,
)


def py_quartic(q: list[int]) -> list[int]:
    q = q + [0] * (-len(q) % 5)
    return [sum((q[i + j] + 1) * 3 ** (4 - j) for j in range(5)) for i in range(0, len(q), 5)]


def py_zre(b: list[int]) -> list[int]:
    out, i = [], 0
    while i < len(b):
        if b[i] != ZERO_BYTE:
            out.append(b[i])
            i += 1
            continue
        run = 1
        while i + run < len(b) and b[i + run] == ZERO_BYTE and run < 14:
            run += 1
        out.append(ZERO_BYTE if run == 1 else 241 + run)
        i += run
    return out


def test_ternarize_sparsity_multiplication():
    x = torch.tensor([[1.0, -0.6, 0.4, -0.1, 0.0], [0.0] * 5])
    q, amax = ternarize(x, 1.0)
    assert amax.tolist() == [1.0, 0.0] and q.tolist() == [[1, -1, 0, 0, 0], [0] * 5]
    q, _ = ternarize(x, 1.75)
    assert q[0].tolist() == [1, 0, 0, 0, 0]  # 0.6 / 1.75 < 1/2


def test_quartic_known_bytes_and_round_trip():
    assert quartic_encode(torch.zeros(5, dtype=torch.int8)).tolist() == [ZERO_BYTE]
    assert quartic_encode(torch.ones(5, dtype=torch.int8)).tolist() == [242]
    q = torch.tensor([-1, -1, -1, -1, -1, 1], dtype=torch.int8)
    assert quartic_encode(q).tolist() == [0, 2 * 81 + 27 + 9 + 3 + 1]
    gen = torch.Generator().manual_seed(0)
    for n in (1, 4, 5, 6, 101):
        q = torch.randint(-1, 2, (n,), generator=gen, dtype=torch.int8)
        b = quartic_encode(q)
        assert b.tolist() == py_quartic(q.tolist())
        assert torch.equal(quartic_decode(b, n), q)


def test_zero_run_encoding_known_codes_and_round_trip():
    z = ZERO_BYTE
    cases = {
        (z,): [z],
        (z, z): [243],
        (7,) + (z,) * 14 + (8,): [7, 255, 8],
        (z,) * 15: [255, z],
        (z,) * 16 + (3, z, z, z): [255, 243, 3, 244],
        (1, 2, 3): [1, 2, 3],
        (): [],
    }
    for raw, want in cases.items():
        b = torch.tensor(raw, dtype=torch.uint8)
        assert zre_encode(b).tolist() == want, raw
        assert zre_decode(torch.tensor(want, dtype=torch.uint8)).tolist() == list(raw)
    gen = torch.Generator().manual_seed(1)
    for p_zero in (0.3, 0.9, 0.99):
        b = torch.randint(0, 243, (3000,), generator=gen, dtype=torch.uint8)
        b[torch.rand(3000, generator=gen) < p_zero] = z
        enc = zre_encode(b)
        assert enc.tolist() == py_zre(b.tolist())
        assert torch.equal(zre_decode(enc), b)
        # rows of 300: runs do not continue across a row boundary
        rows = b.view(10, 300)
        assert zre_lengths(rows).tolist() == [len(py_zre(r.tolist())) for r in rows]


@settings(max_examples=15)
@given(x=vectors(min_d=1, max_d=120), s=st.sampled_from([1.0, 1.5, 1.75, 1.99]))
def test_bits_are_the_recounted_stream_and_the_contraction_holds(x, s):
    c = ThreeLC(s=s)
    d = x.numel()
    p = c.encode(x[None], 0)
    q = p.fields["q"][0].tolist()
    assert p.nbits.tolist() == [32 + 8 * len(py_zre(py_quartic(q)))]
    assert int(p.nbits[0]) <= c.max_bits(d)
    err = float(((c.decode(p)[0] - x) ** 2).sum())
    assert err <= (1 - c.delta(d)) * float((x**2).sum()) * (1 + 1e-12)


@pytest.mark.parametrize("s", [1.0, 1.5, 1.9])
def test_contraction_is_attained_at_d_1_and_close_to_its_bound_for_d_2(s):
    c = ThreeLC(s=s)
    y = c(torch.tensor([[-3.0]], dtype=torch.float64), 0)
    assert math.isclose(float((y + 3.0) ** 2), (1 - c.delta(1)) * 9.0, rel_tol=1e-12)
    # x = (1, a) with a just below s/2 is dropped: ratio -> 1 - s (2 - s) / (1 + s^2 / 4)
    x = torch.tensor([[1.0, s / 2 * (1 - 1e-9)]], dtype=torch.float64)
    ratio = float(((c(x, 0) - x) ** 2).sum() / (x**2).sum())
    assert ratio <= 1 - c.delta(2)
    assert math.isclose(ratio, 1 - s * (2 - s) / (1 + s * s / 4), rel_tol=1e-6)


def test_wire_bytes_are_the_scale_then_the_encoded_stream():
    c = ThreeLC(s=1.5)
    x = torch.stack([make_vector(k, 64, 3) for k in ("gaussian", "sparse", "one-hot")]).float()
    p = c.encode(x, 0)
    data, nbytes = c.to_bytes(p)
    for j in range(3):
        stream = py_zre(py_quartic(p.fields["q"][j].tolist()))
        scale = x[j].abs().max().reshape(1).view(torch.uint8).tolist()
        assert data[j, : int(nbytes[j])].tolist() == scale + stream
    assert len(set(nbytes.tolist())) == 3  # each row its own size
    q = c.from_bytes(data, nbytes, like=p, nodes=torch.arange(3))
    assert torch.equal(c.decode(q), c.decode(p))


def test_larger_s_sends_fewer_bytes_on_gaussian_rows():
    x = torch.randn(4, 2000, generator=torch.Generator().manual_seed(0))
    sizes = [int(ThreeLC(s=s).encode(x, 0).nbits.sum()) for s in (1.0, 1.5, 1.9)]
    assert sizes[0] > sizes[1] > sizes[2]


def test_spec_and_bad_parameters():
    assert parse_spec("3lc:s=1.75") == ThreeLC(s=1.75)
    with pytest.raises(ValueError, match=r"s must be a number in \[1, 2\), got s=2.0"):
        ThreeLC(s=2.0)
    with pytest.raises(ValueError, match="float_bits"):
        ThreeLC(float_bits=8)
