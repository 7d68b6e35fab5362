"""Pruning a sweep: the bits budget (the runner's ``--max-bits``) each run gets as it starts,
from the runs of its group that have finished (:mod:`experiments.sweep`, "Pruning")."""

from __future__ import annotations

import math
import threading
from pathlib import Path

from experiments.config import RunSpec, SweepConfig
from experiments.select import POOLS, bits_to_tol, group_key, pool_seeds, run_score
from experiments.sweep_tables import UNFINISHED_REASONS, _history, _summary

PRUNE_POOLS = POOLS  # how seeds are pooled by the selection a pruned sweep serves


class _Budget:
    """The bits budget of a pruned sweep's next run (:mod:`experiments.sweep`, "Pruning").

    A group's finished runs are read once each (a finished run never changes) under a lock:
    the pool's threads ask as their runs start.
    """

    def __init__(self, cfg: SweepConfig, specs: list[RunSpec], out: Path, pool: str) -> None:
        self._sel = cfg.select
        self._out = out
        self._pool = pool
        self._groups: dict[tuple, dict[float, list[str]]] = {}
        for s in specs:
            by_mult = self._groups.setdefault(group_key(s.params), {})
            by_mult.setdefault(float(s.params.get("step_mult", 1.0)), []).append(s.run_id)
        self._read: dict[str, tuple[float, float] | None] = {}  # run_id -> (bits, bits at 0)
        self._lock = threading.Lock()

    def max_bits(self, spec: RunSpec) -> float | None:
        """The runner's ``--max-bits`` for ``spec`` (the smaller of the budget and its own),
        or None: no multiplier of its group has all its runs finished with a finite score, or
        the group's runs differ in their iteration-0 bits."""
        by_mult = self._groups[group_key(spec.params)]
        with self._lock:
            pooled, starts = [], set()
            for ids in by_mult.values():
                seen = [self._score(i) for i in ids]
                if any(v is None for v in seen):
                    continue  # a run of this multiplier has not finished yet
                starts |= {v[1] for v in seen}
                pooled.append(pool_seeds([v[0] for v in seen], self._pool))
        best_so_far = min(pooled, default=math.inf)
        if not math.isfinite(best_so_far) or len(starts) > 1:
            return None
        k = len(by_mult[float(spec.params.get("step_mult", 1.0))])
        factor = k if self._pool == "mean" else (1 if k % 2 else 2)
        cap = factor * best_so_far + 1.0  # the runner stops at >= cap: a tie still reaches tol
        own = spec.params.get("max_bits")
        return min(cap, float(own)) if own not in (None, "") else cap

    def _score(self, run_id: str) -> tuple[float, float] | None:
        """(bits to tol, bits at iteration 0) of a finished run (``inf``: did not score), or
        None while it has not finished."""
        if run_id in self._read:
            return self._read[run_id]
        run_dir = self._out / "runs" / run_id
        summary = _summary(run_dir)
        if summary is None or summary.get("reason") in UNFINISHED_REASONS:
            return None
        rows = _history(run_dir)
        start = float(rows[0]["bits_up"]) if rows and rows[0].get("bits_up") else 0.0
        status = {"status": str(summary.get("reason", "completed"))}
        bits = bits_to_tol(rows, self._sel.metric, self._sel.tol) if rows else None
        value = run_score({**status, "bits_to_tol": bits}, self._sel)
        self._read[run_id] = (value, start)
        return self._read[run_id]
