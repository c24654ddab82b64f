"""decode → intervals → profiles → phases: one pipeline for live runs and replay.

The pipeline is a pure function of the batches it is fed and the state it
keeps between them; sources and sinks stay outside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .batch import SampleBatch
from .classify import ClassifierState, classify
from .decode import PROFILE_COUNTERS, DecoderState, decode
from .detectors import used_mask
from .intervals import SEGMENT_KINDS, SEGMENTS, IntervalAccumulator, IntervalBlock, Layout
from .metadata import cpu_model
from .params import Params

KERNEL_ADDRESSES = np.uint64(0x8000_0000_0000_0000)
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

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def join(cls, parts: list["Intervals"]) -> "Intervals":
        names = [f for f in cls.__dataclass_fields__ if f != "partial"]
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in names))

    @property
    def cpi(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.instructions > 0, self.cycles / self.instructions, np.nan)


class Pipeline:
    """Feed it sample batches; it returns the intervals each batch completed."""

    def __init__(self, params: Params, base_mhz: float, voltage_from_perf_status: bool = True,
                 counter_scope: str = "cpu"):
        self.params = params
        self.base_mhz = float(base_mhz)
        self.voltage_from_perf_status = voltage_from_perf_status
        self.decoder = DecoderState(counters=PROFILE_COUNTERS, scope=counter_scope)
        self.accumulator = IntervalAccumulator(params.interval, params.histograms)
        self.layout: Layout = self.accumulator.layout
        self.classifier = ClassifierState(self.layout.width, len(SEGMENTS), params.detector)
        self.used = used_mask(params.detector.detector)
        self.text_range = params.histograms.text_range
        self.count = 0
        self.samples = 0

    def feed(self, batch: SampleBatch) -> Intervals:
        n = len(batch)
        if n <= CHUNK_ROWS:
            return self._feed(batch)
        return Intervals.join([self._feed(batch.slice(a, a + CHUNK_ROWS))
                               for a in range(0, n, CHUNK_ROWS)])

    def _feed(self, batch: SampleBatch) -> Intervals:
        self.samples += len(batch)
        if self.text_range is None and self.used[SEGMENTS.index("ip")] and "ip" in batch:
            self._guess_text_range(batch["ip"])
        decoded = decode(batch, self.decoder, self.base_mhz, self.voltage_from_perf_status)
        block = self.accumulator.feed(batch["t_ns"], batch.get("ip"), decoded)
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
        return cls(params, base_mhz=meta.get("base_freq_mhz") or 0.0,
                   voltage_from_perf_status=(meta.get("voltage_source")
                                             or cpu_model(meta).voltage_source) == "perf_status",
                   counter_scope=meta.get("counter_scope", "cpu"))

    @property
    def n_phases(self) -> int:
        return self.classifier.n_phases

    @property
    def threshold(self) -> float:
        return float(self.classifier.threshold[0])

    def dropped(self) -> dict[str, int]:
        return self.decoder.dropped()

    def _classify(self, block: IntervalBlock) -> Intervals:
        phase, dist, new = classify(block.profiles, block.segment_samples, self.layout.bounds,
                                    SEGMENT_KINDS, self.used, self.classifier)
        return self._intervals(block, phase, dist, new)

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
        user = ips[(ips != 0) & (ips < KERNEL_ADDRESSES)]
        if len(user) == 0:
            return
        lo, hi = int(user.min()), int(user.max()) + 1
        self.text_range = (lo, hi)
        self.accumulator.set_text_range(lo, hi)
