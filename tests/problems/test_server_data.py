"""The server's own data (``Problem.server_grad``): GLMs hold out ``server_rows`` rows, the
quadratics shift ``f`` by a vector of squared norm ``server_zeta2``; problems without it say how
to give it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from problems.logreg import LogReg
from problems.registry import make_problem

KW = {"nodes": 4, "samples": 120, "features": 6, "seed": 3}


def test_glm_server_rows_are_held_out_of_the_nodes_data():
    full = make_problem("logreg", **KW)
    held = make_problem("logreg", server_rows=20, **KW)
    assert not full.has_server_data and held.has_server_data
    assert int(full.counts.sum()) == 120 and int(held.counts.sum()) == 100
    A_S, b_S = held._server
    assert A_S.shape == (20, 6) and b_S.shape == (20,)
    # f_S is the same loss on the server's rows alone: one node holding them.
    alone = LogReg(A_S.numpy(), b_S.numpy(), np.array([20]), lam=held.lam)
    x = torch.linspace(-1, 1, 6, dtype=torch.float64)
    torch.testing.assert_close(held.server_grad(x), alone.full_grad(x), rtol=1e-12, atol=1e-14)

    # The server's rows and the nodes' make up the whole data set (as a multiset of rows).
    def count(M):
        return Counter(tuple(r) for r in np.asarray(M).round(12))

    assert count(held._A64.toarray()) + count(A_S.numpy()) == count(full._A64.toarray())
    # Seeded, and shared by every local copy (each rank computes the same server gradient).
    again = make_problem("logreg", server_rows=20, **KW)
    torch.testing.assert_close(again.server_grad(x), held.server_grad(x), rtol=0, atol=0)
    torch.testing.assert_close(held.local([2]).server_grad(x), held.server_grad(x), rtol=0, atol=0)


def test_glm_refusals():
    with pytest.raises(ValueError, match=r"server_rows must be an integer in \[0, 116\]"):
        make_problem("logreg", server_rows=117, **KW)
    with pytest.raises(ValueError, match="server_rows"):
        make_problem("logreg", server_rows=-1, **KW)
    with pytest.raises(ValueError, match=r"server holds no data.*server_rows=K"):
        make_problem("logreg", **KW).server_grad(torch.zeros(6, dtype=torch.float64))


@pytest.mark.parametrize("family", ["random", "tridiagonal"])
def test_quadratic_server_objective_is_f_shifted_by_server_zeta2(family):
    p = make_problem("quadratic", nodes=3, dim=8, family=family, server_zeta2=0.7, seed=1)
    assert p.has_server_data and p.server_zeta2 == 0.7
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        x = torch.randn(8, generator=gen, dtype=torch.float64)
        gap = ((p.server_grad(x) - p.full_grad(x)) ** 2).sum()
        assert float(gap) == pytest.approx(0.7, rel=1e-12)
    same = make_problem("quadratic", nodes=3, dim=8, family=family, server_zeta2=0.0, seed=1)
    x = torch.ones(8, dtype=torch.float64)
    torch.testing.assert_close(same.server_grad(x), same.full_grad(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="server_zeta2 must be a finite number >= 0"):
        make_problem("quadratic", nodes=3, dim=8, family=family, server_zeta2=-1.0)


def test_the_default_quadratic_is_unchanged_by_its_server():
    a = make_problem("quadratic", nodes=3, dim=8, seed=2)
    b = make_problem("quadratic", nodes=3, dim=8, seed=2, server_zeta2=5.0)
    x = torch.ones(8, dtype=torch.float64)
    torch.testing.assert_close(a.grad(x), b.grad(x), rtol=0, atol=0)
    assert a.consts.to_dict() == b.consts.to_dict() and a.server_zeta2 == 0.1
