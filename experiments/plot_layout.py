"""The figure layout of :mod:`experiments.plot`: axes of the same size whatever the legend.

The axes are :data:`AXES_SIZE` inches; the legend sits to their right in one column, or below
them in as many columns (up to 4) as fit their width when it is wider than ``_RIGHT_MAX`` inches
or taller than the axes with their labels; the figure is then sized to everything drawn, plus a
margin of ``_PAD`` inches (:func:`layout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Width and height of the axes in inches, the same for every legend.
AXES_SIZE = (5.0, 3.4)
# A legend wider than this (inches) goes below the axes instead of to their right.
_RIGHT_MAX = 3.4
_PAD, _GAP = 0.1, 0.15  # inches: figure margin; space between the axes' labels and the legend


def layout(fig: Figure, ax: Axes) -> None:
    """Axes of :data:`AXES_SIZE` inches, the legend right of them (below them when it is wider
    than :data:`_RIGHT_MAX` inches or taller than the axes with their labels), the figure sized
    to hold both with a margin of :data:`_PAD` inches."""
    aw, ah = AXES_SIZE
    fig.set_size_inches(aw + 4.0, ah + 4.0)
    ax.set_position((2.0 / (aw + 4.0), 2.0 / (ah + 4.0), aw / (aw + 4.0), ah / (ah + 4.0)))
    dpi = fig.dpi
    outer = ax.get_tightbbox(fig.canvas.get_renderer())  # ticks, labels, title: no legend yet
    left, bottom = (ax.bbox.x0 - outer.x0) / dpi, (ax.bbox.y0 - outer.y0) / dpi
    right, top = (outer.x1 - ax.bbox.x1) / dpi, (outer.y1 - ax.bbox.y1) / dpi
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        _fit(fig, ax, None, (_PAD + left, _PAD + bottom), None)
        return

    def legend(ncols: int, loc: str):
        leg = ax.legend(handles, labels, fontsize="small", ncols=ncols, loc=loc,
                        bbox_transform=fig.transFigure, borderaxespad=0.0)  # fmt: skip
        box = leg.get_window_extent(fig.canvas.get_renderer())
        return leg, box.width / dpi, box.height / dpi

    leg, lw, lh = legend(1, "upper left")
    if lw <= _RIGHT_MAX and lh <= bottom + ah + top:
        axes_at = (_PAD + left, _PAD + bottom)
        legend_at = (_PAD + left + aw + right + _GAP, _PAD + bottom + ah)
    else:
        room = left + aw + right
        for ncols in range(min(len(handles), 4), 0, -1):
            leg, lw, lh = legend(ncols, "upper center")
            if lw <= room:
                break
        axes_at = (_PAD + left, _PAD + lh + _GAP + bottom)
        legend_at = (_PAD + left + aw / 2, _PAD + lh)
    _fit(fig, ax, leg, axes_at, legend_at)


def _fit(fig: Figure, ax: Axes, leg, axes_at: tuple, legend_at: tuple | None) -> None:
    """Place the axes' lower left corner and the legend's anchor (inches from the figure's lower
    left), then size the figure to everything drawn, plus :data:`_PAD`."""

    def place(dx: float, dy: float, width: float, height: float) -> None:
        fig.set_size_inches(width, height)
        aw, ah = AXES_SIZE
        ax.set_position(((axes_at[0] + dx) / width, (axes_at[1] + dy) / height,
                         aw / width, ah / height))  # fmt: skip
        if leg is not None:
            anchor = ((legend_at[0] + dx) / width, (legend_at[1] + dy) / height)
            leg.set_bbox_to_anchor(anchor, transform=fig.transFigure)

    w, h = fig.get_size_inches()
    place(0.0, 0.0, w, h)
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    place(_PAD - box.x0, _PAD - box.y0, box.width + 2 * _PAD, box.height + 2 * _PAD)
