"""What a reproduction records and shows: the golden record of its quick version
(``golden.json``), the full runs' verdicts (``results.json``, ``--record``) and the ``--list``
text built from them."""

from __future__ import annotations

import datetime
import json
import shlex
import shutil
import textwrap
from typing import Any

from experiments.reproduce_config import (
    PAPERS,
    DataMissing,
    _label,
    available,
    load_paper,
    tomllib,
)

# Reruns of the quick versions on one machine gave identical numbers (every method here is
# deterministic or draws from seed-pinned generators); the tolerance only absorbs float-summation
# order changes across BLAS builds and thread counts, which can move a crossing of the tolerance by
# a logged iteration or two.
GOLDEN_REL_TOL = 0.05


def golden_record(verdict: dict[str, Any]) -> dict[str, Any]:
    """The golden record of a quick verdict (see :mod:`experiments.reproduce`)."""
    keep = ("name", "quick", "kind", "metric", "tol", "bits", "order", "holds", "settings")
    return {
        **{k: verdict[k] for k in keep},
        "tolerance": {
            "bits_to_tol_rel": GOLDEN_REL_TOL,
            "why": (
                "reruns on one machine are bit-identical (deterministic methods, seed-pinned "
                "randomness); 5% leaves room for a crossing of the tolerance to move by a logged "
                "iteration or two under another BLAS or thread count, and is far below the gaps "
                "between methods that the claim is about"
            ),
        },
    }


def results_record(
    verdict: dict[str, Any], argv: list[str], previous: dict[str, Any] | None
) -> dict[str, Any]:
    """What ``--record`` writes to ``experiments/papers/NAME/results.json``.

    One entry per data set run on its own (``--dataset``) and per slice of the grid (``--only``,
    key ``nodes=10``), or ``"all"`` for the whole config; an entry replaces the one of the same
    key and keeps the others.
    """
    dataset = verdict.get("dataset")
    parts = ([] if dataset is None else [_label(dataset)]) + (
        [verdict["slice"]] if verdict.get("slice") else []
    )
    key = " ".join(parts) or "all"
    runs = dict((previous or {}).get("runs", {}))
    runs[key] = {
        "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m experiments.reproduce " + shlex.join(argv),
        "verdict": verdict,
    }
    return {"runs": dict(sorted(runs.items()))}


def recorded(name: str) -> dict[str, Any] | None:
    """The reproduction's ``results.json``, or None if there is none (or it is unreadable)."""
    try:
        data = json.loads((PAPERS / name / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("runs"), dict) else None


def _summary_line(verdict: dict[str, Any]) -> str:
    parts = []
    for s in verdict.get("settings", []):
        names = [_label(v) for v in s["setting"].values()]
        if verdict.get("dataset"):
            names.insert(0, _label(verdict["dataset"]))
        where = ", ".join(names)
        parts.append(f"{where or 'all'}: {'holds' if s['holds'] else 'FAILS'}")
    return "; ".join(parts)


def _listing() -> str:
    """The ``--list`` text: each reproduction's claim and its recorded verdicts, wrapped at the
    terminal's width between words (a statement is never cut), then the data sets with where
    each was found (the runner's ``data sets:`` section, indented)."""
    from problems import datasets

    names = available()
    pad = max([18, *(len(n) + 2 for n in names)])
    lines: list[tuple[str, str]] = []  # (first column, text)
    for name in names:
        try:
            lines.append((name, load_paper(name).claim.statement))
        except DataMissing:
            with open(PAPERS / name / "config.toml", "rb") as fh:
                raw = tomllib.load(fh)
            missing = [s for s in raw["data"]["libsvm"] if datasets.find(s) is None]
            statement = raw.get("claim", {}).get("statement", "")
            lines.append((name, f"{statement} (needs {', '.join(missing)}: missing here)"))
        except (ValueError, OSError, tomllib.TOMLDecodeError) as exc:
            lines.append((name, f"(broken config: {exc})"))
        rec = recorded(name)
        if rec is None or not rec["runs"]:
            try:
                gold = json.loads((PAPERS / name / "golden.json").read_text())
                quick = f"; quick version only: {'holds' if gold.get('holds') else 'FAILS'}"
            except (OSError, ValueError):
                quick = ""
            lines.append(("", f"verdict: no full run recorded (no results.json){quick}"))
            continue
        for entry in rec["runs"].values():
            v = entry.get("verdict", {})
            lines.append(
                ("", f"verdict: {'holds' if v.get('holds') else 'FAILS'} ({_summary_line(v)}); "
                     f"{v.get('runs')} runs, recorded {entry.get('recorded')}")
            )  # fmt: skip
    width = max(shutil.get_terminal_size(fallback=(100, 24)).columns, pad + 30)
    out = []
    for first, text in lines:
        out += textwrap.wrap(
            text, width, initial_indent=f"{first:<{pad}}", subsequent_indent=" " * pad,
            break_long_words=False, break_on_hyphens=False,
        ) or [first]  # fmt: skip
    for line in datasets.listing():  # indented: a line at the margin names a reproduction
        text = line.lstrip()
        lead = " " * (2 + len(line) - len(text))
        out += textwrap.wrap(
            text, width, initial_indent=lead, subsequent_indent=lead + "  ",
            break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
    return "\n".join(out) + "\n"
