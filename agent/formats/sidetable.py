"""The side table ``TRACE.mappings.jsonl``: the executable mappings a live
run learnt after its trace's metadata was written (one JSON object a line,
keys as in trace metadata's ``"mappings"``), read back beside the trace so
that replay classifies as the live run did."""

from __future__ import annotations

import json
import os

SIDE_TABLE_SUFFIX = ".mappings.jsonl"


def side_table_path(trace_path: str) -> str:
    return trace_path + SIDE_TABLE_SUFFIX


def read_side_table(trace_path: str) -> list[dict] | None:
    """The mappings recorded beside a trace, or None if there is no side table.
    A line cut short by a crash is left out."""
    path = side_table_path(trace_path)
    if not os.path.exists(path):
        return None
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and {"start", "end"} <= set(row):
                rows.append(row)
    return rows


def with_side_table(meta: dict, trace_path: str, warn=lambda msg: None) -> dict:
    """Trace metadata with the side table's mappings appended to its own.  A
    recording whose mappings were all in a side table that is now missing is
    taken as one address space, with a warning."""
    extra = read_side_table(trace_path)
    if extra is None:
        if meta.get("mappings") == []:
            warn(f"{side_table_path(trace_path)} is missing: IPs are hashed by address, "
                 "so phases may differ from the live run (keep it beside the trace)")
            return {k: v for k, v in meta.items() if k != "mappings"}
        return meta
    return {**meta, "mappings": list(meta.get("mappings") or []) + extra}
