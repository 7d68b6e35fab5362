"""MLMC with bit-precision levels: unbiased by exact enumeration over the level draw (the only
randomness), each drawn row the reference's ``Q_0 + D_l / p_l``, bits and digits of a
hand-built vector, the wire form with every level drawn, and the omega bound.
(The registry-wide compressor tests cover the contract, Monte Carlo omega, non-finite rows.)"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from compressors import parse_spec
from compressors.mlmc import waterfill_sup
from streams import Streams


def reference(x: list[float], b0: int, depth: int, step: int):
    """``Q_0(x)``, the increments ``D_1..D_depth, D_top`` and ``p_l``, entry by entry in plain
    Python from the docstring's formulas."""
    s = max(abs(v) for v in x)

    def q(v: float, b: int) -> int:
        r = abs(v) / s if s > 0 else 0.0
        return min(math.floor(2**b * r), 2**b - 1)

    def level(b: int) -> list[float]:
        return [math.copysign(s * q(v, b) / 2**b, v) if v != 0 else 0.0 for v in x]

    bs = [b0 + step * j for j in range(depth + 1)]
    Q = [level(b) for b in bs] + [list(x)]
    D = [[hi - lo for hi, lo in zip(Q[j + 1], Q[j], strict=True)] for j in range(depth + 1)]
    norms = [math.sqrt(sum(v * v for v in inc)) for inc in D]
    total = sum(norms)
    p = [nm / total for nm in norms] if total > 0 else [1 / len(D)] * len(D)
    return Q[0], D, p


def outputs(x, b0, depth, step):
    """Each level's message ``Q_0 + D_l / p_l`` (rows), and ``p``."""
    Q0, D, p = reference(x, b0, depth, step)
    rows = [[a + v / pl for a, v in zip(Q0, inc, strict=True)] if pl > 0 else None
            for inc, pl in zip(D, p, strict=True)]  # fmt: skip
    return rows, p


X = [1.0, 0.6, -0.3, 0.0, 0.2, -0.77, 0.05]


@pytest.mark.parametrize("b0,depth,step", [(2, 3, 1), (1, 2, 2), (3, 1, 1), (2, 0, 1)])
def test_exact_enumeration_is_unbiased_and_rows_are_the_reference(b0, depth, step):
    c = parse_spec(f"mlmc-bits:base_bits={b0},depth={depth},step={step}")
    x = torch.tensor(X, dtype=torch.float64)
    rows, p = outputs(X, b0, depth, step)
    mean = [sum(pl * r[j] for pl, r in zip(p, rows, strict=True) if r) for j in range(len(X))]
    torch.testing.assert_close(torch.tensor(mean, dtype=torch.float64), x, rtol=0, atol=1e-12)
    # E||C - x||^2 exactly, against the telescoping formula and the declared omega
    var = sum(pl * sum((a - v) ** 2 for a, v in zip(r, X, strict=True))
              for pl, r in zip(p, rows, strict=True) if r)  # fmt: skip
    Q0, D, _ = reference(X, b0, depth, step)
    S = sum(math.sqrt(sum(v * v for v in inc)) for inc in D)
    R2 = sum((a - v) ** 2 for a, v in zip(Q0, X, strict=True))
    assert var == pytest.approx(S * S - R2, rel=1e-12, abs=1e-15)
    assert var <= c.omega(len(X)) * float((x**2).sum())
    # the compressor's rows: each is the reference's message of the level it drew
    m = 3000
    packet = c.encode(x.expand(m, -1), Streams.for_nodes(1, range(m), 3))
    y = c.decode(packet)
    level = packet.fields["level"]
    for lv, row in enumerate(rows):
        sel = level == lv
        if row is None:
            assert not bool(sel.any())
            continue
        want = torch.tensor(row, dtype=torch.float64).expand(int(sel.sum()), -1)
        torch.testing.assert_close(y[sel], want, rtol=1e-13, atol=1e-13)
        # drawn with probability p_l (5 binomial standard errors)
        freq, sd = float(sel.double().mean()), math.sqrt(p[lv] * (1 - p[lv]) / m)
        assert abs(freq - p[lv]) <= 5 * sd + 1e-12


