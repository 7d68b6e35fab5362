"""The worked examples of ``docs/contributing.md`` run as written and pass the checks of their kind.

Each ```` ```python ```` block of the guide is executed as it stands, in a temporary working folder,
as a fresh module (registered in ``sys.modules`` under a new name for the length of the test, as
an imported file would be: dataclasses and ``typing.get_type_hints`` read annotations through
it). The class it defines is then exercised:

- the compressor: the registry-wide tests of ``tests/compressors/`` called on it (contract,
  Monte-Carlo properties, wire form, non-finite policy, ``decode_sum``), with the class in
  ``COMPRESSORS`` for the length of the test, and its declared ``omega`` and bits checked
  directly;
- the method: ``algorithms.api.run(Method, ...)`` on a strongly convex quadratic (it converges,
  and equals the registered EF21 it writes out), then the method contract, the declared-options
  test and checkpoint-resume with the class in ``ALGORITHMS``;
- the problem: the problems' registry contract, its constants against the Hessian's
  eigenvalues and their definitions, its gradients against finite differences, a run through
  the API and the command line;
- the hook: DDP training on a one-process gloo group (spawned, as the suite's DDP tests are),
  and under ``-m dist`` on two processes against ``allreduce``.
"""

from __future__ import annotations

import importlib
import itertools
import math
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from algorithms.base import Algorithm
from compressors.base import Compressor
from problems.base import Problem
from streams import Streams

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "contributing.md"
KINDS = {"Compressor": Compressor, "Algorithm": Algorithm, "Problem": Problem, "CommHook": None}
_COUNTER = itertools.count()


def guide_blocks() -> list[str]:
    """The ```` ```python ```` blocks of the guide, in order."""
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)


def block_of(kind: str) -> str:
    """The one block defining a subclass of ``kind`` (``Compressor``, ``CommHook``, ...)."""
    found = [b for b in guide_blocks() if re.search(rf"^class \w+\({kind}\):", b, flags=re.M)]
    assert len(found) == 1, f"{len(found)} blocks of the guide define a {kind}"
    return found[0]


def execute(block: str) -> types.ModuleType:
    """Run ``block`` as a new module (left in ``sys.modules``: callers remove it)."""
    name = f"docs_contributing_example_{next(_COUNTER)}"
    module = types.ModuleType(name)
    module.__file__ = str(GUIDE)
    sys.modules[name] = module
    exec(compile(block, f"{GUIDE}:{name}", "exec"), module.__dict__)
    return module


