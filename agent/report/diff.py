"""What changed between two recordings of the same program: their phases
paired by profile distance, and per pair time, CPI, voltage, productive
frequency, energy and the functions whose share moved most.

Each trace is replayed with the same detection options (:func:`run_phases`);
each phase's profile is the mean of its intervals' profiles.  Two phases'
distance is the classifier's, taken between those means: per used profile
segment the total-variation distance of code signatures or the cumulative
distance of value histograms, the largest of them.  Phases are paired so
that the sum of distances is least (the assignment problem, SciPy's solver);
a pair further apart than the detection threshold is no pair, and its
phases are "gone" (only in A) or "new" (only in B).

Seconds are the program's CPU time: a phase's samples times the sampling
period.  A pair is "slower" or "faster" when its seconds differ by more than
``tolerance``; a change in a phase under ``min_share`` of both runs is
listed but not counted as a change of the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..core.histograms import TOTAL_VARIATION
from ..core.driver import Driver
from ..core.intervals import SEGMENT_KINDS
from ..core.settings import DetectionSettings, pipeline_for
from ..core.source import Sink
from ..errors import UserError
from ..formats.energytable import read_energy_table
from ..formats.tracefiles import open_trace
from ..live.phase_functions import PhaseFunctions
from ..live.phase_profile import period_ns_of

#: A pair whose seconds differ by more than this share has changed.
TOLERANCE = 0.10
#: Phases under this share of both runs' time do not count as changes.
MIN_SHARE = 0.05
#: Functions listed per pair, those whose share moved most.
TOP_FUNCTIONS = 5
#: Phases of each run that are paired, the largest (by samples): the
#: distances of every phase to every other take MAX² entries (32 MB), and
#: the assignment half a second at 2,000 (benchmarks/bench_diff.py).
MAX_PAIRED_PHASES = 2000
ALL_FUNCTIONS = 1 << 30


@dataclass
class PhaseStats:
    """One phase of one run: its mean profile and what the summary reports."""

    phase: int
    intervals: int = 0
    samples: int = 0
    instructions: int = 0
    cycles: int = 0
    voltage_weighted: float = 0.0
    voltage_samples: int = 0
    pfreq_weighted: float = 0.0
    pfreq_samples: int = 0
    energy_j: float | None = None
    counted_energy_j: float = 0.0   # energy of the intervals with instructions counted
    profile_sum: np.ndarray | None = None
    segment_members: np.ndarray | None = None
    functions: dict[str, float] = field(default_factory=dict)

    def mean_profile(self, bounds: np.ndarray) -> np.ndarray:
        """Per segment, the mean over the intervals that had samples in it."""
        members = np.repeat(self.segment_members, np.diff(bounds))
        return self.profile_sum / np.maximum(members, 1)


@dataclass
class RunPhases:
    path: str
    period_ns: int
    bounds: np.ndarray
    used: np.ndarray
    threshold: float
    phases: dict[int, PhaseStats]
    #: The replay's samples and how its intervals end ("every 100 samples").
    samples: int = 0
    interval: str = ""
    mapped: bool = True         # whether the trace recorded the code's mappings

    @property
    def total_samples(self) -> int:
        return sum(p.samples for p in self.phases.values())

    def seconds(self, phase: int) -> float:
        return self.phases[phase].samples * self.period_ns / 1e9

    def share(self, phase: int) -> float:
        return self.phases[phase].samples / max(self.total_samples, 1)


class _Collector(Sink):
    """A sink adding each interval's profile into its phase; ``energy`` is
    the recording's energy table (by interval index), if any: energy is
    known only while every interval matches a row of it."""

    def __init__(self, energy: dict[int, tuple[int, int, float]] | None = None):
        self.phases: dict[int, PhaseStats] = {}
        self.energy = energy
        self.energy_known = energy is not None

    def classified(self, c) -> None:
        iv = c.intervals
        if iv.partial:
            return
        for row in range(len(iv)):
            stats = self.phases.setdefault(int(iv.phase[row]), PhaseStats(int(iv.phase[row])))
            self._add(stats, iv.profiles[row], iv.segment_samples[row], iv, row)

    def _add(self, stats: PhaseStats, profile, segment_samples, iv, row) -> None:
        has = (segment_samples > 0).astype(np.int64)
        if stats.profile_sum is None:
            stats.profile_sum = np.zeros(len(profile))
            stats.segment_members = np.zeros(len(has), np.int64)
        stats.profile_sum += profile
        stats.segment_members += has
        stats.intervals += 1
        n = int(iv.samples[row])
        stats.samples += n
        if iv.instructions[row] > 0:
            stats.instructions += int(iv.instructions[row])
            stats.cycles += int(iv.cycles[row])
        if np.isfinite(iv.voltage_mv[row]):
            stats.voltage_weighted += float(iv.voltage_mv[row]) * n
            stats.voltage_samples += n
        if np.isfinite(iv.pfreq_mhz[row]):
            stats.pfreq_weighted += float(iv.pfreq_mhz[row]) * n
            stats.pfreq_samples += n
        if self.energy_known:
            self._add_energy(stats, iv, row)

    def _add_energy(self, stats: PhaseStats, iv, row) -> None:
        known = self.energy.get(int(iv.index[row]))
        if known is None or known[:2] != (int(iv.t_start_ns[row]), int(iv.t_end_ns[row])):
            self.energy_known = False
            return
        stats.energy_j = (stats.energy_j or 0.0) + known[2] / 1e6
        if iv.instructions[row] > 0:
            stats.counted_energy_j += known[2] / 1e6


def run_phases(trace: str, given: Mapping[str, Any], warn) -> RunPhases:
    """Replay ``trace`` with the detection settings ``given`` (setting ->
    value, None: the recording's own)."""
    source = open_trace(trace, warn=warn)
    try:
        meta = source.metadata
        settings = DetectionSettings.given(given, meta.get("detection"))
        pipeline = pipeline_for(meta, settings, tuple(meta.get("signals") or source.signals),
                                warn, fall_back=True)
        collector = _Collector(read_energy_table(trace))
        pipeline.keep_profiles()
        has_ips = "ip" in source.signals
        functions = PhaseFunctions.of_recording(meta) if has_ips else None
        if hasattr(source, "read_only"):
            source.read_only(pipeline.columns | set(functions.columns if functions else ()))
        Driver(pipeline, [collector] + ([functions] if functions else [])).run(source.batches())
    finally:
        source.close()
    for stats in collector.phases.values():
        if not collector.energy_known:
            stats.energy_j = None
        if functions is not None:
            stats.functions = dict(functions.top(stats.phase, ALL_FUNCTIONS))
    stats = pipeline.stats()
    if not collector.phases:
        raise UserError(f"{trace}: no complete interval to compare ({stats.samples:,} samples, "
                        f"intervals {stats.interval}): a run this short needs shorter "
                        f"intervals, e.g. --interval-samples 20")
    return RunPhases(trace, period_ns_of(meta.get("sampling")), pipeline.layout.bounds,
                     pipeline.used, pipeline.threshold, collector.phases, stats.samples,
                     stats.interval, bool(meta.get("mappings")))


def phase_distance(a: PhaseStats, b: PhaseStats, bounds: np.ndarray, used: np.ndarray) -> float:
    """The largest segment distance between two phases' mean profiles; 1 if
    they share no used segment."""
    return float(distance_matrix([a], [b], bounds, used)[0, 0])


def distance_matrix(a: list[PhaseStats], b: list[PhaseStats], bounds: np.ndarray,
                    used: np.ndarray) -> np.ndarray:
    """:func:`phase_distance` of every phase of ``a`` (rows) to every phase of
    ``b`` (columns), each mean profile taken once and each segment's
    distances as one L1 distance matrix: total variation is half the L1
    distance of the histograms, the cumulative distance the L1 distance of
    their running sums over one less than the bins."""
    from scipy.spatial.distance import cdist
    profile_a = np.array([p.mean_profile(bounds) for p in a]).reshape(len(a), -1)
    profile_b = np.array([p.mean_profile(bounds) for p in b]).reshape(len(b), -1)
    largest = np.full((len(a), len(b)), -np.inf)
    for s, kind in enumerate(SEGMENT_KINDS[:len(bounds) - 1]):     # the segments built
        if not used[s]:
            continue
        xa, xb = profile_a[:, bounds[s]:bounds[s + 1]], profile_b[:, bounds[s]:bounds[s + 1]]
        bins = xa.shape[1]
        if kind == TOTAL_VARIATION and bins:
            distance = 0.5 * cdist(xa, xb, "cityblock")
        elif bins > 1:
            distance = cdist(np.cumsum(xa, axis=1), np.cumsum(xb, axis=1), "cityblock") / (bins - 1)
        else:
            distance = np.zeros_like(largest)
        shared = np.outer([p.segment_members[s] > 0 for p in a], [p.segment_members[s] > 0 for p in b])
        np.maximum(largest, np.where(shared, distance, -np.inf), out=largest)
    largest[np.isneginf(largest)] = 1.0
    return largest


def pair_phases(a: RunPhases, b: RunPhases, threshold: float,
                limit: int = MAX_PAIRED_PHASES) -> list[tuple[int | None, int | None, float]]:
    """(phase of A or None, phase of B or None, distance) for every phase of
    both runs, paired by the least sum of distances: the ``limit`` largest
    phases of each run (by samples).  The smaller phases beyond them
    (:func:`unpaired_phases`) come last, as (phase, None, nan) or
    (None, phase, nan)."""
    from scipy.optimize import linear_sum_assignment
    ids_a, ids_b = largest_phases(a, limit), largest_phases(b, limit)
    cost = distance_matrix([a.phases[i] for i in ids_a], [b.phases[j] for j in ids_b],
                           a.bounds, a.used)
    rows, cols = linear_sum_assignment(cost) if cost.size else ([], [])
    pairs = [(ids_a[r], ids_b[c], float(cost[r, c])) for r, c in zip(rows, cols)
             if cost[r, c] <= threshold]
    paired_a, paired_b = {p[0] for p in pairs}, {p[1] for p in pairs}
    pairs += [(i, None, float("nan")) for i in ids_a if i not in paired_a]
    pairs += [(None, j, float("nan")) for j in ids_b if j not in paired_b]
    pairs += [(i, None, float("nan")) for i in unpaired_phases(a, limit)]
    return pairs + [(None, j, float("nan")) for j in unpaired_phases(b, limit)]


def largest_phases(run: RunPhases, limit: int) -> list[int]:
    """The ``limit`` phases of ``run`` with most samples, in phase order."""
    if len(run.phases) <= limit:
        return sorted(run.phases)
    by_size = sorted(run.phases, key=lambda p: (-run.phases[p].samples, p))
    return sorted(by_size[:limit])


def unpaired_phases(run: RunPhases, limit: int = MAX_PAIRED_PHASES) -> list[int]:
    """The phases of ``run`` beyond the ``limit`` largest: not paired."""
    kept = set(largest_phases(run, limit))
    return [p for p in sorted(run.phases) if p not in kept]


def _side(run: RunPhases, phase: int | None) -> dict:
    if phase is None:
        return {"seconds": 0.0, "share": 0.0, "cpi": None, "seconds_per_100m": None,
                "voltage_mv": None, "pfreq_mhz": None, "energy_j": None,
                "energy_j_per_100m": None}
    s = run.phases[phase]
    seconds = run.seconds(phase)
    per_100m = 1e8 / s.instructions if s.instructions else None
    return {
        "seconds": seconds, "share": run.share(phase),
        "cpi": s.cycles / s.instructions if s.instructions and s.cycles else None,
        "seconds_per_100m": seconds * per_100m if per_100m else None,
        "voltage_mv": s.voltage_weighted / s.voltage_samples if s.voltage_samples else None,
        "pfreq_mhz": s.pfreq_weighted / s.pfreq_samples if s.pfreq_samples else None,
        "energy_j": s.energy_j,
        "energy_j_per_100m": (s.counted_energy_j * per_100m
                              if s.energy_j is not None and per_100m else None),
    }


def function_changes(a: dict[str, float], b: dict[str, float], k: int = TOP_FUNCTIONS) -> list[dict]:
    """The ``k`` functions whose share of the phase moved most."""
    names = set(a) | set(b)
    rows = [{"name": n, "share_a": a.get(n, 0.0), "share_b": b.get(n, 0.0),
             "change": b.get(n, 0.0) - a.get(n, 0.0)} for n in names]
    rows.sort(key=lambda r: (-abs(r["change"]), r["name"]))
    return rows[:k]


def status_of(seconds_a: float, seconds_b: float, phase_a, phase_b, tolerance: float) -> str:
    if phase_a is None:
        return "new"
    if phase_b is None:
        return "gone"
    ratio = seconds_b / seconds_a if seconds_a else float("inf")
    if ratio > 1 + tolerance:
        return "slower"
    if ratio < 1 / (1 + tolerance):
        return "faster"
    return "same"


def diff_runs(a: RunPhases, b: RunPhases, *, threshold: float | None, tolerance: float = TOLERANCE,
              min_share: float = MIN_SHARE, limit: int = MAX_PAIRED_PHASES) -> dict:
    """The comparison, as ``diff --json`` prints it; without a ``threshold``,
    A's detection threshold (as recorded or given).  Phases beyond the
    ``limit`` largest of a run are listed as "unpaired"."""
    threshold = a.threshold if threshold is None else threshold
    pairs = []
    unpaired = {"a": set(unpaired_phases(a, limit)), "b": set(unpaired_phases(b, limit))}
    for phase_a, phase_b, distance in pair_phases(a, b, threshold, limit):
        side_a, side_b = _side(a, phase_a), _side(b, phase_b)
        status = status_of(side_a["seconds"], side_b["seconds"], phase_a, phase_b, tolerance)
        if phase_a in unpaired["a"] or phase_b in unpaired["b"]:
            status = "unpaired"
        pairs.append({
            "phase_a": phase_a, "phase_b": phase_b, "distance": distance,
            "status": status,
            "changed": status not in ("same", "unpaired")
                       and max(side_a["share"], side_b["share"]) >= min_share,
            "slowdown": (side_b["seconds"] / side_a["seconds"]
                         if phase_a is not None and phase_b is not None and side_a["seconds"]
                         else None),
            **{f"{k}_a": v for k, v in side_a.items()},
            **{f"{k}_b": v for k, v in side_b.items()},
            "top_function_a": _top(a, phase_a), "top_function_b": _top(b, phase_b),
            "functions": function_changes(a.phases[phase_a].functions if phase_a is not None else {},
                                          b.phases[phase_b].functions if phase_b is not None else {}),
        })
    pairs.sort(key=lambda p: (-max(p["seconds_a"], p["seconds_b"])))
    paired = any(p["phase_a"] is not None and p["phase_b"] is not None for p in pairs)
    return {"a": a.path, "b": b.path, "seconds_a": sum(a.seconds(p) for p in a.phases),
            "seconds_b": sum(b.seconds(p) for p in b.phases), "threshold": threshold,
            "tolerance": tolerance, "min_share": min_share, "paired_limit": limit,
            "unpaired_a": len(unpaired["a"]), "unpaired_b": len(unpaired["b"]),
            "nearest_distance": None if paired else nearest_distance(a, b, limit),
            "unmapped": [run.path for run in (a, b) if not run.mapped],
            "pairs": pairs}


def nearest_distance(a: RunPhases, b: RunPhases, limit: int = MAX_PAIRED_PHASES) -> float:
    """The distance of the two nearest phases of ``a`` and ``b``: where
    nothing pairs, how far the threshold is from pairing anything."""
    cost = distance_matrix([a.phases[i] for i in largest_phases(a, limit)],
                           [b.phases[j] for j in largest_phases(b, limit)], a.bounds, a.used)
    return float(cost.min())


def diff_rows(result: dict) -> list[dict]:
    """The table's rows as text cells (terminal and report alike)."""
    rows = []
    for p in result["pairs"]:
        moved = [f"{f['name']} {100 * f['change']:+.0f}%" for f in p["functions"][:3]
                 if abs(f["change"]) >= 0.005]
        rows.append({
            "A": _id(p["phase_a"]), "B": _id(p["phase_b"]),
            "runs": p["top_function_b"] or p["top_function_a"] or "-",
            "status": p["status"] + (" *" if p["changed"] else ""),
            "seconds": f"{p['seconds_a']:.2f} → {p['seconds_b']:.2f}",
            "share": f"{100 * p['share_a']:.0f}% → {100 * p['share_b']:.0f}%",
            "CPI": _pair(p["cpi_a"], p["cpi_b"], "{:.2f}"),
            "s/100M": _pair(p["seconds_per_100m_a"], p["seconds_per_100m_b"], "{:.3f}"),
            "mV": _pair(p["voltage_mv_a"], p["voltage_mv_b"], "{:.0f}"),
            "pfreq MHz": _pair(p["pfreq_mhz_a"], p["pfreq_mhz_b"], "{:.0f}"),
            "J": _pair(p["energy_j_a"], p["energy_j_b"], "{:.2f}"),
            "functions moved": ", ".join(moved) or "-",
        })
    return rows


def _top(run: RunPhases, phase: int | None) -> str | None:
    functions = run.phases[phase].functions if phase is not None else {}
    return max(functions, key=functions.get) if functions else None


def _id(phase) -> str:
    return "-" if phase is None else str(phase)


def _pair(a, b, fmt: str) -> str:
    if a is None and b is None:
        return "-"
    return f"{'-' if a is None else fmt.format(a)} → {'-' if b is None else fmt.format(b)}"
