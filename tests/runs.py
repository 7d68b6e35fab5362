"""Run helpers for the method tests: a method's trajectory and the plain-GD reference."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import replace
from pathlib import Path

import torch

from comm import SimulatedComm


def trajectory(algo, problem, T: int, seed: int = 0):
    """``T`` steps from ``problem.x0``: every state, every step's info, and the comm."""
    comm = SimulatedComm(problem.n, seed=seed)
    state = algo.init(problem.x0, problem, comm)
    states, infos = [state], []
    for _ in range(T):
        state, info = algo.step(state, problem, comm)
        states.append(state)
        infos.append(info)
    return states, infos, comm


def gd(problem, gamma: float, T: int):
    """Distributed GD ``x <- x - gamma grad f(x)``: the iterates ``x^0..x^T``."""
    x, xs = problem.x0.clone(), [problem.x0.clone()]
    for _ in range(T):
        x = x - gamma * problem.full_grad(x)
        xs.append(x)
    return xs


@functools.cache
def torch_dist_helpers():
    """The gloo-vs-simulation helpers of ``tests/algorithms/test_torch_dist.py`` (``parity``,
    ``dist_run``, ``assert_same_run``), loaded once: tests/algorithms is not a package."""
    path = Path(__file__).parent / "algorithms" / "test_torch_dist.py"
    spec = importlib.util.spec_from_file_location("torch_dist_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scrambled_accelerated(state, seed: int):
    """An ADIANA/CANITA state with ``y, z, w`` and the shifts moved apart (``h = mean h_i``
    kept), so every term of the update matters."""
    gen = torch.Generator().manual_seed(seed)

    def noise(t):
        return torch.randn(t.shape, generator=gen, dtype=t.dtype)

    h_i = state.h_i + noise(state.h_i)
    return replace(state, x=state.x + noise(state.x), z=state.z + noise(state.z),
                   w=state.w + noise(state.w), h_i=h_i, h=h_i.mean(0))  # fmt: skip
