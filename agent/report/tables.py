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
    table = Table(title=title, title_justify="left")
    for name in ("phase", "intervals", basis, "CPI", "CoV CPI", "voltage mV", "pfreq MHz"):
        table.add_column(name, justify="left" if name == "phase" and names else "right")
    for name in extra_columns or {}:
        table.add_column(name, justify="left")
    for i in shown:
        r = rows[i]
        extra = [col[i] for col in (extra_columns or {}).values()]
        share_text = "-" if r[share] is None else f"{100 * r[share]:.1f} %"
        phase = str(r["phase"])
        if names and names.get(r["phase"]):
            phase = f"{phase} {names[r['phase']]}"
        table.add_row(phase, str(r["intervals"]), share_text,
                      _num(r["cpi"], ".3f"), _num(r["cpi_cov"], ".3f"),
                      _num(r["voltage_mv"], ".1f"), _num(r["pfreq_mhz"], ".0f"), *extra)
    return table


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
