"""The trace format: an Arrow IPC file (Feather v2) of raw sample columns.

* It streams.  Samples are appended as record batches; each is on disk before
  the next is taken, so a crash loses at most the rows not yet written.  A trace
  cut off mid-write (no footer) replays up to its last complete batch.
* It carries its metadata as JSON under the schema key ``phasewatch``.
* Common tools open it: ``pandas.read_feather(path)``, ``pyarrow.feather``,
  ``polars.read_ipc``, and DuckDB over the pyarrow table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from ..core.batch import RAW_DTYPES, SampleBatch, first_bad_id, id_problem
from ..core.source import Sink
from ..errors import UserError
from .schema import validate
from .outputs import Recording, open_output
from .sidetable import open_side_table

ARROW_MAGIC = b"ARROW1"
META_KEY = b"phasewatch"
#: Rows a writer gathers before it writes a record batch, and the longest it waits.
WRITE_ROWS = 65536
WRITE_SECONDS = 1.0
#: Rows a reader gathers from small record batches before yielding one batch.
READ_ROWS = 65536


def arrow_schema(signals, metadata: dict[str, Any]) -> pa.Schema:
    fields = [pa.field(n, pa.from_numpy_dtype(RAW_DTYPES[n]), nullable=False)
              for n in RAW_DTYPES if n in set(signals)]
    return pa.schema(fields, metadata={META_KEY: json.dumps(metadata).encode()})


class TraceWriter(Sink):
    """Appends sample batches to a trace file (as a sink: every batch the
    driver takes, before the pipeline sees it, so that the trace holds
    exactly what was classified).

    With ``side_table``, the trace's side table (:mod:`.sidetable`) is written
    with it as one unit: both stay under temporary names until both are
    complete, so a run killed or failing midway leaves an older pair as it
    was.  With ``keep_complete``, a failed write (a full disk) keeps the
    batches written before it under the trace's name instead of removing them.
    """

    def __init__(self, path: str, metadata: dict[str, Any], signals,
                 rows: int = WRITE_ROWS, seconds: float = WRITE_SECONDS, inputs=(),
                 side_table: bool = False, keep_complete: bool = False):
        self.path = path
        self.schema = arrow_schema(signals, metadata)
        self.signals = tuple(self.schema.names)
        self.rows, self.seconds = rows, seconds
        self.keep_complete = keep_complete
        self.kept: int | None = None      # batches kept after a failed write
        self._pending: list[SampleBatch] = []
        self._pending_rows = 0
        self._last_write = time.monotonic()
        self.rows_written = 0
        self._batches_written = 0
        self._out = open_output(Recording(path), inputs, binary=True)
        self._writer = pa.ipc.new_file(self._out.stream, self.schema)
        # The schema on disk at once: a recording killed before its first
        # samples is still a trace (of none).
        self._writer.write_batch(pa.RecordBatch.from_arrays(
            [_arrow_array(np.zeros(0, RAW_DTYPES[n])) for n in self.signals], schema=self.schema))
        self._out.stream.flush()
        self._complete = self._out.stream.tell() if self._out.error is None else 0
        try:
            self._side = (open_side_table(path, self._out.temp_path, inputs)
                          if side_table else None)
        except BaseException:
            self._out.discard()
            raise

    @property
    def failure(self) -> str | None:
        """Why the trace could not be written (a full disk), or None."""
        if self._side is not None and self._side.failure:
            return f"{self._side.failure}; {self.path} was not kept either (it goes with it)"
        if self._out.failure and self.kept is not None:
            return (f"cannot write {self.path}: {self.write_error}: kept the "
                    f"{self.rows_written:,} samples written before ({self.kept} batches)")
        return self._out.failure

    @property
    def write_error(self) -> str | None:
        """What went wrong with the first write that failed, or None."""
        error = self._out.error
        return None if error is None else (os.strerror(error.errno) if error.errno else str(error))

    def add_mappings(self, rows: list[dict]) -> None:
        """Append executable mappings to the side table (see :mod:`.sidetable`)."""
        if self._side is not None:
            self._side.stream.write("".join(json.dumps(r) + "\n" for r in rows))
            self._side.stream.flush()

    def batch(self, batch: SampleBatch) -> None:
        self.write(batch)

    def write(self, batch: SampleBatch) -> None:
        if len(batch) == 0:
            return
        self._pending.append(batch)
        self._pending_rows += len(batch)
        if self._pending_rows >= self.rows or time.monotonic() - self._last_write >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        cols = {n: np.concatenate([b[n] for b in self._pending]) for n in self.signals}
        self._pending, self._pending_rows = [], 0
        record = pa.RecordBatch.from_arrays([_arrow_array(cols[n]) for n in self.signals],
                                            schema=self.schema)
        self._writer.write_batch(record)
        self._out.stream.flush()
        if self._out.error is None:
            self.rows_written += record.num_rows
            self._batches_written += 1
            self._complete = self._out.stream.tell()
        self._last_write = time.monotonic()

    def close(self, complete: bool = True) -> None:
        """Finish the trace and put it in place (see :mod:`phasewatch.formats.outputs`);
        after a failed write, :attr:`failure` says why there is none.  Not
        ``complete`` (an error ended the run): abandoned, as :meth:`discard`."""
        if not complete:
            self.discard()
            return
        try:
            self.flush()
            self._writer.close()
        except BaseException:
            self.discard()
            raise
        self._out.finish()
        if self._side is not None:
            self._side.finish()
            if self._side.error is not None or self._out.error is not None:
                self._side.discard()
                self._out.discard()
                return
            self._side.commit()
        if self._out.error is not None and self.keep_complete and self._batches_written:
            self.kept = self._batches_written if self._out.keep_first(self._complete) else None
            return
        self._out.commit()

    def discard(self) -> None:
        """Abandon the trace: whatever was at its path stays."""
        if self._side is not None:
            self._side.discard()
        self._out.discard()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *rest):
        if exc_type is None:
            self.close()
        else:
            self.discard()


def _arrow_array(column: np.ndarray) -> pa.Array:
    """An Arrow view of a numpy column.  Not ``pa.array``, whose first call
    imports pandas: a quarter of a second of CPU in the middle of a live run."""
    column = np.ascontiguousarray(column)
    return pa.Array.from_buffers(pa.from_numpy_dtype(column.dtype), len(column),
                                 [None, pa.py_buffer(column)])


class TraceReader:
    """Reads a trace file; a :class:`~phasewatch.core.source.Source`."""

    def __init__(self, path: str, warn=None):
        self.path = path
        self.warn = warn or (lambda msg: print(f"phasewatch: warning: {msg}", file=sys.stderr))
        try:
            # Read, not memory-mapped: each record batch is read when it is
            # replayed and freed after, so memory stays flat however long the
            # trace, and a trace larger than the address-space limit replays.
            self._map = pa.OSFile(os.fsencode(path), "r")   # as bytes: any name opens
        except OSError as exc:
            raise UserError(f"cannot open {path}: {exc.strerror or exc}") from None
        self.truncated = False
        self.samples_read = 0
        try:
            self._file = pa.ipc.open_file(self._map)
            schema = self._file.schema
            self.signals = tuple(schema.names)
        except ARROW_ERRORS:
            # No footer, or a damaged one: read it as the stream it also is.
            self._file = None
            schema = self._open_unfinished()
        self.metadata = validate(_metadata_of(schema, path), self.signals, path)
        for field in schema:
            if field.name not in RAW_DTYPES:
                raise UserError(f"{path}: unknown column {field.name!r} in trace")
            want = pa.from_numpy_dtype(RAW_DTYPES[field.name])
            if field.type != want:
                raise UserError(f"{path}: column {field.name!r} is {field.type}, "
                                f"a phasewatch trace stores it as {want}")

    def _open_unfinished(self) -> pa.Schema:
        self._input = self._map
        self._input.seek(len(ARROW_MAGIC) + 2)
        try:
            self._stream = pa.ipc.open_stream(self._input)
            schema = self._stream.schema
            self.signals = tuple(schema.names)
        except ARROW_ERRORS:
            raise UserError(f"{self.path}: not a phasewatch trace "
                            f"(an Arrow file whose schema cannot be read)") from None
        self.truncated = True
        return schema

    def read_only(self, columns) -> None:
        """Read only ``columns`` (those present) from now on: a replay skips
        the bytes of the signals its detector does not use."""
        columns = set(columns)
        keep = [j for j, name in enumerate(self.signals) if name in columns]
        if self._file is not None and len(keep) < len(self.signals):
            self._file = pa.ipc.open_file(self._map, options=pa.ipc.IpcReadOptions(
                included_fields=keep))

    def record_batches(self) -> Iterator[pa.RecordBatch]:
        if self._file is not None:
            for i in range(self._file.num_record_batches):
                try:
                    record = self._file.get_batch(i)
                    record.validate()
                except ARROW_ERRORS as exc:
                    raise UserError(f"{self.path}: record batch {i + 1} of "
                                    f"{self._file.num_record_batches} is damaged "
                                    f"({_reason(exc)}): the trace is corrupt") from None
                if record.num_rows:
                    yield record
            return
        complete, rows, good = 0, 0, self._input.tell()
        while True:
            try:
                record = self._stream.read_next_batch()
                record.validate()
            except StopIteration:
                break
            except ARROW_ERRORS:
                self.warn(f"{self.path} was cut off mid-write: replaying its {complete} "
                          f"complete batches ({rows} samples); "
                          f"{self._input.size() - good} bytes after them are lost")
                return
            complete, rows, good = complete + (record.num_rows > 0), rows + record.num_rows, self._input.tell()
            if record.num_rows:
                yield record
        self.warn(f"{self.path} was not closed (no footer): replaying its {complete} batches")

    def batches(self) -> Iterator[SampleBatch]:
        gathered, rows = [], 0
        for record in self.record_batches():
            gathered.append(record)
            rows += record.num_rows
            if rows >= READ_ROWS:
                yield self._to_batch(gathered)
                gathered, rows = [], 0
        if gathered:
            yield self._to_batch(gathered)

    def _to_batch(self, records: list[pa.RecordBatch]) -> SampleBatch:
        cols = {}
        for j, name in enumerate(records[0].schema.names):
            if any(r.column(j).null_count for r in records):
                raise UserError(f"{self.path}: column {name!r} has empty (null) cells "
                                f"after sample {self.samples_read}")
            parts = [_numpy_view(r.column(j), RAW_DTYPES[name]) for r in records]
            cols[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        batch = SampleBatch(cols)
        bad = first_bad_id(batch)
        if bad:
            row, name, value = bad
            raise UserError(f"{self.path}: sample {self.samples_read + row}: "
                            f"{id_problem(name, value)}")
        self.samples_read += len(batch)
        return batch

    def stats(self) -> dict[str, int]:
        return {"samples_read": self.samples_read, "truncated": int(self.truncated)}

    def close(self) -> None:
        self._map.close()


def _numpy_view(column: pa.Array, dtype: np.dtype) -> np.ndarray:
    """A numpy view of a column.  Not ``to_numpy``, whose first call imports
    pandas: a third of a second of start-up."""
    if column.null_count or column.type != pa.from_numpy_dtype(dtype):
        return column.to_numpy(zero_copy_only=True)
    return np.frombuffer(column.buffers()[1], dtype, len(column), column.offset * dtype.itemsize)


#: What pyarrow raises on bytes that are not the Arrow format it expects
#: (OSError for a footer or message that fails verification).
ARROW_ERRORS = (pa.ArrowException, OSError, ValueError, NotImplementedError, MemoryError)


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _metadata_of(schema: pa.Schema, path: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise UserError(f"{path}: an Arrow file, but not a phasewatch trace (no phasewatch metadata)")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise UserError(f"{path}: the trace's metadata is not valid JSON") from None


def is_arrow(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(len(ARROW_MAGIC)) == ARROW_MAGIC

