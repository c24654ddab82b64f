"""The data of the phase picture (the thesis's figure 7.3), drawing-library free.

Per interval: each profile segment the detector used (a normalised histogram),
the distance to the phase taken, the threshold it was judged against, and the
phase.  A long run has more intervals than a page or an image has pixels, so
intervals are gathered into at most ``max_columns`` columns of ``per_column``
consecutive intervals each: a column shows the mean of its histograms, the
mean distance and threshold, and the phase most of its intervals are in.

Profiles arrive a block at a time from the pipeline and are summed into the
columns as they come, so memory is bounded by the column count, not the run
length; the per-interval scalars (phase, distance, times) are kept whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.classify import threshold_history
from ..core.intervals import SEGMENTS
from ..core.params import Params
from ..core.pipeline import Intervals
from ..core.predict import NONE, PhasePredictor
from ..core.source import Sink

MAX_COLUMNS = 2000
#: The code signature's heatmap shows its hottest entries only (of 1024):
#: rows a reader can tell apart and label.
TOP_CODE_ENTRIES = 40

#: How each segment is titled and labelled, and whether its bins are ordered
#: values (with a unit) or unordered code-signature entries.
SEGMENT_TITLES = {
    "voltage": ("core voltage", "mV"),
    "pfreq": ("productive frequency", "MHz"),
    "ip": ("code signature", "entry"),
    "freq": ("clock (APERF/MPERF)", "MHz"),
    "c0": ("busy share (C0 residency)", "share"),
}


@dataclass
class Heatmap:
    segment: str
    title: str
    unit: str
    centres: np.ndarray      # y position of each bin (value, or entry number)
    values: np.ndarray       # float [columns, bins]: the columns' mean histograms
    labels: list[str] | None = None     # a name per row, where bins are code entries
    shown: str = ""                      # which bins are drawn, where not all are


@dataclass
class PhaseFigure:
    n_intervals: int
    per_column: int
    first_interval: np.ndarray   # int64 [columns]
    t_start_s: np.ndarray        # seconds from the first interval's start
    heatmaps: list[Heatmap]
    distance: np.ndarray         # NaN where a column's intervals have none
    threshold: np.ndarray
    phase: np.ndarray            # int64 [columns]
    truth: np.ndarray | None = None          # int64 [columns], codes of truth_names
    truth_names: list[str] | None = None
    ari: float | None = None
    #: The phase predicted for each column's intervals on the interval before,
    #: and the share of intervals so predicted right.
    predicted: np.ndarray | None = None
    prediction_accuracy: float | None = None

    @property
    def columns(self) -> int:
        return len(self.first_interval)

    @property
    def aggregated(self) -> bool:
        return self.per_column > 1


class ColumnSums:
    """Sums of consecutive rows into at most ``max_columns`` columns; when the
    columns are full, neighbours merge and each column takes twice the rows."""

    def __init__(self, width: int, max_columns: int = MAX_COLUMNS):
        self.max_columns = max_columns - max_columns % 2
        self.sums = np.zeros((self.max_columns, width))
        self.per = 1
        self.rows = 0

    def add(self, rows: np.ndarray) -> None:
        while len(rows):
            room = self.max_columns * self.per - self.rows
            if room == 0:
                self._merge()
                continue
            take = rows[:room]
            cols = (self.rows + np.arange(len(take))) // self.per
            firsts = np.flatnonzero(np.diff(cols, prepend=-1))
            self.sums[cols[firsts]] += np.add.reduceat(take, firsts, axis=0)
            self.rows += len(take)
            rows = rows[room:]

    def _merge(self) -> None:
        half = self.max_columns // 2
        self.sums[:half] = self.sums[0::2] + self.sums[1::2]
        self.sums[half:] = 0.0
        self.per *= 2

    @property
    def columns(self) -> int:
        return -(-self.rows // self.per)

    def result(self) -> np.ndarray:
        return self.sums[:self.columns]


class FigureRecorder(Sink):
    """A sink that gathers what the figure shows from the intervals'
    profiles (:meth:`of` has the pipeline keep them)."""

    def __init__(self, params: Params, bounds: np.ndarray, used: np.ndarray,
                 max_columns: int = MAX_COLUMNS):
        self.params = params
        self.bounds = bounds
        self.used = used
        width = int(bounds[-1])
        self.segments = SEGMENTS[:len(bounds) - 1]
        self._profiles = ColumnSums(width + len(self.segments), max_columns)
        self._scalars: list[Intervals] = []
        self._predicted: list[np.ndarray | None] = []    # each block's predicted_next, if made
        #: Labels code-signature entries (e.g. :meth:`.code_entries.CodeEntries.names`).
        self.name_entries = lambda entries: {}

    @classmethod
    def of(cls, pipeline) -> "FigureRecorder":
        """The recorder of a pipeline's intervals, which keep their profiles from now on."""
        pipeline.keep_profiles()
        return cls(pipeline.params, pipeline.layout.bounds, pipeline.used)

    def classified(self, c) -> None:
        self.add(c.intervals)

    def add(self, intervals: Intervals) -> None:
        """Complete intervals, with their profiles."""
        if len(intervals) == 0 or intervals.partial:
            return
        has = (intervals.segment_samples > 0).astype(np.float64)
        self._profiles.add(np.hstack([intervals.profiles, has]))
        self._scalars.append(replace(intervals, profiles=None, segment_samples=None))
        pr = intervals.prediction
        self._predicted.append(pr.next_phase.copy() if pr is not None else None)

    @property
    def n_intervals(self) -> int:
        return sum(len(iv) for iv in self._scalars)

    def intervals(self) -> Intervals:
        """Every complete interval seen, as one set of columns."""
        return Intervals.join(self._scalars)

    def figure(self, phase: np.ndarray, distance: np.ndarray, new_phase: np.ndarray,
               status: np.ndarray | None = None) -> PhaseFigure:
        """The figure, with the phase, distance and decision of each interval:
        the pipeline's own, or a recorded run's results drawn over its trace."""
        n = self.n_intervals
        if n == 0:
            raise ValueError("no complete interval")
        t_start = self.intervals().t_start_ns
        threshold = threshold_history(distance, new_phase, self.params.detector, status)
        per = self._profiles.per
        starts = np.arange(0, n, per)
        made = (np.concatenate(self._predicted)
                if self._predicted and all(p is not None for p in self._predicted) else None)
        predicted, accuracy = predicted_phases(np.asarray(phase, np.int64), made)
        return PhaseFigure(
            n_intervals=n, per_column=per, first_interval=starts,
            t_start_s=(t_start[starts] - t_start[0]) / 1e9,
            heatmaps=self._heatmaps(),
            distance=column_means(distance, per), threshold=column_means(threshold, per),
            phase=column_modes(phase, per), predicted=column_modes(predicted, per),
            prediction_accuracy=accuracy)

    def _heatmaps(self) -> list[Heatmap]:
        sums = self._profiles.result()
        width = int(self.bounds[-1])
        maps = []
        for s, segment in enumerate(self.segments):
            members = sums[:, width + s]
            if not self.used[s] or not members.any():
                continue
            lo, hi = int(self.bounds[s]), int(self.bounds[s + 1])
            with np.errstate(invalid="ignore", divide="ignore"):
                values = sums[:, lo:hi] / members[:, None]
            if segment != "ip" and _the_same_throughout(values):
                continue        # a fixed clock, a CPU never idle: nothing to see
            title, unit = SEGMENT_TITLES.get(segment, (segment, "entry"))
            heat = Heatmap(segment, title, unit, self._centres(segment, hi - lo), values)
            maps.append(self._hottest(heat) if segment == "ip" else heat)
        return maps

    def _hottest(self, heat: Heatmap) -> Heatmap:
        """The code signature's TOP_CODE_ENTRIES hottest entries, coolest first
        (so the hottest is drawn on top), each labelled with its code."""
        total = np.nansum(heat.values, axis=0)
        hot = np.argsort(-total, kind="stable")[:TOP_CODE_ENTRIES]
        hot = hot[total[hot] > 0][::-1]
        names = self.name_entries(hot.tolist())
        labels = [f"{names[e]} (#{e})" if e in names else f"entry {e}" for e in hot.tolist()]
        shown = f"hottest {len(hot)} of {len(total)} entries" if len(total) > len(hot) else ""
        return Heatmap(heat.segment, heat.title, "code", np.arange(len(hot), dtype=np.float64),
                       heat.values[:, hot], labels, shown)

    def _centres(self, segment: str, bins: int) -> np.ndarray:
        h = self.params.histograms
        ranges = {"voltage": h.voltage_mv, "pfreq": h.pfreq_mhz, "freq": h.freq_mhz,
                  "c0": (0.0, 1.0)}
        if segment not in ranges:
            return np.arange(bins, dtype=np.float64)
        lo, hi = ranges[segment]
        step = (hi - lo) / bins
        return lo + step * (np.arange(bins) + 0.5)


