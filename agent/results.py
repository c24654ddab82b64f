"""Sinks for classified intervals: JSON Lines, and the per-phase summary.

Phase quality is the thesis's: the mean over phases of the coefficient of
variation of CPI across each phase's intervals, a phase of one interval
counting as the whole run's CoV.  Lower is better; the whole run's CoV is the
score of putting everything in one phase.
"""

from __future__ import annotations

import json
import math
from typing import IO

import numpy as np

from .pipeline import Intervals

JSON_KEYS = ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
             "distance", "phase", "new_phase")


class JsonLinesSink:
    """One JSON object per complete interval, with exactly the keys of docs/formats.md."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def write(self, iv: Intervals) -> None:
        if iv.partial or len(iv) == 0:
            return
        dist = [None if math.isnan(d) else round(d, 6) for d in iv.distance.tolist()]
        rows = zip(iv.index.tolist(), iv.t_start_ns.tolist(), iv.t_end_ns.tolist(),
                   iv.instructions.tolist(), iv.cycles.tolist(), iv.samples.tolist(),
                   dist, iv.phase.tolist(), iv.new_phase.tolist())
        self.stream.write("".join(json.dumps(dict(zip(JSON_KEYS, r))) + "\n" for r in rows))

    def close(self) -> None:
        self.stream.flush()


class PhaseSummary:
    """Per-phase totals, kept as sums so that memory stays bounded."""

    FIELDS = ("intervals", "duration_ns", "instructions", "cycles", "cpi_n", "cpi_sum",
              "cpi_sq", "volt_n", "volt_sum", "pfreq_n", "pfreq_sum")

    def __init__(self, keep_phases: bool = False):
        self.sums = np.zeros((0, len(self.FIELDS)))
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
        if n_phases > len(self.sums):
            self.sums = np.vstack([self.sums, np.zeros((n_phases - len(self.sums), len(self.FIELDS)))])
        cpi = iv.cpi
        ok = ~np.isnan(cpi)
        v_ok, f_ok = ~np.isnan(iv.voltage_mv), ~np.isnan(iv.pfreq_mhz)
        cols = np.column_stack([
            np.ones(len(iv)), iv.t_end_ns - iv.t_start_ns, iv.instructions, iv.cycles,
            ok, np.where(ok, cpi, 0), np.where(ok, cpi * cpi, 0),
            v_ok, np.where(v_ok, iv.voltage_mv, 0), f_ok, np.where(f_ok, iv.pfreq_mhz, 0)])
        np.add.at(self.sums, iv.phase, cols)
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
        rows = []
        for p, s in enumerate(self.sums):
            rows.append({
                "phase": p,
                "intervals": int(s[f["intervals"]]),
                "time_share": s[f["duration_ns"]] / total_time,
                "cpi": _mean(s[f["cpi_sum"]], s[f["cpi_n"]]),
                "cpi_cov": _cov(s[f["cpi_sum"]], s[f["cpi_sq"]], s[f["cpi_n"]]),
                "voltage_mv": _mean(s[f["volt_sum"]], s[f["volt_n"]]),
                "pfreq_mhz": _mean(s[f["pfreq_sum"]], s[f["pfreq_n"]]),
            })
        return rows

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
