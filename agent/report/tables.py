"""The phase table and the closing summary, for a terminal or a pipe."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..formats.results import PhaseSummary, counted
from ..live.function_names import fit_name, short_name

if TYPE_CHECKING:   # rich loads when a table is drawn: run --json and -q draw none
    from rich.table import Table


def _num(x: float, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


#: A kernel column where a phase spends this share of its samples in kernel
#: mode (a compute loop's interrupts are about 1 %; JSON always has each
#: phase's kernel_share).
KERNEL_COLUMN_AT = 0.05


def kernel_column(shares: list[float | None]) -> dict[str, list[str]]:
    """``{"kernel": cells}`` where a phase's kernel share calls for it, else {}."""
    if not any(share is not None and share >= KERNEL_COLUMN_AT for share in shares):
        return {}
    return {"kernel": ["-" if share is None else f"{100 * share:.0f} %" for share in shares]}


#: Phases the table shows at most (those with the most time); the JSON has all.
TABLE_ROWS = 50


def phase_table(summary: PhaseSummary, extra_columns: dict[str, list[str]] | None = None,
                names: dict[int, str] | None = None,
                functions: list[list[tuple[str, float]]] | None = None,
                width: int | None = None) -> Table:
    """The phases, a row each; ``extra_columns`` and ``functions`` (each
    phase's top functions), in the order of ``summary.table()``, beside them.
    Given a ``width``, names are shortened so that the table fits it, a
    cell taking at most :data:`CELL_LINES` lines."""
    rows = summary.table()
    share, basis = ("time_share", "time") if summary.timed else ("instruction_share", "instructions")
    shown = range(len(rows))
    if len(rows) > TABLE_ROWS:
        shown = sorted(sorted(shown, key=lambda i: -(rows[i][share] or 0))[:TABLE_ROWS])
    title = "phases" if len(shown) == len(rows) else \
        f"phases: the {len(shown)} of {len(rows)} with the most {basis}"
    columns = {"intervals": [str(rows[i]["intervals"]) for i in shown],
               basis: ["-" if rows[i][share] is None else f"{100 * rows[i][share]:.1f} %"
                       for i in shown]}
    for name, (key, fmt) in VALUE_COLUMNS.items():
        cells = [_num(rows[i][key], fmt) for i in shown]
        if any(c != "-" for c in cells):    # a signal the host lacks is not a column of dashes
            columns[name] = cells
    columns.update({name: [col[i] for i in shown] for name, col in (extra_columns or {}).items()})
    phases = [rows[i]["phase"] for i in shown]
    tops = None if functions is None else [functions[i] for i in shown]
    columns = _with_names(columns, phases, names, tops, width)
    from rich.table import Table
    table = Table(title=title, title_justify="left")
    for name in columns:
        left = (name == "phase" and names) or name in (extra_columns or {}) \
            or name == "top functions"
        table.add_column(name, justify="left" if left else "right")
    for k in range(len(phases)):
        table.add_row(*(cells[k] for cells in columns.values()))
    return table


