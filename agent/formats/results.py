"""Sinks for classified intervals: JSON Lines, and the per-phase summary.

Phase quality is the thesis's: the mean over phases of the coefficient of
variation of CPI across each phase's intervals, a phase of one interval
counting as the whole run's CoV.  Lower is better; the whole run's CoV is the
score of putting everything in one phase.
"""

from __future__ import annotations

import io
import json
import math
from typing import IO

import numpy as np

from ..core.kernels import kernel
from ..core.pipeline import Intervals, Pipeline

JSON_KEYS = ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
             "distance", "phase", "new_phase")


class JsonLinesSink:
    """One JSON object per complete interval, with exactly the keys of docs/formats.md.

    The lines are byte for byte what ``json.dumps`` gives for each interval's
    dict (distance rounded to 6 places, NaN as null), written by a compiled
    kernel a batch of intervals at a time: under a microsecond an interval,
    against 12 µs for one ``json.dumps`` each."""

    def __init__(self, stream: IO[str] | IO[bytes]):
        self.stream = stream
        self.text = isinstance(stream, io.TextIOBase)

    def write(self, iv: Intervals) -> None:
        if iv.partial or len(iv) == 0:
            return
        data = json_lines(iv)
        raw = getattr(self.stream, "buffer", None)
        if not self.text:
            self.stream.write(data)
        elif raw is None:
            self.stream.write(str(data, "ascii"))
        else:
            self.stream.flush()
            raw.write(data)

    def close(self) -> None:
        self.stream.flush()


class CsvSink:
    """The same values as :class:`JsonLinesSink`, as CSV: a header row of
    :data:`JSON_KEYS`, then a row per complete interval (no distance: empty;
    ``new_phase`` as true/false, as in the JSON)."""

    def __init__(self, stream: IO[str] | IO[bytes]):
        self.stream = stream
        self._put(",".join(JSON_KEYS) + "\n")

    def write(self, iv: Intervals) -> None:
        if iv.partial or len(iv) == 0:
            return
        rows = (json.loads(line) for line in str(json_lines(iv), "ascii").splitlines())
        self._put("".join(",".join(_csv_cell(row[k]) for k in JSON_KEYS) + "\n" for row in rows))

    def _put(self, text: str) -> None:
        self.stream.write(text if isinstance(self.stream, io.TextIOBase) else text.encode())

    def close(self) -> None:
        self.stream.flush()


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def results_sink(path: str, stream: IO[str] | IO[bytes]):
    """The per-interval results writer for ``--output PATH``: CSV for a name
    ending in ``.csv``, JSON Lines otherwise."""
    return CsvSink(stream) if path.lower().endswith(".csv") else JsonLinesSink(stream)


def _literals() -> tuple[np.ndarray, np.ndarray]:
    """The text before each value (``{"index": ``, ``, "t_start_ns": ``, ...) and
    after the last, end to end, with their offsets."""
    pieces = [("{" if i == 0 else ", ") + json.dumps(k) + ": " for i, k in enumerate(JSON_KEYS)]
    pieces.append("}\n")
    data = np.frombuffer("".join(pieces).encode(), np.uint8)
    return data, np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)


_LITERALS, _LITERAL_OFFSETS = _literals()
#: Distances from 1000 on, negative ones and those within rounding error of a
#: tie at the 6th place are left to Python's round(); none arise in practice.
_FAST_LIMIT = 1000.0
_FIXED, _NULL, _GIVEN = 0, 1, 2
_WORDS = np.frombuffer(b"nulltruefalse", np.uint8)
#: The widest line: the literals, 7 integers of up to 20 characters, a distance, "false".
_LINE_BYTES = len(_LITERALS) + 7 * 20 + 32 + 5


def json_lines(iv: Intervals) -> memoryview:
    """The JSON Lines text (ASCII) of ``iv``'s intervals."""
    n = len(iv)
    columns = (iv.index, iv.t_start_ns, iv.t_end_ns, iv.instructions, iv.cycles, iv.samples,
               iv.phase)
    if any(c.dtype.kind == "u" and c.max() > np.iinfo(np.int64).max for c in columns):
        return memoryview(_dumps_per_interval(iv).encode())
    ints = np.stack([np.asarray(c, np.int64) for c in columns])
    micro, mode, given, given_offsets = _distance_codes(iv.distance)
    out = np.empty(n * _LINE_BYTES + len(given), np.uint8)
    size = _format_kernel(ints, micro, mode, given, given_offsets,
                          np.ascontiguousarray(iv.new_phase, np.bool_),
                          _LITERALS, _LITERAL_OFFSETS, out)
    return memoryview(out[:size])


def _dumps_per_interval(iv: Intervals) -> str:
    """The same text, one ``json.dumps`` per interval (for counts beyond int64)."""
    dist = [None if math.isnan(d) else round(d, 6) for d in iv.distance.tolist()]
    rows = zip(iv.index.tolist(), iv.t_start_ns.tolist(), iv.t_end_ns.tolist(),
               iv.instructions.tolist(), iv.cycles.tolist(), iv.samples.tolist(),
               dist, iv.phase.tolist(), iv.new_phase.tolist())
    return "".join(json.dumps(dict(zip(JSON_KEYS, r))) + "\n" for r in rows)


