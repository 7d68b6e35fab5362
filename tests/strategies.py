"""Hypothesis strategies and registry-driven cases shared by the tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from compressors import COMPRESSORS, Compressor

VECTOR_KINDS = ("gaussian", "one-hot", "constant", "heavy-tailed", "sparse", "ramp")
SCALES = (1e-20, 1e-3, 1.0, 1e3, 1e20)


def compressor_cases(n: int = 4) -> list[tuple[str, Compressor]]:
    """Every registered compressor's examples, bound to ``n`` nodes, as ``(id, instance)``."""
    cases = []
    for cls in COMPRESSORS.values():
        for c in cls.examples():
            c = c.bind(c.n) if getattr(c, "n", None) is not None else c.bind(n)
            cases.append((c.spec(), c))
    return cases


def make_vector(kind: str, d: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    """A float64 ``(d,)`` test vector of the named kind (adversarial ones included)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "gaussian":
        x = torch.randn(d, generator=g, dtype=torch.float64)
    elif kind == "one-hot":
        x = torch.zeros(d, dtype=torch.float64)
        x[int(torch.randint(d, (1,), generator=g))] = -1.0
    elif kind == "constant":
        x = torch.full((d,), 1.0, dtype=torch.float64)
    elif kind == "heavy-tailed":
        x = torch.empty(d, dtype=torch.float64).cauchy_(generator=g)
    elif kind == "sparse":
        x = torch.randn(d, generator=g, dtype=torch.float64)
        x[torch.rand(d, generator=g) < 0.8] = 0.0
        x[0] = 1.0
    elif kind == "ramp":
        x = torch.linspace(-1.0, 2.0, d, dtype=torch.float64)
    else:
        raise ValueError(kind)
    return x * scale


@st.composite
def vectors(draw, d: int | None = None, min_d: int = 1, max_d: int = 64, scales=SCALES):
    """A ``(d,)`` float64 vector: a kind from ``VECTOR_KINDS``, a scale from ``scales``."""
    d = d if d is not None else draw(st.integers(min_d, max_d))
    kind = draw(st.sampled_from(VECTOR_KINDS))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from(scales))
    return make_vector(kind, d, seed, scale)
