"""The phase figure as a static image, drawn with Matplotlib.

The same rows as the page, in the same colours: one heatmap per profile
segment, distance with the threshold, the phase band and, where given, the
ground-truth band.  Its size is fixed by ``WIDTH_PX`` and the number of rows.
"""

from __future__ import annotations

import logging

# Without a writable home (a system user), Matplotlib warns in two lines at
# import that it made its config folder in /tmp: nothing for the user to do.
logging.getLogger("matplotlib").setLevel(logging.ERROR)

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from .figure import PhaseFigure, phase_colours, predicted_title  # noqa: E402

WIDTH_PX = 1600
DPI = 100
HEIGHT_IN = {"heatmap": 2.2, "distance": 1.6, "band": 0.45}
TOP_IN = 0.9
BOTTOM_IN = 0.6
#: A labelled heatmap (the code signature's entries) gives each row this much
#: height, so that its labels, in LABEL_PT type, stand apart.
LABEL_ROW_IN = 0.16
LABEL_PT = 7
#: Width of a label's character in inches, at LABEL_PT (DejaVu Sans, on average).
LABEL_CHAR_IN = 0.6 * LABEL_PT / 72
LEFT_IN = 0.7


def rows_of(fig: PhaseFigure) -> list[tuple[str, object]]:
    rows = [("heatmap", h) for h in fig.heatmaps] + [("distance", None), ("band", "phase")]
    if fig.predicted is not None:
        rows.append(("band", "predicted"))
    if fig.truth is not None:
        rows.append(("band", "truth"))
    return rows


def row_height_in(kind: str, item) -> float:
    if kind == "heatmap" and item.labels is not None:
        return max(HEIGHT_IN[kind], LABEL_ROW_IN * len(item.labels) + 0.4)
    return HEIGHT_IN[kind]


def height_px(fig: PhaseFigure) -> int:
    inches = sum(row_height_in(kind, item) for kind, item in rows_of(fig)) + TOP_IN + BOTTOM_IN
    return int(round(inches * DPI))


def left_in(fig: PhaseFigure) -> float:
    """The left margin: room for the longest heatmap label (at most a third of the width)."""
    longest = max([len(label) for h in fig.heatmaps for label in (h.labels or [])], default=0)
    return min(max(LEFT_IN, longest * LABEL_CHAR_IN + 0.2), WIDTH_PX / DPI / 3)


def draw(fig: PhaseFigure, title: str):
    """The figure, as Matplotlib's Figure (closed by the caller)."""
    rows = rows_of(fig)
    heights = [row_height_in(kind, item) for kind, item in rows]
    tall = height_px(fig) / DPI
    figure, axes = plt.subplots(
        len(rows), 1, sharex=True, figsize=(WIDTH_PX / DPI, tall), dpi=DPI,
        gridspec_kw=dict(height_ratios=heights, hspace=0.35, top=1 - TOP_IN / tall,
                         bottom=BOTTOM_IN / tall, left=left_in(fig) / (WIDTH_PX / DPI),
                         right=0.98))
    axes = np.atleast_1d(axes)
    extent_x = (fig.first_interval[0], fig.first_interval[-1] + fig.per_column)
    for ax, (kind, item) in zip(axes, rows):
        if kind == "heatmap":
            _heatmap(ax, item, extent_x)
        elif kind == "distance":
            _distance(ax, fig)
        elif item == "phase":
            _band(ax, fig.phase, int(fig.phase.max()) + 1, extent_x, "phase")
        elif item == "predicted":
            _band(ax, fig.predicted, int(max(fig.phase.max(), fig.predicted.max())) + 1, extent_x,
                  predicted_title(fig))
        else:
            label = "ground truth" + (f" (ARI {fig.ari:.3f})" if fig.ari is not None else "")
            _band(ax, fig.truth, len(fig.truth_names), extent_x, label)
    axes[-1].set_xlabel("interval")
    # The title holds the user's file name: a "$" in it is text, not mathtext to parse.
    figure.suptitle(title, fontsize=12, parse_math=False)
    return figure


def write_png(fig: PhaseFigure, title: str, path) -> None:
    figure = draw(fig, title)
    try:
        figure.savefig(path, dpi=DPI)
    finally:
        plt.close(figure)


def _heatmap(ax, heat, extent_x) -> None:
    lo, hi = heat.centres[0], heat.centres[-1]
    half = (heat.centres[1] - heat.centres[0]) / 2 if len(heat.centres) > 1 else 0.5
    ax.imshow(np.nan_to_num(heat.values.T), aspect="auto", origin="lower", cmap="viridis",
              interpolation="nearest", extent=(*extent_x, lo - half, hi + half))
    shown = f" ({heat.shown})" if heat.shown else ""
    ax.set_title(f"{heat.title} histogram per interval{shown}", fontsize=9, loc="left")
    if heat.labels is not None:
        ax.set_yticks(heat.centres, heat.labels, fontsize=LABEL_PT)
    else:
        ax.set_ylabel(heat.unit)


def _distance(ax, fig: PhaseFigure) -> None:
    x = fig.first_interval
    ax.plot(x, fig.distance, color="#444", linewidth=0.8, label="distance")
    ax.plot(x, fig.threshold, color="#d62728", linewidth=1.5, linestyle="--", label="threshold")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("distance")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("distance to the phase taken, and the threshold", fontsize=9, loc="left")


def _band(ax, codes: np.ndarray, n: int, extent_x, label: str) -> None:
    cmap = ListedColormap(phase_colours(n))
    ax.imshow(codes[None, :], aspect="auto", cmap=cmap, vmin=-0.5, vmax=n - 0.5,
              interpolation="nearest", extent=(*extent_x, 0, 1))
    ax.set_yticks([])
    ax.set_title(label, fontsize=9, loc="left")
