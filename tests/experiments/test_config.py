"""Sweep configs: validation messages, grid expansion, run ids, argv and params."""

from __future__ import annotations

import re

import pytest

from experiments.config import RunSpec, Selection, SweepConfig, load_config

TOML = """
name = "tiny"
[base]
problem = "quadratic"
nodes = 2
iters = 20
[[methods]]
algorithm = "ef21"
label = "EF21"
[[methods]]
algorithm = "3pc"
mechanism = "lag"
[grid]
compressor = ["topk:k=1", "topk:k=2"]
step-mult = { base = 2, from = -1, to = 2 }
seed = [0, 1]
[select]
rule = "bits_to_tol"
metric = "grad_norm_sq"
tol = 1e-4
"""


def base_dict(**over) -> dict:
    cfg = {
        "name": "t",
        "base": {"problem": "quadratic", "nodes": 2, "iters": 20},
        "methods": [{"algorithm": "ef21"}],
        "grid": {"step_mult": [1, 2], "seed": [0]},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> SweepConfig:
    path = tmp_path_factory.mktemp("cfg") / "tiny.toml"
    path.write_text(TOML)
    return load_config(path)


def test_toml_is_resolved(cfg):
    assert cfg.name == "tiny"
    assert cfg.base == {"problem": "quadratic", "nodes": 2, "iters": 20}
    assert cfg.methods == [
        {"algorithm": "ef21", "label": "EF21"},
        {"algorithm": "3pc", "mechanism": "lag"},
    ]
    assert cfg.grid == {
        "compressor": ["topk:k=1", "topk:k=2"],
        "step_mult": [0.5, 1, 2, 4],
        "seed": [0, 1],
    }
    assert cfg.select == Selection(rule="bits_to_tol", metric="grad_norm_sq", tol=1e-4)
    assert load_config(cfg.to_dict()) == cfg


def test_runs_cross_methods_with_grid(cfg):
    runs = cfg.runs()
    assert len(runs) == 2 * 2 * 4 * 2
    first = runs[0]
    assert isinstance(first, RunSpec)
    assert first.argv == [
        "ef21", "--problem", "quadratic", "--nodes", "2", "--iters", "20",
        "--compressor", "topk:k=1", "--step-mult", "0.5", "--seed", "0",
    ]  # fmt: skip
    assert first.params == {
        "algorithm": "ef21", "label": "EF21", "problem": "quadratic", "nodes": 2, "iters": 20,
        "compressor": "topk:k=1", "step_mult": 0.5, "seed": 0,
    }  # fmt: skip
    last = runs[-1]
    assert last.argv[:1] == ["3pc"] and last.argv[7:9] == ["--mechanism", "lag"]
    assert last.params["label"] == "3pc" and last.params["mechanism"] == "lag"
    assert (last.params["compressor"], last.params["step_mult"], last.params["seed"]) == (
        "topk:k=2", 4, 1,
    )  # fmt: skip
    # methods outermost, then the grid with its last key fastest
    assert [r.params["seed"] for r in runs[:4]] == [0, 1, 0, 1]
    assert [r.params["step_mult"] for r in runs[:4]] == [0.5, 0.5, 1, 1]


def test_run_ids_unique_safe_and_stable(cfg, tmp_path):
    ids = [r.run_id for r in cfg.runs()]
    assert len(set(ids)) == len(ids) == 32
    assert all(re.fullmatch(r"[A-Za-z0-9._=+-]+", i) for i in ids)
    # the same config read again (or from its resolved dict) names its runs identically
    again = tmp_path / "again.toml"
    again.write_text(TOML)
    assert [r.run_id for r in load_config(again).runs()] == ids
    assert [r.run_id for r in load_config(cfg.to_dict()).runs()] == ids
    assert ids[0].startswith("EF21_topk-k=1_m0.5_s0_")
    assert ids[-1].startswith("3pc_mechanism=lag_topk-k=2_m4_s1_")
    # a changed base changes every id: a different run is never mistaken for a finished one
    other = load_config(base_dict(base={"problem": "quadratic", "nodes": 3, "iters": 20}))
    assert not {r.run_id for r in other.runs()} & {
        r.run_id for r in load_config(base_dict()).runs()
    }


def test_defaults_fill_core_params():
    cfg = load_config(base_dict(grid={"seed": [3]}))
    (run,) = cfg.runs()
    assert run.params == {
        "algorithm": "ef21", "label": "ef21", "compressor": "identity", "step_mult": 1.0,
        "problem": "quadratic", "nodes": 2, "iters": 20, "seed": 3,
    }  # fmt: skip
    assert run.argv == ["ef21", "--problem", "quadratic", "--nodes", "2", "--iters", "20",
                        "--seed", "3"]  # fmt: skip


def test_flags_booleans_and_repeatables():
    cfg = load_config(
        base_dict(
            base={
                "problem": "quadratic",
                "nodes": 2,
                "force_compressor": True,
                "layerwise": False,
                "problem-opt": {"dim": 8, "L": 2.0},
            },
            grid={"seed": [0]},
        )
    )
    (run,) = cfg.runs()
    assert run.argv == [
        "ef21", "--problem", "quadratic", "--nodes", "2", "--force-compressor",
        "--problem-opt", "dim=8", "--problem-opt", "L=2.0", "--seed", "0",
    ]  # fmt: skip
    assert run.params["problem_opt"] == ("dim=8", "L=2.0")


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"colour": 1}, "unknown top-level key 'colour' in the sweep config; allowed: "
                        "name, base, methods, grid, select"),
        ({"grid": {"seed": []}}, "grid.seed is empty; give at least one value"),
        ({"grid": {"seed": 0}}, "grid.seed must be a list of values (or {base, from, to}), got 0"),
        ({"grid": {"nodes": [2, 4]}}, "grid.nodes is also set in [base]; set it in one place only"),
        ({"grid": {"seed": [0, 0]}},
         "grid.seed repeats a value: 0 and 0 are the same --seed 0; give each value once"),
        ({"grid": {"step_mult": {"base": 2, "from": 0}}},
         "grid.step_mult as a table needs exactly the keys base, from, to; got ['base', 'from']"),
        ({"grid": {"step_mult": {"base": 2, "from": 3, "to": 1}}},
         "grid.step_mult: 'to' (1) must be >= 'from' (3)"),
        ({"methods": []},
         "methods must be a non-empty list of tables ([[methods]] with algorithm)"),
        ({"methods": [{"label": "x"}]},
         "methods[0] must be a table with an 'algorithm' key, got {'label': 'x'}"),
        ({"methods": [{"algorithm": "ef21", "seed": 1}]},
         "grid.seed is also set in methods[0]; set it in one place"),
        ({"base": {"problem": "quadratic", "iters": [10, 20]}},
         "base.iters is a list; only [grid] takes lists of values "
         "(or a repeatable flag such as problem_opt)"),
        ({"select": {"rule": "fastest"}},
         "select.rule must be one of min_final, bits_to_tol, got 'fastest'"),
        ({"select": {"rule": "bits_to_tol"}},
         "select.rule 'bits_to_tol' needs select.tol (a number > 0)"),
        ({"select": {"tol": -1.0}}, "select.tol must be a number > 0, got -1.0"),
        ({"select": {"window": 3}},
         "unknown key 'window' in [select]; allowed: rule, metric, tol"),
        ({"name": "a b"},
         "name must be a plain folder name: 1 to 100 letters, digits and ._=+-, not starting "
         "with a dot (so neither '.' nor '..'), no path separators; got 'a b'"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_key(over, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        load_config(base_dict(**over))


def test_unknown_flags_and_algorithms():
    with pytest.raises(ValueError, match=r"^unknown runner flag 'nodez' in base; allowed: ") as e:
        load_config(base_dict(base={"nodez": 2}))
    assert ", nodes, " in str(e.value) and ", step_mult, " in str(e.value)
    with pytest.raises(ValueError, match=r"^unknown runner flag 'colour' in grid; allowed: "):
        load_config(base_dict(grid={"colour": ["red"]}))
    with pytest.raises(ValueError, match=r"^methods\[0\]\.algorithm 'ef99' is unknown; allowed: "):
        load_config(base_dict(methods=[{"algorithm": "ef99"}]))
    with pytest.raises(ValueError, match=r"^base\.out is set by the sweep itself; not allowed "):
        load_config(base_dict(base={"out": "x"}))
    # a value the runner's own parser rejects fails at load time, with the parser's words
    with pytest.raises(ValueError, match=r"invalid choice: 'float16'"):
        load_config(base_dict(base={"dtype": "float16"}))
    with pytest.raises(ValueError, match=r"invalid int value: 'two'"):
        load_config(base_dict(base={"nodes": "two"}))


def test_ignore_drops_foreign_tables(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(TOML.replace('name = "tiny"\n', "") + "\n[claim]\norder = ['EF21']\n")
    with pytest.raises(ValueError, match="unknown top-level key 'claim'"):
        load_config(path)
    cfg = load_config(path, ignore=("claim",))
    # a file called config.toml takes its folder's name
    assert cfg.name == tmp_path.name
    assert len(cfg.runs()) == 32
