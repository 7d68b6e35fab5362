"""The whole grid checked before the first run: names, repeated points, sizes, the runner's own
option checks (``load_config``) and one resolved run per group (``resolve_runs``)."""

from __future__ import annotations

import re
import time

import pytest
import torch

from experiments import validate
from experiments.config import MAX_RUNS, MAX_VALUES, load_config
from experiments.sweep import run_sweep
from experiments.validate import resolve_runs


def config(**over) -> dict:
    cfg = {
        "name": "t",
        "base": {"problem": "quadratic", "nodes": 2, "iters": 5},
        "methods": [{"algorithm": "ef21"}],
        "grid": {"step_mult": [1, 2], "seed": [0]},
    }
    cfg.update(over)
    return cfg


def refused(message: str, **over) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        load_config(config(**over))


NAME_RULE = (
    "name must be a plain folder name: 1 to 100 letters, digits and ._=+-, not starting with a "
    "dot (so neither '.' nor '..'), no path separators; got "
)


@pytest.mark.parametrize("name", [".", "..", ".hidden", "a/b", "..\\x", "", "a" * 101, "x y"])
def test_names_are_plain_folder_names(name):
    refused(NAME_RULE + repr(name), name=name)


def test_plain_names_pass():
    for name in ("ef21-vs-ef", "a.b", "x=1+y_2", "a" * 100, "-x"):
        assert load_config(config(name=name)).name == name


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"step_mult": [1, 1.0]}, "grid.step_mult repeats a value: 1 and 1.0 are the same "
                                  "--step-mult 1.0; give each value once"),
        ({"step_mult": [2, 1e0, 1]}, "grid.step_mult repeats a value: 1.0 and 1 are the same "
                                     "--step-mult 1.0; give each value once"),
        ({"step_mult": {"base": 1, "from": 0, "to": 2}}, "grid.step_mult repeats a value: 1 and "
                                                         "1 are the same --step-mult 1.0; give "
                                                         "each value once"),
        ({"step": ["1", 1.0]}, "grid.step repeats a value: '1' and 1.0 are the same --step 1.0; "
                               "give each value once"),
        ({"compressor": ["topk:k=1", "topk: k=1"]}, "grid.compressor repeats a value: 'topk:k=1' "
                                                    "and 'topk: k=1' are the same --compressor "
                                                    "topk:k=1; give each value once"),
        ({"problem_opt": [["L=2"], ["L=2.0"]]}, "grid.problem_opt repeats a value: ['L=2'] and "
                                                "['L=2.0'] are the same --problem-opt L=2.0; "
                                                "give each value once"),
        ({"seed": [0, 1, 0]}, "grid.seed repeats a value: 0 and 0 are the same --seed 0; give "
                              "each value once"),
    ],
)  # fmt: skip
def test_repeated_points_are_refused_after_normalising(grid, message):
    refused(message, grid=grid)


def test_distinct_values_of_one_key_pass():
    cfg = load_config(
        config(grid={"step_mult": [1, 1.5, 2.0], "compressor": ["topk:k=1", "randk:k=1"]})
    )
    assert len(cfg.runs()) == 6


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ([{"algorithm": "ef-sgd"}, {"algorithm": "ef14", "label": "B"}],
         "methods[1] gives the same runs as methods[0]: algorithm 'ef-sgd' (= 'ef14') with the "
         "same flags (once defaults and numbers are read as the runner reads them); keep one, or "
         "make them differ in a flag"),
        ([{"algorithm": "ef21", "label": "A"}, {"algorithm": "ef21", "label": "B",
                                                "x0": "default"}],
         "methods[1] gives the same runs as methods[0]: algorithm 'ef21' with the same flags "
         "(once defaults and numbers are read as the runner reads them); keep one, or make them "
         "differ in a flag"),
    ],
)  # fmt: skip
def test_methods_that_give_the_same_runs_are_refused(methods, message):
    refused(message, methods=methods)


