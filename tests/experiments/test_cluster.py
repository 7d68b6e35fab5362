"""Sweeps through submitit (experiments.cluster) with the local executor, the path a SLURM job
array takes without a cluster: the same results as the process pool; a job warned before its
time limit checkpoints, is requeued and resumes from its checkpoint (not from scratch) to the
history of an uninterrupted run; a second sweep over the same folder runs nothing again."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from experiments.sweep import main as sweep_main  # noqa: E402
from experiments.sweep import run_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sweep.toml"
TIMES = {"wall_s", "t_compute", "t_encode", "t_communicate", "t_decode"}


def table(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIMES} for r in csv.DictReader(fh)]


@pytest.mark.heavy  # submitit jobs: about 20 s each on 2 cores
def test_the_local_executor_gives_the_pools_results(tmp_path):
    local = run_sweep(EXAMPLE, tmp_path / "local", progress=False, executor="local",
                      cluster={"time_min": 5})  # fmt: skip
    pool = run_sweep(EXAMPLE, tmp_path / "pool", jobs=2, progress=False)
    assert table(local / "summary.csv") == table(pool / "summary.csv")
    assert table(local / "best.csv") == table(pool / "best.csv")
    book = json.loads((local / "jobs.json").read_text())
    assert sorted(book) == sorted(r["run_id"] for r in table(pool / "summary.csv"))
    for run_id in book:
        assert table(local / "runs" / run_id / "history.csv") == table(
            pool / "runs" / run_id / "history.csv"
        )
    # again into the same folder: everything is finished, nothing is submitted
    again = run_sweep(EXAMPLE, local, progress=False, executor="local", cluster={"time_min": 5})
    assert json.loads((again / "jobs.json").read_text()) == book


ONE_RUN = """
name = "one"
[base]
problem = "quadratic"
nodes = {nodes}
iters = {iters}
log_every = {log_every}
[[methods]]
algorithm = "marina"
[grid]
compressor = ["randk:k=3"]
step_mult = [1]
seed = [{seed}]
"""


def _runner_pid(run_dir: Path) -> int | None:
    """The process running ``python -m algorithms.run ... --out RUN_DIR`` (or --resume it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"algorithms.run" in args and str(run_dir).encode() in args:
            return int(proc.name)
    return None


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.heavy  # submitit jobs: about 20 s each on 2 cores
def test_a_preempted_job_checkpoints_is_requeued_and_resumes(tmp_path):
    """The job gets the scheduler's preemption signal (SIGUSR2, as submitit's local executor
    and SLURM's --signal send it) once its run has logged a few rows: the runner checkpoints,
    the job is requeued, and the requeued task continues the same folder with --resume, to the
    history of an uninterrupted run."""
    iters, every = 12_000, 1000  # preempted after 3000 steps: 9000 (about 3 s) left to land
    cfg = tmp_path / "long.toml"
    cfg.write_text(ONE_RUN.format(nodes=10, iters=iters, log_every=every, seed=5))
    out = tmp_path / "out"
    result: dict = {}
    argv = [str(cfg), "--out", str(out), "--executor", "local", "--time-min", "10", "--quiet"]
    sweeper = threading.Thread(target=lambda: result.update(code=sweep_main(argv)))
    sweeper.start()
    deadline = time.monotonic() + 120
    sent = False
    while sweeper.is_alive() and time.monotonic() < deadline and not sent:
        for hist in (out / "runs").glob("*/history.csv"):
            if len(hist.read_text().splitlines()) >= 4:  # header + 3 rows: 3 * every - 1 done
                pid = _runner_pid(hist.parent)
                if pid is not None:
                    os.kill(_parent(pid), signal.SIGUSR2)  # the job's task process
                    sent = True
        time.sleep(0.05)
    sweeper.join(timeout=180)
    assert sent, "the run ended before it could be preempted"
    assert result.get("code") == 0
    (row,) = table(out / "summary.csv")
    assert row["status"] == "completed" and row["iters_run"] == str(iters)
    run_dir = out / "runs" / row["run_id"]
    config = json.loads((run_dir / "config.json").read_text())
    assert len(config.get("resumed", [])) == 1  # requeued once, from a checkpoint
    assert config["resumed"][0]["from_iter"] >= 2 * every
    direct = tmp_path / "direct"
    cli = ["marina", "--compressor", "randk:k=3", "--problem", "quadratic", "--nodes", "10",
           "--iters", str(iters), "--log-every", str(every), "--seed", "5", "--quiet",
           "--out", str(direct)]  # fmt: skip
    subprocess.run([sys.executable, "-m", "algorithms.run", *cli], check=True, cwd=ROOT)
    assert table(run_dir / "history.csv") == table(direct / "history.csv")


def test_cluster_options_need_a_cluster_executor(capsys):
    assert sweep_main([str(EXAMPLE), "--time-min", "5"]) == 2
    assert "--time-min needs --executor local or slurm" in capsys.readouterr().err
    assert sweep_main([str(EXAMPLE), "--executor", "local", "--time-min", "-1"]) == 2
    assert "--time-min -1.0: must be > 0" in capsys.readouterr().err


@pytest.mark.heavy  # submitit jobs: about 20 s each on 2 cores
def test_a_run_of_two_tasks_is_a_torch_distributed_group(tmp_path):
    """``--tasks-per-run 2``: the job's two tasks form a gloo group (submitit's environment
    gives the ranks), each holding 3 of the 6 nodes, and follow the 6-node simulation."""
    cfg = tmp_path / "multi.toml"
    cfg.write_text(ONE_RUN.format(nodes=6, iters=30, log_every=1, seed=2))
    out = tmp_path / "out"
    argv = [str(cfg), "--out", str(out), "--executor", "local", "--tasks-per-run", "2",
            "--time-min", "5", "--quiet"]  # fmt: skip
    assert sweep_main(argv) == 0
    (row,) = table(out / "summary.csv")
    run_dir = out / "runs" / row["run_id"]
    assert json.loads((run_dir / "config.json").read_text())["world_size"] == 2
    sim = tmp_path / "sim"
    cli = ["marina", "--compressor", "randk:k=3", "--problem", "quadratic", "--nodes", "6",
           "--iters", "30", "--seed", "2", "--quiet", "--out", str(sim)]  # fmt: skip
    subprocess.run([sys.executable, "-m", "algorithms.run", *cli], check=True, cwd=ROOT)
    got, want = table(run_dir / "history.csv"), table(sim / "history.csv")
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        for key in ("iter", "bits_up", "bits_down"):
            assert a[key] == b[key], key
        assert abs(float(a["f"]) - float(b["f"])) <= 1e-10 * max(1.0, abs(float(b["f"])))


def test_slurm_arrays_carry_the_options(tmp_path, monkeypatch):
    """With stand-in ``srun``/``sbatch`` on PATH: the runs go to one job array whose sbatch
    script carries the partition, the time limit, the tasks and GPUs per run, the array
    parallelism and the warning signal; without SLURM the sweep exits 2 naming it."""
    from experiments import cluster
    from experiments.config import load_config

    assert sweep_main([str(EXAMPLE), "--out", str(tmp_path / "none"), "--executor", "slurm",
                       "--quiet"]) == 2  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\nfor a; do last="$a"; done\ncp "$last" {tmp_path}/script.sh\n'
        'echo "Submitted batch job 4242"\n'
    )
    for f in ("srun", "sbatch"):
        (bin_dir / f).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    opts = {"partition": "gpu-long", "time_min": 90, "gpus_per_run": 1, "tasks_per_run": 2,
            "array_parallelism": 3, "signal_delay_s": 100}  # fmt: skip
    ex = cluster._executor("slurm", tmp_path / "jobs", opts)
    specs = load_config(EXAMPLE).runs()
    with ex.batch():
        jobs = [ex.submit(cluster.RunJob(), s.argv, str(tmp_path / s.run_id), None, {})
                for s in specs]  # fmt: skip
    assert [j.job_id for j in jobs] == [f"4242_{i}" for i in range(len(specs))]
    script = (tmp_path / "script.sh").read_text()
    for line in ("#SBATCH --partition=gpu-long", "#SBATCH --time=90", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --ntasks-per-node=2", f"#SBATCH --array=0-{len(specs) - 1}%3",
                 "#SBATCH --signal=USR2@100"):  # fmt: skip
        assert line in script, (line, script)
