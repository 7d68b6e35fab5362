"""Every command of README.md and of the pages of docs/ is exercised, and gives a sensible result.

``doc_commands()`` collects the commands of ``README.md`` and ``docs/*.md`` (:data:`PAGES`), each
page through ``readme_commands(text)``: the lines of its fenced ``bash`` blocks (continuations
joined, comments dropped) and the inline ``python -m ...`` / ``torchrun ...`` spans. ``EXERCISED``
maps each one to how a test runs it: the command itself (in a temporary folder) and a check of
its result, or, for a template such as ``--dim D``, a concrete instance. A command missing from
``EXERCISED`` (or an entry no longer on any page) fails ``test_every_command_is_exercised``, so
neither the README nor a docs page can gain an untested command. The ``python`` blocks of the
README and of ``docs/distributed.md`` run below; those of ``docs/contributing.md`` run in
``tests/test_docs_examples.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
LIBSVM = REPO.parent / "shared" / "data" / "libsvm"


def readme_commands(text: str | None = None) -> list[str]:
    """The README's commands, in order of appearance, each once."""
    text = README.read_text() if text is None else text
    cmds: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                cmds.append(re.sub(r"\s+", " ", line))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        if span.startswith(("python -m ", "torchrun ")):
            cmds.append(re.sub(r"\s+", " ", span.strip()))
    return list(dict.fromkeys(cmds))


def pages() -> list[Path]:
    """The pages whose commands are checked: the README and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def doc_commands() -> list[str]:
    """The commands of every page, in order of appearance (pages in :func:`pages` order), once."""
    cmds = [c for page in pages() for c in readme_commands(page.read_text(encoding="utf-8"))]
    return list(dict.fromkeys(cmds))


def python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


@dataclass(frozen=True)
class Use:
    """How a README command is exercised.

    Attributes:
        argv: the command run (``None``: exercised elsewhere, see ``where``).
        check: asserts on the output folder and the captured output.
        where: for ``argv=None``, where it is exercised.
        marks: pytest marks (``slow``, ``dist``).
        needs_libsvm: skipped when the LIBSVM sets are absent.
    """

    argv: list[str] | None
    check: Callable[[Path, str], None] | None = None
    where: str = ""
    marks: tuple[str, ...] = ()
    needs_libsvm: bool = False


def _summary(path: Path) -> dict:
    return json.loads(path.joinpath("summary.json").read_text())


def _check_marina(tmp: Path, out: str) -> None:
    folder = Path(re.search(r"results in (\S+)", out).group(1))
    s = _summary(folder if folder.is_absolute() else tmp / folder)
    assert s["reason"] == "completed"
    rows = (tmp / folder / "history.csv").read_text().splitlines()
    head = rows[0].split(",")
    g0 = float(rows[1].split(",")[head.index("grad_norm_sq")])
    assert s["final"]["grad_norm_sq"] < 1e-2 * g0, (g0, s["final"])


def _check_ef21(tmp: Path, out: str) -> None:
    s = _summary(tmp / "runs" / "ef21")
    assert s["reason"] == "completed"
    # The README states f = 0.258 and ||grad f||^2 = 1.4e-6 (from f = log 2 at the origin).
    assert abs(s["final"]["f"] - 0.258) < 5e-4, s["final"]
    assert 1e-6 < s["final"]["grad_norm_sq"] < 2e-6, s["final"]


def _check_listing(tmp: Path, out: str) -> None:
    for name in ("ef21", "marina", "dasha", "topk", "randk", "logreg", "sigmoid-squared"):
        assert name in out, name


def _check_problems(tmp: Path, out: str) -> None:
    assert re.search(r"\bL\b", out) and "L_tilde" in out, out


def _check_reproduce_list(tmp: Path, out: str) -> None:
    for name in ("ef21-vs-ef", "marina-vs-diana", "dasha-vs-marina", "3pc-quadratic", "3pc-lag"):
        assert name in out, name
    assert "verdict" in out


def _check_reproduce_quick(tmp: Path, out: str) -> None:
    """The quick reproduction's verdict and bits are the golden record's (EF21 36,075 bits to
    1e-5 on mushrooms, EF14 never), within the record's own tolerance."""
    golden = json.loads((REPO / "experiments/papers/ef21-vs-ef/golden.json").read_text())
    verdict = json.loads((tmp / "q" / "verdict.json").read_text())
    assert verdict["holds"] is golden["holds"] is True, out
    rel = golden["tolerance"]["bits_to_tol_rel"]
    pairs = zip(golden["settings"][0]["methods"], verdict["settings"][0]["methods"], strict=True)
    for want, got in pairs:
        assert got["label"] == want["label"]
        if want["bits_to_tol"] is None:
            assert got["bits_to_tol"] is None, got
        else:
            assert abs(got["bits_to_tol"] - want["bits_to_tol"]) <= rel * want["bits_to_tol"], got


