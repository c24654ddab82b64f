"""The phase table and the closing summary, for a terminal or a pipe."""

from __future__ import annotations

import math

from rich.table import Table

from ..formats.results import PhaseSummary


def _num(x: float, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


#: Phases the table shows at most (those with the most time); the JSON has all.
TABLE_ROWS = 50


def phase_table(summary: PhaseSummary, extra_columns: dict[str, list[str]] | None = None,
                names: dict[int, str] | None = None) -> Table:
    rows = summary.table()
    share, basis = ("time_share", "time") if summary.timed else ("instruction_share", "instructions")
    shown = range(len(rows))
    if len(rows) > TABLE_ROWS:
        shown = sorted(sorted(shown, key=lambda i: -(rows[i][share] or 0))[:TABLE_ROWS])
    title = "phases" if len(shown) == len(rows) else \
        f"phases: the {len(shown)} of {len(rows)} with the most {basis}"
    columns = {"phase": [_phase_cell(rows[i]["phase"], names) for i in shown],
               "intervals": [str(rows[i]["intervals"]) for i in shown],
               basis: ["-" if rows[i][share] is None else f"{100 * rows[i][share]:.1f} %"
                       for i in shown]}
    for name, (key, fmt) in VALUE_COLUMNS.items():
        cells = [_num(rows[i][key], fmt) for i in shown]
        if any(c != "-" for c in cells):    # a signal the host lacks is not a column of dashes
            columns[name] = cells
    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name == "phase" and names else "right")
    for name in extra_columns or {}:
        table.add_column(name, justify="left")
    for k, i in enumerate(shown):
        table.add_row(*(cells[k] for cells in columns.values()),
                      *(col[i] for col in (extra_columns or {}).values()))
    return table


#: The table's columns of measured values: left out where no phase has one.
VALUE_COLUMNS = {"CPI": ("cpi", ".3f"), "CoV CPI": ("cpi_cov", ".3f"),
                 "voltage mV": ("voltage_mv", ".1f"), "pfreq MHz": ("pfreq_mhz", ".0f")}


def _phase_cell(phase: int, names: dict[int, str] | None) -> str:
    return f"{phase} {names[phase]}" if names and names.get(phase) else str(phase)


def summary_lines(summary: PhaseSummary, dropped: dict[str, int],
                  implausible: dict[str, int] | None = None) -> list[str]:
    lines = [f"quality: mean per-phase CoV of CPI {_num(summary.quality(), '.4f')} "
             f"(whole run {_num(summary.run_cov(), '.4f')})"]
    tail = summary.partial
    if tail is not None and len(tail):
        lines.append(f"left out: the trailing partial interval ({int(tail.samples[0])} samples, "
                     f"{int(tail.instructions[0]):,} instructions)")
    if dropped:
        lines.append("dropped deltas (counter went backwards): "
                     + ", ".join(f"{k} {v}" for k, v in dropped.items()))
    if implausible:
        lines.append("implausible values left out (voltage outside 0.5-1.6 V, clock above "
                     "10 GHz; check the MSR device or the trace): "
                     + ", ".join(f"{k} {v}" for k, v in implausible.items()))
    return lines


def prediction_line(p: dict) -> str:
    """The scores of the phase predictions, in a line."""
    def share(x) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"
    error = p["median_remaining_error"]
    return (f"prediction: next interval right {share(p['next_accuracy'])} of {p['next_scored']}, "
            f"the phase after a change {share(p['change_accuracy'])} of {p['changes']} "
            f"({p['changes_foreseen']} foreseen an interval ahead), remaining length "
            f"median error {share(error)}")
