"""Registry contract (every problem), make_problem's validation, x0, Consts and the CLI."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import pkgutil

import pytest
import torch

import problems
from problems import PROBLEMS, Consts, Problem, make_problem
from problems.__main__ import main
from streams import Streams, tags

SMALL = {
    "quadratic": {"dim": 6},
    "quadratic-game": {"dim": 3},
    "logreg": {"samples": 60, "features": 5},
    "logreg-nonconvex": {"samples": 60, "features": 5},
    "least-squares": {"samples": 60, "features": 5},
    "sigmoid-squared": {"samples": 60, "features": 5},
    "mlp": {"samples": 40, "hidden": 8},
    "cnn": {"samples": 40},
    "resnet18": {"samples": 4, "test_samples": 2},
}
CHEAP = [name for name in PROBLEMS if name != "resnet18"]


def all_problem_classes():
    for info in pkgutil.iter_modules(problems.__path__):
        if info.name != "__main__":
            importlib.import_module(f"problems.{info.name}")
    seen, todo = set(), [Problem]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen


def test_every_named_problem_class_is_registered():
    registered = set(PROBLEMS.values())
    for cls in all_problem_classes():
        if "name" in vars(cls) and cls.name and not getattr(cls, "family", ""):
            assert PROBLEMS.get(cls.name) is cls, f"{cls.__name__} is missing from PROBLEMS"
    for name, cls in PROBLEMS.items():
        assert cls.name == name and cls.description and cls in registered
        assert all(default is not None for default, _ in cls.knobs.values())


@pytest.mark.parametrize("name", CHEAP)
def test_contract(name):
    n = 3
    p = make_problem(name, nodes=n, seed=1, **SMALL[name])
    assert (p.n, p.m) == (n, n) and p.nodes.tolist() == list(range(n))
    assert p.x0.shape == (p.d,) and p.x0.dtype == p.dtype
    gen = torch.Generator().manual_seed(0)
    X = p.x0 + 0.1 * torch.randn(n, p.d, generator=gen, dtype=torch.float64).to(p.dtype)
    G = p.grad(X)
    assert G.shape == (n, p.d) and G.dtype == p.dtype and torch.isfinite(G).all()
    same = p.grad(p.x0)
    torch.testing.assert_close(same, p.grad(p.x0.expand(n, -1)))
    assert p.loss(p.x0).dim() == 0 and p.node_loss(X).shape == (n,)
    assert p.full_grad(p.x0).shape == (p.d,)
    rng = Streams.for_nodes(5, range(n))
    b1, b2 = p.sample(rng, 4), p.sample(rng, 4)
    torch.testing.assert_close(p.grad(X, b1), p.grad(X, b2), rtol=0, atol=0)
    torch.testing.assert_close(p.grad(X, b1), p.grad(X.clone(), b1), rtol=0, atol=0)
    assert p.sample(torch.Generator().manual_seed(0), 2).size == 2  # generators are accepted
    c = p.consts
    assert isinstance(c, Consts)
    json.dumps(c.to_dict(full=True))
    if p.convex:
        assert c.f_star is not None and c.zeta2 is not None and p.x_star is not None
        assert p.full_grad(p.x_star.to(torch.float64)).norm() <= 1e-9 or p.dtype != torch.float64
    if c.L is not None:
        assert c.L_i.shape == (n,) and c.L <= c.L_tilde * (1 + 1e-12)
    loc = p.local([n - 1])
    torch.testing.assert_close(loc.grad(X[n - 1 :]), G[n - 1 :], rtol=1e-5, atol=1e-6)
    assert loc.consts is c


@pytest.mark.parametrize("name", CHEAP)
def test_float32(name):
    p = make_problem(name, nodes=2, dtype="float32", **SMALL[name])
    assert p.grad(p.x0).dtype == torch.float32 and p.loss(p.x0).dtype == torch.float32


def test_x0_options():
    kw = {"nodes": 2, **SMALL["logreg"]}
    assert torch.equal(
        make_problem("logreg", x0="zeros", **kw).x0, torch.zeros(5, dtype=torch.float64)
    )
    assert torch.equal(
        make_problem("logreg", x0="ones", **kw).x0, torch.ones(5, dtype=torch.float64)
    )
    a = make_problem("logreg", x0="randn", seed=3, **kw).x0
    assert torch.equal(a, make_problem("logreg", x0="randn", seed=3, **kw).x0)
    torch.testing.assert_close(make_problem("logreg", x0="randn:2", seed=3, **kw).x0, 2 * a)
    assert torch.equal(a, Streams.shared(3, 1, tags.X0).normal(5)[0])
    for bad in ["gauss", "randn:0", "randn:x", "zeros:1"]:
        with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
            make_problem("logreg", x0=bad, **kw)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "svm"}, "unknown problem 'svm'; allowed: quadratic, logreg"),
        ({"name": "logreg", "dtype": "float16"}, "dtype must be float64 or float32, got 'float16'"),
        ({"name": "logreg", "nodes": 0}, "nodes must be a positive integer, got 0"),
        ({"name": "logreg", "seed": -1}, "seed must be a non-negative integer, got -1"),
        ({"name": "logreg", "lam": -0.5}, "lambda must be >= 0, got -0.5"),
        ({"name": "logreg", "split": "random"}, "unknown split 'random'"),
        ({"name": "logreg", "split": "dirichlet:0"}, "alpha must be a positive number, got '0'"),
        ({"name": "logreg", "hidden": 3}, r"logreg: unknown option\(s\) \['hidden'\]"),
        ({"name": "logreg", "scale": "l1"}, "scale must be one of none, standard, maxabs"),
        ({"name": "logreg", "samples": 5, "nodes": 6}, "logreg: 6 nodes but the data has only 5"),
    ],
)
def test_make_problem_bad_inputs(kwargs, match):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
        make_problem(name, **kwargs)


def test_consts_helpers():
    c = Consts.from_L_i([1.0, 2.0, 2.0], L=1.5, mu=None)
    assert c.L_tilde == pytest.approx(math.sqrt(3.0)) and c.L_max == 2.0
    d = c.to_dict()
    assert d["L_i"] == {"n": 3, "min": 1.0, "mean": pytest.approx(5 / 3), "max": 2.0}
    assert d["mu"] is None and "values" not in d["L_i"]
    assert c.to_dict(full=True)["L_i"]["values"] == [1.0, 2.0, 2.0]
    with pytest.raises(ValueError, match=r"got shape \(1, 2\)"):
        Consts(L_i=torch.ones(1, 2))


def test_cli_prints_the_constants(capsys):
    rc = main(
        [
            "--problem",
            "logreg-nonconvex",
            "--dataset",
            "breast-cancer",
            "--nodes",
            "20",
            "--lambda",
            "0.1",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    p = make_problem("logreg-nonconvex", dataset="breast-cancer", nodes=20, lam=0.1)
    for key in ("L", "L_tilde", "L_max", "L_pm", "mu", "f_star", "zeta2", "L_i"):
        assert f"\n{key} " in out
    assert f"{p.consts.L:.10g}" in out and f"{p.consts.L_tilde:.10g}" in out
    assert "28 x 11, 29 x 9  (total 569)" in out and "f is nonconvex" in out
    assert "constants" in out and " s" in out


def test_cli_json_list_and_errors(capsys):
    assert main(["--problem", "least-squares", "--nodes", "3", "--samples", "30", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n"] == 3 and d["consts"]["L_pm"] > 0 and len(d["consts"]["L_i"]["values"]) == 3
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PROBLEMS) and "--L-pm" in out
    for argv, match in [
        (["--problem", "logreg", "--nodes", "0"], "nodes must be a positive integer, got 0"),
        (["--problem", "logreg", "--dataset", "libsvm:/no/such"], "'/no/such' not found"),
        (["--problem", "logreg", "--hidden", "4"], "unknown option"),
        (["--problem", "quadratic", "--L", "-1"], "got -1.0"),
        (["--problem", "logreg", "--device", "gpu7"], "bad --device 'gpu7'"),
        ([], "--problem is required"),
    ]:
        assert main(argv) == 2
        assert match in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--problem", "nope"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["--problem", "mlp", "--batched", "maybe"])


def test_every_knob_has_a_cli_option():
    from problems.__main__ import parser

    dests = {a.dest for a in parser()._actions}
    for cls in PROBLEMS.values():
        assert set(cls.knobs) <= dests


def test_public_signatures():
    sig = inspect.signature(make_problem)
    assert list(sig.parameters)[:1] == ["name"]
    for key in ("dataset", "split", "nodes", "lam", "dtype", "device", "seed", "x0", "knobs"):
        assert key in sig.parameters


def test_x0_randn_is_standard_normal_seeded_by_the_run_seed():
    """``--x0 randn`` is the papers' ``x0 ~ N(0, I)``, from the run's seed alone; ``zeros`` is
    the origin."""
    from problems.base import parse_x0

    d = 40_000
    x = parse_x0("randn", d, lambda: torch.zeros(d), seed=11)
    assert x.dtype == torch.float64 and x.shape == (d,)
    assert abs(float(x.mean())) < 4 / math.sqrt(d)
    assert abs(float(x.var()) - 1) < 4 * math.sqrt(2 / d)
    assert torch.equal(x, parse_x0("randn", d, lambda: torch.ones(d), seed=11))
    assert not torch.equal(x, parse_x0("randn", d, lambda: torch.zeros(d), seed=12))
    assert torch.equal(parse_x0("zeros", 3, lambda: torch.ones(3), seed=1), torch.zeros(3).double())


def test_cli_help_prints(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "contiguous:array" in out and "N(0, SCALE^2 I)" in out
