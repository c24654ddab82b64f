"""The side table ``TRACE.energy.jsonl``: the package energy of each complete
interval of a live run (``{"index", "t_start_ns", "t_end_ns", "energy_uj"}``
a line), written beside its trace where RAPL was readable, so that a replay
of the trace (``diff``) knows each interval's energy.  An interval is matched
by index and times: a replay that cuts intervals otherwise finds none."""

from __future__ import annotations

import json
import os
from typing import Iterable

from .outputs import ENERGY_SUFFIX, open_output


def energy_table_path(trace_path: str) -> str:
    return trace_path + ENERGY_SUFFIX


def write_energy_table(trace_path: str, rows: Iterable[tuple[int, int, int, float]]) -> str | None:
    """(index, t_start_ns, t_end_ns, energy_uj) rows beside the trace; None,
    or one line saying why they could not be written."""
    with open_output(energy_table_path(trace_path), inputs=[trace_path]) as out:
        for index, t0, t1, uj in rows:
            out.stream.write(json.dumps({"index": index, "t_start_ns": t0, "t_end_ns": t1,
                                         "energy_uj": uj}) + "\n")
    return out.failure


def read_energy_table(trace_path: str) -> dict[int, tuple[int, int, float]] | None:
    """(t_start_ns, t_end_ns, energy_uj) by interval index, or None without a
    table.  Lines that are not such rows are left out."""
    path = energy_table_path(trace_path)
    if not os.path.exists(path):
        return None
    table = {}
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
                table[int(row["index"])] = (int(row["t_start_ns"]), int(row["t_end_ns"]),
                                            float(row["energy_uj"]))
            except (ValueError, KeyError, TypeError):
                continue
    return table
