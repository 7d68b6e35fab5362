"""The contract every registered method keeps, checked over the whole registry (as the
compressors' contract test does for every compressor): on small random instances (Hypothesis
draws the number of nodes, the dimension, the seed and the compressor's ``k``),

- its state is rows: every ``*_i`` field is one row per held node with the iterate's dtype, the
  iterate is ``(d,)``, ``t`` counts steps, and a step never mutates the state it is given;
- a seed fixes the run: two runs with the same seed give the same states, bit for bit;
- at its theory step on a strongly convex problem its iterates stay finite;
- the bits are the comm layer's: each step's reported bits are the ledger's growth, every node
  sends something over a run, and ``init`` charges what reaches the server (a server field it
  fills from the nodes' data with no bits charged fails: :func:`algorithms.base.uncharged_init`).

What the contract leaves to other tests: resuming from a checkpoint equals the uninterrupted run
(``test_checkpoint.py::test_resume_equals_the_uninterrupted_run``, every method), and a method
that reads another node's rows outside the comm layer cannot pass the gloo parity of
``test_torch_dist.py::test_gloo_matches_the_simulation_for_every_method`` (every method, two
and four processes, ``-m dist``): under torch.distributed a node's rows live in its own process.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms.base import uncharged_init
from algorithms.registry import ALGORITHMS, usual_compressor, usual_options
from comm import SimulatedComm
from compressors import parse_spec
from problems.registry import make_problem

STEPS = 6


def _instance(name: str, n: int, d: int, k: int, seed: int):
    problem = make_problem("quadratic", nodes=n, lam=0.2, dim=d, seed=seed)
    spec = usual_compressor(name, min(k, d))
    cls = ALGORITHMS[name]
    opts = usual_options(name)  # options a method requires (BEER's consensus, MoTEF's momentum)
    try:
        algo, _ = cls.configure(problem, parse_spec(spec), **opts)
    except ValueError:  # no theory step here (stochastic methods' batch constants): a fixed one
        algo, _ = cls.configure(problem, parse_spec(spec), step=0.02, **opts)
    return algo, problem


def _run(algo, problem, seed: int, steps: int = STEPS):
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    init_bits = float(comm.ledger.up.sum())
    states, infos = [state], []
    for _ in range(steps):
        before = float(comm.ledger.up.sum()), float(comm.ledger.down.sum())
        snapshot = {f.name: _copy(getattr(state, f.name)) for f in dataclasses.fields(state)}
        state, info = algo.step(state, problem, comm)
        prev = states[-1]
        for name, value in snapshot.items():  # the step left its input as it was
            assert _same(getattr(prev, name), value), f"step mutated its input's {name}"
        grown = (float(comm.ledger.up.sum()) - before[0]) / comm.m
        assert info.bits_up == pytest.approx(grown, rel=0, abs=1e-9)
        assert info.bits_down == pytest.approx(
            (float(comm.ledger.down.sum()) - before[1]) / comm.m, rel=0, abs=1e-9
        )
        states.append(state)
        infos.append(info)
    return states, infos, comm, init_bits


def _copy(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b) or (a.isnan() == b.isnan()).all() and
                     torch.equal(a.nan_to_num(), b.nan_to_num()))
        )  # fmt: skip
    return a == b


SIZES = st.tuples(
    st.integers(2, 5),  # nodes
    st.integers(4, 9),  # dimension
    st.integers(1, 3),  # the compressor's k
    st.integers(0, 2**16),  # seed
)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=SIZES)
def test_every_method_keeps_the_contract(name, size):
    n, d, k, seed = size
    algo, problem = _instance(name, n, d, k, seed)
    states, infos, comm, init_bits = _run(algo, problem, seed)
    free = uncharged_init(states[0], problem.x0, init_bits)
    assert not free, f"init set the server's {free} with no bits charged"
    for t, state in enumerate(states):
        assert state.t == t and state.x.shape == (d,)
        assert bool(torch.isfinite(state.x).all()), f"non-finite iterate at step {t}"
        for f in dataclasses.fields(state):
            value = getattr(state, f.name)
            if f.name.endswith("_i") and isinstance(value, torch.Tensor):
                assert value.shape[0] == comm.m, f"{f.name} is not one row per node"
                if value.is_floating_point():
                    assert value.dtype == state.x.dtype, f"{f.name} has dtype {value.dtype}"
    # every node sends something over the run, and what the steps report is the ledger's
    per_node = comm.ledger.up
    assert bool((per_node > 0).all()), f"a node sent nothing in {STEPS} steps: {per_node}"
    assert init_bits + comm.m * sum(i.bits_up for i in infos) == pytest.approx(
        float(per_node.sum()), rel=1e-12
    )
    # a seed fixes the run
    again, _, _, _ = _run(algo, problem, seed)
    for a, b in zip(states, again, strict=True):
        for f in dataclasses.fields(a):
            assert _same(getattr(a, f.name), getattr(b, f.name)), f"{f.name} differs"
