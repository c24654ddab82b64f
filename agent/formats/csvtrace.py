"""Plain CSV traces (docs/formats.md): one row per sample, integer cells (decimal, or
hexadecimal with 0x), a header row.

Parsing is pyarrow's streaming CSV reader.  When it rejects the file, the file
is scanned again line by line to name the first bad line and column.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..core.batch import (CSV_COLUMNS, OPTIONAL_CSV_COLUMNS, RAW_DTYPES, SampleBatch, first_bad_id,
                          id_problem)
from ..errors import UserError
from . import metadata as md, schema

BLOCK_BYTES = 8 << 20
#: The longest line read as a sample: a real row is under 300 bytes.  A
#: longer one is refused before the CSV parser gathers it, which would hold
#: several copies of it.
MAX_LINE_BYTES = 1 << 20


class LineTooLong(Exception):
    def __init__(self, line: int):
        self.line = line


class _LineBound(io.RawIOBase):
    """A file read through, failing on a line longer than MAX_LINE_BYTES."""

    def __init__(self, path: str):
        self._f = open(path, "rb")
        self._run = 0           # bytes since the last newline
        self._lines = 1         # the line being read

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        n = len(data)
        if not n:
            return data
        first = data.find(b"\n")
        if first < 0:
            self._run += n
        else:
            if self._run + first > MAX_LINE_BYTES:
                raise LineTooLong(self._lines)
            self._lines += data.count(b"\n")
            self._run = n - 1 - data.rfind(b"\n")
        if self._run > MAX_LINE_BYTES:
            raise LineTooLong(self._lines)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


class CsvReader:
    """A :class:`~phasewatch.core.source.Source` over a raw CSV file."""

    def __init__(self, path: str, base_mhz: float | None = None):
        self.path = path
        self.header = read_header(path)
        self.columns = self.signals = known_columns(self.header)
        self.samples_read = 0
        self._first = None
        self._batches = self._read()
        self._first = next(self._batches, None)
        if self._first is None:
            raise UserError(f"{path}: no samples after the header line")
        base = base_mhz or tsc_rate_mhz(self._first)
        if not base:
            raise UserError(f"{path}: cannot tell the base frequency (the TSC does not advance "
                            f"over the first samples): give it with --base-mhz")
        if base > md.MAX_BASE_MHZ:
            raise UserError(f"{path}: the TSC rate of the first samples, {base:.6g} MHz, is not a "
                            f"base frequency: give it with --base-mhz")
        self.metadata = schema.validate(md.new(base_freq_mhz=base, source_file=path,
                                           signals={c: "csv" for c in self.columns}),
                                    self.columns, path)

    def batches(self) -> Iterator[SampleBatch]:
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        yield from self._batches

    def _read(self) -> Iterator[SampleBatch]:
        types = {c: pa.from_numpy_dtype(RAW_DTYPES[c]) for c in self.columns}
        source = _LineBound(self.path)
        try:
            reader = pacsv.open_csv(
                source,
                read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, skip_rows=1,
                                               column_names=list(self.header)),
                convert_options=pacsv.ConvertOptions(column_types=types,
                                                     include_columns=list(self.columns)))
            for record in reader:
                if any(col.null_count for col in record.columns):
                    self._fail()
                batch = SampleBatch({c: record.column(c).to_numpy() for c in self.columns})
                bad = first_bad_id(batch)
                if bad:
                    row, name, value = bad
                    raise UserError(f"{self.path}:{self.samples_read + row + 2}: "
                                    f"{id_problem(name, value)}")
                self.samples_read += len(batch)
                yield batch
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            self._fail()
        except LineTooLong as exc:
            raise UserError(f"{self.path}:{exc.line}: a line longer than {MAX_LINE_BYTES:,} "
                            f"bytes: not a sample row") from None
        finally:
            source.close()

    def _fail(self):
        raise UserError(first_bad_cell(self.path, self.columns)) from None

    def stats(self) -> dict[str, int]:
        return {"samples_read": self.samples_read}

    def close(self) -> None:
        self._batches.close()


def read_header(path: str) -> tuple[str, ...]:
    """The CSV's column names, stripped of spaces (and of a byte-order mark),
    checked against docs/formats.md.  Unnamed and repeated unknown columns get
    placeholder names, so that every name is unique."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), None)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a trace: neither the phasewatch format nor text CSV") from None
    except csv.Error:
        raise UserError(f"{path}:1: the header row is not CSV (or a cell is longer than "
                        f"{csv.field_size_limit()} characters)") from None
    except OSError as exc:
        raise UserError(f"cannot open {path}: {exc.strerror}") from None
    if not header:
        raise UserError(f"{path}: empty file: a CSV trace needs a header row "
                        f"({','.join(CSV_COLUMNS)})")
    names = [h.strip() for h in header]
    known = set(CSV_COLUMNS) | set(OPTIONAL_CSV_COLUMNS)
    twice = sorted({n for n in names if n in known and names.count(n) > 1})
    if twice:
        raise UserError(f"{path}:1: column(s) {', '.join(twice)} named more than once")
    names = [n if n in known else f"_unused_{i}" for i, n in enumerate(names)]
    missing = [c for c in CSV_COLUMNS if c not in names]
    if missing:
        raise UserError(f"{path}:1: missing column(s) {', '.join(missing)} "
                        f"(the header must name {','.join(CSV_COLUMNS)})")
    return tuple(names)


def known_columns(header) -> tuple[str, ...]:
    """The sample columns of a header, in trace order."""
    return tuple(c for c in RAW_DTYPES if c in set(header))


def first_bad_cell(path: str, columns) -> str:
    """A one-line description of the first line of ``path`` that does not parse."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        rows = csv.reader(f)
        try:
            header = [h.strip() for h in next(rows)]
            wanted = [(header.index(c), c) for c in columns]
            for row in rows:
                line = rows.line_num
                if len(row) != len(header):
                    return f"{path}:{line}: expected {len(header)} cells, found {len(row)}"
                for i, name in wanted:
                    problem = _cell_problem(row[i].strip(), RAW_DTYPES[name])
                    if problem:
                        return f"{path}:{line}: column {name!r}: {problem}"
        except csv.Error as exc:
            if "field limit" in str(exc):
                return (f"{path}:{rows.line_num}: a cell longer than {csv.field_size_limit()} "
                        f"characters: not a sample")
            return f"{path}:{rows.line_num}: not CSV: {exc}"
    return f"{path}: cannot be read as CSV"


def _cell_problem(text: str, dtype: np.dtype) -> str | None:
    if text == "":
        return "empty cell"
    try:
        value = int(text, 16 if text[:2].lower() == "0x" else 10)
    except ValueError:
        return f"{text[:40]!r} is not an integer"
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        return f"{value} is outside {info.min}..{info.max}"
    return None


def tsc_rate_mhz(batch: SampleBatch) -> float | None:
    """The TSC rate over the first CPU's samples in ``batch``, in MHz."""
    if "tsc" not in batch or len(batch) < 2:
        return None
    rows = np.flatnonzero(batch["cpu"] == batch["cpu"][0])
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    dt = int(batch["t_ns"][last]) - int(batch["t_ns"][first])
    dtsc = int(batch["tsc"][last]) - int(batch["tsc"][first])
    if dt <= 0 or dtsc <= 0:
        return None
    return dtsc / dt * 1e3


def looks_like_csv(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096)
    try:
        # A character cut at the end of the 4096 bytes is not an error.
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    first = next(itertools.chain(text.splitlines(), [""]))
    return "," in first or first.strip() in CSV_COLUMNS