def test_hand_built_vector_digits_and_bits():
    # s = 1, r = (1, .6, .3, 0, .2): q_2 = (3, 2, 1, 0, 0) (r = 1 capped at 2^2 - 1),
    # q_3 = (7, 4, 2, 0, 1) -> digits (1, 0, 0, 0, 1); q_4 = (15, 9, 4, 0, 3) -> (1, 1, 0, 0, 1)
    c = parse_spec("mlmc-bits:base_bits=2,depth=2,step=1")
    x = torch.tensor([1.0, 0.6, -0.3, 0.0, 0.2], dtype=torch.float32)
    m = 400
    packet = c.encode(x.expand(m, -1), Streams.for_nodes(0, range(m), 3))
    f, level = packet.fields, packet.fields["level"]
    assert set(level.tolist()) == {0, 1, 2}
    assert f["q0"][0].tolist() == [3, 2, 1, 0, 0]
    assert f["signs"][0].tolist() == [False, False, True, False, False]
    assert f["digits"][level == 0][0].tolist() == [1, 0, 0, 0, 1]
    assert f["digits"][level == 1][0].tolist() == [1, 1, 0, 0, 1]
    assert bool((f["digits"][level == 2] == 0).all())
    # level code 2 bits, s 32, per entry sign + 2 bits (15); a truncation level: its scale 32
    # and one digit per entry (5); the top: 5 float values (160)
    trunc, top = 2 + 32 + 15 + 32 + 5, 2 + 32 + 15 + 160
    assert packet.nbits.tolist() == [trunc if lv < 2 else top for lv in level.tolist()]
    assert c.max_bits(5) == top
    _, nbytes = c.to_bytes(packet)
    assert nbytes.tolist() == [(b + 7) // 8 for b in packet.nbits.tolist()]
    # the top message carries (x - Q_{b_2}(x)) / p_top: residuals (1, .6, .3, 0, .2) - q_4/16
    _, _, p = reference(x.tolist(), 2, 2, 1)
    res = torch.tensor([1 / 16, 0.6 - 9 / 16, -(0.3 - 4 / 16), 0.0, 0.2 - 3 / 16]) / p[2]
    torch.testing.assert_close(f["values"][level == 2][0], res, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wire_round_trip_with_every_level(dtype):
    c = parse_spec("mlmc-bits:base_bits=1,depth=2")
    g = torch.Generator().manual_seed(4)
    m, d = 60, 33
    x = torch.randn(m, d, generator=g, dtype=torch.float64).to(dtype)
    x[1] = 0.0
    packet = c.encode(x, Streams.for_nodes(2, range(m), 3))
    assert set(packet.fields["level"].tolist()) == {0, 1, 2}
    data, nbytes = c.to_bytes(packet)
    back = c.from_bytes(data, nbytes, like=packet, nodes=torch.arange(m))
    assert torch.equal(c.decode(back), c.decode(packet))
    assert torch.equal(back.nbits, packet.nbits)
    if dtype == torch.float32:
        assert torch.equal(nbytes, (packet.nbits + 7) // 8)
    assert bool((c.decode(packet)[1] == 0).all())
    bad = data.clone()
    bad[:, 0] |= 3  # the 2-bit level code reads 3 > depth
    with pytest.raises(ValueError, match="level"):
        c.from_bytes(bad, nbytes, like=packet, nodes=torch.arange(m))


@pytest.mark.parametrize("compiled", [True, False])
def test_the_payload_is_compact(compiled, monkeypatch):
    """``q0`` in the narrowest dtype of ``base_bits``; ``values`` with no columns unless a
    row drew the top increment, the decode then the same as from a zero block (-0 -> +0)."""
    from compressors import compiled_mlmc

    monkeypatch.setattr(compiled_mlmc, "FAST_FROM", 0)
    monkeypatch.setattr(compiled_mlmc, "ENABLED", compiled and compiled_mlmc.ENABLED)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4000, generator=g)
    x[0, :7] = -1e-6  # below every level: -0 before the values' + 0, which makes it +0
    rng = Streams.for_nodes(1, range(3), 3)
    empty = 0
    for spec, dtype in [("mlmc-bits", torch.uint8), ("mlmc-bits:base_bits=8", torch.uint8),
                        ("mlmc-bits:base_bits=9,depth=2", torch.int16),
                        ("mlmc-bits:base_bits=16,depth=1", torch.int32)]:  # fmt: skip
        c = parse_spec(spec)
        p = c.encode(x, rng)
        assert p.fields["q0"].dtype == dtype
        drew_top = bool((p.fields["level"] == c.depth).any())
        assert p.fields["values"].shape == (3, 4000 if drew_top else 0)
        if drew_top:
            continue
        empty += 1
        y = c.decode(p)
        full = dict(p.fields, values=torch.zeros(3, 4000))
        assert torch.equal(y.view(torch.int32), c.decode(dataclasses.replace(p, fields=full))
                           .view(torch.int32))  # fmt: skip
        assert bool((y[0, :7].view(torch.int32) == 0).all())  # +0, not -0
    assert empty >= 3  # long rows: the top increment is rarely drawn
    top = parse_spec("mlmc-bits:depth=0").encode(x, rng)  # depth 0: the top is the only draw
    assert top.fields["values"].shape == (3, 4000)


def test_omega_is_the_box_supremum_and_below_the_plain_bound():
    rnd = random.Random(0)
    for b0, depth, step, d in [(2, 8, 1, 1000), (1, 3, 2, 20), (3, 2, 1, 7), (2, 5, 1, 60)]:
        c = parse_spec(f"mlmc-bits:base_bits={b0},depth={depth},step={step}")
        cap, kappa, w = c.caps(d), 1 - 4.0**-b0, 4.0**-b0
        sup = waterfill_sup(cap, kappa)

        def ratio(u, kappa=kappa):
            return (sum(u) ** 2 - sum(v * v for v in u)) / (kappa + sum(v * v for v in u))

        grid = max(ratio([min(t * cap[0] / 2000, a) for a in cap]) for t in range(2001))
        assert grid <= sup * (1 + 1e-12) and sup <= grid * (1 + 1e-5)
        for _ in range(2000):  # no point of the box does better
            assert ratio([a * rnd.random() ** 0.3 for a in cap]) <= sup * (1 + 1e-12)
        assert c.omega(d) == min(sup, (d - 1) * w)
        assert c.omega(d) <= depth * d * w / (1 + (d - 1) * w) + 1e-12
    assert parse_spec("mlmc-bits:depth=0").omega(50) == 0.0
    assert parse_spec("mlmc-bits").omega(1) == 0.0


def test_collinear_increments_are_exact_and_zero_stays_zero():
    c = parse_spec("mlmc-bits")
    e = torch.zeros(4, 9, dtype=torch.float64)
    e[:, 3] = -2.5  # one-hot: every increment lies along e_3, so C(x) = x for every draw
    torch.testing.assert_close(c(e, Streams.for_nodes(0, range(4), 3)), e, rtol=1e-15, atol=0)
    z = torch.zeros(2, 9)
    assert bool((c(z, 0) == 0).all())
    with pytest.raises(ValueError, match="base_bits"):
        parse_spec("mlmc-bits:base_bits=0")
    with pytest.raises(ValueError, match="62"):
        parse_spec("mlmc-bits:base_bits=20,depth=10,step=5")
