"""The report page: the phase figure drawn with Plotly, and the phase table.

The page is one self-contained HTML file (Plotly's script inlined), so it
opens from disk with no network.  Heatmaps, distance, threshold and the phase
bands share one x axis, so zooming one zooms all; hovering tells the interval,
its time and its value.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figure import PhaseFigure, phase_colours, predicted_title
from .tables import VALUE_COLUMNS, top_functions_cell

ROW_HEIGHT = {"heatmap": 0.26, "distance": 0.16, "band": 0.05}
#: The page loads Plotly from this file beside it (written with the page).
PLOTLY_FILE = "plotly.min.js"


def build_figure(fig: PhaseFigure) -> go.Figure:
    rows = [("heatmap", h) for h in fig.heatmaps] + [("distance", None), ("band", "phase")]
    if fig.predicted is not None:
        rows.append(("band", "predicted"))
    if fig.truth is not None:
        rows.append(("band", "truth"))
    heights = np.array([ROW_HEIGHT[kind] for kind, _ in rows])
    plot = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.025,
                         row_heights=list(heights / heights.sum()),
                         subplot_titles=[_row_title(kind, item, fig) for kind, item in rows])
    x = fig.first_interval
    for r, (kind, item) in enumerate(rows, start=1):
        if kind == "heatmap":
            _add_heatmap(plot, r, x, item, fig)
        elif kind == "distance":
            _add_distance(plot, r, x, fig)
        elif item in ("phase", "predicted"):
            codes = fig.phase if item == "phase" else fig.predicted
            top = max(fig.phase.max(), fig.predicted.max() if fig.predicted is not None else 0)
            _add_band(plot, r, x, codes, [f"phase {p}" for p in range(top + 1)], f"{item}-band")
        else:
            _add_band(plot, r, x, fig.truth, fig.truth_names, "truth-band")
    plot.update_xaxes(title_text="interval", row=len(rows), col=1)
    plot.update_layout(updatemenus=[x_axis_menu(fig, len(plot.data), len(rows))])
    plot.update_layout(height=260 + 190 * len(fig.heatmaps) + 200 + 60 * len(rows),
                       showlegend=True, legend=dict(orientation="h", y=1.02, x=1, xanchor="right"),
                       margin=dict(l=70, r=30, t=50, b=50), hovermode="closest")
    return plot


def per_mille(shares: np.ndarray) -> np.ndarray:
    """Shares as whole thousandths (no sample: 0), two bytes each in the page:
    a page of 1,000 intervals stays well under a megabyte."""
    return np.round(np.nan_to_num(shares) * 1000).astype(np.uint16)


def x_axis_menu(fig: PhaseFigure, traces: int, rows: int) -> dict:
    """Buttons that put intervals or seconds from the start on the shared x axis."""
    title = f"xaxis{rows if rows > 1 else ''}.title.text"
    seconds = np.round(fig.t_start_s, 3).tolist()
    intervals = fig.first_interval.tolist()
    return dict(type="buttons", direction="right", x=0, xanchor="left", y=1.06, yanchor="bottom",
                buttons=[dict(label="x: interval", method="update",
                              args=[{"x": [intervals] * traces}, {title: "interval"}]),
                         dict(label="x: seconds", method="update",
                              args=[{"x": [seconds] * traces}, {title: "seconds from the start"}])])


def _row_title(kind: str, item, fig: PhaseFigure) -> str:
    if kind == "heatmap":
        shown = f" ({item.shown})" if item.shown else ""
        return f"{item.title} histogram per interval{shown}"
    if kind == "distance":
        return "distance to the phase taken, and the threshold"
    if item == "predicted":
        return predicted_title(fig)
    return "phase" if item == "phase" else "ground truth"



def _add_heatmap(plot, row: int, x, heat, fig: PhaseFigure) -> None:
    y = heat.labels if heat.labels is not None else heat.centres
    at = "%{y}" if heat.labels is not None else f"%{{y:.4g}} {heat.unit}"
    plot.add_trace(go.Heatmap(
        x=x, y=y, z=per_mille(heat.values.T), name=heat.title,
        colorscale="Viridis", showscale=False,
        hovertemplate=f"%{{x}}<br>{heat.title} {at}<br>share %{{z}} ‰<extra></extra>"),
        row=row, col=1)
    if heat.labels is not None:
        plot.update_yaxes(type="category", tickfont=dict(size=9), row=row, col=1)
    else:
        plot.update_yaxes(title_text=heat.unit, row=row, col=1)


def _add_distance(plot, row: int, x, fig: PhaseFigure) -> None:
    plot.add_trace(go.Scatter(x=x, y=fig.distance, mode="lines", name="distance",
                                line=dict(color="#444", width=1)), row=row, col=1)
    plot.add_trace(go.Scatter(x=x, y=fig.threshold, mode="lines", name="threshold",
                                line=dict(color="#d62728", width=2, dash="dash")),
                   row=row, col=1)
    plot.update_yaxes(title_text="distance", range=[0, 1.02], row=row, col=1)


def _add_band(plot, row: int, x, codes: np.ndarray, names: list[str], uid: str) -> None:
    n = max(len(names), 1)
    colours = phase_colours(n)
    scale = []
    for i, colour in enumerate(colours):
        scale += [[i / n, colour], [(i + 1) / n, colour]]
    plot.add_trace(go.Heatmap(
        x=x, y=[0], z=[codes], zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False,
        uid=uid, name=uid, text=[[names[c] for c in codes]],
        hovertemplate="%{x}<br>%{text}<extra></extra>"), row=row, col=1)
    plot.update_yaxes(showticklabels=False, row=row, col=1)


def table_html(rows: list[dict], colours: list[str]) -> str:
    """The phases as the terminal shows them: columns no phase has a value
    for left out, function names shortened (:func:`top_functions_cell`)."""
    values = {name: (key, fmt) for name, (key, fmt) in VALUE_COLUMNS.items()
              if any(_num(r[key], fmt) != "-" for r in rows)}
    head = "".join(f"<th>{html.escape(name)}</th>" for name in ("phase", "intervals", "time",
                                                                *values))
    head += '<th class="functions">top functions</th>'

    body = []
    for r in rows:
        swatch = f'<span class="swatch" style="background:{colours[r["phase"] % len(colours)]}"></span>'
        tops = html.escape(top_functions_cell(r.get("top_functions", [])))
        cells = "".join(f"<td>{_num(r[key], fmt)}</td>" for key, fmt in values.values())
        body.append(f"<tr><td>{swatch}{r['phase']}</td><td>{r['intervals']}</td>"
                    f"<td>{100 * r['time_share']:.1f} %</td>{cells}"
                    f"<td class=\"functions\">{tops}</td></tr>")
    return f'<table id="phase-table"><tr>{head}</tr>{"".join(body)}</table>'


def section_html(section_id: str, heading: str, rows: list[dict]) -> str:
    """A heading and a table of text cells, the keys of the first row as its header."""
    if not rows:
        return f"<h2>{html.escape(heading)}</h2><p>nothing to compare</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values())
                   + "</tr>" for r in rows)
    return (f"<h2>{html.escape(heading)}</h2>"
            f'<table id="{html.escape(section_id)}"><tr>{head}</tr>{body}</table>')


def _num(x, fmt: str) -> str:
    return "-" if x is None or x != x else format(x, fmt)


def plotly_script() -> str:
    """Plotly's own script, as the page loads it from PLOTLY_FILE beside it."""
    from plotly.offline import get_plotlyjs
    return get_plotlyjs()


def page(fig: PhaseFigure, title: str, notes: list[str], rows: list[dict],
         sections: list[tuple[str, str, list[dict]]] = ()) -> str:
    """The report page; ``sections`` are (id, heading, rows) tables after the phases'."""
    plot = build_figure(fig)
    div = plot.to_html(full_html=False, include_plotlyjs=PLOTLY_FILE, div_id="phase-figure",
                       config={"responsive": True, "displaylogo": False})
    colours = phase_colours(len(rows))
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-top: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th.functions, td.functions {{ text-align: left; font-family: monospace; max-width: 48em;
                overflow-wrap: anywhere; }}
.swatch {{ display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em;
           vertical-align: middle; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<ul id="notes">{items}</ul>
{div}
<h2>Phases</h2>
{table_html(rows, colours)}
{"".join(section_html(*section) for section in sections)}
</body></html>
"""