def _check_sweep(tmp: Path, out: str) -> None:
    folder = tmp / "runs" / "sweeps" / "mine"
    assert (folder / "summary.csv").is_file() and (folder / "best.csv").is_file()


def _check_sweep_help(tmp: Path, out: str) -> None:
    for key in ("[base]", "[[methods]]", "[grid]", "[select]", "step_mult", "seed", "compressor"):
        assert key in out, key


def _check_plot(tmp: Path, out: str) -> None:
    assert (tmp / "fig.png").stat().st_size > 1000


def _check_utility(tmp: Path, out: str) -> None:
    assert re.search(r"speed-?up", out, flags=re.I) and re.search(r"break-?even", out, re.I), out


def _check_compressors(tmp: Path, out: str) -> None:
    # d = 1000, K = 10: delta = K/d, omega = d/K - 1, and 10 x (32 + 10) bits formula and measured
    assert re.search(r"topk:k=10\s+contractive\s+delta=0.01\s+420\s+420\s", out), out
    assert re.search(r"randk:k=10\s+unbiased\s+omega=99\s+420\s+420\s", out), out


def _check_theory(tmp: Path, out: str) -> None:
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m and int(m.group(1)) >= 1 and m.group(2) == "0", out


def _check_hooks_list(tmp: Path, out: str) -> None:
    rows = [m.groups() for m in re.finditer(r"^(\S+)\s+(all-reduce|all-gather)\s", out, re.M)]
    names = {name for name, _ in rows}
    want = {"fp16", "bf16", "allreduce", "powersgd", "acp-sgd", "scalecom", "dgc", "comp"}
    want |= {"torch-powersgd", "torch-fp16", "torch-bf16"}  # PyTorch's own, as comparators
    assert want <= names and len(rows) >= 16, out
    assert dict(rows)["powersgd"] == "all-reduce" and dict(rows)["dgc"] == "all-gather", out


def _check_method_help(tmp: Path, out: str) -> None:
    assert "ef21's options:" in out and "--init {full,compressed,zero}" in out, out
    assert "--regime" in out and "--mechanism" not in out, out


def _check_run_folder(tmp: Path, out: str) -> None:
    s = _summary(tmp / "r")
    assert s["reason"] == "completed" and s["iters"] == 100, s


def _check_docs_current(tmp: Path, out: str) -> None:
    assert "generated pages up to date" in out, out


def _check_resume(tmp: Path, out: str) -> None:
    rows = (tmp / "r" / "history.csv").read_text().splitlines()
    assert rows[-1].split(",")[0] == "40", rows[-1]