def _with_names(columns: dict[str, list[str]], phases: list[int], names: dict[int, str] | None,
                tops: list | None, width: int | None) -> dict[str, list[str]]:
    """The phase column first and the top functions last, their names fitted
    into what the other columns leave of ``width``: the functions take what
    they need of it, leaving the phase's name a third at least."""
    free = None if width is None else width - _drawn_width(columns, 1 + (tops is not None))
    phase_width = free
    cells = None
    if tops is not None:
        ids = max([len("phase"), *(len(str(p)) for p in phases)])
        least_phase = None if free is None else max(ids, free // 3) if names else ids
        cells = [top_functions_cell(top, None if free is None else
                                    max(free - least_phase, MIN_NAME)) for top in tops]
        if free is not None:
            used = max([len("top functions"), *(len(line) for c in cells for line in c.split("\n"))])
            phase_width = max(free - used, least_phase)
    named = {"phase": [_phase_cell(p, names, phase_width) for p in phases], **columns}
    if cells is not None:
        named["top functions"] = cells
    return named


#: A cell of the terminal table takes at most this many lines.
CELL_LINES = 2
#: Names are not cut shorter than this (a column that narrow gets more lines).
MIN_NAME = 8


def _drawn_width(columns: dict[str, list[str]], more: int) -> int:
    """Columns a table takes with these columns and ``more`` to come
    (rich's default box: a border and a space either side of each cell)."""
    content = sum(max([len(name), *(len(c) for c in cells)]) for name, cells in columns.items())
    return content + 3 * (len(columns) + more) + 1


#: A function with less of a phase's samples is left out of its cell.
SHOWN_SHARE = 0.005


def top_functions_cell(top: list[tuple[str, float]], width: int | None = None) -> str:
    """``region_a 97%, region_b 2%``: the functions that round to at least
    1 %, their names shortened (:func:`short_name`) and, given a ``width``,
    fitted into :data:`CELL_LINES` lines of it (names cut further, then the
    least of them left out)."""
    top = _by_short_name(top)
    if not top:
        return "-"
    if width is None:
        return ", ".join(f"{name} {100 * share:.0f}%" for name, share in top)
    for k in range(len(top), 0, -1):
        for budget in range(max([MIN_NAME, *(len(name) for name, _ in top[:k])]), MIN_NAME - 1, -1):
            text = _packed([f"{fit_name(name, budget)} {100 * share:.0f}%"
                            for name, share in top[:k]], width)
            if text is not None:
                return text
    name, share = top[0]
    return f"{fit_name(name, max(width - 5, 1))} {100 * share:.0f}%"


def _by_short_name(top: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Shares of functions with one short name added up (``f`` and ``f [clone
    .cold]``; two instances of one template); those under half a per cent left out."""
    shares: dict[str, float] = {}
    for name, share in top:
        shares[short_name(name)] = shares.get(short_name(name), 0.0) + share
    return sorted(((n, s) for n, s in shares.items() if s >= SHOWN_SHARE), key=lambda item: -item[1])


def _packed(entries: list[str], width: int) -> str | None:
    """The entries, comma separated, in lines of at most ``width``; None
    where that takes more than :data:`CELL_LINES` lines."""
    lines = [entries[0]]
    for entry in entries[1:]:
        if len(lines[-1]) + len(", ") + len(entry) + 1 <= width:
            lines[-1] += ", " + entry
        else:
            lines[-1] += ","
            lines.append(entry)
    if len(lines) > CELL_LINES or any(len(line) > width for line in lines):
        return None
    return "\n".join(lines)


#: The table's columns of measured values: left out where no phase has one.
VALUE_COLUMNS = {"CPI": ("cpi", ".3f"), "CoV CPI": ("cpi_cov", ".3f"),
                 "voltage mV": ("voltage_mv", ".1f"), "pfreq MHz": ("pfreq_mhz", ".0f")}


def _phase_cell(phase: int, names: dict[int, str] | None, width: int | None = None) -> str:
    """``0 Accumulator<>::fold``: the id and, where it has one, the name,
    fitted into ``width``."""
    if not names or not names.get(phase):
        return str(phase)
    parts = [short_name(part) for part in names[phase].split("+")]
    if width is not None:
        each = (max(width - len(f"{phase} "), MIN_NAME) - len(parts) + 1) // len(parts)
        parts = [fit_name(part, max(each, MIN_NAME)) for part in parts]
    return f"{phase} {'+'.join(parts)}"


def summary_lines(summary: PhaseSummary, dropped: dict[str, int],
                  implausible: dict[str, int] | None = None) -> list[str]:
    lines = [f"quality: mean per-phase CoV of CPI {_num(summary.quality(), '.4f')} "
             f"(whole run {_num(summary.run_cov(), '.4f')})"]
    tail = summary.partial
    if tail is not None and len(tail):
        instructions = counted(tail, 0)
        lines.append(f"left out: the trailing partial interval ({int(tail.samples[0])} samples, "
                     + ("instructions not counted)" if instructions is None
                        else f"{instructions:,} instructions)"))
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
