"""MLMC debiasing of Top-K and of bit-precision levels: unbiased, the variance the telescoping
formula at the adaptive probabilities (measured by Monte Carlo), below the declared omega, and
exact when k >= d; the biased base level alone, or the increment sent without its 1/p_l, fails
the same unbiasedness check. (The registry-wide compressor tests cover the contract, the wire
form and non-finite rows.)"""

from __future__ import annotations

import pytest
import torch

from comm import SimulatedComm
from compressors import parse_spec


def _increments(x: torch.Tensor, ks: list[int]) -> torch.Tensor:
    mag = torch.sort(x.abs(), descending=True, stable=True).values ** 2
    return torch.stack([mag[a:b].sum().sqrt() for a, b in zip(ks, ks[1:], strict=False)])


@pytest.mark.parametrize("kind", ["gauss", "ones", "ramp"])
def test_unbiased_with_the_telescoping_variance(kind):
    C, d, S = parse_spec("mlmc:k=4"), 40, 40000
    x = {"gauss": torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
         "ones": torch.ones(d, dtype=torch.float64),
         "ramp": torch.arange(1, d + 1, dtype=torch.float64)}[kind]  # fmt: skip
    y = C.decode(C.encode(x.expand(S, d).clone(), SimulatedComm(S, seed=1).rng(0)))
    a = _increments(x, C.levels(d))
    want = float(a.sum() ** 2 - (a**2).sum())  # E||C(x) - x||^2
    err = ((y - x) ** 2).sum(dim=1)
    se = float(err.std()) / S**0.5
    assert abs(float(err.mean()) - want) <= 4 * se + 1e-12
    assert want <= C.omega(d) * float((x**2).sum()) + 1e-12
    sd = (y.var(dim=0) / S).sqrt()
    assert bool(((y.mean(dim=0) - x).abs() <= 5 * sd + 1e-12).all())


def test_levels_omega_and_the_exact_case():
    C = parse_spec("mlmc:k=4")
    assert C.levels(40) == [4, 8, 16, 32, 40] and C.omega(40) == pytest.approx(3 * 0.9)
    x = torch.randn(3, 5, dtype=torch.float64)
    packet = C.encode(x, SimulatedComm(3, seed=0).rng(0))  # k = 4 < d = 5: one level
    assert torch.allclose(C.decode(packet), x) and C.omega(5) == 0.0
    exact = parse_spec("mlmc:k=8")
    assert torch.equal(exact.decode(exact.encode(x, SimulatedComm(3, seed=0).rng(0))), x)


def _unbiased(y: torch.Tensor, x: torch.Tensor) -> bool:
    """The sample mean of the rows ``y`` is ``x`` within 5 standard errors per coordinate."""
    sd = (y.var(dim=0) / y.shape[0]).sqrt()
    return bool(((y.mean(dim=0) - x).abs() <= 5 * sd + 1e-12).all())


@pytest.mark.parametrize("kind", ["gauss", "ramp", "heavy"])
def test_bit_levels_unbiased_with_the_telescoping_variance_and_the_base_level_biased(kind):
    C, d, S = parse_spec("mlmc-bits:base_bits=2,depth=4"), 40, 40000
    g = torch.Generator().manual_seed(2)
    x = {"gauss": torch.randn(d, dtype=torch.float64, generator=g),
         "ramp": torch.arange(1, d + 1, dtype=torch.float64),
         "heavy": torch.empty(d, dtype=torch.float64).cauchy_(generator=g)}[kind]  # fmt: skip
    packet = C.encode(x.expand(S, d).clone(), SimulatedComm(S, seed=1).rng(0))
    y = C.decode(packet)
    Q = [C.quantize(x[None], level)[0] for level in range(C.depth + 2)]  # Q_0 .. Q_depth, x
    a = torch.stack([(hi - lo).norm() for lo, hi in zip(Q, Q[1:], strict=False)])
    want = float(a.sum() ** 2 - ((x - Q[0]) ** 2).sum())  # E||C(x) - x||^2 = S^2 - ||R||^2
    err = ((y - x) ** 2).sum(dim=1)
    se = float(err.std()) / S**0.5
    assert abs(float(err.mean()) - want) <= 4 * se + 1e-12
    assert float(err.mean()) <= C.omega(d) * float((x**2).sum()) + 4 * se
    assert _unbiased(y, x)
    # contrasts: the biased base level Q_0 alone, and Q_0 + D_l without the 1/p_l weight
    assert not _unbiased(Q[0].expand(S, d), x)
    p = a / a.sum()
    unweighted = Q[0] + (y - Q[0]) * p[packet.fields["level"]][:, None]
    assert not _unbiased(unweighted, x)
