"""Legend labels and the caption file of :mod:`experiments.plot`.

A line's label is ``label, compressor, xM``, ``M`` its step-size multiplier (:func:`line_mark`);
lines that this cannot tell apart get as few ``k=v`` parameters as that takes
(:func:`legend_labels`). A label longer than :data:`LABEL_WIDTH` characters is wrapped onto a
second line, a long value is abbreviated (``libsvm:/.../a9a.txt``), and what still does not fit
is cut, the label then ending ``... [n]``. The settings in which the lines differ but that some
label leaves out (:func:`hidden_settings`) go to the caption file ``FIG.caption.txt``
(:func:`caption_path`), which lists each line's source, how its runs were chosen and its
settings (:func:`caption_text`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.plot_sources import X_AXES, at_edge

# Legend labels longer than this many characters are wrapped, onto _LABEL_LINES lines at most.
LABEL_WIDTH = 40
_LABEL_LINES = 2
_VALUE_WIDTH = 24  # a parameter's value in a label is abbreviated past this many characters
# Shown in every label, so never added as a distinguishing key.
LEGEND_SKIP = ("algorithm", "label", "compressor", "seed", "step_mult")


def line_mark(group: dict) -> str:
    """The multiplier part of a line's label: ``x2``, ``x2, edge``, ``x64 (none reached tol)``."""
    chosen = group["chosen"]
    if chosen is None:
        m = group["params"].get("step_mult")
        return "" if m is None else f"x{_fmt(float(m))}"
    m = float(chosen["step_mult"])
    if chosen.get("fallback"):
        return f"x{_fmt(m)} ({chosen['fallback']})"
    if "tried" in chosen:
        edge = at_edge(m, chosen["tried"]) is not None
    else:
        edge = int(chosen["n_mults"]) > 1 and str(chosen.get("at_edge")) in ("True", "true", "1")
    return f"x{_fmt(m)}{', edge' if edge else ''}"


def legend_labels(params: list[dict], marks: list[str] | None = None) -> list[str]:
    """``label or algorithm, compressor[, mark][, k=v ...]`` for each group (see the module
    doc): ``k=v`` only for the lines that the rest cannot tell apart, and only as many of the
    parameters that differ between them as that takes; wrapped past :data:`LABEL_WIDTH`
    characters, a long value abbreviated (``libsvm:/.../a9a.txt``), and what does not fit on
    two lines cut, the label then ending ``... [n]``: its entry in the caption file.

    Args:
        params: each line's parameters (``problem_opt`` entries count as parameters of their
            own: ``zeta2=4``).
        marks: each line's multiplier text (``x2, edge``), if any.
    """
    return labels_and_shown(params, marks)[0]


def labels_and_shown(
    params: list[dict], marks: list[str] | None = None
) -> tuple[list[str], list[set]]:
    """The labels of :func:`legend_labels` and, for each, the parameters whose value it shows in
    full."""
    flat = [_flat(p) for p in params]
    marks = marks or [""] * len(flat)
    bases = [
        [str(p.get("label") or p.get("algorithm")), str(p.get("compressor", "identity"))]
        + ([m] if m else [])
        for p, m in zip(flat, marks, strict=True)
    ]
    keys: dict[str, None] = {}
    for p in flat:
        keys.update(dict.fromkeys(k for k in p if k not in LEGEND_SKIP))
    order = [*keys, "algorithm"]  # the method's registry name: only when labels coincide
    same: dict[str, list[int]] = {}
    for i, base in enumerate(bases):
        same.setdefault(", ".join(base), []).append(i)
    named: list[list[str]] = [[] for _ in flat]
    for members in same.values():
        for k in _telling(order, [flat[i] for i in members]):
            for i in members:
                named[i].append(k)
    short: dict[str, dict[str, str]] = {}  # per key: value -> its abbreviation, if that is 1:1
    for k in {k for ks in named for k in ks}:
        values = {_value(p.get(k)) for p in flat}
        abbrev = {v: _short(v) for v in values}
        short[k] = abbrev if len(set(abbrev.values())) == len(values) else {v: v for v in values}
    labels, shown = [], []
    for base, p, ks in zip(bases, flat, named, strict=True):
        values = [_value(p.get(k)) for k in ks]
        parts = [f"{k}={short[k][v]}" for k, v in zip(ks, values, strict=True)]
        text, n = _wrap(base + parts, len(base))
        if n < len(ks):  # the rest is in the caption file, under this line's number
            text += f" [{len(labels) + 1}]"
        labels.append(text)
        shown.append({k for k, v in zip(ks[:n], values[:n], strict=True) if short[k][v] == v})
    return labels, shown


def _telling(order: list[str], params: list[dict]) -> list[str]:
    """Few keys whose values tell ``params`` apart (greedy: each adds the most distinct
    combinations); fewer than needed when some are identical in every key."""
    chosen: list[str] = []
    if len(params) < 2:
        return chosen

    def distinct(ks: list[str]) -> int:
        return len({tuple(_value(p.get(k)) for k in ks) for p in params})

    def rank(k: str) -> tuple[int, int]:  # more lines told apart first, then shorter text
        return distinct([*chosen, k]), -max(len(_short(_value(p.get(k)))) for p in params)

    while distinct(chosen) < len(params):
        best = max((k for k in order if k not in chosen), key=rank, default=None)
        if best is None or distinct([*chosen, best]) == distinct(chosen):
            break
        chosen.append(best)
    return chosen


