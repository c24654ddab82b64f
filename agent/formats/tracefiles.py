"""Open a recorded trace, whichever format it is in, told apart by content."""

from __future__ import annotations

import os

from ..errors import UserError
from .bbvfile import looks_like_bb
from .inputs import check_regular
from .sidetable import SIDE_TABLE_SUFFIX, with_side_table
from .trace import TraceReader, is_arrow


def is_recording(path: str) -> bool:
    """Whether a file in a folder of recordings is one to replay: a trace
    (either format) or a SimPoint .bb file, not a trace's side table, a JSON
    results or labels file, or anything else."""
    if path.endswith(SIDE_TABLE_SUFFIX):
        return False        # read with its trace
    try:
        if os.path.getsize(path) == 0:
            return False
        if is_arrow(path) or looks_like_bb(path):
            return True
        with open(path, "rb") as f:
            if f.read(64).lstrip()[:1] in (b"{", b"["):
                return False    # JSON
        from .csvtrace import looks_like_csv
        return looks_like_csv(path)
    except OSError:
        return False


def open_trace(path: str, base_mhz: float | None = None, warn=None):
    """A source over ``path``: the project's trace format or plain CSV."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory, not a trace")
    check_regular(path, "trace")       # a FIFO or device would never end
    try:
        if os.path.getsize(path) == 0:
            if path.endswith(".partial"):
                raise UserError(f"{path}: empty file: a recording stopped before it wrote "
                                f"anything, so there is nothing to replay")
            raise UserError(f"{path}: empty file")
        if is_arrow(path):
            source = TraceReader(path, warn=warn)
        else:
            from .csvtrace import CsvReader, looks_like_csv  # pyarrow.csv: imported for CSV only
            source = CsvReader(path, base_mhz=base_mhz) if looks_like_csv(path) else None
        if source is not None:
            source.metadata = with_side_table(source.metadata, path, warn or (lambda msg: None))
            return source
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    raise UserError(f"{path}: not a trace: neither the phasewatch trace format "
                    f"nor a CSV with a header row")
