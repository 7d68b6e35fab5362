"""The heat-map figure of a ``heatmap`` claim, drawn from its verdict."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from experiments.reproduce_config import _label


def heatmap_figure(verdict: dict[str, Any], path: Path, title: str) -> None:
    """The paper's kind of figure for a heat-map claim: median bits to the tolerance per
    (row, column) cell, one panel per setting, written to ``path`` ``.png`` and ``.pdf``; a cell
    that never reached it is shown blank and marked "never"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows_key, cols_key, settings = verdict["rows"], verdict["cols"], verdict["settings"]
    fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4.2), squeeze=False)
    for ax, s in zip(axes[0], settings, strict=True):
        rows = list(dict.fromkeys(str(c[rows_key]) for c in s["cells"]))
        cols = list(dict.fromkeys(c[cols_key] for c in s["cells"]))
        grid = np.full((len(rows), len(cols)), np.nan)
        for c in s["cells"]:
            b = c.get("bits_to_tol")
            if b is not None and math.isfinite(b):
                grid[rows.index(str(c[rows_key])), cols.index(c[cols_key])] = b
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                never = np.isnan(grid[i, j])
                # dark text on the light (few bits) end of the map, light text on the dark end
                dark = never or im.norm(grid[i, j]) < 0.5
                text = "never" if never else f"{grid[i, j]:.3g}"
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=8, color="k" if dark else "w"
                )
        ax.set_xticks(range(len(cols)), [_label(c) for c in cols])
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        setting = ", ".join(f"{k}={_label(v)}" for k, v in s["setting"].items())
        ax.set_title(f"{title} {setting}".strip() + f": {'holds' if s['holds'] else 'FAILS'}")
        fig.colorbar(im, ax=ax, label=f"median bits to {verdict['metric']} <= {verdict['tol']:g}")
    fig.tight_layout()
    for suffix in (".png", ".pdf"):
        fig.savefig(path.with_suffix(suffix))
    plt.close(fig)
