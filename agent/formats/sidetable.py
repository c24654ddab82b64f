"""The side table ``TRACE.mappings.jsonl``: the executable mappings a live
run learnt after its trace's metadata was written (one JSON object a line,
keys as in trace metadata's ``"mappings"``), read back beside the trace so
that replay classifies as the live run did.

It is written with its trace as one unit (:class:`~.trace.TraceWriter`):
while the run records, it sits beside the trace's temporary file under that
name plus the suffix, so that a run killed outright leaves a pair that
replays, and an older pair at the final names stays as it was."""

from __future__ import annotations

import json
import os
import stat

from ..errors import UserError
from .inputs import open_regular
from .outputs import MAPPINGS_SUFFIX as SIDE_TABLE_SUFFIX, Output, check_outputs

#: The largest side table read: about 400,000 mappings.
MAX_SIDE_TABLE_BYTES = 64 << 20


def side_table_path(trace_path: str) -> str:
    return trace_path + SIDE_TABLE_SUFFIX


def check_side_table_output(trace_path: str, inputs=()) -> None:
    """Refuse a side table that would be written through a link, over an
    input, or onto something that is not a regular file.  A trace written to
    a device or FIFO has no side table."""
    try:
        if not stat.S_ISREG(os.stat(trace_path).st_mode):
            return
    except OSError:
        pass
    path = side_table_path(os.path.realpath(trace_path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UserError(f"{path}: a symbolic link where the side table of {trace_path} goes; "
                        f"remove it or record under another name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: not a regular file, where the side table of {trace_path} "
                        f"goes; remove it or record under another name")
    check_outputs([path], inputs)


def open_side_table(trace_path: str, trace_temp: str | None, inputs=()) -> Output | None:
    """The side table of a trace being written to ``trace_temp``; None for a
    trace that is not a regular file (a device or FIFO has no side table)."""
    if trace_temp is None:
        return None
    check_side_table_output(trace_path, inputs)
    return Output(side_table_path(os.path.realpath(trace_path)),
                  temp=trace_temp + SIDE_TABLE_SUFFIX)


def read_side_table(trace_path: str) -> list[dict] | None:
    """The mappings recorded beside a trace, or None if there is no side table.
    A last line cut short by a crash is left out; any other wrong line is
    refused with its number."""
    from .schema import check_mapping        # msgspec: only to read a table
    path = side_table_path(trace_path)
    if not os.path.lexists(path):       # a trace named through a link: its table is
        path = side_table_path(os.path.realpath(trace_path))   # beside the file itself
    data = _read_bounded(path)
    if data is None:
        return None
    lines = data.split(b"\n")
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cut_short = n == len(lines)      # no newline after it
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            if cut_short:
                break
            raise _bad(path, n, "not a JSON line") from None
        problem = check_mapping(row)
        if problem and cut_short:
            break
        if problem:
            raise _bad(path, n, problem)
        rows.append(row)
    return rows


def _bad(path: str, line: int, problem: str) -> UserError:
    return UserError(f"{path}: line {line}: {problem}: not a side table phasewatch wrote; "
                     f"move it away (replay then hashes IPs by address)")


def _read_bounded(path: str) -> bytes | None:
    """The bytes of a regular file of at most MAX_SIDE_TABLE_BYTES; None if absent."""
    if not os.path.lexists(path):
        return None
    with open_regular(path, "side table") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_SIDE_TABLE_BYTES:
            raise UserError(f"{path}: {size:,} bytes, more than a side table holds "
                            f"({MAX_SIDE_TABLE_BYTES:,}); move it away")
        try:
            return f.read(MAX_SIDE_TABLE_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror}") from None


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