#: A value segment no column moves further than this (cumulative distance,
#: under a shift of one bin in 64) from its mean is not drawn.
STEADY_DISTANCE = 0.01


def _the_same_throughout(values: np.ndarray) -> bool:
    """Whether every column with samples has about the same histogram."""
    seen = values[~np.isnan(values).any(axis=1)]
    if len(seen) == 0:
        return False
    moved = np.abs(np.cumsum(seen - seen.mean(axis=0), axis=1)).sum(axis=1)
    return bool(moved.max() / max(seen.shape[1] - 1, 1) < STEADY_DISTANCE)


def predicted_phases(phase: np.ndarray,
                     ahead: np.ndarray | None = None) -> tuple[np.ndarray, float | None]:
    """The phase predicted for each interval on the interval before (an
    interval with none predicted shows its own phase), and the share of
    intervals predicted right.  ``ahead``: each interval's ``predicted_next``
    as the run made it (a live run's tap); without it, or where it is not
    one per phase, the predictor (core.predict) is run over the phases."""
    if ahead is None or len(ahead) != len(phase):
        phase = np.ascontiguousarray(phase, np.int64)
        zero = np.zeros(len(phase), np.int64)
        ahead = PhasePredictor().observe_block(phase.copy(), np.zeros(len(phase), np.bool_),
                                               zero, zero).next_phase
    predicted = np.concatenate([phase[:1], ahead[:-1]])
    scored = np.concatenate([[False], (ahead[:-1] != NONE) & (phase[1:] >= 0)])
    accuracy = float((predicted[scored] == phase[scored]).mean()) if scored.any() else None
    predicted[~scored] = phase[~scored]
    return predicted, accuracy