PY = [sys.executable, "-m"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
SWEEP = "python -m experiments.sweep examples/sweep.toml --out runs/sweeps/mine --jobs 2"
PLOT = "python -m experiments.plot runs/sweeps/mine --x bits --y grad_norm_sq -o fig.png"

TORCHRUN_EXAMPLE = (
    "torchrun --standalone --nproc_per_node=4 -m algorithms.run ef21 --compressor "
    "topk:ratio=0.01 --problem mlp --dataset digits --backend gloo --iters 200 --out runs/dist"
)

CHOCO_DOC = (
    "python -m algorithms.run choco-sgd --compressor topk:k=2 --topology torus --nodes 9 "
    "--consensus 0.2 --iters 1000 --out runs/choco"
)
BEER_DOC = (
    "python -m algorithms.run beer --compressor topk:k=2 --topology torus --nodes 9 "
    "--consensus 0.2 --step 0.1 --iters 1000 --out runs/beer"
)
CHOCO_DIST_DOC = (
    "torchrun --standalone --nproc_per_node=2 -m algorithms.run choco-sgd --compressor topk:k=2 "
    "--topology ring --nodes 8 --consensus 0.2 --iters 200 --backend gloo --out runs/choco-dist"
)


def _check_choco(tmp: Path, out: str) -> None:
    # docs/decentralized.md states f - f* = 3.5e-3 (from 4.6)
    s = _summary(tmp / "runs" / "choco")
    assert s["reason"] == "completed" and 3e-3 < s["final"]["f_gap"] < 4e-3, s["final"]


def _check_beer(tmp: Path, out: str) -> None:
    # docs/decentralized.md states f - f* = 1.3e-3, the nodes in agreement to 4e-7
    s = _summary(tmp / "runs" / "beer")
    assert s["reason"] == "completed" and 1.2e-3 < s["final"]["f_gap"] < 1.4e-3, s["final"]
    rows = (tmp / "runs" / "beer" / "history.csv").read_text().splitlines()
    head = rows[0].split(",")
    assert 3e-7 < float(rows[-1].split(",")[head.index("consensus")]) < 5e-7


def _check_stamps(tmp: Path, out: str) -> None:
    assert "stale" not in out, out  # and exit 0 (_run): every kernel module's stamps current


def _check_sparsifiers(tmp: Path, out: str) -> None:
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 10, out
    kept = {(r[1].strip(), r[2].strip()): float(r[5]) for r in rows}
    assert kept[("laplace", "topk")] == 1.0 and 0.9 < kept[("gauss", "sidco-exp-3")] < 1.2, out


EXERCISED: dict[str, Use] = {
    "python -m benchmarks.sparsifiers --dim 1000000 --ratio 0.01": Use(
        [*PY, "benchmarks.sparsifiers", "--dim", "100000", "--ratio", "0.01", "--repeats", "1"],
        _check_sparsifiers,
    ),
    CHOCO_DOC: Use(None, _check_choco),
    BEER_DOC: Use(None, _check_beer),
    CHOCO_DIST_DOC: Use(
        None,
        where="test_sharded_gloo_equals_the_simulation (tests/algorithms/test_decentralized.py):"
        " choco-sgd on a ring of 8 nodes over 2 gloo processes against the simulation",
    ),
    'pip install torch==2.13.0 && pip install -e ".[dev]" && python -m benchmarks.vector_width '
    "&& python -m compressors.warm && python -m problems.warm && python -m algorithms.run marina "
    "--compressor randk": Use(
        [*PY, "algorithms.run", "marina", "--compressor", "randk"], _check_marina
    ),
    "python -m pytest -q": Use(None, where=".ci/run runs it on a clean checkout"),
    "python -m compressors.warm": Use(
        None,
        where=".ci/run runs it before the suite; test_every_compressor_encodes_decodes_and_sums_"
        "in_both_dtypes (tests/compressors/test_warm.py) runs its command line on two compressors",
    ),
    "python -m benchmarks.vector_width": Use(
        None,
        where=".ci/run runs it before the warm-ups; test_the_calibration_times_both_widths_and_"
        "records_its_choice (tests/test_vector_width.py, heavy) runs its command line",
    ),
    "python -m problems.warm": Use(
        None,
        where=".ci/run runs it before the suite; test_every_case_runs_every_kind_of_call "
        "(tests/problems/test_warm.py) runs its command line",
    ),
    "python -m algorithms.run ef21 --compressor topk:ratio=0.05 --problem logreg-nonconvex "
    "--dataset breast-cancer --problem-opt scale=standard --nodes 20 --split contiguous "
    "--lambda 0.1 --x0 zeros --iters 2000 --out runs/ef21": Use(None, _check_ef21),
    "python -m algorithms.run --list": Use(None, _check_listing),
    "python -m algorithms.run ALGORITHM [options]": Use(
        [*PY, "algorithms.run", "marina", "--compressor", "randk", "--iters", "100"]
        + ["--out", "r", "--quiet"],
        _check_run_folder,
    ),
    "python docs/generate.py": Use(
        None,
        where="test_generated_pages_are_up_to_date (tests/test_docs_generated.py): the committed "
        "pages equal what it writes; test_a_method_added_without_regenerating_fails_the_check "
        "runs it on a copy of docs/",
    ),
    "python docs/generate.py --check": Use(
        [sys.executable, str(REPO / "docs" / "generate.py"), "--check"], _check_docs_current
    ),
    "python -m algorithms.run ef21 --help": Use(None, _check_method_help),
    "python -m streams.stamps": Use(
        None,
        where="test_the_command_restamps_a_copy_after_a_change (tests/test_stamps.py): it runs "
        "on a copy of the packages, one kernel module changed",
    ),
    "python -m streams.stamps --check": Use([*PY, "streams.stamps", "--check"], _check_stamps),
    TORCHRUN_EXAMPLE: Use(None, marks=("dist",)),
    "torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint "
    "HOST:PORT --rdzv-id myrun -m algorithms.run marina --compressor randk:k=5 --problem logreg "
    "--nodes 1000 --iters 500 --out runs/two-hosts": Use(
        None,
        where="test_two_launchers_over_loopback_match_the_simulation (tests/algorithms/"
        "test_torch_dist.py): the same launch, both hosts on this machine",
    ),
    "torchrun --standalone --nproc_per_node=2 x.py": Use(
        None, where="test_python_block_ddp", marks=("dist",)
    ),
    "python -m experiments.sweep --help": Use(None, _check_sweep_help),
    SWEEP: Use(None, _check_sweep),
    PLOT: Use(None, _check_plot),
    "python -m experiments.reproduce --list": Use(None, _check_reproduce_list),
    "python -m experiments.reproduce ef21-vs-ef --dataset mushrooms --jobs 2 --record": Use(
        None,
        where="the full run writes results.json into the repository; the test runs its quick "
        "form (test_reproduce_quick) and the slow suite compares quick runs with golden.json",
    ),
    "python -m compressors --dim D [--spec SPEC]... [--nodes N]": Use(
        [*PY, "compressors", "--dim", "1000", "--spec", "topk:k=10", "--spec", "randk:k=10"]
        + ["--nodes", "4"],
        _check_compressors,
    ),
    "python -m algorithms.run --resume DIR [--iters T]": Use(None, _check_resume),
    "python -m problems --problem logreg-nonconvex --dataset breast-cancer --nodes 20": Use(
        None, _check_problems
    ),
    "python -m theory_checks [--fast] [--only PATTERN]": Use(
        [*PY, "theory_checks", "--fast", "--only", "ef21.nonconvex-bound", "--out", "tc"],
        _check_theory,
    ),
    "python -m systems.utility --model resnet50 --workers 64 --bandwidth 10": Use(
        None, _check_utility
    ),
    "python -m systems.validate --nproc 2 --out runs/validate": Use(
        None, where="test_systems_validate (slow, dist)", marks=("slow", "dist")
    ),
    "python -m systems.hooks --list": Use(None, _check_hooks_list),
    "python -m systems.netstudy --bandwidth 0.5,1,5,10 --workers 2,4 --model cnn --out "
    "runs/netstudy": Use(
        None,
        where="test_tiny_two_worker_run_over_a_throttled_link (tests/systems/test_netstudy.py, "
        "dist, root): the same study at one bandwidth with three methods; the full study is a "
        "command, not a test",
    ),
    "python -m systems.netstudy --model mlp --workers 2,4 --bandwidth 0.5,1,5,10 --repeats 3 "
    "--iters 10 --batch 32 --train-iters 600 --eval-every 20 --out runs/netstudy-mlp": Use(
        None,
        where="test_tiny_two_worker_run_over_a_throttled_link (tests/systems/test_netstudy.py, "
        "dist, root): the study with repeats and the link probe at one bandwidth; the full "
        "study is a command, not a test",
    ),
    "torchrun --nnodes 2 --node-rank R --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "
    "HOST0:29500 -m systems.networker --model mlp --method fp16 --method powersgd:rank=4 --method "
    "torch-powersgd:rank=4 --train-iters 400 --target-acc 0.75 --out launch.json": Use(
        None,
        where="needs two hosts; the same worker under torchrun on one host, in network "
        "namespaces, is test_tiny_two_worker_run_over_a_throttled_link "
        "(tests/systems/test_netstudy.py, dist, root)",
    ),
    "python -m systems.pays --model resnet50 --gpus 64 --bandwidth 10 --hooks "
    "'fp16;powersgd:rank=4'": Use(
        None,
        where="test_resnet50_on_64_gpus_at_10_gbps (tests/systems/test_pays.py): the answer "
        "with PowerSGD all-reduced and the fp16 baseline, codec times stubbed",
    ),
    "python -m algorithms.run --batch FILE [--exact]": Use(
        None,
        where="test_the_command_line_batch_writes_folders_that_resume_alone "
        "(tests/algorithms/test_batched_runs.py): a batch file of two runs, --exact, each "
        "folder equal to the run alone and resumed alone",
    ),
    "python -m benchmarks --only grid": Use(
        None,
        where="test_grid_quick_on_one_set (tests/benchmarks/test_bench_grid.py, slow, LIBSVM): "
        "the grid batched and one run per process on mushrooms, the same multipliers chosen",
        marks=("slow",),
    ),
    "python -m benchmarks [--quick] [--out DIR]": Use(
        [*PY, "benchmarks", "--quick", "--only", "compressors", "--out", "bench"],
        where="test_benchmarks_quick (slow)",
        marks=("slow",),
    ),
}


def _literal(cmd: str) -> list[str] | None:
    """The argv of a literal ``python -m ...`` command (None for anything else)."""
    words = shlex.split(cmd)
    if words[:2] == ["python", "-m"]:
        return [*PY, *words[2:]]
    if words and words[0] == "torchrun":
        return [*TORCHRUN, *words[1:]]
    return None


def _argv(cmd: str, use: Use) -> list[str] | None:
    return use.argv if use.argv is not None else (_literal(cmd) if use.check or use.marks else None)


def test_every_command_is_exercised():
    cmds = doc_commands()
    missing = [c for c in cmds if c not in EXERCISED]
    stale = [c for c in EXERCISED if c not in cmds]
    assert not missing, f"commands of README.md or docs/ no test exercises: {missing}"
    assert not stale, f"EXERCISED entries no longer in README.md or docs/: {stale}"
    for cmd, use in EXERCISED.items():
        assert _argv(cmd, use) is not None or use.where, cmd


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMPZOO_DATA": str(LIBSVM)}
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{shlex.join(argv)} -> exit {p.returncode}\n{out}"
    assert "Traceback" not in out, out
    return out


def _workdir(tmp: Path) -> Path:
    if (REPO / "examples").is_dir():
        shutil.copytree(REPO / "examples", tmp / "examples")
    return tmp


SINGLE = [
    c
    for c, u in EXERCISED.items()
    if (u.argv is not None or u.check is not None)
    and not u.marks
    and c not in (SWEEP, PLOT)
    and "--resume" not in c
]


# the longest command (about 20 s): CI runs it after the default suite (its 8-minute budget)
HEAVY = {"python -m systems.utility --model resnet50 --workers 64 --bandwidth 10"}


@pytest.mark.parametrize(
    "cmd", [pytest.param(c, marks=pytest.mark.heavy) if c in HEAVY else c for c in SINGLE]
)
def test_command(cmd: str, tmp_path: Path):
    use = EXERCISED[cmd]
    out = _run(_argv(cmd, use), _workdir(tmp_path))
    use.check(tmp_path, out)


def test_sweep_then_plot(tmp_path: Path):
    cwd = _workdir(tmp_path)
    out = _run(_literal(SWEEP), cwd)
    EXERCISED[SWEEP].check(cwd, out)
    out = _run(_literal(PLOT), cwd)
    EXERCISED[PLOT].check(cwd, out)


def test_checkpoint_then_resume(tmp_path: Path):
    _run(
        [*PY, "algorithms.run", "ef21", "--compressor", "topk:k=2", "--iters", "20"]
        + ["--checkpoint-every", "10", "--out", "r", "--quiet"],
        tmp_path,
    )
    out = _run([*PY, "algorithms.run", "--resume", "r", "--iters", "40", "--quiet"], tmp_path)
    EXERCISED["python -m algorithms.run --resume DIR [--iters T]"].check(tmp_path, out)


@pytest.mark.skipif(not LIBSVM.joinpath("mushrooms.txt").is_file(), reason="no LIBSVM sets")
# heavy: CI runs it after the default suite (the default suite's 8-minute budget)
@pytest.mark.heavy
def test_reproduce_quick(tmp_path: Path):
    out = _run(
        [*PY, "experiments.reproduce", "ef21-vs-ef", "--dataset", str(LIBSVM / "mushrooms.txt")]
        + ["--quick", "--out", str(tmp_path / "q"), "--quiet"],
        tmp_path,
    )
    _check_reproduce_quick(tmp_path, out)


def test_python_block_api(capsys):
    """The README's Python API example runs and ends where the command line ends."""
    block = next(b for b in python_blocks() if "algorithms.api" in b)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    res = scope["res"]
    assert res.summary["reason"] == "completed" and len(res.history) == 501
    out = capsys.readouterr().out
    assert out.startswith("completed") and "500" in out
    final = res.history.iloc[-1]
    assert final["grad_norm_sq"] < res.history.iloc[0]["grad_norm_sq"] * 1e-2


def test_python_block_compressors():
    block = next(b for b in python_blocks() if "parse_spec" in b)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(block, "README.md", "exec"), {})
    assert buf.getvalue().split()[0] == "0.01"
    assert "tensor([420, 420, 420, 420])" in buf.getvalue()


