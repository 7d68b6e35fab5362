"""Where a method's default step comes from, declared as data.

Every registered method declares ``provenance: ClassVar[Provenance]``: the origin of the step
its ``theory`` returns (and of the parameters that come with it). ``--list``,
``python -m algorithms.run METHOD --help``, the run's summary line, ``config.json`` and the
generated methods table (``docs/methods.md``) all show it, so a user sees before a run whether
the default step is a paper's theorem or something weaker.

The kinds, strongest first:

* ``theorem``: a theorem of the method's paper (``ref``: paper and theorem number);
* ``authors-code``: the step the authors' published code uses (``ref``: repository and file);
* ``derived``: derived in this library where no usable theorem could be read; ``where`` names
  the function (``"module:function"``) whose docstring holds the written derivation (a
  ``Derivation`` paragraph, checked by ``tests/algorithms/test_provenance.py``);
* ``borrowed``: another method's step used here (``ref``: from which method, and why);
* ``reconstruction``: the paper's algorithm or theorem could not be read; the step is a
  reconstruction from what could be (``ref``: from what);
* ``practical``: a step from the paper's experiments or common practice, because the theorem's
  step is unusable in practice (``ref``: whose setting); the theorem's step stays available as
  ``--step theory``;
* ``none``: no step from theory: ``--step`` must be given (``ref``: why).

A method whose step changes provenance with a regime (EF21-HB's PL step, borrowed from EF21)
returns that regime's provenance in :attr:`algorithms.base.Theory.provenance`; the class-level
declaration is the default regime's.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

KINDS: dict[str, str] = {
    "theorem": "a theorem of the method's paper",
    "authors-code": "the step of the authors' published code",
    "derived": "derived in this library (the derivation is written in the code it names)",
    "borrowed": "another method's step, used for this one",
    "reconstruction": "reconstructed: the paper's algorithm or theorem could not be read",
    "practical": "a practical step (the theorem's step is unusable): --step theory gives it",
    "none": "no theory step: give --step",
}


@dataclass(frozen=True)
class Provenance:
    """The origin of a step: its ``kind`` (one of :data:`KINDS`), a reference ``ref`` a reader
    can follow, and for ``derived`` steps ``where`` the derivation is written."""

    kind: str
    ref: str
    where: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            allowed = ", ".join(KINDS)
            raise ValueError(f"provenance kind must be one of {allowed}, got {self.kind!r}")
        if not self.ref.strip():
            raise ValueError(f"a {self.kind} provenance needs a reference")
        if self.kind == "derived" and not self.where:
            raise ValueError("a derived step names where its derivation is written (where=)")

    def label(self) -> str:
        """One line: ``kind: ref``."""
        return f"{self.kind}: {self.ref}"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def theorem(ref: str) -> Provenance:
    """A theorem of the method's paper: ``ref`` names the paper and the theorem."""
    return Provenance("theorem", ref)


def authors_code(repo: str, file: str, note: str = "") -> Provenance:
    """The step of the authors' code: ``repo`` (owner/name) and ``file`` (and function)."""
    return Provenance("authors-code", f"{repo}, {file}" + (f" ({note})" if note else ""))


def derived(where: str, ref: str) -> Provenance:
    """Derived here: ``where`` is the ``"module:function"`` whose docstring has the derivation,
    ``ref`` says what was derived from what."""
    return Provenance("derived", ref, where=where)


def borrowed(method: str, why: str) -> Provenance:
    """Another method's step: ``method`` names it, ``why`` says why it is used here."""
    return Provenance("borrowed", f"{method}'s step: {why}")


def reconstruction(ref: str) -> Provenance:
    """A reconstruction: ``ref`` says from what (the paper's algorithm/theorem not read)."""
    return Provenance("reconstruction", ref)


def practical(ref: str) -> Provenance:
    """A practical default step: ``ref`` says whose setting it is."""
    return Provenance("practical", ref)


def no_step(why: str) -> Provenance:
    """No theory step: ``why`` says why (the run needs ``--step``)."""
    return Provenance("none", why)


def derivation_text(where: str) -> str:
    """The docstring of ``"module:function"`` (where a derived step's derivation is written)."""
    module, _, name = where.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj.__doc__ or ""