def _wrap(parts: list[str], fixed: int) -> tuple[str, int]:
    """``parts`` joined by ``, `` on lines of at most :data:`LABEL_WIDTH` characters (a longer
    part gets a line of its own), :data:`_LABEL_LINES` lines at most: the parts after the first
    ``fixed`` that do not fit become ``...``. Returns the text and how many of those parts it
    shows."""
    lines = [""]
    shown = 0
    for i, part in enumerate(parts):
        if lines[-1] and len(lines[-1]) + 2 + len(part) > LABEL_WIDTH:
            if len(lines) == _LABEL_LINES and i >= fixed:
                lines[-1] += ", ..."
                break
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] = f"{lines[-1]}, {part}" if lines[-1] else part
        shown += i >= fixed
    return "\n".join(lines), shown


def hidden_settings(groups: list[dict], shown: list[set]) -> list[str]:
    """The settings (other than method, compressor, multiplier and seed) that differ between
    the lines and that some line's label leaves out."""
    return [k for k in _differing(groups) if any(k not in s for s in shown)]


def _differing(groups: list[dict]) -> list[str]:
    """The settings, other than those every label shows, whose values differ between lines."""
    flat = [_flat(g["full"]) for g in groups]
    keys: dict[str, None] = {}
    for p in flat:
        keys.update(dict.fromkeys(k for k in p if k not in LEGEND_SKIP))
    return [k for k in keys if len({_value(p.get(k)) for p in flat}) > 1]


def caption_text(
    groups: list[dict], labels: list[str], hidden: list[str], paths: list[Path], x: str, y: str
) -> str:
    """The caption file's text: what is plotted, then each line's source and settings."""
    flat = [_flat(g["full"]) for g in groups]
    differ = _differing(groups)
    out = [
        f"{' and '.join(p.name for p in paths)}: {y} against {X_AXES[x][0] or x}, one line per "
        "group of runs (the mean over its seeds; a band from their minimum to maximum).",
        f"The lines differ in {', '.join(differ)}; the legend names a setting only where the "
        f"rest of a label cannot tell lines apart, and leaves out {', '.join(hidden)}.",
        "",
    ]
    for i, (g, label, p) in enumerate(zip(groups, labels, flat, strict=True)):
        tag = f"[{i + 1}]"
        text = label.replace("\n", " ").removesuffix(" " + tag)
        out.append(f"{tag} {text}")
        out.append(f"  from: {', '.join(g['sources'])} ({_origin(g)})")
        out.append("  " + ", ".join(f"{k}={_value(p.get(k))}" for k in differ))
    return "\n".join(out) + "\n"


def _origin(group: dict) -> str:
    """How a line's runs were chosen, for the caption."""
    n = len(group["curves"])
    runs = f"{n} run{'s' if n > 1 else ''} averaged" if n > 1 else "1 run"
    chosen = group["chosen"]
    if chosen is None:
        return f"run folder{'s' if n > 1 else ''}, {runs}"
    m = _fmt(float(chosen["step_mult"]))
    tried = ", ".join(_fmt(t) for t in chosen.get("tried", [])) or f"{chosen['n_mults']}"
    if chosen.get("fallback"):
        rule = f"{chosen['fallback']}; the lowest final {chosen['metric']}"
    elif chosen.get("rule") == "bits_to_tol":
        rule = f"fewest uplink bits to {chosen['metric']} <= {_fmt(chosen['select_tol'])}"
    else:
        rule = f"lowest final {chosen.get('metric')}"
    return f"sweep, step_mult {m} of {tried} ({rule}), {runs}"


def _flat(params: dict) -> dict:
    """``params`` with each ``problem_opt`` entry ``k=v`` as a parameter ``k`` of its own."""
    out = {k: v for k, v in params.items() if k != "problem_opt"}
    opts = params.get("problem_opt") or ()
    for item in [opts] if isinstance(opts, str) else opts:
        k, _, v = str(item).partition("=")
        out[k if k not in out else f"problem_opt.{k}"] = v
    return out


def _short(text: str) -> str:
    """A long value abbreviated for a label: a path to its first and last parts."""
    if len(text) <= _VALUE_WIDTH:
        return text
    head, sep, rest = text.partition("/")
    if sep and "/" in rest:
        short = f"{head}/.../{rest.rsplit('/', 1)[1]}"
        if len(short) < len(text):
            return short
    keep = _VALUE_WIDTH - 3
    return text[: keep - keep // 2] + "..." + text[-(keep // 2) :]


def _value(v: Any) -> str:
    """A parameter's value as a label shows it (an unset one: ``default``)."""
    if v is None:
        return "default"
    if isinstance(v, bool):
        return str(v).lower()
    return _fmt(v)


def caption_path(figure: str | Path) -> Path:
    """``FIG.caption.txt`` beside the figure ``FIG.EXT``."""
    figure = Path(figure)
    return figure.with_name(figure.stem + ".caption.txt")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return format(v, "g")
    if isinstance(v, (list, tuple)):
        return ";".join(map(str, v))
    return str(v)
