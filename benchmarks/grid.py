"""``--only grid``: a paper's grid end to end, batched against one run per process, side by side.

The grid is the EF21 paper's (``benchmarks/ef21_grid.toml``: EF21 and EF14 with Top-1, 12 step
multipliers, the four LIBSVM sets, 2000 iterations, 96 runs); it runs twice through
``experiments.sweep`` on this machine's cores, ``--batch auto`` (each method and set's 12
multipliers advance together) and then ``--batch off`` (every run its own process, as a sweep
ran before batches), and the report gives both wall times, their ratio and whether both chose
the same multipliers (``best.csv``). Before either, the engines of the grid's gradients (each
run's, on its thread count, and each batch's at its number of points) are chosen as a sweep
does up front and memoised (:func:`problems.glm_engine.choose`), and that time is reported
apart: otherwise the first sweep measured them and the second found them (on the 2-core AMD
EPYC, a fresh memo added 11 s to the batched sweep's 26 s). ``--quick`` runs the grid on
mushrooms and phishing at 300 iterations. ``--device cuda`` runs both sweeps' runs on the GPU.

A second table, measured first, times the step itself on each set: one run's step (median of the
interleaved repeats) against a 12-run batch's step divided by 12 (EF21 + Top-1, float64, n = 20,
on this process's threads, or on the GPU with ``--device cuda``), with the range of that share
over the rounds, each round's from its two adjacent windows (on the 2-core AMD EPYC, mushrooms'
share measured 0.27 and 0.28 in two runs and 0.47 in a third, a day later, with the same code).
A third splits both, in the same rounds, into the step with a free gradient (its floor, as in
the paper table) and the gradient alone at the step's point: what batching saves per run on
each. Each timed window (a round times the six, in turn) starts once the threads of the one
before have gone quiet (:func:`problems.glm_engine.settle`, as in the paper table) and after
0.1 s of untimed calls (:data:`WARM_S`). Without them the first 100 ms of each window ran slow:
NumPy's BLAS threads, which the single run's gradient may use, spin for about 0.1 s after it and
shared the cores with the batch's kernel (phishing, single run on dense-numpy/2: the batch's
first 60 steps 1.7-1.9 ms each, then 0.78-0.8 ms), and after a pause even alone the first 100
steps averaged 0.9-1.1 ms against 0.75 ms (measured while settle's wait could still end early,
before its windows spanned the clock's ticks; after a full wait the first 10-20 ms can still run
slow). A sweep runs thousands of steps without such pauses. Each part's rows are saved as it
ends.

Targets (issue 35): the grid at least 5x faster batched, and the per-run step of a 12-run batch
at most 1/4 of a single run's.
"""

from __future__ import annotations

import csv
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import tomllib
import torch

from benchmarks.paper import FreeGrad, find_data
from benchmarks.progress import Tracker
from benchmarks.report import round_ratios, spread

log = logging.getLogger("benchmarks")

GRID = Path(__file__).with_name("ef21_grid.toml")
GRID_SPEEDUP = 5.0
STEP_SHARE = 0.25
BATCH = 12
QUICK_SETS = ("mushrooms", "phishing")
QUICK_ITERS = 300
#: Seconds of untimed steps before each timed window of :func:`step_times` (see the module
#: docstring: the first steps after a pause or after the other side's calls run slow).
WARM_S = 0.1


def _config(quick: bool, sets: list[str], device: str = "cpu"):
    from experiments.config import load_config

    cfg = tomllib.loads(GRID.read_text())
    cfg["grid"]["dataset"] = sets
    if quick:
        cfg["base"]["iters"] = QUICK_ITERS
    if device != "cpu":
        cfg["base"]["device"] = device
    return load_config(cfg)


def _sweep(cfg, out: Path, batch: str, jobs: int) -> float:
    from experiments.sweep import run_sweep

    t0 = time.perf_counter()
    run_sweep(cfg, out, jobs=jobs, progress=False, batch=batch)
    return time.perf_counter() - t0


def _choose_engines(cfg, out: Path, jobs: int) -> float:
    """Seconds to choose (or look up) the gradients' engines of the grid's runs and of its
    batches, as a sweep does up front (:func:`experiments.validate.resolve_runs`), memoised
    per machine and input; untimed in either sweep's wall time, so that both find them."""
    from experiments.sweep_pool import planned_batches
    from experiments.sweep_servers import RUN_THREADS
    from experiments.validate import resolve_runs

    t0 = time.perf_counter()
    resolve_runs(cfg, threads=RUN_THREADS, points=planned_batches(cfg, out, jobs))
    return time.perf_counter() - t0


def _best(out: Path) -> list[tuple]:
    with (out / "best.csv").open(newline="") as fh:
        return [(r["label"], r["dataset"], r["step_mult"], r["value"]) for r in csv.DictReader(fh)]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _per_step(algo, state, problem, comm, steps: int, device: str) -> float:
    """Seconds per step of ``steps`` steps of ``algo`` from ``state``, timed after
    :data:`WARM_S` seconds of untimed steps."""
    box = [state]

    def step():
        box[0], _ = algo.step(box[0], problem, comm)

    return _per_call(step, steps, device)


