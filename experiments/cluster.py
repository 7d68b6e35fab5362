"""A sweep's runs as cluster jobs through submitit: SLURM job arrays, or submitit's local
executor (the same path, without a cluster).

``python -m experiments.sweep FILE --executor slurm --partition P --time-min T ...`` submits
every unfinished run as one task of a job array (``--array-parallelism K`` at once); ``--executor
local`` runs them through submitit's local executor. Each task is a :class:`RunJob`: it starts
``python -m algorithms.run`` for its run folder (``--tasks-per-run W`` tasks of one job form a
torch.distributed group, using submitit's environment for the rank, world size and master
address), and waits for it.

Preemption and timeouts. When the scheduler warns a job (submitit's signal), :meth:`RunJob.
checkpoint` sends the runner SIGTERM; the runner finishes its step, writes its checkpoint and
exits; then the job is requeued with the same arguments, and the requeued task, finding the
checkpoint, continues with ``--resume``: a run is never restarted from scratch once it has a
checkpoint, and one folder is only ever written by one live task (the old one has exited before
the new one starts). ``--checkpoint-every`` adds periodic checkpoints against hard failures.

Bookkeeping: ``OUT/jobs/`` is submitit's folder (pickled job descriptions, logs: written and read
by compzoo and submitit alone); ``OUT/jobs.json`` maps each run to its last job id. Running the
sweep again collects what finished, leaves runs whose job is still pending or running alone,
and resubmits only what failed or never ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import submitit

__all__ = ["RunJob", "submit_all"]

# How long a preempted runner may take to finish its step and write its checkpoint.
STOP_GRACE_S = 120
ALIVE = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED")


class RunJob(submitit.helpers.Checkpointable):
    """One run of a sweep as a (possibly multi-task) job: fresh, or resumed from its
    checkpoint when the folder has one."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None

    def __call__(
        self, argv: list[str], run_dir: str, iters: int | None, env: dict[str, str]
    ) -> int:
        folder = Path(run_dir)
        env = dict(env)
        if int(os.environ.get("SUBMITIT_LOCAL_NTASKS", os.environ.get("SLURM_NTASKS", "1"))) > 1:
            dist = submitit.helpers.TorchDistributedEnvironment().export(
                set_cuda_visible_devices=False
            )
            env.update(RANK=str(dist.rank), WORLD_SIZE=str(dist.world_size),
                       LOCAL_RANK=str(dist.local_rank), LOCAL_WORLD_SIZE=str(dist.local_world_size),
                       MASTER_ADDR=dist.master_addr, MASTER_PORT=str(dist.master_port))  # fmt: skip
        if (folder / "checkpoint" / "meta.json").is_file():
            args = ["--resume", str(folder), "--quiet"]
            args += ["--iters", str(iters)] if iters is not None else []
        else:
            args = [*argv, "--quiet", "--out", str(folder), "--overwrite"]
        cmd = [sys.executable, "-m", "algorithms.run", *args]
        self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        # Reaped with waitpid(WNOHANG), not Popen.wait: the preemption handler (checkpoint)
        # runs on this thread, inside this loop, and waits for the same child.
        code = None
        while code is None:
            code = _reap(self._proc.pid)
            time.sleep(0.1)
        self._proc = None
        return code

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Stop the runner (SIGTERM: it finishes its step, checkpoints and exits), then
        requeue with the same arguments."""
        proc = self._proc
        if proc is not None and _reap(proc.pid) is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while _reap(proc.pid) is None:
                if time.monotonic() > deadline:
                    proc.kill()
                    deadline = float("inf")
                time.sleep(0.1)
        self._proc = None
        return submitit.helpers.DelayedSubmission(RunJob(), *args, **kwargs)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._proc = None


_REAPED: dict[int, int] = {}


def _reap(pid: int) -> int | None:
    """The exit status of child ``pid`` if it has ended (reaped once, remembered), else None."""
    if pid in _REAPED:
        return _REAPED[pid]
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _REAPED.get(pid, 1)
    if done == 0:
        return None
    _REAPED[pid] = os.waitstatus_to_exitcode(status)
    return _REAPED[pid]


def _executor(kind: str, folder: Path, opts: dict[str, Any]):
    if kind == "local":
        ex = submitit.LocalExecutor(folder=folder)
        params = {"timeout_min": opts.get("time_min") or 60,
                  "tasks_per_node": opts.get("tasks_per_run") or 1,
                  "gpus_per_node": opts.get("gpus_per_run") or 0}  # fmt: skip
        if opts.get("signal_delay_s") is not None:
            params["signal_delay_s"] = opts["signal_delay_s"]
        ex.update_parameters(**params)
        return ex
    if shutil.which("srun") is None or shutil.which("sbatch") is None:
        raise ValueError(
            "--executor slurm: no SLURM here (srun and sbatch are not on PATH); use "
            "--executor local (the same jobs on this machine) or the default pool"
        )
    ex = submitit.SlurmExecutor(folder=folder)
    params = {"time": int(opts.get("time_min") or 60),
              "ntasks_per_node": opts.get("tasks_per_run") or 1,
              "array_parallelism": opts.get("array_parallelism") or 256,
              "signal_delay_s": opts.get("signal_delay_s") or 120}  # fmt: skip
    if opts.get("partition"):
        params["partition"] = opts["partition"]
    if opts.get("gpus_per_run"):
        params["gpus_per_node"] = opts["gpus_per_run"]
    ex.update_parameters(**params)
    return ex


def _alive(kind: str, folder: Path, job_id: str) -> bool:
    """Whether the job ``job_id`` (from an earlier submission) is still pending or running."""
    if kind != "slurm":
        return False  # local jobs end with the sweep process that waits for them
    try:
        state = submitit.SlurmJob(folder=folder, job_id=job_id).state
    except Exception:  # noqa: BLE001 - no scheduler answer: treat as gone
        return False
    return state.split()[0].upper() in ALIVE


def submit_all(
    todo: list, out: Path, env: dict[str, str], kind: str, opts: dict[str, Any], progress
) -> None:
    """Submit every run of ``todo`` (``RunSpec``s) as a job array and wait for the jobs;
    ``progress(n)`` is called as runs end."""
    folder = out / "jobs"
    book_path = out / "jobs.json"
    book = json.loads(book_path.read_text()) if book_path.is_file() else {}
    waiting = [s for s in todo if s.run_id in book and _alive(kind, folder, book[s.run_id])]
    fresh = [s for s in todo if s not in waiting]
    ex = _executor(kind, folder, opts)
    ex.update_parameters(**({"job_name": out.name} if kind == "slurm" else {}))
    jobs = []
    if fresh:
        try:
            with ex.batch():
                for s in fresh:
                    run_dir = str(out / "runs" / s.run_id)
                    jobs.append(ex.submit(RunJob(), s.argv, run_dir, _iters(s.argv), env))
        except (OSError, subprocess.CalledProcessError, submitit.core.utils.FailedJobError) as e:
            raise ValueError(f"--executor {kind}: submitting the jobs failed: {e}") from None
    book.update({s.run_id: j.job_id for s, j in zip(fresh, jobs, strict=True)})
    book_path.write_text(json.dumps(book, indent=1) + "\n")
    pending = {j.job_id: j for j in jobs}
    pending.update({book[s.run_id]: submitit.SlurmJob(folder=folder, job_id=book[s.run_id])
                    for s in waiting})  # fmt: skip
    while pending:
        for jid, job in list(pending.items()):
            if job.done():
                del pending[jid]
                progress(1)
        time.sleep(0.5)


def _iters(argv: list[str]) -> int | None:
    return int(argv[argv.index("--iters") + 1]) if "--iters" in argv else None
