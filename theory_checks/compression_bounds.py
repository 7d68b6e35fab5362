"""Bits against error: the volume lower bound that any compressor with ``b`` bits obeys, measured on
the all-reduce quantizers (``ssq``, ``msq``, ``thc``), spherical compression and sparse dithering.

The paper: Albasyoni, Safaryan, Condat & Richtárik, "Optimal Gradient Compression for
Distributed and Federated Learning" (arXiv 2010.03246) studies the trade-off between the bits of
a compressed vector and its error and proves worst-case and average-case lower bounds; only its
abstract and contents could be read, so the bound checked here is not quoted from it. It is the
classical volume (covering) bound, derived here:

*Bound.* Let ``C`` be any compressor whose output, given its randomness shared with the
receiver, is a function of a message of at most ``b`` bits, and let ``x`` be uniform in the unit
ball of ``R^d``. For a fixed shared seed the outputs form a codebook of at most ``N = 2^b``
points; the points within distance ``r`` of it have volume fraction at most ``N r^d``, so
``E min_c ||c - x||^2 >= int_0^{r0} 2 r (1 - N r^d) dr = (d / (d + 2)) N^(-2/d)``
(``r0 = N^(-1/d)``), and ``E||x||^2 = d / (d + 2)``. Averaging over seeds and allowing any
rescaling ``lambda C`` (the same message):

    ``R = min_lambda E||lambda C(x) - x||^2 / E||x||^2 >= 2^(-2 b / d)``.

For an unbiased ``C`` with ``omega``, ``lambda = 1 / (1 + omega)`` gives
``R <= omega / (1 + omega)``, for a contractive one ``R <= 1 - delta``: so the declarations must
satisfy ``omega / (1 + omega) >= 2^(-2b/d)``, resp. ``1 - delta >= 2^(-2b/d)``
(``b >= (d/2) log2(1 + 1/omega)``), a bits-versus-variance bound.

The claim (``compressors.volume-bound``), per compressor instance: (a) the measured ``R``
(Monte Carlo over ``x`` uniform in the ball, fresh randomness per draw; ``R`` from the sample
moments, its standard error from 20 batches) is at least ``2^(-2b/d)`` with ``b`` the declared
bits, up to ``Z = 5`` standard errors; (b) the declared constant obeys the bound; (c) a
compressor declared unbiased is unbiased at a fixed vector (every coordinate of the sample mean
within ``Z + 1`` standard errors of ``x``, plus ``1e-12 ||x||_inf`` for entries sent exactly),
the premise of (b).

Variable-size payloads (sparse dithering) are also held to their *mean* bits: (d) with
``bbar`` the measured mean of ``nbits``, ``R >= c_d 2^(-2 (bbar + log2(1 + max_bits)) / d)``,
``c_d = (d + 2) Vol(B_d)^(2/d) / (2 pi e)`` (0.83 at ``d = 8``, 0.99 at ``d = 1000``). Derived
here: given the seed, the message ``M`` has entropy at most ``E len(M) + log2(1 + max_bits)``
(its length, then at most ``len`` bits), so ``I(x; lambda C(x)) <= bbar + log2(1 + max_bits)``
and the Shannon lower bound for ``x`` uniform in the ball,
``E||y - x||^2 >= (d / (2 pi e)) 2^(2 (h(x) - I) / d)`` with ``h(x) = log2 Vol(B_d)``, gives
(d). The sample's ``bbar`` and ``R`` enter with ``Z`` standard errors each in the bound's favour.

Tight instance: spherical compression at ``d = 3`` is within a factor 1.4 of the bound when its
float is left out of the count (``k = 8``: ``R = 0.0078``, index-only bound ``2^(-16/3) =
0.025``), so counting the float is what keeps it above: its counted ``b = k + 32`` puts the
bound at ``~1e-8``. The quantizers sit far above (``b/d >= 2``). Sparse dithering's ``max_bits``
is loose, so (a) says little there; (d) holds with room: at ``d = 256``, ``s = 3`` it sends
``bbar = 268`` bits for ``R = 0.765``, where (d) would allow ``R`` down to 0.22 and the volume
bound at ``R = 0.765`` needs only ``(d/2) log2(1/R) = 49`` bits (a factor 5.4; the table at
``d = 1000`` is in :mod:`compressors.sparse_dithering`). Not a rate.

Power: ``bits-without-float`` (each compressor counting its payload without its float, the
classic under-count) must fail (spherical's measured ``R`` and its declared ``1 - delta`` fall
below the index-only bound); ``shrunk-as-unbiased`` (each unbiased compressor's output divided
by ``1 + omega``, a biased operator still declared unbiased) must fail (c).
"""

from __future__ import annotations

import math

import torch

from compressors import Compressor, parse_spec
from compressors.montecarlo import Z
from streams import Streams, tags
from theory_checks.base import Check, Outcome, Variant

V_BITS = Variant(
    "bits-without-float",
    "wrong-constant",
    "the payload counted without its float (scale or coefficient): fewer bits than it sends",
)
V_SHRUNK = Variant(
    "shrunk-as-unbiased",
    "other",
    "each unbiased compressor's output divided by 1 + omega (biased) but still declared unbiased",
)

#: (spec, d): the instances measured.
INSTANCES = (
    ("ssq:width=1", 8),
    ("ssq:width=2", 8),
    ("msq:widths=1/3", 8),
    ("thc:width=1", 8),
    ("thc:width=3,table=thc", 8),
    ("spherical", 3),
    ("spherical:k=8", 3),
    ("sparse-dithering:s=0.25", 8),
    ("sparse-dithering", 64),
    ("sparse-dithering:s=3.0", 256),
)