def _per_call(fn, calls: int, device: str) -> float:
    """Seconds per call of ``calls`` calls of ``fn``, timed after :data:`WARM_S` seconds of
    untimed ones."""
    _sync(device)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARM_S:
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls


def step_times(name: str, steps: int, repeats: int = 3, device: str = "cpu") -> dict:
    """One run's step and a 12-run batch's step on set ``name`` (seconds, medians), and the
    split of each: the step with a free gradient (its floor, :class:`benchmarks.paper.
    FreeGrad`) and the gradient alone at the step's point."""
    from algorithms.base import step_mode
    from algorithms.batching import for_runs
    from algorithms.registry import get_algorithm
    from comm import SimulatedComm
    from comm.batched import BatchedSimulatedComm
    from compressors import parse_spec
    from problems.batched import Tiled
    from problems.glm_engine import settle
    from problems.registry import make_problem

    problem = make_problem("logreg-nonconvex", dataset=name, split="contiguous:last", nodes=20,
                           lam=0.1, x0="randn", seed=0, device=device)  # fmt: skip
    with step_mode(problem):  # as the runner steps
        algo, _ = get_algorithm("ef21").configure(problem, parse_spec("topk:k=1"))
        n = problem.n
        single_comm = SimulatedComm(n, seed=0)
        tiled = Tiled(problem, BATCH)
        comm = BatchedSimulatedComm(n, BATCH, 0)
        batch = for_runs(algo, [algo.gamma * 2.0**k for k in range(BATCH)], n, problem.dtype,
                         problem.device)  # fmt: skip
        one_state = algo.init(problem.x0, problem, single_comm)
        state = batch.init(tiled.x0, tiled, comm)
        one_state, _ = algo.step(one_state, problem, single_comm)
        state, _ = batch.step(state, tiled, comm)  # compiles and chooses the kernels
        # the split: each step with a free gradient (a stored one copied out), and the
        # gradient alone at the step's point
        free_one, free_batch = FreeGrad(problem), FreeGrad(tiled)
        x_one, x_batch = one_state.x.clone(), state.x.clone()
        windows = {
            "single_s": lambda: _per_step(algo, one_state, problem, single_comm, steps, device),
            "batch_s": lambda: _per_step(batch, state, tiled, comm, steps, device),
            "single_floor_s": lambda: _per_step(algo, one_state, free_one, single_comm, steps,
                                                device),
            "batch_floor_s": lambda: _per_step(batch, state, free_batch, comm, steps, device),
            "single_grad_s": lambda: _per_call(lambda: problem.grad(x_one), steps, device),
            "batch_grad_s": lambda: _per_call(lambda: tiled.grad(x_batch), steps, device),
        }  # fmt: skip
        times: dict[str, list[float]] = {k: [] for k in windows}
        for _ in range(repeats):  # interleaved, each once the other's threads have gone quiet
            for key, window in windows.items():
                settle()
                times[key].append(window())
    return {
        "set": name,
        **{key: statistics.median(t) for key, t in times.items()},
        # each round's two steps, timed one after the other
        "single_rounds_s": times["single_s"],
        "batch_rounds_s": times["batch_s"],
        "points_engine": problem.points_engine,
        "engine": problem.engine,
        "threads": torch.get_num_threads(),
    }


def run(quick: bool = False, track: Tracker | None = None, device: str = "cpu") -> list[dict]:
    """The grid batched and unbatched, and the step table (rows; see the module docstring)."""
    track = track or Tracker()
    sets = [s for s in (QUICK_SETS if quick else ("mushrooms", "phishing", "a9a", "w8a"))
            if find_data(s) is not None]  # fmt: skip
    if not sets:
        log.warning("grid: no LIBSVM set found (COMPZOO_DATA): skipped")
        return []
    jobs = os.cpu_count() or 1
    cfg = _config(quick, sets, device)
    track.plan(3 + len(sets))
    rows: list[dict] = []
    # the step table first, then the batched grid, then one run per process (on a GPU the
    # last is by far the longest: each run starts its own CUDA context): each part's rows are
    # saved as it ends, so a stopped benchmark keeps what it measured
    for name in sets:
        track.case(f"step of one run vs a {BATCH}-run batch on {name}")
        rows.append({"kind": "step", "device": device,
                     **step_times(name, 50 if quick else 300, device=device)})  # fmt: skip
        track.rows(rows)
    grid_row = {"kind": "grid", "runs": len(cfg.runs()), "sets": sets, "jobs": jobs,
                "device": device, "iters": cfg.base.get("iters"), "off_s": None}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="compzoo-grid-") as tmp:
        track.case("choosing the engines of the grid's runs and batches")
        grid_row["engines_s"] = _choose_engines(cfg, Path(tmp) / "auto", jobs)
        for batch in ("auto", "off"):
            track.case(f"grid of {len(cfg.runs())} runs, --batch {batch}, --jobs {jobs}")
            grid_row[f"{batch}_s"] = _sweep(cfg, Path(tmp) / batch, batch, jobs)
            if batch == "auto":
                rows.insert(0, grid_row)
            track.rows(rows)
        chosen_off = [r[2] for r in _best(Path(tmp) / "off")]
        chosen_auto = [r[2] for r in _best(Path(tmp) / "auto")]
        grid_row.update({
            "same_choice": _best(Path(tmp) / "off") == _best(Path(tmp) / "auto"),
            "chosen_off": chosen_off, "chosen_auto": chosen_auto,
        })  # fmt: skip
        track.rows(rows)
    return rows