def test_methods_differing_in_a_flag_pass():
    methods = [{"algorithm": "ef21"}, {"algorithm": "ef21", "label": "B", "iters": 6}]
    assert len(load_config(config(methods=methods)).runs()) == 4


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"grid": {"iters": [5, -1]}, "base": {"problem": "quadratic"}},
         "grid.iters = -1: --iters must be >= 1, got -1"),
        ({"grid": {"seed": [0, -1]}}, "grid.seed = -1: --seed must be an integer in [0, 2**63), "
                                      "got -1"),
        ({"grid": {"step_mult": [1, float("nan")]}},
         "grid.step_mult = nan: --step-mult must be a positive number, got nan"),
        ({"grid": {"step_mult": [1, -2]}},
         "grid.step_mult = -2: --step-mult must be a positive number, got -2.0"),
        ({"base": {"problem": "quadratic", "nodes": 0}}, "base.nodes = 0: --nodes must be >= 1, "
                                                         "got 0"),
        ({"methods": [{"algorithm": "ef21", "log_every": 0}]},
         "methods[0].log_every = 0: --log-every must be >= 1, got 0"),
        ({"grid": {"step": ["theory", "fast"]}},
         "grid.step = 'fast': --step must be 'default', 'theory' or a positive float, got 'fast'"),
        ({"grid": {"step": [0.1, "inf"]}},
         "grid.step = 'inf': --step must be 'default', 'theory' or a positive float, got 'inf'"),
    ],
)  # fmt: skip
def test_the_runners_option_checks_name_the_key_and_value(over, message):
    refused(message, **over)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"grid": {"iters": ["ten"]}, "base": {"problem": "quadratic"}},
         "grid.iters = 'ten': the runner rejects its arguments: argument --iters: invalid int "
         "value: 'ten'"),
        ({"base": {"problem": "quadratic", "nodes": 2.5}},
         "base.nodes = 2.5: the runner rejects its arguments: argument --nodes: invalid int "
         "value: '2.5'"),
    ],
)  # fmt: skip
def test_values_the_runners_parser_refuses_name_the_key(over, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):  # then the parser's hint
        load_config(config(**over))


def test_too_large_grids_are_refused_before_expanding():
    t0 = time.perf_counter()
    huge = {"base": 2, "from": 0, "to": 2**62}
    refused(f"grid.step_mult = {{base = 2, from = 0, to = {2**62}}} has {2**62 + 1} values; at "
            f"most {MAX_VALUES} per key", grid={"step_mult": huge})  # fmt: skip
    refused(f"grid.seed has {MAX_VALUES + 1} values; at most {MAX_VALUES} per key",
            grid={"seed": list(range(MAX_VALUES + 1))})  # fmt: skip
    refused("grid.step_mult = {base = 2, from = 0, to = 2000}: 2**2000 is beyond a float's range "
            "(about 1e-308 to 1.8e308); with base 2 the exponents must lie in -1023..1023",
            grid={"step_mult": {"base": 2, "from": 0, "to": 2000}})  # fmt: skip
    refused("grid.step_mult = {base = 10, from = -400, to = 0}: 10**-400 is beyond a float's "
            "range (about 1e-308 to 1.8e308); with base 10 the exponents must lie in -308..308",
            grid={"step_mult": {"base": 10, "from": -400, "to": 0}})  # fmt: skip
    assert time.perf_counter() - t0 < 1.0


def test_too_many_runs_are_refused_naming_the_largest_key():
    t0 = time.perf_counter()
    refused(f"the sweep has 200000 runs (2 method(s) x grid.seed ({MAX_VALUES}) x grid.step_mult "
            f"(10)); at most {MAX_RUNS} runs per sweep: shrink grid.seed ({MAX_VALUES} values) or "
            "split the sweep",
            methods=[{"algorithm": "ef21"}, {"algorithm": "diana"}],
            grid={"seed": list(range(MAX_VALUES)),
                  "step_mult": {"base": 2, "from": 0, "to": 9}})  # fmt: skip
    assert time.perf_counter() - t0 < 1.0


def test_the_largest_power_grid_keeps_its_ends():
    cfg = load_config(config(grid={"step_mult": {"base": 2, "from": -1023, "to": 1023}}))
    values = cfg.grid["step_mult"]
    assert values[0] == 2.0**-1023 and values[-1] == 2**1023 and len(values) == 2047


def test_one_run_per_group_is_resolved_quietly(monkeypatch, capsys):
    import runner.resolve as resolve

    seen = []
    real = resolve.configure

    def spy(args, objects=None):
        seen.append((args.compressor, args.step_mult, args.seed, args.algorithm))
        print("from configure")  # silenced by resolve_runs
        return real(args, objects)

    monkeypatch.setattr(resolve, "configure", spy)
    cfg = load_config(config(
        methods=[{"algorithm": "ef21"}, {"algorithm": "ef-sgd"}],
        grid={"compressor": ["topk:k=1", "topk:k=2"], "step_mult": [1, 2, 4], "seed": [0, 1]},
    ))  # fmt: skip
    resolve_runs(cfg)
    assert sorted(seen) == sorted(
        (c, 1.0, 0, a) for a in ("ef21", "ef-sgd") for c in ("topk:k=1", "topk:k=2")
    )
    assert capsys.readouterr() == ("", "")