def defined(module: types.ModuleType, base: type) -> type:
    """The class ``module`` defines that subclasses ``base``."""
    classes = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, base) and v.__module__ == module.__name__
    ]
    assert len(classes) >= 1, f"no {base.__name__} defined"
    leaves = [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
    return leaves[0]


@pytest.fixture
def load(tmp_path, monkeypatch):
    """``load(kind)``: the class the guide's block of ``kind`` defines, executed in
    ``tmp_path``; its module and whatever it registered are removed afterwards."""
    from systems.hooks.registry import HOOKS, hook_names

    hook_names()  # import every hook module first, so that restoring HOOKS loses none
    hooks = dict(HOOKS)
    monkeypatch.chdir(tmp_path)
    names: list[str] = []

    def _load(kind: str) -> type:
        module = execute(block_of(kind))
        names.append(module.__name__)
        base = KINDS[kind] or importlib.import_module("comm.hooks").CommHook
        return defined(module, base)

    yield _load
    for name in names:
        sys.modules.pop(name, None)
    HOOKS.clear()
    HOOKS.update(hooks)


def test_the_guide_has_one_runnable_example_per_kind(load):
    blocks = guide_blocks()
    assert len(blocks) == len(KINDS)
    for kind in KINDS:
        cls = load(kind)
        assert cls.__doc__ and "arXiv" in cls.__doc__, f"{cls.__name__} cites no paper"


# --------------------------------------------------------------------------- the compressor
def _contract_modules():
    names = ("test_contract", "test_properties", "test_wire", "test_nonfinite", "test_decode_sum")
    return [importlib.import_module(f"tests.compressors.{n}") for n in names]


def test_compressor_passes_the_registry_wide_compressor_tests(load, monkeypatch):
    from compressors.registry import COMPRESSORS

    cls = load("Compressor")
    monkeypatch.setitem(COMPRESSORS, "sto-sign", cls)
    contract, properties, wire, nonfinite, decode_sum = _contract_modules()
    for d in (1, 2, 3):
        contract.test_tiny_dimensions("sto-sign", d)
    for c in cls.examples():
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            contract.test_shape_dtype_device_and_finite(c=c, dtype=dtype)
            wire.test_round_trip_is_bitwise_also_for_other_nodes_rows(c, dtype)
            nonfinite.test_named_extremes_decode_finite(c, dtype, "plain")
            nonfinite.test_finite_rows_decode_finite(c=c, dtype=dtype)
            nonfinite.test_nonfinite_rows_decode_nonfinite(c=c, dtype=dtype)
        contract.test_zero_maps_to_zero_without_nan(c)
        contract.test_same_streams_same_output_and_rows_are_independent(c=c)
        contract.test_different_streams_give_different_draws(c)
        contract.test_generators_are_accepted_per_row(c)
        contract.test_bits_match_the_declared_formula(c=c)
        contract.test_spec_round_trip(c)
        properties.test_unbiased_mean_and_omega(c=c)
        properties.test_constant_is_attained_at_the_worst_case(c)
        for kind in ("gaussian", "one-hot", "constant", "heavy-tailed", "ramp"):
            properties.test_declared_bias_variance_pair_holds(c, kind)
        properties.test_declared_bias_variance_pair_is_tight(c)
        wire.test_size_law_float32_exact_and_float64_pays_for_stored_width(c)
        wire.test_bad_input_raises(c)
        for d in (17, 200):
            decode_sum.test_decode_sum_is_the_weighted_sum_of_decoded_rows("sto-sign", c, d)
        decode_sum.test_decoded_rows_share_no_memory_with_the_input("sto-sign", c)


def test_compressor_constant_and_bits_are_the_declared_ones(load):
    from compressors.montecarlo import error_ratios

    c = load("Compressor")()
    assert c.unbiased and not c.deterministic
    gen = torch.Generator().manual_seed(0)
    for d in (5, 64, 1000):
        x = torch.randn(3, d, dtype=torch.float64, generator=gen)
        packet = c.encode(x, Streams.for_nodes(1, range(3)))
        assert packet.nbits.tolist() == [d + 32] * 3 == [c.bits(d)] * 3
        assert c.omega(d) == d - 1
    # E||C(x) - x||^2 = d ||x||_inf^2 - ||x||^2 exactly: the Monte-Carlo mean within 5 s.e.
    x = torch.randn(40, dtype=torch.float64, generator=gen)
    ratios, y = error_ratios(c, x, 20000, seed=3)
    want = (40 * float(x.abs().max()) ** 2 - float((x**2).sum())) / float((x**2).sum())
    se = float(ratios.std()) / math.sqrt(ratios.numel())
    assert abs(float(ratios.mean()) - want) <= 5 * se, (float(ratios.mean()), want)
    assert want <= c.omega(40)


def test_compressor_bits_are_what_the_comm_layer_charges(load):
    from algorithms.api import run

    c = load("Compressor")()
    res = run("dcgd", compressor=c, problem="quadratic", nodes=4, iters=20, step=0.05)
    assert res.summary["reason"] == "completed"
    steps = res.history["bits_up"].diff().dropna()
    assert (steps == 20 + 32).all(), steps.tolist()  # d = 20: d signs and one float per step


# --------------------------------------------------------------------------- the method
def _quadratic():
    from problems.registry import make_problem

    return make_problem("quadratic", nodes=4, dim=10, lam=0.5, seed=2)


def test_method_converges_and_equals_the_registered_ef21(load):
    from algorithms.api import run

    method = load("Algorithm")
    problem = _quadratic()
    res = run(method, compressor="topk:k=5", problem=problem, iters=50)
    h = res.history
    assert res.summary["reason"] == "completed" and len(h) == 51
    assert h["grad_norm_sq"].iloc[-1] < 1e-6 * h["grad_norm_sq"].iloc[0]
    assert h["f_gap"].iloc[-1] < 1e-6 * h["f_gap"].iloc[0]
    assert "arXiv 2106.05203, Theorem 1" in res.config["step"]["theory"]["source"]
    ref = run("ef21", compressor="topk:k=5", problem=problem, iters=50, regime="nonconvex")
    assert res.config["step"]["gamma"] == ref.config["step"]["gamma"]
    for col in ("f", "grad_norm_sq", "bits_up", "bits_down"):
        assert h[col].equals(ref.history[col]), col  # entry for entry (NaN where unlogged)
    # G: the registered EF21 sums each node's squared errors in float64 (Top-K's shifted form)
    assert h["G"].isna().equals(ref.history["G"].isna())
    assert np.allclose(h["G"].dropna(), ref.history["G"].dropna(), rtol=1e-12, atol=0)


def test_method_passes_the_registry_wide_method_tests(load, monkeypatch, tmp_path):
    from algorithms.registry import ALGORITHMS
    from compressors import parse_spec
    from runner.cli import list_everything

    method = load("Algorithm")
    monkeypatch.setitem(ALGORITHMS, "ef-gd", method)
    contract = importlib.import_module("tests.algorithms.test_contract_methods")
    options = importlib.import_module("tests.algorithms.test_options_declared")
    checkpoint = importlib.import_module("tests.algorithms.test_checkpoint")
    contract.test_every_method_keeps_the_contract(name="ef-gd")
    options.test_every_hyperparameter_is_a_declared_option("ef-gd")
    checkpoint.test_resume_equals_the_uninterrupted_run(tmp_path, "ef-gd")
    line = next(ln for ln in list_everything().splitlines() if ln.startswith("  ef-gd "))
    assert "Gradient descent on an EF21 estimator" in line and "[--init]" in line
    with pytest.raises(ValueError, match=r"--init must be one of full, zero, got 'half'"):
        method(compressor=parse_spec("topk:k=2"), gamma=1.0, init_mode="half")


# --------------------------------------------------------------------------- the problem
def _finite_difference(fn, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    eye = torch.eye(x.numel(), dtype=x.dtype)
    return torch.stack([(fn(x + h * e) - fn(x - h * e)) / (2 * h) for e in eye], dim=-1)


def test_problem_passes_the_registry_contract_and_its_constants_are_exact(load, monkeypatch):
    from problems.registry import PROBLEMS, make_problem

    cls = load("Problem")
    monkeypatch.setitem(PROBLEMS, cls.name, cls)
    registry = importlib.import_module("tests.problems.test_problems_registry")
    monkeypatch.setitem(registry.SMALL, cls.name, {"dim": 6})
    registry.test_contract(cls.name)
    registry.test_float32(cls.name)

    p = make_problem(cls.name, nodes=5, dim=8, seed=3, x0="randn")
    c = p.consts
    x = p.x0.clone()
    H = torch.autograd.functional.hessian(p.loss, x)
    ev = torch.linalg.eigvalsh(H)
    assert c.L == pytest.approx(float(ev.max()), rel=1e-12)
    assert c.mu == pytest.approx(float(ev.min()), rel=1e-12)
    H_i = p.hess(x)
    torch.testing.assert_close(H_i.mean(0), H, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(c.L_i, torch.linalg.eigvalsh(H_i).abs().amax(1), rtol=1e-12, atol=0)
    assert c.L_tilde == pytest.approx(float(c.L_i.pow(2).mean().sqrt()), rel=1e-12)
    var = torch.einsum("nij,njk->ik", H_i, H_i) / p.n - H @ H
    assert c.L_pm == pytest.approx(math.sqrt(float(torch.linalg.eigvalsh(var).max())), rel=1e-9)
    # gradients against central differences: of f, and of every node's f_i
    torch.testing.assert_close(_finite_difference(p.loss, x), p.full_grad(x), rtol=0, atol=1e-7)
    G = p.grad(x)
    for j in range(p.n):
        node = p.local([j])
        fd = _finite_difference(lambda v, node=node: node.node_loss(v)[0], x)
        torch.testing.assert_close(fd, G[j], rtol=0, atol=1e-7)
    assert p.full_grad(p.x_star).norm() < 1e-12
    assert float(p.loss(p.x_star)) == pytest.approx(c.f_star, rel=1e-12)
    assert c.zeta2 == pytest.approx(float((p.grad(p.x_star) ** 2).sum(1).mean()), rel=1e-12)


def test_problem_runs_from_the_api_and_the_command_line(load, monkeypatch, tmp_path):
    from algorithms.api import run
    from algorithms.run import run as cli
    from problems.registry import PROBLEMS, make_problem

    cls = load("Problem")
    res = run("ef21", compressor="topk:k=3", problem=cls(*_separable_data()), iters=60)
    h = res.history
    assert res.summary["reason"] == "completed"
    assert h["f_gap"].iloc[-1] < 1e-4 * h["f_gap"].iloc[0]
    monkeypatch.setitem(PROBLEMS, cls.name, cls)
    argv = ["ef21", "--compressor", "topk:k=2", "--problem", cls.name, "--problem-opt", "dim=6"]
    assert cli([*argv, "--iters", "20", "--quiet", "--out", str(tmp_path / "r")]) == 0
    assert make_problem(cls.name, nodes=3, dim=6).d == 6
    with pytest.raises(ValueError, match="no --dataset, --split or --lambda"):
        make_problem(cls.name, lam=0.1)


def _separable_data(n: int = 4, d: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    a = 0.2 + torch.rand(n, d, generator=g, dtype=torch.float64)
    return a, torch.randn(n, d, generator=g, dtype=torch.float64)


# --------------------------------------------------------------------------- the hook
STEPS = 12


def _hook_worker(rank: int, world: int, spec: str, steps: int) -> dict:
    """DDP steps of the harness's small model with hook ``spec`` (the guide's hook is executed
    here first, which registers it): each step's local gradient, its averaged gradient, and the
    hook's residuals and payload bytes."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from systems.hooks import make_hook
    from tests.systems.ddp_harness import tiny_model

    execute(block_of("CommHook"))
    model = DDP(tiny_model(0))
    hook = make_hook(spec).register(model)
    g = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(32, 12, generator=g), torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    raw, avg = [], []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model.module(X), y)
        raw.append(torch.cat([q.flatten() for q in torch.autograd.grad(loss, params)]))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        avg.append(torch.cat([p.grad.flatten() for p in params]).clone())
        opt.step()
    residuals = getattr(hook, "residuals", {})
    return {
        "raw": torch.stack(raw),
        "avg": torch.stack(avg),
        "residual": torch.cat([residuals[k] for k in sorted(residuals)] or [torch.zeros(0)]),
        "sent": hook.stats.sent_bytes,
        "params": torch.cat([p.detach().flatten() for p in params]),
    }


def test_hook_on_one_process_feeds_its_rounding_back(load):
    from tests.systems.ddp_harness import run_ddp

    hook = load("CommHook")
    assert hook.allreducible and hook.name == "fp16-ef"
    r = run_ddp(1, _hook_worker, "fp16-ef", STEPS)[0]
    raw, avg = r["raw"], r["avg"]
    entries = raw.shape[1]
    assert r["sent"] == 2 * entries * STEPS  # fp16: two bytes per entry, one all-reduce a step
    scale = float(raw.abs().max())
    assert float((avg - raw).abs().max()) <= 2e-3 * scale  # each step within fp16's rounding
    # From step 2 on, what fp16 rounds away is sent later: the averaged gradients add up to the
    # local ones less the last residual (the same entries, in the bucket's order).
    drift = (avg[1:] - raw[1:]).sum(0)
    assert r["residual"].numel() == entries
    torch.testing.assert_close(
        drift.abs().sort().values, r["residual"].abs().sort().values, rtol=0, atol=1e-6 * scale
    )
    plain = (avg[1:] - raw[1:]).abs().sum(0)  # the roundings, had they not been fed back
    assert float(drift.abs().sum()) < 0.5 * float(plain.sum())


@pytest.mark.dist
def test_hook_on_two_processes_matches_allreduce(load):
    from tests.systems.ddp_harness import run_ddp

    load("CommHook")
    got = run_ddp(2, _hook_worker, "fp16-ef", STEPS)
    ref = run_ddp(2, _hook_worker, "allreduce", STEPS)
    for rank in range(2):
        for a, b in zip(got[rank]["avg"], ref[rank]["avg"], strict=True):
            assert float((a - b).abs().max()) <= 2e-3 * float(b.abs().max())
    assert torch.equal(got[0]["params"], got[1]["params"])
    assert 2 * got[0]["sent"] == ref[0]["sent"] > 0
