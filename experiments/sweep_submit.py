"""A sweep's runs as submitit jobs: the ``local`` and ``slurm`` executors
(:mod:`experiments.cluster` submits them and waits)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from experiments.config import SweepConfig
from experiments.sweep_pool import STDERR_TAIL
from experiments.sweep_servers import _env
from experiments.sweep_tables import _finished

log = logging.getLogger("compzoo.sweep")


def _run_jobs(cfg: SweepConfig, out: Path, kind: str, opts: dict, progress: bool) -> None:
    """The unfinished runs as submitit jobs (:mod:`experiments.cluster`); a run that ends
    without a summary gets ``stderr.txt`` from its job's log."""
    from experiments import cluster

    specs = cfg.runs()
    todo = [s for s in specs if not _finished(out / "runs" / s.run_id)]
    bar = tqdm(total=len(specs), initial=len(specs) - len(todo), desc=cfg.name, unit="run",
               file=sys.stderr, disable=not progress)  # fmt: skip
    try:
        cluster.submit_all(todo, out, _env(), kind, opts, bar.update)
    finally:
        bar.close()
    book = json.loads((out / "jobs.json").read_text()) if (out / "jobs.json").is_file() else {}
    for s in todo:
        run_dir = out / "runs" / s.run_id
        if _finished(run_dir):
            continue
        job = book.get(s.run_id, "?")
        logs = sorted((out / "jobs").glob(f"{job}_*log.err")) if job != "?" else []
        tail = logs[-1].read_text(errors="replace")[-STDERR_TAIL:] if logs else "(no log)"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "stderr.txt").write_text(f"job {job} ended without a summary\n{tail}")
        log.warning("run %s failed (job %s); its log: %s", s.run_id, job, logs[-1] if logs else "-")
