"""FastSGD: the values against a plain reference, the key widths against brute force, the bits
recounted key by key, and the declared delta against a search over vectors. (The registry-wide
compressor tests cover the contract, the wire form and non-finite rows.)"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from compressors import parse_spec
from compressors.fastsgd import FastSGD


def reference(x: list[float], base: float, levels: int) -> list[float]:
    """The docstring's values, one coordinate at a time."""
    M = max(abs(v) for v in x)
    out = []
    for v in x:
        if v == 0:
            out.append(0.0)
            continue
        q = round(math.log(M / abs(v)) / math.log(base))  # Python rounds halves to even too
        out.append(math.copysign(M * base**-q, v) if q < levels else 0.0)
    return out


def rows(m: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=g, dtype=torch.float64) * torch.exp(
        3 * torch.randn(m, d, generator=g, dtype=torch.float64)
    )
    x[torch.rand(m, d, generator=g) < 0.3] = 0.0
    return x


@pytest.mark.parametrize("base,levels", [(2.0, 8), (1.5, 20), (4.0, 3)])
def test_values_match_the_reference(base, levels):
    c = FastSGD(base=base, levels=levels)
    x = rows(5, 200, 1)
    y = c(x, 0)
    want = torch.tensor([reference(r, base, levels) for r in x.tolist()], dtype=torch.float64)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=0)


def test_bits_recounted_key_by_key_and_the_widths_are_the_best_triple():
    c = FastSGD()
    d = 300
    x = rows(4, d, 2)
    packet = c.encode(x, 0)
    B = math.ceil(math.log2(d))
    for i in range(4):
        keys = [j for j, v in enumerate(packet.fields["keep"][i].tolist()) if v]
        deltas = [k - p - 1 for k, p in zip(keys, [-1] + keys[:-1], strict=True)]
        need = [int(g).bit_length() for g in deltas]

        def cost(ws, need=need):
            return sum(min(w for w in (*ws, B) if w >= n) for n in need)

        best = min(cost(t) for t in itertools.combinations_with_replacement(range(B + 1), 3))
        widths = tuple(packet.fields["widths"][i].tolist())
        assert cost(widths) == best
        header = 32 + math.ceil(math.log2(d + 1)) + 3 * math.ceil(math.log2(B + 1))
        assert int(packet.nbits[i]) == header + len(keys) * (2 + 1 + 3) + cost(widths)
    data, nbytes = c.to_bytes(c.encode(x.float(), 0))
    assert torch.equal(nbytes, (packet.nbits + 7) // 8)


def test_adjacent_keys_cost_no_delta_bits():
    c = FastSGD()
    x = torch.zeros(1, 1000, dtype=torch.float64)
    x[0, 100:164] = 1.0  # 64 adjacent keys: one delta of 100, then 63 zeros
    packet = c.encode(x, 0)
    assert packet.fields["widths"][0].tolist() == [0, 0, 7]  # 100 needs 7 bits, B = 10
    assert int(packet.nbits[0]) == 32 + 10 + 3 * 4 + 64 * (2 + 1 + 3) + 7


@pytest.mark.parametrize("base,levels", [(2.0, 8), (1.5, 20), (4.0, 3), (2.0, 1)])
@pytest.mark.parametrize("d", [2, 10, 1000])
def test_declared_delta_is_the_supremum_over_vectors(base, levels, d):
    """``1 - delta`` bounds the ratio on vectors ``(1, u, ..., u)`` for a grid of ``u`` and just
    either side of every rounding boundary ``b^-(q + 1/2)``, and on random vectors; and it is
    reached there (to 1e-6): it is the supremum."""
    c = FastSGD(base=base, levels=levels)
    bound = 1 - c.delta(d)
    ends = torch.tensor([base ** -(q + 0.5) for q in range(levels)], dtype=torch.float64)
    u = torch.cat([torch.logspace(-8, 0, 2001, dtype=torch.float64), ends * (1 + 1e-10),
                   ends * (1 - 1e-10)])  # fmt: skip
    x = u[:, None].expand(-1, d).clone()
    x[:, 0] = 1.0
    y = c(x, 0)
    ratio = ((y - x) ** 2).sum(dim=1) / (x**2).sum(dim=1)
    assert float(ratio.max()) <= bound * (1 + 1e-12)
    assert float(ratio.max()) >= (1 - 1e-6) * bound
    r = rows(500, d, 3)
    r = r[(r != 0).any(dim=1)]
    ratio = ((c(r, 0) - r) ** 2).sum(dim=1) / (r**2).sum(dim=1)
    assert float(ratio.max()) <= bound * (1 + 1e-12)


def test_delta_in_numbers():
    c = FastSGD()
    assert c.delta(1) == 1.0
    assert 1 - c.delta(1000) == pytest.approx(999 * (1 - 2**-0.5) ** 2 / (1 + 999 / 2))
    assert c.delta(10**6) >= 1 / 10**6  # every error is at most the entry's square (b <= 4)


def test_bad_parameters_are_refused():
    for spec, message in (("fastsgd:base=1", "base must be"), ("fastsgd:base=5", "base must be"),
                          ("fastsgd:levels=0", "levels must be"),
                          ("fastsgd:levels=300", "levels must be")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_spec(spec)