@pytest.mark.dist
def test_torchrun_example(tmp_path: Path):
    cmd = next(c for c in EXERCISED if c.startswith("torchrun"))
    _run(_literal(cmd), tmp_path)
    assert _summary(tmp_path / "runs" / "dist")["reason"] == "completed"


@pytest.mark.dist
def test_python_block_ddp(tmp_path: Path):
    block = next(
        b for b in python_blocks(DOCS / "distributed.md") if "DistributedDataParallel" in b
    )
    (tmp_path / "x.py").write_text(block)
    out = _run([*TORCHRUN, "--standalone", "--nproc_per_node=2", "x.py"], tmp_path)
    assert re.search(r"rank 0: \d+ bits up, \d+ bytes on the wire", out), out


@pytest.mark.slow
@pytest.mark.dist
def test_systems_validate(tmp_path: Path):
    cmd = "python -m systems.validate --nproc 2 --out runs/validate"
    out = _run(_literal(cmd), tmp_path, timeout=1800)
    assert re.search(r"predicted", out, flags=re.I), out


@pytest.mark.slow
def test_benchmarks_quick(tmp_path: Path):
    use = EXERCISED["python -m benchmarks [--quick] [--out DIR]"]
    _run(use.argv, tmp_path, timeout=1800)
    assert (tmp_path / "bench" / "benchmarks.md").stat().st_size > 100
