"""Sinks for classified intervals: the results file (JSON Lines or CSV), and
the per-phase summary.

Phase quality is the thesis's: the mean over phases of the coefficient of
variation of CPI across each phase's intervals, a phase of one interval
counting as the whole run's CoV.  Lower is better; the whole run's CoV is the
score of putting everything in one phase.
"""

from __future__ import annotations

import io
import json
import math
from typing import IO, TYPE_CHECKING

import numpy as np

from ..core.classify import NO_DATA, TENTATIVE
from ..core.pipeline import Intervals, PipelineStats
from ..core.source import Sink
from . import prediction_text
from .outputs import Output, open_output

if TYPE_CHECKING:
    from ..core.source import Classified

#: The keys of the classification, then of the prediction (core.prediction).
INTERVAL_KEYS = ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
                 "distance", "phase", "new_phase", "tentative", "no_data")
PREDICTION_KEYS = ("predicted_next", "predicted_after_change", "expected_remaining_intervals",
                   "expected_remaining_s", "confidence")
#: ``confidence`` is an object of these keys (in CSV, one column each: ``confidence.next``, ...).
CONFIDENCE_KEYS = ("next", "after_change", "remaining")
JSON_KEYS = INTERVAL_KEYS + PREDICTION_KEYS
CSV_KEYS = INTERVAL_KEYS + PREDICTION_KEYS[:-1] + tuple(f"confidence.{k}" for k in CONFIDENCE_KEYS)
_TEXT = ("instructions", "cycles", "distance", "new_phase", "tentative", "no_data")
#: One interval's line, as ``json.dumps`` writes its dict: integers, then the
#: distance and the flags as JSON text, then the prediction's piece of text
#: (formats.prediction_text), between the separators that follow.
_JSON_LINE = ("{" + ", ".join(f'"{key}": %{"s" if key in _TEXT else "d"}' for key in INTERVAL_KEYS)
              + "%s}\n")
_JSON_SEPARATORS = ([f', "{key}": ' for key in PREDICTION_KEYS[:-1]]
                    + [', "confidence": {' + f'"{CONFIDENCE_KEYS[0]}": ']
                    + [f', "{k}": ' for k in CONFIDENCE_KEYS[1:]] + ["}"])
_CSV_LINE = ",".join("%s" if key in _TEXT else "%d" for key in INTERVAL_KEYS) + "%s\n"
_CSV_SEPARATORS = [","] * (len(CSV_KEYS) - len(INTERVAL_KEYS)) + [""]


def _json_number(x: float) -> str:
    """A distance rounded to 6 places as ``json.dumps`` spells it; NaN, no distance, null."""
    if x != x:
        return "null"
    return repr(round(x, 6)) if math.isfinite(x) else json.dumps(x)


def _csv_number(x: float) -> str:
    """The same as CSV: the value as Python writes it, nothing for no distance."""
    return "" if x != x else repr(round(x, 6))


def _counts(counts: np.ndarray, samples: np.ndarray, missing: str) -> list[str]:
    """Counts as text; ``missing`` for a count of 0 over samples: a counter
    the host does not count (a CPU that was sampled ran cycles)."""
    return [missing if n == 0 and k else str(n)
            for n, k in zip(counts.tolist(), samples.tolist())]


def _rows(iv: Intervals, number, nothing: str, separators: list[str]):
    """Each interval's values, in :data:`INTERVAL_KEYS` order, the counts,
    the distance and ``new_phase`` as text (``nothing`` for a count not
    taken), then the prediction's piece of text (its values between
    ``separators``; ``nothing`` for each where there is none)."""
    distance = [number(d) for d in iv.distance.tolist()]
    status = iv.statuses
    new, tentative, no_data = ([("false", "true")[b] for b in flags.tolist()]
                               for flags in (iv.new_phase, status == TENTATIVE, status == NO_DATA))
    if iv.prediction is None:
        predicted = [nothing.join(separators)] * len(iv)
    else:
        predicted = prediction_text.texts(iv.prediction, separators, nothing, number)
    return zip(iv.index.tolist(), iv.t_start_ns.tolist(), iv.t_end_ns.tolist(),
               _counts(iv.instructions, iv.samples, nothing),
               _counts(iv.cycles, iv.samples, nothing), iv.samples.tolist(),
               distance, iv.phase.tolist(), new, tentative, no_data, predicted)