def _ball(d: int, count: int, seed: int) -> torch.Tensor:
    """``count`` points uniform in the unit ball of ``R^d`` (float64)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(count, d, generator=g, dtype=torch.float64)
    r = torch.rand(count, 1, generator=g, dtype=torch.float64) ** (1.0 / d)
    return z / torch.linalg.vector_norm(z, dim=1, keepdim=True) * r


def _bits(c: Compressor, d: int, variant: str | None) -> int:
    b = c.max_bits(d)
    return b - c.float_bits if variant == V_BITS.name else b


def _outputs(c: Compressor, x: torch.Tensor, seed: int, variant: str | None):
    """The decoded rows and each row's counted bits (less the float under ``V_BITS``)."""
    rng = Streams.for_nodes(seed, range(x.shape[0]), tags.COMPRESSION_BOUNDS)  # one per row
    packet = c.encode(x, rng)
    y = c.decode(packet)
    if variant == V_SHRUNK.name and c.unbiased:
        y = y / (1.0 + c.omega(x.shape[1]))
    nbits = packet.nbits.double() - (c.float_bits if variant == V_BITS.name else 0)
    return y, nbits


def _slb_factor(d: int) -> float:
    """``(d + 2) Vol(B_d)^(2/d) / (2 pi e)``: the Shannon lower bound's constant for the ball."""
    log_vol = 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d + 1.0)
    return (d + 2) * math.exp(2.0 * log_vol / d) / (2.0 * math.pi * math.e)


def _best_rescaled(x: torch.Tensor, y: torch.Tensor) -> float:
    a = float((x * y).sum(1).mean())
    b = float((y * y).sum(1).mean())
    n2 = float((x * x).sum(1).mean())
    return 1.0 - (a * a / (b * n2) if b > 0 else 0.0)


def _run(fast: bool, variant: str | None = None) -> list[Outcome]:
    count = 8000 if fast else 100000
    out = []
    for i, (spec, d) in enumerate(INSTANCES):
        c = parse_spec(spec)
        b = _bits(c, d, variant)
        bound = 2.0 ** (-2.0 * b / d)
        x = _ball(d, count, seed=100 + i)
        y, nbits = _outputs(c, x, seed=200 + i, variant=variant)
        r = _best_rescaled(x, y)
        parts = torch.tensor(
            [_best_rescaled(xs, ys) for xs, ys in zip(x.chunk(20), y.chunk(20), strict=True)]
        )
        se = float(parts.std()) / math.sqrt(20)
        out.append(
            Outcome(
                f"{spec}, d={d}: measured R over the unit ball, b={b}",
                f"R >= 2^(-2b/d) = {bound:.4g}",
                f"R = {r:.4g} ± {se:.1g}",
                r + Z * se >= bound,
                tolerance=f"{Z:g} se",
                margin=(r + Z * se) / bound - 1.0,
            )
        )
        if not c.fixed_size:
            mean_b = float(nbits.mean()) + Z * float(nbits.std()) / math.sqrt(count)
            info = mean_b + math.log2(1.0 + _bits(c, d, variant))
            rd = _slb_factor(d) * 2.0 ** (-2.0 * info / d)
            out.append(
                Outcome(
                    f"{spec}, d={d}: measured R against the mean bits {float(nbits.mean()):.1f}",
                    f"R >= c_d 2^(-2 (bbar + log2(1 + max_bits)) / d) = {rd:.4g}",
                    f"R = {r:.4g} ± {se:.1g}",
                    r + Z * se >= rd,
                    tolerance=f"{Z:g} se",
                    margin=(r + Z * se) / rd - 1.0,
                )
            )
        if c.unbiased:
            om = c.omega(d)
            declared, name = om / (1.0 + om), f"omega/(1+omega) = {om / (1.0 + om):.4g}"
        else:
            declared, name = 1.0 - c.delta(d), f"1 - delta = {1.0 - c.delta(d):.4g}"
        out.append(
            Outcome(
                f"{spec}, d={d}: declared constant, b={b}",
                f">= 2^(-2b/d) = {bound:.4g}",
                name,
                declared >= bound,
                margin=declared / bound - 1.0,
            )
        )
        if c.unbiased:
            xf = _ball(d, 1, seed=300 + i)[0]
            draws = _outputs(c, xf.expand(count, d).contiguous(), 400 + i, variant)[0]
            se_j = draws.std(dim=0) / math.sqrt(count)
            slack = se_j + 1e-12 * float(xf.abs().max())  # entries sent exactly: rounding
            z = float(((draws.mean(0) - xf).abs() / slack).max())
            out.append(
                Outcome(
                    f"{spec}, d={d}: unbiased at a fixed x",
                    f"max_j |mean_j - x_j| / se_j <= {Z + 1:g}",
                    f"{z:.3g}",
                    z <= Z + 1,
                    tolerance="z-score",
                    margin=(Z + 1) / max(z, 1e-12) - 1.0,
                )
            )
    return out


CHECKS = [
    Check(
        "compressors.volume-bound",
        "volume lower bound 2^(-2b/d) (derived, THEORY of this module); Albasyoni, Safaryan, "
        "Condat & Richtárik 2020, arXiv 2010.03246 (abstract: bits-vs-error lower bounds)",
        _run,
        fast=True,
        variants=(V_BITS, V_SHRUNK),
    ),
]
