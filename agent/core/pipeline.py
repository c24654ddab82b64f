"""decode → intervals → profiles → phases: one pipeline for live runs and replay.

The pipeline is a pure function of the batches it is fed and the state it
keeps between them; sources and sinks stay outside.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .batch import KERNEL_START, SampleBatch
from .classify import (MATCHED, TENTATIVE, ClassifierState, classify, interval_log_cpi,
                       known_phase_dict, known_phase_of)
from .codemap import CodeMap
from .cpumodels import FALLBACK_BASE_HZ
from .decode import COUNTERS, PROFILE_COUNTERS, DecoderState, decode
from .detectors import USES_CPI, counters_for, histograms_for, used_mask
from .intervals import SEGMENTS, IntervalAccumulator, IntervalBlock, Layout, segment_kinds
from .params import Params, cpu_model_of
from .predict import Predictions

#: Rows decoded and profiled at a time, so that the work arrays stay in cache.
CHUNK_ROWS = 32768


@dataclass
class Intervals:
    """Classified intervals, as columns (the JSON Lines keys and a few more)."""

    index: np.ndarray
    t_start_ns: np.ndarray
    t_end_ns: np.ndarray
    instructions: np.ndarray
    cycles: np.ndarray
    samples: np.ndarray
    distance: np.ndarray
    phase: np.ndarray
    new_phase: np.ndarray
    voltage_mv: np.ndarray       # mean over the interval's samples, NaN if none
    pfreq_mhz: np.ndarray
    partial: bool = False
    #: Where the pipeline keeps profiles (:meth:`Pipeline.keep_profiles`):
    #: each interval's profile, every segment built, and its samples per segment.
    profiles: np.ndarray | None = None
    segment_samples: np.ndarray | None = None
    #: Each interval's classifier status (core.classify: MATCHED, NO_DATA,
    #: TENTATIVE); None: all matched (a source with no candidates).
    status: np.ndarray | None = None
    #: What is expected after each interval (core.prediction.PredictionTap), where predicted.
    prediction: Predictions | None = None

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def join(cls, parts: list["Intervals"]) -> "Intervals":
        if len(parts) == 1:
            return parts[0]
        columns = {name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS}
        for name in ("profiles", "segment_samples", "status"):
            if all(getattr(p, name) is not None for p in parts):
                columns[name] = np.concatenate([getattr(p, name) for p in parts])
        return cls(**columns)

    @classmethod
    def empty(cls) -> "Intervals":
        z, f = np.zeros(0, np.int64), np.zeros(0)
        return cls(z, z, z, z, z, z, f, z, np.zeros(0, np.bool_), f, f)

    def rows(self, which) -> "Intervals":
        """The intervals ``which`` (a slice or a mask) selects."""
        columns = {name: getattr(self, name)[which] for name in _COLUMNS}
        extra = {name: getattr(self, name)[which] for name in ("profiles", "segment_samples",
                                                               "status")
                 if getattr(self, name) is not None}
        return Intervals(**columns, partial=self.partial, **extra)

    def labelled(self) -> "Intervals":
        """The intervals that have a phase: all but those without data before
        the first phase (phase -1)."""
        keep = self.phase >= 0
        return self if keep.all() else self.rows(keep)

    @property
    def statuses(self) -> np.ndarray:
        return self.status if self.status is not None else np.zeros(len(self), np.int8)

    @property
    def cpi(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            known = (self.instructions > 0) & (self.cycles > 0)   # 0 cycles: not counted
            return np.where(known, self.cycles / self.instructions, np.nan)


_COLUMNS = ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples", "distance",
            "phase", "new_phase", "voltage_mv", "pfreq_mhz")


@dataclass(frozen=True)
class PipelineStats:
    """What a summary reports of a pipeline at the end."""

    detector: str
    adaptive: bool
    interval: str               # how intervals end: "every 100 samples"
    samples: int
    threshold: float            # the threshold at the end (adaptive: as adapted)
    dropped: dict[str, int]
    implausible: dict[str, int]


class Pipeline:
    """Feed it sample batches; it returns the intervals each batch completed."""

    def __init__(self, params: Params, base_mhz: float, voltage_from_perf_status: bool = True,
                 counter_scope: str = "cpu", mappings: list[dict] | None = None):
        detector = params.detector.detector
        params = replace(params, histograms=histograms_for(detector, params.histograms))
        self.params = params
        self.base_mhz = float(base_mhz)
        self.voltage_from_perf_status = voltage_from_perf_status
        self.decoder = DecoderState(counters=PROFILE_COUNTERS + counters_for(detector),
                                    scope=counter_scope)
        self.accumulator = IntervalAccumulator(params.interval, params.histograms)
        self.layout: Layout = self.accumulator.layout
        self.classifier = ClassifierState(self.layout.width, len(SEGMENTS), params.detector)
        self.held: Intervals | None = None   # a tentative interval awaiting the next
        self.used = used_mask(params.detector.detector)
        self.cpi_tolerance = (params.detector.cpi_tolerance
                              if params.detector.detector in USES_CPI else 0.0)
        self.kinds = segment_kinds(params.histograms)
        self.text_range = params.histograms.text_range
        self.mappings = mappings
        self.accumulator.set_code_map(CodeMap.from_mappings(mappings))
        self.accumulator.build_segments(self.used)
        self.count = 0
        self.samples = 0
        self.profiles_kept = False

    @property
    def columns(self) -> frozenset[str]:
        """The raw columns ``feed`` reads; a source may leave the others unread."""
        wanted = {"t_ns", "cpu", "tid"} | {COUNTERS[k] for k in self.decoder.decoded}
        wanted.add("perf_status" if self.voltage_from_perf_status else "vcore_mv")
        if self.accumulator.built > SEGMENTS.index("ip"):
            wanted |= {"ip", "pid"}
        return frozenset(wanted)

    def keep_profiles(self) -> None:
        """From now on, completed intervals carry their profiles, every
        segment built, for sinks that need them (the report's heatmaps)."""
        self.profiles_kept = True
        self.accumulator.build_segments(np.ones(len(SEGMENTS), np.bool_))

    def feed(self, batch: SampleBatch) -> Intervals:
        n = len(batch)
        if n <= CHUNK_ROWS:
            return self._feed(batch)
        return Intervals.join([self._feed(batch.slice(a, a + CHUNK_ROWS))
                               for a in range(0, n, CHUNK_ROWS)])

    def _feed(self, batch: SampleBatch) -> Intervals:
        self.samples += len(batch)
        if (self.text_range is None and self.params.histograms.ip_signature == "fold"
                and self.used[SEGMENTS.index("ip")] and "ip" in batch):
            self._guess_text_range(batch["ip"])
        decoded = decode(batch, self.decoder, self.base_mhz, self.voltage_from_perf_status)
        block = self.accumulator.feed(batch["t_ns"], batch.get("ip"), decoded, batch.get("pid"))
        return self._classify(block)

    def finish(self) -> Intervals:
        """The trailing partial interval, reported but neither classified nor
        added to any centroid: its phase is -1."""
        block = self.accumulator.pending()
        n = len(block)
        return self._intervals(block, np.full(n, -1, np.int64), np.full(n, np.nan),
                               np.zeros(n, np.bool_), partial=True)

    @classmethod
    def for_trace(cls, meta: dict, params: Params) -> "Pipeline":
        """The pipeline for samples described by trace metadata ``meta``: the
        one constructor live runs and replay share, so that both decode alike."""
        pipeline = cls(params, base_mhz=meta.get("base_freq_mhz") or FALLBACK_BASE_HZ / 1e6,
                       voltage_from_perf_status=(meta.get("voltage_source")
                                                 or cpu_model_of(meta).voltage_source)
                       == "perf_status",
                       counter_scope=meta.get("counter_scope", "cpu"),
                       mappings=meta.get("mappings"))
        pipeline.start_from(meta.get("known_phases"))
        return pipeline

    @property
    def profile(self) -> str:
        """What phases are comparable under: the detector and the profile's layout."""
        return (f"{self.params.detector.detector}:"
                + ",".join(str(int(b)) for b in self.layout.bounds))

    def start_from(self, known: dict | None) -> None:
        """Start from the phases a recording's run started from (its
        ``known_phases``: the catalogue's), where they are of this profile, so
        that a replay gives the run's ids."""
        if not known or known.get("profile") != self.profile:
            return
        # The profile names the layout, but a file may say one thing and hold another.
        fitting = [p for p in known.get("phases", [])
                   if p["width"] == self.layout.width and len(p["members"]) == len(SEGMENTS)]
        self.classifier.seed([known_phase_of(p) for p in fitting], int(known.get("next_id", 0)))

    def known_phases(self) -> dict:
        """The phases this pipeline knows now, as :meth:`start_from` takes them."""
        return {"profile": self.profile, "next_id": self.classifier.next_id,
                "phases": [known_phase_dict(p) for p in self.classifier.known()]}

    def set_mappings(self, mappings: list[dict]) -> None:
        """Executable mappings learnt while running (each new one with the
        ``t_ns`` from which it applies); replay reads the same list."""
        self.mappings = list(mappings)
        self.accumulator.set_code_map(CodeMap.from_mappings(self.mappings))

    @property
    def code_map(self) -> CodeMap:
        return self.accumulator.code_map

    @property
    def n_phases(self) -> int:
        return self.classifier.n_phases

    @property
    def threshold(self) -> float:
        return float(self.classifier.threshold[0])

    def stats(self) -> PipelineStats:
        p = self.params
        return PipelineStats(p.detector.detector, p.detector.adaptive, p.interval.describe(),
                             self.samples, self.threshold, self.dropped(), self.implausible())

    def dropped(self) -> dict[str, int]:
        return self.decoder.dropped()

    def implausible(self) -> dict[str, int]:
        return self.decoder.implausible_values()

    def _classify(self, block: IntervalBlock) -> Intervals:
        log_cpi = (interval_log_cpi(block.instructions, block.cycles)
                   if self.cpi_tolerance > 0 and len(block) else None)
        decided = classify(block.profiles, block.segment_samples, self.layout.bounds,
                           self.kinds, self.used, self.classifier, log_cpi, self.cpi_tolerance)
        intervals = self._intervals(block, decided.phase, decided.distance, decided.new_phase)
        intervals.status = decided.status
        if self.profiles_kept:
            # the block is the accumulator's scratch space, reused by the next batch
            intervals.profiles = block.profiles.copy()
            intervals.segment_samples = block.segment_samples.copy()
        return self._hold_tentative(intervals)

    def _hold_tentative(self, intervals: Intervals) -> Intervals:
        """Intervals whose phase is settled.  A tentative last interval waits
        for the next one, which may confirm the phase it opened; the one held
        from the batch before comes first, with the phase it took."""
        held, self.held = self.held, None
        if held is not None and len(intervals):
            if self.classifier.relabel >= 0:
                held.phase[:] = self.classifier.relabel
                held.new_phase[:] = True
                held.status[:] = MATCHED
            intervals = Intervals.join([held, intervals])
        elif held is not None:
            self.held = held
        if len(intervals) and intervals.statuses[-1] == TENTATIVE:
            self.held = intervals.rows(slice(len(intervals) - 1, None))
            intervals = intervals.rows(slice(0, len(intervals) - 1))
        return intervals

    def flush(self) -> Intervals:
        """The interval held for the next decision, as it stands: at the end of a stream."""
        held, self.held = self.held, None
        return held if held is not None else Intervals.empty()

    def _intervals(self, block: IntervalBlock, phase, dist, new, partial=False) -> Intervals:
        n = len(block)
        index = np.arange(self.count, self.count + n, dtype=np.int64)
        if not partial:
            self.count += n
        with np.errstate(divide="ignore", invalid="ignore"):
            volt = block.voltage_sum / block.segment_samples[:, 0]
            pfreq = block.pfreq_sum / block.segment_samples[:, 1]
        return Intervals(index, block.t_start_ns.copy(), block.t_end_ns.copy(),
                         block.instructions.copy(), block.cycles.copy(), block.samples.copy(),
                         dist, phase, new, volt, pfreq, partial)

    def _guess_text_range(self, ips: np.ndarray) -> None:
        """No text range known: take the span of the user-space IPs seen first,
        and keep it, so that profiles stay comparable for the whole run."""
        user = ips[(ips != 0) & (ips < KERNEL_START)]
        if len(user) == 0:
            return
        lo, hi = int(user.min()), int(user.max()) + 1
        self.text_range = (lo, hi)
        self.accumulator.set_text_range(lo, hi)
