"""Monte-Carlo estimates of a compressor's constants, shared by the property tests and
``theory_checks``.

Draws are batched: ``draws`` rows hold the same vector, each row with an independent stream, so
one ``encode`` call gives all samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compressors.base import Compressor, Packet
from streams import Streams, tags

Z = 5.0  # standard errors for one-sided Monte-Carlo comparisons


@dataclass(frozen=True)
class Estimate:
    """A sample mean and its standard error over ``n`` draws."""

    mean: float
    se: float
    n: int

    def at_most(self, bound: float, z: float = Z) -> bool:
        """The mean is at most ``bound`` up to ``z`` standard errors (and rounding)."""
        return self.mean <= bound + z * self.se + 1e-12 * max(1.0, abs(bound))

    def at_least(self, bound: float, z: float = Z) -> bool:
        return self.mean >= bound - z * self.se - 1e-12 * max(1.0, abs(bound))

    def __str__(self) -> str:
        return f"{self.mean:.4g} ± {self.se:.1g}"


def estimate(samples: torch.Tensor) -> Estimate:
    n = samples.numel()
    return Estimate(float(samples.mean()), float(samples.std()) / n**0.5 if n > 1 else 0.0, n)


def draws_of(
    c: Compressor, x: torch.Tensor, draws: int, seed: int = 0
) -> tuple[torch.Tensor, Packet]:
    """``draws`` independent compressions of ``x`` (``(d,)``): rows with independent keys; node
    ids cycle through ``0..n-1`` for compressors that need them. Returns outputs and packet."""
    n = getattr(c, "n", None) or 1
    keys = Streams.for_nodes(seed, range(draws), tags.MONTECARLO).keys
    rng = Streams(keys, torch.arange(draws) % n)
    packet = c.encode(x.expand(draws, x.numel()), rng)
    return c.decode(packet), packet


def error_ratios(
    c: Compressor, x: torch.Tensor, draws: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per draw ``||C(x) - x||^2 / ||x||^2``, and the outputs."""
    y, _ = draws_of(c, x, draws, seed)
    return ((y - x) ** 2).sum(dim=1) / (x**2).sum(), y


def declared_constant(c: Compressor, d: int) -> tuple[str, float] | None:
    """What ``E||C(x) - x||^2 / ||x||^2`` may not exceed: ``omega`` (unbiased) or
    ``1 - delta`` (contractive); None for a compressor in neither class."""
    if c.unbiased:
        return "omega", c.omega(d)
    if c.contractive:
        return "1 - delta", 1.0 - c.delta(d)
    return None
