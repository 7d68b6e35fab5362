"""What a reproduction records and shows: the golden record of its quick version
(``golden.json``), the full runs' verdicts (``results.json``, ``--record``) and the ``--list``
text built from them."""

from __future__ import annotations

import datetime
import hashlib
import json
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path
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
    slowdown = ("axis", "base", "high", "factor", "suffer") if verdict["kind"] == "slowdown" else ()
    slowdown += ("any",) if verdict.get("any") else ()
    return {
        **{k: verdict[k] for k in keep + slowdown},
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


# ------------------------------------------------------------------ pre-registration
CLAIM_FILE = "config.toml"  # the claim, its setting, tolerance and verdict rule


def claim_sha256(folder: Path) -> str:
    """The SHA-256 of a reproduction's claim file (``config.toml``), as recorded."""
    return hashlib.sha256((folder / CLAIM_FILE).read_bytes()).hexdigest()


def _git(folder: Path, *args: str) -> str | None:
    """``git -C folder ARGS``'s output, or None where git or a repository is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def claim_commit(folder: Path) -> str | None:
    """The commit that last changed the claim file, or None (no git, or not committed)."""
    return _git(folder, "log", "-1", "--format=%H", "--", CLAIM_FILE) or None


def registration_problem(folder: Path, previous: dict[str, Any] | None) -> str | None:
    """Why ``--record`` must refuse, or None. A claim is pre-registered by committing its
    ``config.toml`` before its results: recording refuses a claim file with changes not
    committed (in a git checkout), and results whose recorded claim hash is not the claim file's
    now (the recorded verdicts belong to the claim they were made under)."""
    status = _git(folder, "status", "--porcelain", "--", CLAIM_FILE)
    if status:
        return (
            f"{folder / CLAIM_FILE} has changes not committed: a claim is pre-registered by "
            "committing it before its results are recorded; commit it, then record"
        )
    if previous and previous.get("runs"):
        old = (previous.get("claim") or {}).get("sha256")
        now = claim_sha256(folder)
        if old != now:
            was = f"sha256 {old[:12]}" if old else "no recorded hash"
            return (
                f"{folder / CLAIM_FILE} is not the claim its recorded results were made under "
                f"({was} in results.json, {now[:12]} now): a changed claim is a new "
                "pre-registration. Keep the old verdicts beside it: move results.json to "
                f"results-{(old or 'unhashed')[:12]}.json, then record"
            )
    return None


def results_record(
    verdict: dict[str, Any],
    argv: list[str],
    previous: dict[str, Any] | None,
    folder: Path | None = None,
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
    out: dict[str, Any] = {}
    if folder is not None:
        out["claim"] = {
            "file": CLAIM_FILE,
            "sha256": claim_sha256(folder),
            "commit": claim_commit(folder),
        }
    elif previous and previous.get("claim"):
        out["claim"] = previous["claim"]
    for key_kept in ("registration", "original_claim"):
        if previous and key_kept in previous:
            out[key_kept] = previous[key_kept]
    if "registration" not in out and out.get("claim", {}).get("commit"):
        # The first record: --record takes only a committed, unchanged claim file, so the claim
        # was committed before these results existed.
        commit = out["claim"]["commit"][:12]
        out["registration"] = {
            "preregistered": True,
            "claim_commit": commit,
            "first_results_commit": None,
            "note": f"config.toml was committed in {commit} before its first results were "
            f"recorded ({runs[key]['recorded']}): the claim was fixed before measuring",
        }
    out["runs"] = dict(sorted(runs.items()))
    return out


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
    lines: list[tuple[str | None, str]] = [  # (first column, or None for a full-width line)
        (None, "Each reproduction states a paper's claim, its setting, tolerance and verdict "
               "rule in its config.toml, committed before its results (pre-registered; "
               "results.json records the file's SHA-256). 'holds': the claim as stated was "
               "reproduced here. 'FAILS': the claim as stated is not reproduced in this setting; "
               "the numbers are in the reproduction's README.md and results.json. It is a "
               "finding about the claim here, not an error of the library; a FAILS verdict "
               "exits 1."),
        (None, ""),
    ]  # fmt: skip
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
        reg = (rec or {}).get("registration")
        if reg is not None:
            first = reg.get("first_results_commit")
            said = (
                f"pre-registered: yes (claim committed in {reg['claim_commit'][:7]}, before its "
                + (f"first results in {first[:7]})" if first else "first results were recorded)")
                if reg.get("preregistered")
                else "pre-registered: not shown (claim and first results committed together in "
                f"{reg['claim_commit'][:7]})"
            )
            lines.append(("", said))
        orig = (rec or {}).get("original_claim")
        if orig is not None:
            lines.append(
                ("", f"original claim ({orig['commit'][:7]}, replaced after it failed or before "
                     f"any full run): {orig['statement']}: {orig['verdict']} (quick version)")
            )  # fmt: skip
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
        lead, rest = ("", "") if first is None else (f"{first:<{pad}}", " " * pad)
        out += textwrap.wrap(
            text, width, initial_indent=lead, subsequent_indent=rest,
            break_long_words=False, break_on_hyphens=False,
        ) or [first or ""]  # fmt: skip
    for line in datasets.listing():  # indented: a line at the margin names a reproduction
        text = line.lstrip()
        lead = " " * (2 + len(line) - len(text))
        out += textwrap.wrap(
            text, width, initial_indent=lead, subsequent_indent=lead + "  ",
            break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
    return "\n".join(out) + "\n"
