"""The GMC / LIEC-SGD checks (theory_checks.momentum_ec): the broken variants break exactly what
they say and nothing else, the verdict helpers. (The fast checks and their power run in
test_tc_power.py; the full ones are slow.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algorithms.momentum.gmc import GMC
from algorithms.momentum.liec_sgd import LIECSGD
from comm import SimulatedComm
from compressors import parse_spec
from theory_checks import momentum_ec as tc
from theory_checks.vr_problems import logreg_nonconvex


def _state_after(algo, problem, steps: int):
    comm = SimulatedComm(problem.n, seed=0)
    state = algo.init(problem.x0, problem, comm)
    for _ in range(steps):
        state, _ = algo.step(state, problem, comm)
    return state


def test_gmc_variants_change_only_what_they_name():
    p, c = logreg_nonconvex(), parse_spec("topk:k=2")
    algo, _ = GMC.configure(p, c)
    state = _state_after(algo, p, 5)
    good, _ = algo.step(state, p, SimulatedComm(p.n, seed=0))
    no_mem, _ = tc.GMCNoMemory.configure(p, c)[0].step(state, p, SimulatedComm(p.n, seed=0))
    torch.testing.assert_close(no_mem.x, good.x, rtol=0, atol=0)  # the same messages ...
    assert float(no_mem.e_i.abs().max()) == 0.0 and float(good.e_i.abs().max()) > 0  # ... lost
    flip, _ = tc.GMCFlippedMomentum.configure(p, c)[0].step(state, p, SimulatedComm(p.n, seed=0))
    mirrored = state.__class__(x=state.x, t=state.t, e_i=state.e_i,
                               x_prev=2 * state.x - state.x_prev)  # fmt: skip
    ref, _ = algo.step(mirrored, p, SimulatedComm(p.n, seed=0))
    torch.testing.assert_close(flip.x, ref.x, rtol=0, atol=0)
    torch.testing.assert_close(flip.x_prev, state.x, rtol=0, atol=0)


def test_liec_variants_change_only_what_they_name():
    p, c = logreg_nonconvex(), parse_spec("topk:k=2")
    algo, _ = LIECSGD.configure(p, c, period=4)
    state = _state_after(algo, p, 5)  # t = 5: a compressed round next
    good, _ = algo.step(state, p, SimulatedComm(p.n, seed=0))
    local, _ = tc.LIECNoLocalCompensation.configure(p, c, period=4)[0].step(
        state, p, SimulatedComm(p.n, seed=0)
    )
    torch.testing.assert_close(local.x, good.x, rtol=0, atol=0)
    torch.testing.assert_close(local.e, good.e, rtol=0, atol=0)
    torch.testing.assert_close(local.x_i, state.x_i - (state.x - good.x), rtol=0, atol=1e-15)
    assert not torch.allclose(local.x_i, good.x_i)
    server, _ = tc.LIECNoServerError.configure(p, c, period=4)[0].step(
        state, p, SimulatedComm(p.n, seed=0)
    )
    torch.testing.assert_close(server.x_i, good.x_i, rtol=0, atol=0)
    assert float(server.e.abs().max()) == 0.0 and float(good.e.abs().max()) > 0
    # at an averaging round the no-local-compensation variant is the method itself
    sync = _state_after(algo, p, 7)
    a, _ = algo.step(sync, p, SimulatedComm(p.n, seed=0))
    b, _ = tc.LIECNoLocalCompensation.configure(p, c, period=4)[0].step(
        sync, p, SimulatedComm(p.n, seed=0)
    )
    torch.testing.assert_close(a.x_i, b.x_i, rtol=0, atol=0)


def test_checks_are_not_rate_checks_and_name_two_variants():
    assert all(not c.rate and len(c.variants) >= 2 for c in tc.CHECKS)


def test_residual_verdicts():
    ok = tc.residual_outcomes("s", 1.0, 1e-5, 1e-6)
    assert [o.passed for o in ok] == [True, True]
    assert ok[1].margin == pytest.approx(10 / tc.RATIO - 1)
    stall = tc.residual_outcomes("s", 1.0, 1e-2, 0.9e-2)
    assert [o.passed for o in stall] == [False, False]
    diverged = tc.residual_outcomes("s", 1.0, float("inf"), float("nan"))
    assert not any(o.passed for o in diverged) and diverged[1].margin == -np.inf
    assert tc.tail_mean(np.arange(8.0)) == pytest.approx(6.5)


@pytest.mark.slow
@pytest.mark.parametrize("chk", tc.CHECKS, ids=lambda c: c.name)
def test_full_checks_pass(chk):
    outcomes = chk.fn(False)
    assert outcomes and all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
