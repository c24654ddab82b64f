"""A report's folder: ``index.html`` and ``phases.png`` of a run's phases,
each complete or not at all, with the table of its phases beside them."""

from __future__ import annotations

import os
from typing import Callable

from ..console import escaped
from ..core.pipeline import Intervals
from ..core.source import Sink
from ..errors import UserError
from ..formats.outputs import check_folder, check_outputs, write_all_or_none
from ..formats.results import PhaseSummary
from ..live.phase_functions import PhaseFunctions
from .figure import PhaseFigure

TOP_FUNCTIONS = 3


def phase_rows(intervals: Intervals, functions: PhaseFunctions | None) -> list[dict]:
    summary = PhaseSummary()
    summary.write(intervals)
    rows = summary.table()
    for row in rows:
        row["top_functions"] = functions.top(row["phase"], TOP_FUNCTIONS) if functions else []
    return rows


def write_report(out_dir: str, figure: PhaseFigure, title: str, notes: list[str],
                 rows: list[dict], inputs=(), sections=()) -> list[str]:
    """Writes index.html (with Plotly's script beside it) and phases.png into
    ``out_dir``, all complete or none at all."""
    from .page import page, plotly_script
    from .png import write_png
    check_folder(out_dir, inputs=inputs)
    check_report_dir(out_dir)
    # A page and a PNG are UTF-8 text to their readers: names' stray bytes shown as \xNN.
    title, notes = escaped(title), [escaped(note) for note in notes]
    if figure.aggregated:
        notes = notes + [f"aggregated for drawing: each column is {figure.per_column} "
                         f"consecutive intervals (mean histograms, mean distance and threshold, "
                         f"the phase of most of them); {figure.columns:,} columns in all"]
    html_path, png_path, plotly_path = report_files(out_dir)
    text = page(figure, title, notes, rows, sections)
    # All are checked, written and finished before any is put in place: a
    # report that cannot be whole leaves the old one as it was.
    files = [(html_path, False, lambda f: f.write(text)),
             (png_path, True, lambda f: write_png(figure, title, f)),
             (plotly_path, False, lambda f: f.write(plotly_script()))]
    check_outputs([path for path, _, _ in files], inputs)
    write_all_or_none(files)
    return [html_path, png_path]


def report_files(out_dir: str) -> list[str]:
    """The files a report writes into ``out_dir``."""
    from .page import PLOTLY_FILE
    return [os.path.join(out_dir, name) for name in ("index.html", "phases.png", PLOTLY_FILE)]


def check_report_dir(out_dir: str) -> None:
    """Make the report's folder, or say in one line why it cannot be written."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make the report folder {out_dir}: {exc.strerror}") from None
    if not os.access(out_dir, os.W_OK):
        raise UserError(f"cannot write in the report folder {out_dir}: permission denied")


class ReportFolder(Sink):
    """A live run's ``--report DIR``: the recorder's figure drawn into DIR
    when the run has ended well; ``describe()`` gives the title and notes."""

    def __init__(self, out_dir: str, recorder, functions: PhaseFunctions | None,
                 describe: Callable[[], tuple[str, list[str]]], warn: Callable[[str], None]):
        self.out_dir, self.recorder, self.functions = out_dir, recorder, functions
        self.describe, self.warn = describe, warn

    def close(self, complete: bool = True) -> None:
        if not complete:
            return
        if self.recorder.n_intervals == 0:
            self.warn(f"no report in {self.out_dir}: the run ended before its first interval did")
            return
        iv = self.recorder.intervals()
        figure = self.recorder.figure(iv.phase, iv.distance, iv.new_phase, iv.statuses)
        title, notes = self.describe()
        try:
            write_report(self.out_dir, figure, title, notes, phase_rows(iv, self.functions))
        except UserError as exc:
            self.failure = str(exc)