def predicted_title(fig: PhaseFigure) -> str:
    """The predicted band's title, with its accuracy."""
    right = fig.prediction_accuracy
    return ("phase predicted on the interval before"
            + ("" if right is None else f" (right for {100 * right:.1f} % of the intervals)"))


def column_means(values: np.ndarray, per: int) -> np.ndarray:
    """Mean of each run of ``per`` values, NaNs left out (NaN if all are)."""
    cols = _column_of(len(values), per)
    ok = ~np.isnan(values)
    total = np.bincount(cols, weights=np.where(ok, values, 0.0))
    count = np.bincount(cols, weights=ok.astype(np.float64))
    with np.errstate(invalid="ignore"):
        return total / count


def column_modes(labels: np.ndarray, per: int) -> np.ndarray:
    """The most frequent label of each run of ``per`` labels (the smallest, on a tie)."""
    if per == 1:
        return labels.astype(np.int64)
    cols = _column_of(len(labels), per)
    codes, inverse = np.unique(labels, return_inverse=True)
    counts = np.zeros((cols[-1] + 1, len(codes)), np.int64)
    np.add.at(counts, (cols, inverse), 1)
    return codes[counts.argmax(axis=1)].astype(np.int64)


def _column_of(n: int, per: int) -> np.ndarray:
    return np.arange(n) // per


def phase_colours(n: int) -> list[str]:
    """One colour per phase, the same in every drawing of the report."""
    from plotly.colors import qualitative
    palette = qualitative.Dark24
    return [palette[i % len(palette)] for i in range(max(n, 1))]


def with_truth(figure: PhaseFigure, labels, phase: np.ndarray,
               ari: float | None) -> PhaseFigure:
    """The figure with a ground-truth band (one label per interval), each
    truth label drawn in the colour of the phase that shares most intervals
    with it, so that agreement shows as matching colours."""
    names, codes = np.unique(np.asarray([str(x) for x in labels]), return_inverse=True)
    colour = matched_codes(codes, len(names), np.asarray(phase, np.int64))
    figure.truth = column_modes(colour[codes], figure.per_column)
    figure.truth_names = [""] * int(colour.max() + 1)
    for label, c in zip(names.tolist(), colour.tolist()):
        figure.truth_names[c] = label
    figure.ari = ari
    return figure


def matched_codes(truth: np.ndarray, n_truth: int, phase: np.ndarray) -> np.ndarray:
    """A code per truth label: the phase it overlaps most, greedily, largest
    overlap first; labels left unmatched get codes after the last phase."""
    n_phase = int(phase.max()) + 1
    overlap = np.zeros((n_truth, n_phase), np.int64)
    np.add.at(overlap, (truth, phase), 1)
    code = np.full(n_truth, -1, np.int64)
    taken = np.zeros(n_phase, np.bool_)
    for flat in np.argsort(-overlap, axis=None, kind="stable"):
        t, p = divmod(int(flat), n_phase)
        if overlap[t, p] == 0:
            break
        if code[t] < 0 and not taken[p]:
            code[t], taken[p] = p, True
    unmatched = code < 0
    code[unmatched] = n_phase + np.arange(unmatched.sum())
    return code
