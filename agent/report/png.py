"""The phase figure as a static image, drawn with Matplotlib.

The same rows as the page, in the same colours: one heatmap per profile
segment, distance with the threshold, the phase band and, where given, the
ground-truth band.  Its size is fixed by ``WIDTH_PX`` and the number of rows.
"""

from __future__ import annotations

import matplotlib

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


def rows_of(fig: PhaseFigure) -> list[tuple[str, object]]:
    rows = [("heatmap", h) for h in fig.heatmaps] + [("distance", None), ("band", "phase")]
    if fig.predicted is not None:
        rows.append(("band", "predicted"))
    if fig.truth is not None:
        rows.append(("band", "truth"))
    return rows


def height_px(fig: PhaseFigure) -> int:
    inches = sum(HEIGHT_IN[kind] for kind, _ in rows_of(fig)) + TOP_IN + BOTTOM_IN
    return int(round(inches * DPI))


def write_png(fig: PhaseFigure, title: str, path) -> None:
    rows = rows_of(fig)
    heights = [HEIGHT_IN[kind] for kind, _ in rows]
    figure, axes = plt.subplots(
        len(rows), 1, sharex=True, figsize=(WIDTH_PX / DPI, height_px(fig) / DPI), dpi=DPI,
        gridspec_kw=dict(height_ratios=heights, hspace=0.35,
                         top=1 - TOP_IN / (height_px(fig) / DPI),
                         bottom=BOTTOM_IN / (height_px(fig) / DPI), left=0.07, right=0.98))
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
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def _heatmap(ax, heat, extent_x) -> None:
    lo, hi = heat.centres[0], heat.centres[-1]
    half = (heat.centres[1] - heat.centres[0]) / 2 if len(heat.centres) > 1 else 0.5
    ax.imshow(np.nan_to_num(heat.values.T), aspect="auto", origin="lower", cmap="viridis",
              interpolation="nearest", extent=(*extent_x, lo - half, hi + half))
    shown = f" ({heat.shown})" if heat.shown else ""
    ax.set_title(f"{heat.title} histogram per interval{shown}", fontsize=9, loc="left")
    if heat.labels is not None:
        ax.set_yticks(heat.centres, heat.labels, fontsize=5)
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
