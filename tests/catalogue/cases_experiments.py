"""Catalogue cases of experiments/ and systems/: plots, sweeps, reproductions, the systems
model's commands. Run folders are written by hand in the runner's format (no run is started)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .harness import Case

PLOT, SWEEP, REPRO = "experiments.plot", "experiments.sweep", "experiments.reproduce"
UTIL, VALID = "systems.utility", "systems.validate"
HISTORY = ["iter", "bits_up", "bits_down", "f", "f_gap", "grad_norm_sq", "wall_s"]


def _run(folder: Path, rows: list[list], reason: str = "completed") -> None:
    folder.mkdir(parents=True)
    with (folder / "history.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HISTORY)
        w.writerows(rows)
    args = {"algorithm": "ef21", "compressor": "topk:k=1", "step_mult": 1.0, "seed": 0}
    (folder / "config.json").write_text(json.dumps({"algorithm": "ef21", "args": args}))
    (folder / "summary.json").write_text(json.dumps({"reason": reason}))


def run_no_fstar(tmp: Path) -> None:
    """A finished run of a problem without f*: ``f`` negative, ``f_gap`` empty."""
    _run(tmp / "r", [[i, 10 * i, 0, -0.5 * i, "", 2.0**-i, 0.1 * i] for i in range(5)])


def run_diverged(tmp: Path) -> None:
    rows = [[i, 10 * i, 0, 10.0**i, 10.0**i, 10.0**i, 0.1 * i] for i in range(4)]
    _run(tmp / "r", [*rows, [4, 40, 0, "inf", "inf", "inf", 0.4]], reason="diverged")


def run_with(**files: str):
    """A run folder whose named files are replaced by the given text."""

    def setup(tmp: Path) -> None:
        run_no_fstar(tmp)
        for name, text in files.items():
            (tmp / "r" / name.replace("_", ".")).write_text(text)

    return setup


def a_file(tmp: Path) -> None:
    (tmp / "file").write_text("not a folder\n")


def absent(tmp: Path, name: str) -> None:
    assert not (tmp / name).exists(), f"{name} was written"


def png(tmp: Path, name: str) -> None:
    assert (tmp / name).read_bytes().startswith(b"\x89PNG"), f"{name} is not a PNG"


def untouched(tmp: Path, name: str) -> None:
    assert (tmp / name).read_text() == "not a folder\n", f"{name} was changed"


def toml(text: str):
    def setup(tmp: Path) -> None:
        (tmp / "s.toml").write_text(text)

    return setup


GOOD = """name = "cat"
[base]
problem = "quadratic"
nodes = 2
iters = 3
[[methods]]
algorithm = "ef21"
[grid]
step_mult = [1, 2]
"""


def sweep_toml(old: str, new: str):
    assert old in GOOD
    return toml(GOOD.replace(old, new))


def no_runs(tmp: Path) -> None:
    """Refused before anything started: no ``OUT/runs``, indeed no sweep folder at all (neither
    ``--out {tmp}/out`` nor the default ``runs/sweeps/NAME``, whose ``..`` is ``runs/``)."""
    for out in ("out", "runs"):
        assert not (tmp / out / "runs").exists(), f"{out}/runs was created"
        assert not (tmp / out).exists(), f"{out} was created"


def missing_data(tmp: Path) -> None:
    """A problem whose data file is not there."""
    data = f'problem = "logreg"\ndataset = "libsvm:{tmp}/none.txt"'
    (tmp / "s.toml").write_text(GOOD.replace('problem = "quadratic"', data))


def foreign_sweep(tmp: Path) -> None:
    (tmp / "s.toml").write_text(GOOD)
    (tmp / "out").mkdir()
    other = json.loads(json.dumps({"name": "cat", "base": {}, "methods": [], "grid": {}}))
    (tmp / "out" / "sweep.json").write_text(json.dumps(other))


def empty_sweep(tmp: Path) -> None:
    """A sweep folder whose runs never started."""
    from experiments.config import load_config

    (tmp / "s.toml").write_text(GOOD)
    (tmp / "out").mkdir()
    (tmp / "out" / "sweep.json").write_text(json.dumps(load_config(tmp / "s.toml").to_dict()))


R = ["{tmp}/r"]
O = ["-o", "{tmp}/fig.png"]
CASES: list[Case] = [
    # experiments.plot
    Case(
        "plot-missing-folder",
        PLOT,
        ["{tmp}/nope", *O],
        message=r"'.*/nope' does not exist; "
        r"give run folders or sweep folders",
    ),  # fmt: skip
    Case(
        "plot-not-a-run",
        PLOT,
        ["{tmp}", *O],
        message=r"is neither a run folder \(config.json, "
        r"history.csv\) nor a sweep folder \(sweep.json\)",
    ),  # fmt: skip
    Case(
        "plot-unknown-column",
        PLOT,
        [*R, "--y", "loss", *O],
        setup=run_no_fstar,
        message=r"column 'loss' is not in .*history.csv; have: iter, bits_up, bits_down, f, "
        r"grad_norm_sq",
    ),  # fmt: skip
    Case(
        "plot-empty-f-gap",
        PLOT,
        [*R, "--y", "f_gap", *O],
        setup=run_no_fstar,
        message=r"column 'f_gap' of .* is empty \(f\* is unknown for this run's problem\); "
        r"columns with values: iter, bits_up, bits_down, f, grad_norm_sq",
    ),  # fmt: skip
    Case(
        "plot-unsupported-suffix",
        PLOT,
        [*R, "-o", "{tmp}/fig.gif"],
        setup=run_no_fstar,
        message=r"unsupported figure format '.gif' in '.*fig.gif'; allowed suffixes: .png, "
        r".pdf, .svg, .jpg",
        check=lambda t: absent(t, "fig.gif"),
    ),  # fmt: skip
    Case(
        "plot-output-is-a-folder-name",
        PLOT,
        [*R, "-o", "."],
        setup=run_no_fstar,
        message=r"output '.' names a folder, not a figure file \(e.g. fig.png\)",
    ),
    Case(
        "plot-unwritable-output",
        PLOT,
        [*R, "-o", "{tmp}/file/fig.png"],
        setup=lambda t: (run_no_fstar(t), a_file(t)),
        message=r"cannot write the figure '.*/file/fig.png'",
    ),  # fmt: skip
    Case(
        "plot-bad-yscale",
        PLOT,
        [*R, "--yscale", "cube", *O],
        setup=run_no_fstar,
        message=r"argument --yscale: invalid choice: 'cube' \(choose from '?log'?, "
        r"'?linear'?, '?symlog'?\)",
    ),  # fmt: skip
    Case(
        "plot-bad-x",
        PLOT,
        [*R, "--x", "epochs", *O],
        setup=run_no_fstar,
        message=r"argument --x: invalid choice: 'epochs' \(choose from '?bits'?",
    ),
    Case(
        "plot-modeled-time-without-network",
        PLOT,
        [*R, "--x", "modeled-time", *O],
        setup=run_no_fstar,
        message=r"x='modeled-time' needs the systems model "
        r"\(--bandwidth GBPS, Gbit/s per node, and --workers P\)",
    ),  # fmt: skip
    Case(
        "plot-bandwidth-nan",
        PLOT,
        [*R, "--x", "modeled-time", "--bandwidth", "nan", "--workers", "2", *O],
        setup=run_no_fstar,
        message=r"bandwidth must be a finite number > 0 Gbit/s, got nan",
    ),  # fmt: skip
    Case(
        "plot-workers-zero",
        PLOT,
        [*R, "--x", "modeled-time", "--bandwidth", "1", "--workers", "0", *O],
        setup=run_no_fstar,
        message=r"workers must be an integer >= 1, got 0",
    ),  # fmt: skip
    Case(
        "plot-negative-tol",
        PLOT,
        [*R, "--tol", "-1", *O],
        setup=run_no_fstar,
        message=r"select.tol must be a number > 0, got -1.0",
    ),
    Case(
        "plot-corrupt-config",
        PLOT,
        [*R, *O],
        setup=run_with(config_json="{oops"),
        message=r"'.*/r/config.json' is not readable JSON \(Expecting",
    ),
    Case(
        "plot-config-not-an-object",
        PLOT,
        [*R, *O],
        setup=run_with(config_json="[1, 2]"),
        message=r"'.*/r/config.json' must hold a JSON object, got list",
    ),
    Case(
        "plot-bad-number",
        PLOT,
        [*R, *O],
        setup=run_with(history_csv=",".join(HISTORY) + "\n0,0,0,1,,oops,0\n"),
        message=r"column 'grad_norm_sq' of .* holds 'oops' at row 1; allowed: numbers, inf, "
        r"nan",
    ),  # fmt: skip
    Case(
        "plot-empty-history",
        PLOT,
        [*R, *O],
        setup=run_with(history_csv=",".join(HISTORY)),
        message=r"'.*/r/history.csv' has no rows: the run logged nothing",
    ),
    Case(
        "plot-negative-values-fall-back",
        PLOT,
        [*R, "--y", "f", *O],
        code=0,
        setup=run_no_fstar,
        message=r"warning: f has values <= 0 \(smallest -2\), which a log "
        r"y axis cannot show; using a linear y axis instead \(choose one with --yscale "
        r"log\|linear\|symlog\)",
        check=lambda t: png(t, "fig.png"),
    ),  # fmt: skip
    Case(
        "plot-diverged-points-dropped",
        PLOT,
        [*R, *O],
        code=0,
        setup=run_diverged,
        message=r"warning: .*/r: dropped 1 non-finite grad_norm_sq value\(s\), from iteration "
        r"4 on \(the run diverged\)",
    ),  # fmt: skip
    Case(
        "plot-corrupt-sweep-json",
        PLOT,
        ["{tmp}", *O],
        setup=lambda t: (t / "sweep.json").write_text("{"),
        message=r"'.*/sweep.json' is not readable JSON",
    ),  # fmt: skip
    # experiments.sweep
    Case(
        "sweep-missing-config",
        SWEEP,
        ["{tmp}/nope.toml"],
        message=r"sweep config '.*/nope.toml' is not a file",
    ),
    Case("sweep-config-is-a-folder", SWEEP, ["{tmp}"], message=r"sweep config '.*' is not a file"),
    Case(
        "sweep-bad-toml",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=toml("name = [\n"),
        message=r"sweep config '.*/s.toml' is not valid TOML: ",
    ),
    Case(
        "sweep-binary-config",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=lambda t: (t / "s.toml").write_bytes(b"\xff\xfe\x00name"),
        message=r"sweep config '.*/s.toml' is not valid TOML",
    ),  # fmt: skip
    Case(
        "sweep-unknown-top-key",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml('name = "cat"', 'name = "cat"\nseeds = [0, 1]'),
        message=r"unknown top-level key 'seeds' in the sweep config; allowed: name, base, "
        r"methods, grid, select",
    ),  # fmt: skip
    Case(
        "sweep-plural-grid-key",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("step_mult = [1, 2]", "seeds = [0, 1]"),
        message=r"unknown runner flag 'seeds' in grid; allowed: .*\bseed\b",
    ),
    Case(
        "sweep-unknown-method-key",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml('algorithm = "ef21"', 'algorithm = "ef21"\ngama = 0.1'),
        message=r"unknown runner flag 'gama' in methods\[0\]; allowed: ",
    ),
    Case(
        "sweep-unknown-select-key",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=toml(GOOD + '[select]\nrules = "min_final"\n'),
        message=r"unknown key 'rules' in \[select\]; allowed: rule, metric, tol",
    ),
    Case(
        "sweep-bad-rule",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=toml(GOOD + '[select]\nrule = "fast"\n'),
        message=r"select.rule must be one of min_final, bits_to_tol, got 'fast'",
    ),
    Case(
        "sweep-bits-to-tol-without-tol",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=toml(GOOD + '[select]\nrule = "bits_to_tol"\n'),
        message=r"select.rule 'bits_to_tol' needs select.tol \(a number > 0\)",
    ),
    Case(
        "sweep-unknown-algorithm",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml('algorithm = "ef21"', 'algorithm = "adam"'),
        message=r"methods\[0\].algorithm 'adam' is unknown; allowed: .*ef21",
    ),
    Case(
        "sweep-no-methods",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml('[[methods]]\nalgorithm = "ef21"\n', ""),
        message=r"methods must be a non-empty list of tables \(\[\[methods\]\] with algorithm\)",
    ),
    Case(
        "sweep-power-grid-keys",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("[1, 2]", "{ base = 2, from = 0, too = 3 }"),
        message=r"grid.step_mult as a table needs exactly the keys base, from, to; got "
        r"\['base', 'from', 'too'\]",
    ),  # fmt: skip
    Case(
        "sweep-power-grid-reversed",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("[1, 2]", "{ base = 2, from = 3, to = 0 }"),
        message=r"grid.step_mult: 'to' \(0\) must be >= 'from' \(3\)",
    ),
    Case(
        "sweep-power-grid-fraction",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("[1, 2]", "{ base = 2, from = 0.5, to = 3 }"),
        message=r"grid.step_mult.from must be an integer exponent, got 0.5",
    ),
    Case(
        "sweep-empty-grid",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("[1, 2]", "[]"),
        message=r"grid.step_mult is empty; give at least one value",
    ),
    Case(
        "sweep-grid-key-also-in-base",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("iters = 3", "iters = 3\nstep_mult = 1"),
        message=r"grid.step_mult is also set in \[base\]; set it in one place only",
    ),
    Case(
        "sweep-managed-key",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("iters = 3", 'iters = 3\nout = "x"'),
        message=r"base.out is set by the sweep itself; not allowed among: out, overwrite",
    ),
    Case(
        "sweep-bad-runner-value",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("iters = 3", 'iters = "many"'),
        message=r"the runner rejects its arguments: .*--iters: invalid int value: 'many'",
    ),
    Case(
        "sweep-list-in-base",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml("nodes = 2", "nodes = [2, 3]"),
        message=r"base.nodes is a list; only \[grid\] takes lists of values",
    ),
    Case(
        "sweep-bad-name",
        SWEEP,
        ["{tmp}/s.toml"],
        setup=sweep_toml('"cat"', '"my sweep"'),
        message=r"name must be a plain folder name: 1 to 100 letters, digits and ._=\+-, not "
        r"starting with a dot \(so neither '.' nor '..'\), no path separators; got 'my sweep'",
    ),  # fmt: skip
    # the whole grid is checked before the first run: exit 2, nothing written
    Case(
        "sweep-name-dotdot",
        SWEEP,
        ["{tmp}/s.toml", "--quiet"],
        setup=sweep_toml('"cat"', '".."'),
        message=r"name must be a plain folder name: .*not starting with a dot \(so neither '.' "
        r"nor '..'\), no path separators; got '\.\.'",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-name-dot",
        SWEEP,
        ["{tmp}/s.toml", "--quiet"],
        setup=sweep_toml('"cat"', '"."'),
        message=r"name must be a plain folder name: .*; got '\.'",
        check=no_runs,
    ),
    Case(
        "sweep-name-with-separator",
        SWEEP,
        ["{tmp}/s.toml", "--quiet"],
        setup=sweep_toml('"cat"', '"a/b"'),
        message=r"name must be a plain folder name: .*no path separators; got 'a/b'",
        check=no_runs,
    ),
    Case(
        "sweep-repeated-multiplier",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("[1, 2]", "[1, 1.0]"),
        message=r"grid.step_mult repeats a value: 1 and 1.0 are the same --step-mult 1.0; give "
        r"each value once",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-repeated-method",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml(
            'algorithm = "ef21"', 'algorithm = "ef-sgd"\n[[methods]]\nalgorithm = "ef14"'
        ),
        message=r"methods\[1\] gives the same runs as methods\[0\]: algorithm 'ef-sgd' "
        r"\(= 'ef14'\) with the same flags",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-negative-iters",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=toml(GOOD.replace("iters = 3\n", "") + "iters = [3, -1]\n"),
        message=r"error: grid.iters = -1: --iters must be >= 1, got -1",
        check=no_runs,
    ),
    Case(
        "sweep-topk-k-zero",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=toml(GOOD + 'compressor = ["topk:k=1", "topk:k=0"]\n'),
        message=r"error: grid.compressor = 'topk:k=0': k must be a positive integer "
        r"\(1 <= k <= d\), got k=0",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-negative-seed",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=toml(GOOD + "seed = [0, -1]\n"),
        message=r"error: grid.seed = -1: --seed must be an integer in \[0, 2\*\*63\), got -1",
        check=no_runs,
    ),
    Case(
        "sweep-nan-multiplier",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("[1, 2]", "[1, nan]"),
        message=r"error: grid.step_mult = nan: --step-mult must be a positive number, got nan",
        check=no_runs,
    ),
    Case(
        "sweep-zero-nodes",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("nodes = 2", "nodes = 0"),
        message=r"error: base.nodes = 0: --nodes must be >= 1, got 0",
        check=no_runs,
    ),
    Case(
        "sweep-byzantine-without-byzantine-method",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("nodes = 2", "nodes = 4\nbyzantine = 1"),
        message=r"error: run ef21_m1_[0-9a-f]{8}: base.byzantine = 1: --byzantine does not apply "
        r"to ef21; its options: ",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-missing-data-file",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=missing_data,
        message=r"error: run ef21_m1_[0-9a-f]{8}: base.dataset = 'libsvm:.*/none.txt': logreg: "
        r"dataset file '.*/none.txt' not found",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-power-grid-too-long",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("[1, 2]", "{ base = 2, from = 0, to = 100000 }"),
        message=r"error: grid.step_mult = \{base = 2, from = 0, to = 100000\} has 100001 values; "
        r"at most 10000 per key",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-power-grid-overflow",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=sweep_toml("[1, 2]", "{ base = 2, from = 0, to = 2000 }"),
        message=r"error: grid.step_mult = \{base = 2, from = 0, to = 2000\}: 2\*\*2000 is beyond "
        r"a float's range \(about 1e-308 to 1.8e308\); with base 2 the exponents must lie in "
        r"-1023..1023",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-too-many-runs",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=toml(
            GOOD + f"seed = {list(range(10000))}\nlog_every = {{ base = 2, from = 0, to = 20 }}\n"
        ),
        message=r"error: the sweep has 420000 runs \(1 method\(s\) x grid.step_mult \(2\) x "
        r"grid.seed \(10000\) x grid.log_every \(21\)\); at most 100000 runs per sweep: shrink "
        r"grid.seed \(10000 values\) or split the sweep",
        check=no_runs,
    ),  # fmt: skip
    Case(
        "sweep-jobs-zero",
        SWEEP,
        ["{tmp}/s.toml", "--jobs", "0", "--out", "{tmp}/o"],
        setup=toml(GOOD),
        message=r"jobs must be an integer >= 1, got 0",
    ),
    Case(
        "sweep-out-is-a-file",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/file"],
        setup=lambda t: (toml(GOOD)(t), a_file(t)),
        message=r"'.*/file' exists and is not a sweep folder \(no sweep.json\); choose another "
        r"--out",
        check=lambda t: untouched(t, "file"),
    ),  # fmt: skip
    Case(
        "sweep-unwritable-out",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/file/sub"],
        setup=lambda t: (toml(GOOD)(t), a_file(t)),
        message=r"cannot write the sweep folder '.*/file/sub'",
    ),  # fmt: skip
    Case(
        "sweep-folder-of-another-config",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=foreign_sweep,
        message=r"'.*/out' holds a sweep of a different config \(differs "
        r"in: base, grid, methods, select\); choose another --out",
    ),  # fmt: skip
    Case(
        "sweep-corrupt-record",
        SWEEP,
        ["{tmp}/s.toml", "--out", "{tmp}/out"],
        setup=lambda t: (
            toml(GOOD)(t),
            (t / "out").mkdir(),
            (t / "out" / "sweep.json").write_text("{"),
        ),
        message=r"'.*/out/sweep.json' is unreadable \(.*\): '.*/out' is not a sweep folder this "
        r"command can resume; choose another --out",
    ),
    Case(
        "plot-sweep-without-finished-runs",
        PLOT,
        ["{tmp}/out", *O],
        setup=empty_sweep,
        message=r"no finished runs in .*/out",
    ),
    # experiments.reproduce
    Case(
        "reproduce-unknown-name",
        REPRO,
        ["nope"],
        message=r"unknown reproduction 'nope'; available: .*ef21-vs-ef",
    ),
    Case("reproduce-no-name", REPRO, [], message=r"no NAME given; available: .*ef21-vs-ef"),
    Case(
        "reproduce-jobs-zero",
        REPRO,
        ["ef21-vs-ef", "--jobs", "0"],
        message=r"--jobs must be >= 1, got 0",
    ),
    Case(
        "reproduce-golden-without-quick",
        REPRO,
        ["ef21-vs-ef", "--write-golden"],
        message=r"--write-golden records the quick version: give --quick and no --dataset",
    ),
    Case(
        "reproduce-record-quick",
        REPRO,
        ["ef21-vs-ef", "--quick", "--record"],
        message=r"--record records a full run: not with --quick",
    ),
    Case(
        "reproduce-dataset-not-found",
        REPRO,
        ["ef21-vs-ef", "--quick", "--dataset", "libsvm:{tmp}/none.txt", "--out", "{tmp}/o"],
        message=r"--dataset 'libsvm:.*/none.txt': file not found",
    ),  # fmt: skip
    Case(
        "reproduce-dataset-for-generated-data",
        REPRO,
        ["3pc-quadratic", "--quick", "--dataset", "mushrooms", "--out", "{tmp}/o"],
        message=r"3pc-quadratic: takes no --dataset \(its problem generates its own data\)",
    ),
    Case(
        "reproduce-data-absent-skips",
        REPRO,
        ["ef21-vs-ef", "--quick", "--out", "{tmp}/o"],
        code=0,
        env={"COMPZOO_LIBSVM_DIR": "/nonexistent/libsvm", "COMPZOO_DATA": ""},
        message=r"ef21-vs-ef: skipped: the LIBSVM set\(s\) .* are not in /nonexistent/libsvm "
        r"\(set COMPZOO_LIBSVM_DIR",
    ),  # fmt: skip
    Case(
        "reproduce-out-is-a-file",
        REPRO,
        ["3pc-quadratic", "--quick", "--out", "{tmp}/file"],
        setup=a_file,
        message=r"'.*/file' exists and is not a sweep folder",
    ),
    Case(
        "reproduce-unwritable-out",
        REPRO,
        ["3pc-quadratic", "--quick", "--out", "{tmp}/file/sub"],
        setup=a_file,
        message=r"error: cannot write the sweep folder '.*/file/sub': Not a directory",
    ),  # fmt: skip
    # systems.utility (bad values are refused before anything is measured)
    Case(
        "utility-params-zero",
        UTIL,
        ["--params", "0"],
        message=r"--params must be an integer >= 1, got 0",
    ),
    Case(
        "utility-unknown-compressor",
        UTIL,
        ["--compressors", "foo"],
        message=r"--compressors 'foo': unknown compressor 'foo'; allowed: .*topk",
    ),
    Case(
        "utility-bandwidth-inf",
        UTIL,
        ["--bandwidth", "inf"],
        message=r"--bandwidth must be a finite number > 0 Gbit/s, got inf",
    ),
    Case(
        "utility-table-bandwidths-text",
        UTIL,
        ["--table-bandwidths", "1,fast"],
        message=r"--table-bandwidths must be numbers joined by commas, got '1,fast'",
    ),
    Case(
        "utility-table-bandwidths-zero",
        UTIL,
        ["--table-bandwidths", "0,10"],
        message=r"--table-bandwidths must all be > 0 Gbit/s, got '0,10'",
    ),
    Case(
        "utility-layerwise-with-params",
        UTIL,
        ["--params", "10", "--layerwise"],
        message=r"--layerwise needs the model's tensors; it cannot be combined with --params",
    ),
    Case(
        "utility-negative-latency",
        UTIL,
        ["--latency-us", "-1"],
        message=r"--latency-us must be >= 0, got -1.0",
    ),
    Case(
        "utility-unknown-model",
        UTIL,
        ["--model", "vgg"],
        message=r"argument --model: invalid choice: 'vgg' \(choose from .*resnet50",
    ),
    Case(
        "utility-unwritable-plot",
        UTIL,
        ["--params", "100", "--compressors", "identity", "--quiet", "--plot", "{tmp}/file/fig.png"],
        setup=a_file,
        message=r"cannot write the plot '.*/file/fig.png'",
    ),  # fmt: skip
    Case(
        "utility-plot-unsupported-suffix",
        UTIL,
        ["--params", "100", "--compressors", "identity", "--quiet", "--plot", "{tmp}/fig.xyz"],
        message=r"cannot write the plot '.*/fig.xyz': Format 'xyz' is not supported",
    ),  # fmt: skip
    # systems.validate (bad values are refused before torchrun starts)
    Case("validate-missing-out", VALID, [], message=r"the following arguments are required: --out"),
    Case(
        "validate-one-process",
        VALID,
        ["--out", "{tmp}/v", "--nproc", "1"],
        message=r"--nproc values must be >= 2 \(a collective needs two ranks\), got \[1\]",
    ),
    Case(
        "validate-bad-bench-sizes",
        VALID,
        ["--out", "{tmp}/v", "--bench-sizes", "1e3,10"],
        message=r"--bench-sizes must be integers joined by commas, got '1e3,10'",
    ),
    Case(
        "validate-one-bench-size",
        VALID,
        ["--out", "{tmp}/v", "--bench-sizes", "1000"],
        message=r"--bench-sizes needs two or more sizes >= 1 \(for the fit\), got '1000'",
    ),
    Case(
        "validate-one-iteration",
        VALID,
        ["--out", "{tmp}/v", "--iters", "1"],
        message=r"--iters must be >= 2 \(the first iteration is not timed\), got 1",
    ),
    Case(
        "validate-unknown-compressor",
        VALID,
        ["--out", "{tmp}/v", "--compressors", "foo"],
        message=r"--compressors 'foo': unknown compressor 'foo'; allowed: ",
    ),
    Case(
        "validate-unwritable-out",
        VALID,
        ["--out", "{tmp}/file/v"],
        setup=a_file,
        message=r"cannot create --out '.*/file/v'",
    ),
]