def derive(rows: list[dict]) -> list[dict]:
    """Add the ratios and the targets' verdicts."""
    out = []
    for r in rows:
        r = dict(r)
        if r.get("kind") == "grid" and r.get("off_s") is None:
            r["speedup"], r["target"] = None, "not measured (--batch off did not finish)"
        elif r.get("kind") == "grid":
            r["speedup"] = r["off_s"] / r["auto_s"]
            ok = r["speedup"] >= GRID_SPEEDUP
            r["target"] = "met" if ok else f"MISSED (>= {GRID_SPEEDUP:g}x)"
        elif r.get("kind") == "step":
            r["share"] = r["batch_s"] / BATCH / r["single_s"]
            if r.get("single_rounds_s") and r.get("batch_rounds_s"):
                batch = [b / BATCH for b in r["batch_rounds_s"]]
                r["share_rounds"] = round_ratios(batch, r["single_rounds_s"], per=1)
            ok = r["share"] <= STEP_SHARE
            r["target"] = "met" if ok else f"MISSED (<= {STEP_SHARE:g})"
            for part in ("floor", "grad"):
                if r.get(f"single_{part}_s") and r.get(f"batch_{part}_s") is not None:
                    r[f"{part}_share"] = r[f"batch_{part}_s"] / BATCH / r[f"single_{part}_s"]
        out.append(r)
    return out


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r.get("kind") != "grid":
            continue
        lines += [
            f"{r['runs']} runs ({', '.join(r['sets'])}; {r['iters']} iterations), "
            f"--jobs {r['jobs']}, device {r.get('device', 'cpu')}:\n",
            "| --batch off s | --batch auto s | off / auto | same multipliers chosen | "
            "target (>= 5x) |",
            "|---|---|---|---|---|",
            f"| {_num(r['off_s'], '.1f')} | {r['auto_s']:.1f} | {_num(r['speedup'], '.2f')}x | "
            f"{ {True: 'yes', False: 'NO'}.get(r.get('same_choice'), '-') } | {r['target']} |",
            "",
        ]
        if r.get("engines_s") is not None:
            lines += [
                f"Before either sweep, the gradients' engines of its runs and batches were chosen "
                f"(or looked up) as a sweep does up front, in {r['engines_s']:.1f} s: memoised per "
                "machine and input, so both sweeps find them (the first sweep of a grid on a "
                "machine pays it once).",
                "",
            ]
    steps = [r for r in rows if r.get("kind") == "step"]
    if steps:
        lines += [
            f"EF21 + Top-1, float64, n = 20, device {steps[0].get('device', 'cpu')}, "
            f"{steps[0].get('threads', '?')} threads: one run's step "
            f"against a {BATCH}-run batch's step / {BATCH}:\n",
            "| set | engine | batch kernel | one run ms | batch ms | per run ms | per run / one "
            "| by round | target (<= 1/4) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in steps:
            lines.append(
                f"| {r['set']} | {r['engine']} | {r['points_engine']} | "
                f"{1e3 * r['single_s']:.3f} | {1e3 * r['batch_s']:.3f} | "
                f"{1e3 * r['batch_s'] / BATCH:.3f} | {r['share']:.2f} | "
                f"{spread(r.get('share_rounds'))} | {r['target']} |"
            )
        lines += [
            "",
            "By round: the lowest and highest share of the rounds, each from its two steps timed "
            "one after the other (the verdict is on the medians). A spread that straddles 1/4 "
            "says the machine's phases, not the code, decide the verdict.",
        ]
        split = [r for r in steps if "floor_share" in r and "grad_share" in r]
        if split:
            lines += [
                "",
                "Where the steps go (the same rounds): each step with a free gradient (its floor: "
                "a stored gradient copied out; the method, the compressor and the comm layer) and "
                f"the gradient alone at the step's point (one run's; the batch's {BATCH} points in "
                "one pass). A step can cost more than its floor plus its gradient alone: the "
                "gradient inside a step runs after other work, not back to back.\n",
                "| set | one run: floor ms | one run: gradient ms | batch: floor ms | batch: "
                "gradient ms | floor per run / one | gradient per run / one |",
                "|---|---|---|---|---|---|---|",
            ]
            for r in split:
                lines.append(
                    f"| {r['set']} | {1e3 * r['single_floor_s']:.3f} | "
                    f"{1e3 * r['single_grad_s']:.3f} | {1e3 * r['batch_floor_s']:.3f} | "
                    f"{1e3 * r['batch_grad_s']:.3f} | {r['floor_share']:.2f} | "
                    f"{r['grad_share']:.2f} |"
                )
    return "\n".join(lines) + "\n"