def _distance_codes(d: np.ndarray):
    """Each distance as k = round(d, 6)·1e6 (``_FIXED``), ``_NULL`` for NaN, or
    Python's own text (``_GIVEN``) where the column arithmetic might differ.

    ``round(x, 6)`` is the double nearest to k/1e6, with k the correctly
    rounded x·1e6, and its repr is k's digits with the point put back and
    trailing zeros dropped (as ``1.2e-05`` below 1e-4).  np.rint(x·1e6) finds
    the same k except within a rounding error of a tie."""
    nan = np.isnan(d)
    with np.errstate(invalid="ignore"):
        scaled = np.where(nan, 0.0, d) * 1e6
        micro = np.rint(scaled).astype(np.int64)
        given = ~nan & ((np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6)
                        | np.signbit(d) | ~(np.abs(d) < _FAST_LIMIT))
    mode = np.where(nan, _NULL, np.where(given, _GIVEN, _FIXED)).astype(np.int8)
    texts = [json.dumps(round(x, 6)).encode() for x in d[given].tolist()]
    offsets = np.zeros(len(d) + 1, np.int64)
    offsets[1:][given] = [len(t) for t in texts]
    return micro, mode, np.frombuffer(b"".join(texts), np.uint8), np.cumsum(offsets)


@kernel(cache=True, nogil=True, inline="always")
def _put_int(v, out, pos):
    """Decimal digits of ``v`` at ``out[pos:]``; the position after them."""
    if v < 0:
        out[pos] = 45  # '-'
        pos += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)
    else:
        u = np.uint64(v)
    return _put_unsigned(u, out, pos)


@kernel(cache=True, nogil=True, inline="always")
def _put_unsigned(u, out, pos):
    ten = np.uint64(10)
    end = pos
    while True:  # least significant digit first, then reversed
        q = u // ten
        out[end] = np.uint8(48 + (u - q * ten))
        end += 1
        u = q
        if u == 0:
            break
    i, j = pos, end - 1
    while i < j:
        out[i], out[j] = out[j], out[i]
        i += 1
        j -= 1
    return end


@kernel(cache=True, nogil=True, inline="always")
def _put_bytes(src, a, b, out, pos):
    for i in range(a, b):
        out[pos] = src[i]
        pos += 1
    return pos


