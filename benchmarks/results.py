"""A benchmark run's results as they come: the raw rows, the report derived from them, and
``benchmarks.md`` / ``benchmarks.json`` written to ``--out`` after every case.

Each file is written whole to a temporary file beside it and then renamed over the old one
(``os.replace``), so a reader (or a run stopped at any moment) finds the previous version or the
new one, never half of one. While the run goes on, and after it is interrupted, the report says
which parts it holds; once every part has finished, it is the complete report.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

from benchmarks import grid, report, scale

__all__ = ["Results", "write_atomic"]

NO_BANDWIDTH = {"numpy": float("nan"), "torch": float("nan"), "best": float("nan")}


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Results:
    """The rows measured so far (``raw``, one list per part) and where they are written.

    ``done`` lists the parts that finished; ``running`` is the part under way (its rows so far
    are in ``raw``) with its :class:`benchmarks.progress.Tracker`.
    """

    def __init__(self, quick: bool, device: str, parts: tuple[str, ...], out: str | None):
        self.quick, self.device, self.parts = quick, device, parts
        self.out = Path(out) if out else None
        self.raw: dict = {}
        self.done: list[str] = []
        self.running = None  # (part, tracker)
        self.complete = False  # the complete report is written
        self.t_start = time.perf_counter()

    def derive(self) -> dict:
        """The derived results of every part (empty lists for parts not run)."""
        raw = self.raw
        bw_all = raw.get("bandwidth", NO_BANDWIDTH)
        bw = bw_all["best"]
        return {
            "bandwidth": bw_all,
            "iterations": report.derive_iterations(raw.get("iterations", []), bw),
            "sparse": report.derive_sparse(raw.get("iterations", [])),
            "compressors": report.derive_compressors(raw.get("compressors", [])),
            "memory": report.derive_memory(raw.get("memory", [])),
            "deep": report.derive_deep(raw.get("deep", [])),
            "paper": report.derive_paper(raw.get("paper", []), bw),
            "scale": scale.derive(raw.get("scale", [])),
            "grid": grid.derive(raw.get("grid", [])),
        }

    def state(self, interrupted: str | None = None) -> str:
        """Empty when complete; else which parts the results hold."""
        if interrupted is None and self.running is None and len(self.done) == len(self.parts):
            return ""
        done = ", ".join(self.done) or "none"
        text = f"parts done: {done}"
        if self.running is not None:
            part, track = self.running
            verb = "stopped" if interrupted else "running"
            text += f"; {part} {verb} after {track.finished} of {track.total} cases"
        if interrupted:
            return f"INTERRUPTED by {interrupted} ({text})"
        return f"IN PROGRESS ({text})"

    def meta(self, state: str) -> str:
        total = time.perf_counter() - self.t_start
        dev = self.device
        head = (
            f"{'quick' if self.quick else 'full'} run on {dev} "
            f"({platform.processor() or 'cpu'}, {os.cpu_count()} cores, torch "
            f"{torch.__version__}, {torch.get_num_threads()} torch threads), "
        )
        if state:
            head += f"{state}, {total:.0f} s so far. "
        else:
            head += f"{total:.0f} s in all. "
        return (
            head + "Medians of repeats; timings on a shared machine are noisy. Rerun: "
            "`python -m benchmarks"
            + (" --quick" if self.quick else "")
            + (f" --device {dev}" if dev != "cpu" else "")
            + "`."
        )

    def render(self, interrupted: str | None = None) -> tuple[str, str]:
        """The markdown report and the JSON text of the results so far."""
        state = self.state(interrupted)
        res = self.derive()
        res["meta"] = self.meta(state)
        text = report.markdown(res)
        doc = {**res, "raw": self.raw, "status": state or "complete", "parts_done": self.done}
        return text, json.dumps(doc, indent=1) + "\n"

    def save(self, interrupted: str | None = None) -> str:
        """Write both files to ``out`` (if given); return the markdown report."""
        text, doc = self.render(interrupted)
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            write_atomic(self.out / "benchmarks.json", doc)
            write_atomic(self.out / "benchmarks.md", text)
        return text

    def save_partial(self) -> None:
        """:meth:`save` while the run goes on (nothing to do without ``out``)."""
        if self.out is not None:
            self.save()
