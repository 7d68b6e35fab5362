"""What a running benchmark says on stderr: which part and case runs, and what it skipped.

Each part's ``run`` takes a :class:`Tracker` (``track``): ``plan(total)`` once, ``case(label)``
as each case starts (logged as ``[3/12] iterations (part 1/6): LABEL``), ``rows(rows)`` as each
case's rows are measured (kept, and handed to ``on_rows``: the command writes them to ``--out``
at once), and ``skip(method, why)`` for a method a case cannot configure. :meth:`Tracker.finish`
logs the skips as one line per part, ``iterations: skipped (no theory step here): adiana,
canita, ...``. A method's own message says which flag of the runner would help (``give --step
FLOAT``); this command takes no such flag, so :func:`reason` keeps the message up to that advice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

__all__ = ["Tracker", "reason", "why_skipped", "NO_THEORY", "NOT_HERE"]

log = logging.getLogger("benchmarks")

NO_THEORY = "no theory step here"
NOT_HERE = "cannot run on this problem"
_FLAG = re.compile(r"--[a-z]")


def reason(message: str) -> str:
    """``message`` without its advice on the runner's flags: cut before the last ``:`` or ``;``
    that precedes the first ``--flag`` (``"X needs mu: give --step FLOAT"`` -> ``"X needs mu"``).
    """
    found = _FLAG.search(message)
    if found is None:
        return message
    head = message[: found.start()]
    cut = max(head.rfind(":"), head.rfind(";"))
    text = head[:cut].strip().rstrip(":;,. ") if cut > 0 else ""
    return text or why_skipped(message)


def second_order(requires: tuple[str, ...] | frozenset[str], what: str) -> str | None:
    """Why a method is left out of a first-order benchmark, or None: second-order methods
    (FedNL, Newton-3PC) hold ``d (d + 1) / 2`` Hessian entries per node, neither an ``(n, d)``
    state nor a first-order step's cost (and at ``d = 1000`` minutes per case).

    Args:
        requires: the method's declared problem capabilities (``Algorithm.requires``).
        what: the benchmark, for the message (``"first-order benchmark"``).
    """
    if "hessians" in requires:
        return f"second-order: d x d Hessians per node, outside this {what}"
    return None


def why_skipped(message: str) -> str:
    """The kind of a configure failure: the method has no theory step on this problem (its
    message asks for an explicit step) or it cannot run on it at all."""
    return NO_THEORY if "--step" in message else NOT_HERE


class Tracker:
    """One part's progress: the case counter on stderr, the rows so far, the skipped methods.

    Args:
        part: the part's name (``iterations``); empty for a part run on its own.
        index, parts: the part's place among the parts run (``part 1/6``).
        quiet: log nothing (the default, for a part called from Python).
        on_rows: called after each case with every row measured so far.
    """

    def __init__(
        self,
        part: str = "",
        index: int = 1,
        parts: int = 1,
        quiet: bool = True,
        on_rows: Callable[[list[dict]], None] | None = None,
    ) -> None:
        self.part, self.index, self.parts, self.quiet = part, index, parts, quiet
        self.on_rows = on_rows
        self.total = 0
        self.started = 0
        self.finished = 0
        self.measured: list[dict] = []
        self.skipped: dict[str, list[str]] = {}

    def plan(self, total: int) -> None:
        """The number of cases this part will run."""
        self.total = total

    def case(self, label: str) -> None:
        """Case ``label`` starts."""
        self.started += 1
        if not self.quiet:
            where = f"{self.part} (part {self.index}/{self.parts})" if self.part else "case"
            log.info("[%d/%d] %s: %s", self.started, self.total, where, label)

    def rows(self, rows: list[dict]) -> None:
        """A case finished with ``rows``."""
        self.finished += 1
        self.measured.extend(rows)
        if self.on_rows is not None:
            self.on_rows(self.measured)

    def skip(self, method: str, why: str) -> None:
        """``method`` could not be configured on a case, for reason kind ``why``."""
        names = self.skipped.setdefault(why, [])
        if method not in names:
            names.append(method)

    def summary(self) -> str:
        """``skipped (KIND): a, b; skipped (KIND): c``, or empty if nothing was skipped."""
        return "; ".join(f"skipped ({why}): {', '.join(m)}" for why, m in self.skipped.items())

    def finish(self) -> None:
        """Log the skip summary: one line for the part."""
        text = self.summary()
        if text and not self.quiet:
            log.info("%s: %s", self.part or "part", text)