@kernel(cache=True, nogil=True, inline="always")
def _put_micro(k, out, pos):
    """repr(k / 1e6) for 0 <= k < 1e9: ``0.25``, ``1.0``, ``5e-06``, ``1.2e-05``."""
    if 0 < k < 100:
        if k < 10:
            pos = _put_int(k, out, pos)
            exponent = 6
        else:
            pos = _put_int(k // 10, out, pos)
            if k % 10:
                out[pos] = 46  # '.'
                pos = _put_int(k % 10, out, pos + 1)
            exponent = 5
        out[pos] = 101  # 'e'
        out[pos + 1] = 45  # '-'
        out[pos + 2] = 48
        out[pos + 3] = 48 + exponent
        return pos + 4
    pos = _put_int(k // 1_000_000, out, pos)
    out[pos] = 46
    pos += 1
    frac = k % 1_000_000
    if frac == 0:
        out[pos] = 48
        return pos + 1
    width = 6
    while frac % 10 == 0:
        frac //= 10
        width -= 1
    for i in range(width - 1, -1, -1):
        out[pos + i] = 48 + frac % 10
        frac //= 10
    return pos + width


@kernel(cache=True, nogil=True)
def _format_kernel(ints, micro, mode, given, given_offsets, new_phase, lits, lit_offsets, out):
    """Write every interval's line to ``out``; the number of bytes written.
    ``ints`` holds index, t_start_ns, t_end_ns, instructions, cycles, samples, phase."""
    pos = 0
    for i in range(ints.shape[1]):
        for key in range(9):
            pos = _put_bytes(lits, lit_offsets[key], lit_offsets[key + 1], out, pos)
            if key < 6:
                pos = _put_int(ints[key, i], out, pos)
            elif key == 6:
                if mode[i] == 0:
                    pos = _put_micro(micro[i], out, pos)
                elif mode[i] == 1:
                    pos = _put_bytes(_WORDS, 0, 4, out, pos)  # null
                else:
                    pos = _put_bytes(given, given_offsets[i], given_offsets[i + 1], out, pos)
            elif key == 7:
                pos = _put_int(ints[6, i], out, pos)
            elif new_phase[i]:
                pos = _put_bytes(_WORDS, 4, 8, out, pos)  # true
            else:
                pos = _put_bytes(_WORDS, 8, 13, out, pos)  # false
        pos = _put_bytes(lits, lit_offsets[9], lit_offsets[10], out, pos)
    return pos


class PhaseSummary:
    """Per-phase totals, kept as sums so that memory stays bounded."""

    FIELDS = ("intervals", "duration_ns", "instructions", "cycles", "cpi_n", "cpi_sum",
              "cpi_sq", "volt_n", "volt_sum", "pfreq_n", "pfreq_sum")

    def __init__(self, keep_phases: bool = False):
        self.sums = np.zeros((0, len(self.FIELDS)))
        self.n_phases = 0
        self.total = np.zeros(len(self.FIELDS))
        self.partial: Intervals | None = None
        self.phases: list[np.ndarray] | None = [] if keep_phases else None

    def write(self, iv: Intervals) -> None:
        if iv.partial:
            self.partial = iv if len(iv) else None
            return
        if len(iv) == 0:
            return
        n_phases = int(iv.phase.max()) + 1
        if n_phases > len(self.sums):       # grown geometrically: one phase per interval is possible
            size = max(n_phases, 2 * len(self.sums))
            self.sums = np.vstack([self.sums, np.zeros((size - len(self.sums), len(self.FIELDS)))])
        self.n_phases = max(self.n_phases, n_phases)
        cpi = iv.cpi
        ok = ~np.isnan(cpi)
        v_ok, f_ok = ~np.isnan(iv.voltage_mv), ~np.isnan(iv.pfreq_mhz)
        cols = np.column_stack([
            np.ones(len(iv)), iv.t_end_ns - iv.t_start_ns, iv.instructions, iv.cycles,
            ok, np.where(ok, cpi, 0), np.where(ok, cpi * cpi, 0),
            v_ok, np.where(v_ok, iv.voltage_mv, 0), f_ok, np.where(f_ok, iv.pfreq_mhz, 0)])
        for j in range(cols.shape[1]):      # np.add.at, several times faster
            self.sums[:n_phases, j] += np.bincount(iv.phase, cols[:, j], n_phases)
        self.total += cols.sum(axis=0)
        if self.phases is not None:
            self.phases.append(iv.phase.copy())

    def close(self) -> None:
        pass

    @property
    def n_intervals(self) -> int:
        return int(self.total[0])

    def phase_labels(self) -> np.ndarray:
        return np.concatenate(self.phases) if self.phases else np.zeros(0, np.int64)

    def table(self) -> list[dict]:
        """One row per phase: intervals, share of run time, CPI, voltage, frequency."""
        f = {n: i for i, n in enumerate(self.FIELDS)}
        total_time = self.total[f["duration_ns"]] or 1.0
        total_instructions = self.total[f["instructions"]]
        rows = []
        for p, s in enumerate(self.sums[:self.n_phases]):
            rows.append({
                "phase": p,
                "intervals": int(s[f["intervals"]]),
                "time_share": s[f["duration_ns"]] / total_time,
                "instruction_share": (s[f["instructions"]] / total_instructions
                                      if total_instructions else None),
                "cpi": _mean(s[f["cpi_sum"]], s[f["cpi_n"]]),
                "cpi_cov": _cov(s[f["cpi_sum"]], s[f["cpi_sq"]], s[f["cpi_n"]]),
                "voltage_mv": _mean(s[f["volt_sum"]], s[f["volt_n"]]),
                "pfreq_mhz": _mean(s[f["pfreq_sum"]], s[f["pfreq_n"]]),
            })
        return rows

    @property
    def timed(self) -> bool:
        """Whether the intervals have durations (a .bb file's have only
        instruction counts: its phases' shares are of instructions)."""
        return bool(self.total[self.FIELDS.index("duration_ns")])

    def run_cov(self) -> float:
        f = {n: i for i, n in enumerate(self.FIELDS)}
        t = self.total
        return _cov(t[f["cpi_sum"]], t[f["cpi_sq"]], t[f["cpi_n"]])

    def quality(self) -> float:
        """Mean per-phase CoV of CPI (NaN where CPI is unknown)."""
        rows = self.table()
        run = self.run_cov()
        covs = [run if r["intervals"] == 1 else r["cpi_cov"] for r in rows]
        covs = [c for c in covs if not math.isnan(c)]
        return float(np.mean(covs)) if covs else math.nan


def _mean(total: float, n: float) -> float:
    return total / n if n else math.nan


def _cov(total: float, squares: float, n: float) -> float:
    if not n:
        return math.nan
    mean = total / n
    var = max(squares / n - mean * mean, 0.0)
    return math.sqrt(var) / mean if mean else math.nan


def adjusted_rand_index(truth, predicted) -> float:
    from sklearn.metrics import adjusted_rand_score
    return float(adjusted_rand_score(truth, predicted))


def summary_dict(summary: PhaseSummary, pipeline: Pipeline, ari) -> dict:
    tail = summary.partial
    return {
        "samples": pipeline.samples,
        "intervals": summary.n_intervals,
        "phases": summary.table(),
        "quality_cpi_cov": summary.quality(),
        "run_cpi_cov": summary.run_cov(),
        "threshold": pipeline.threshold,
        "dropped_deltas": pipeline.dropped(),
        "implausible_values": pipeline.implausible(),
        "partial_interval": None if tail is None else {
            "samples": int(tail.samples[0]), "instructions": int(tail.instructions[0])},
        "ari": ari,
    }


def finite(value):
    """NaN becomes null, as JSON has no NaN."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