def test_resolved_runs_name_the_key_and_the_run(tmp_path):
    def resolve_refuses(message: str, **over):
        cfg = load_config(config(**over))
        with pytest.raises(ValueError, match="^" + message + "$"):
            resolve_runs(cfg)

    resolve_refuses(
        r"grid\.compressor = 'topk:k=0': k must be a positive integer \(1 <= k <= d\), got k=0",
        grid={"compressor": ["topk:k=1", "topk:k=0"]},
    )
    resolve_refuses(
        r"run ef21_m1_s0_[0-9a-f]{8}: base\.byzantine = 1: --byzantine does not apply to ef21; its "
        r"options: .*",
        base={"problem": "quadratic", "nodes": 4, "byzantine": 1},
    )
    none = tmp_path / "none.txt"
    resolve_refuses(
        rf"run ef21_m1_s0_[0-9a-f]{{8}}: base\.dataset = 'libsvm:{re.escape(str(none))}': logreg: "
        rf"dataset file '{re.escape(str(none))}' not found",
        base={"problem": "logreg", "nodes": 2, "dataset": f"libsvm:{none}"},
    )
    # a message that names no key of the config names the run, whose id spells its values
    resolve_refuses(
        r"run ef21_topk-k=500_m1_[0-9a-f]{8}: k must be <= d, got k=500 with d=\d+",
        grid={"compressor": ["topk:k=500"], "step_mult": [1, 2]},
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present here")
def test_a_missing_device_is_refused_unless_the_runs_start_elsewhere():
    cfg = load_config(config(base={"problem": "quadratic", "nodes": 2, "device": "cuda"}))
    with pytest.raises(ValueError, match=r"^base\.device = 'cuda': --device 'cuda': CUDA is not "):
        resolve_runs(cfg)
    resolve_runs(cfg, device_here=False)  # e.g. SLURM jobs: resolved on the CPU here


def test_run_sweep_refuses_before_its_folder_exists(tmp_path):
    cfg = load_config(config(base={"problem": "quadratic", "nodes": 2, "byzantine": 1}))
    with pytest.raises(ValueError, match="--byzantine does not apply to ef21"):
        run_sweep(cfg, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_config_built_by_hand_is_checked_too(tmp_path):
    from experiments.config import SweepConfig

    cfg = SweepConfig(name="h", base={"problem": "quadratic", "nodes": 2, "iters": 5},
                      methods=[{"algorithm": "ef21"}], grid={"step_mult": [1, 1.0]})  # fmt: skip
    with pytest.raises(ValueError, match=r"^grid\.step_mult repeats a value: 1 and 1\.0 "):
        run_sweep(cfg, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_the_runs_checks_use_the_runners_own_functions(monkeypatch):
    """A new range check in the runner reaches sweeps without a change here."""
    import runner.cli as cli

    real = cli.check_run_options

    def stricter(args):
        real(args)
        if args.iters > 4:
            raise ValueError(f"--iters must be <= 4 here, got {args.iters}")

    monkeypatch.setattr(cli, "check_run_options", stricter)
    refused("base.iters = 5: --iters must be <= 4 here, got 5")
    assert validate._scalar_error(validate._parser().parse_args(["ef21", "--iters", "4"])) is None


def test_the_sweep_measures_its_runs_engine_once_before_they_start(tmp_path, monkeypatch):
    """``resolve_runs`` builds each group's problem on the runs' own thread count, on a machine
    the runs do not load yet: the engine it measures is memoised under the key each run looks
    up, so no run measures it again (beside the others, where nothing is memoised)."""
    import numpy as np

    from problems import glm_engine

    rng = np.random.default_rng(0)
    lines = []
    for j in range(3000):  # 75,000 stored entries: above the size measured (MEASURE_ABOVE)
        cols = np.sort(rng.choice(40, size=25, replace=False)) + 1
        lines.append(f"{(-1) ** j} " + " ".join(f"{c}:{rng.random():.3f}" for c in cols))
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("COMPZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(glm_engine, "load_per_core", lambda: 0.1)  # a quiet machine
    monkeypatch.setattr(glm_engine, "busy_elsewhere", lambda since: 0.0)
    seen = []
    real = glm_engine.measure

    def spy(options, apply):
        seen.append(sorted({t for _, t in options}))
        return real(options, apply)

    monkeypatch.setattr(glm_engine, "measure", spy)
    data = f"libsvm:{tmp_path / 'big.txt'}"
    cfg = load_config(config(base={"problem": "logreg", "dataset": data, "nodes": 4, "iters": 5}))
    with glm_engine.threads_used(2):  # the sweep's own process, on two threads
        resolve_runs(cfg, threads=1)
        assert seen == [[1]]  # measured once, among one-thread candidates, as a run has them
        resolve_runs(cfg, threads=1)  # what each run's configure does, on its one thread
        assert seen == [[1]]  # read from the memo
        resolve_runs(cfg)  # on the sweep's own threads: other candidates, another key
        assert seen == [[1], [1, 2]]