def json_lines(iv: Intervals) -> str:
    """One JSON object a line, byte for byte what ``json.dumps`` writes for
    each interval's dict."""
    return "".join([_JSON_LINE % row for row in _rows(iv, _json_number, "null", _JSON_SEPARATORS)])


def csv_lines(iv: Intervals) -> str:
    """The same values as CSV rows (no distance, no prediction, a count not taken: empty;
    booleans true/false)."""
    return "".join([_CSV_LINE % row for row in _rows(iv, _csv_number, "", _CSV_SEPARATORS)])


class ResultsSink(Sink):
    """The results, one per complete interval: JSON Lines with exactly the
    keys of docs/formats.md, or CSV (a header row of the same keys) where
    ``csv``.  Written to ``stream``; :meth:`open` writes a file through the
    one output helper, put in place only when the run ends well."""

    def __init__(self, stream: IO[str] | IO[bytes], csv: bool = False, output: Output | None = None):
        self.stream = stream
        self.csv = csv
        self.output = output
        if csv:
            self._put(",".join(CSV_KEYS) + "\n")

    @classmethod
    def open(cls, path: str, inputs=()) -> "ResultsSink":
        """``--output PATH``: CSV for a name ending in ``.csv``, JSON Lines otherwise."""
        out = open_output(path, inputs=inputs, binary=True)
        return cls(out.stream, csv=path.lower().endswith(".csv"), output=out)

    @property
    def failure(self) -> str | None:
        return self.output.failure if self.output else None

    def classified(self, c: Classified) -> None:
        self.write(c.intervals)

    def write(self, iv: Intervals) -> None:
        if iv.partial or len(iv) == 0:
            return
        self._put(csv_lines(iv) if self.csv else json_lines(iv))

    def _put(self, text: str) -> None:
        self.stream.write(text if isinstance(self.stream, io.TextIOBase) else text.encode())

    def close(self, complete: bool = True) -> None:
        if self.output is None:
            self.stream.flush()
        elif complete:
            self.output.close()
        else:
            self.output.discard()


class PhaseSummary(Sink):
    """Per-phase totals, kept as sums so that memory stays bounded."""

    FIELDS = ("intervals", "duration_ns", "instructions", "cycles", "cpi_n", "cpi_sum",
              "cpi_sq", "volt_n", "volt_sum", "pfreq_n", "pfreq_sum")

    def __init__(self, keep_phases: bool = False):
        self.sums = np.zeros((0, len(self.FIELDS)))
        self.n_phases = 0
        self.total = np.zeros(len(self.FIELDS))
        self.partial: Intervals | None = None
        self.phases: list[np.ndarray] | None = [] if keep_phases else None

    def classified(self, c: Classified) -> None:
        self.write(c.intervals)

    def write(self, iv: Intervals) -> None:
        if iv.partial:
            self.partial = iv if len(iv) else None
            return
        if self.phases is not None:
            self.phases.append(iv.phase.copy())
        iv = iv.labelled()
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
            if not s[f["intervals"]]:
                continue        # an id of a known phase this run never visited
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


def summary_dict(summary: PhaseSummary, stats: PipelineStats, ari) -> dict:
    tail = summary.partial
    return {
        "samples": stats.samples,
        "intervals": summary.n_intervals,
        "phases": summary.table(),
        "quality_cpi_cov": summary.quality(),
        "run_cpi_cov": summary.run_cov(),
        "threshold": stats.threshold,
        "dropped_deltas": stats.dropped,
        "implausible_values": stats.implausible,
        "partial_interval": None if tail is None else {
            "samples": int(tail.samples[0]), "instructions": counted(tail, 0)},
        "ari": ari,
    }


def counted(iv: Intervals, k: int) -> int | None:
    """Interval ``k``'s instructions; None where they were not counted (0
    over samples, as in the results)."""
    n, samples = int(iv.instructions[k]), int(iv.samples[k])
    return None if n == 0 and samples else n


def finite(value):
    """NaN becomes null, as JSON has no NaN."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
