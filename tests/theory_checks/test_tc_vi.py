"""The instance of ``vi.masha1-linear`` has the constants and steps its docstring states."""

from __future__ import annotations

import pytest

from algorithms.vi.masha1 import MASHA1, masha1_rate
from compressors import parse_spec
from theory_checks.vi import game


def test_instance_constants_and_steps():
    p = game()
    c = p.consts
    assert (p.n, p.d) == (10, 20)
    assert c.mu == pytest.approx(0.1, rel=1e-9)
    assert c.L == pytest.approx(1.281, abs=5e-4) and c.L_tilde == pytest.approx(1.285, abs=5e-4)
    assert c.zeta2 == pytest.approx(100.0, rel=1e-9) and p.similarity == pytest.approx(0.1)
    rand, _ = MASHA1.configure(p, parse_spec("randk:k=4"))
    ident, _ = MASHA1.configure(p, parse_spec("identity"))
    assert (rand.p, ident.p) == (0.2, 1.0)
    assert rand.gamma == pytest.approx(0.2085, abs=5e-5)
    assert ident.gamma == pytest.approx(1 / (2**0.5 * c.L), rel=1e-12)
    assert masha1_rate(rand.p, rand.gamma, c.mu) == pytest.approx(0.0104, abs=5e-5)
    assert masha1_rate(1.0, ident.gamma, c.mu) == pytest.approx(0.0276, abs=5e-5)
