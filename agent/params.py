"""Parameters of interval splitting, profiling and detection, with the thesis's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from .cpumodels import CpuModel

DEFAULT_INTERVAL_INSTRUCTIONS = 100_000_000
DEFAULT_THRESHOLD = 0.25


@dataclass(frozen=True)
class IntervalParams:
    """An interval ends at the first sample that brings the retired-instruction
    count to the next multiple of ``instructions``, or, in time mode, at the first
    sample at or past the next multiple of ``ns`` from the run's first sample."""

    kind: str = "instructions"          # "instructions" or "time"
    instructions: int = DEFAULT_INTERVAL_INSTRUCTIONS
    ns: int = 100_000_000

    @property
    def size(self) -> int:
        return self.instructions if self.kind == "instructions" else self.ns

    def describe(self) -> str:
        if self.kind == "instructions":
            return f"every {self.instructions:,} instructions"
        return f"every {self.ns / 1e6:g} ms"


@dataclass(frozen=True)
class HistogramParams:
    """Ranges and bin counts of an execution profile.  Values outside a range
    fall in its end bins; IPs outside the text range likewise."""

    voltage_mv: tuple[float, float] = (962.0, 1080.0)
    voltage_bins: int = 32
    pfreq_mhz: tuple[float, float] = (0.0, 3000.0)
    pfreq_bins: int = 64
    ip_bins: int = 32                    # a power of two
    ip_fold_groups: int = 2              # groups of log2(ip_bins) bits XOR-folded
    text_range: tuple[int, int] | None = None

    @classmethod
    def for_model(cls, model: CpuModel, text_range=None) -> "HistogramParams":
        return cls(voltage_mv=model.voltage_range_mv,
                   pfreq_mhz=(0.0, model.freq_max_mhz),
                   text_range=text_range)


@dataclass(frozen=True)
class DetectorParams:
    detector: str = "vpf"                # "vpf" or "vpf-ip"
    threshold: float = DEFAULT_THRESHOLD
    adaptive: bool = False
    # Adaptive threshold: mean + z * std of the distances of intervals that
    # joined an existing phase, exponentially weighted, kept within bounds.
    adaptive_z: float = 4.0
    adaptive_alpha: float = 0.05
    adaptive_min: float = 0.05
    adaptive_max: float = 0.5
    adaptive_warmup: int = 8


@dataclass(frozen=True)
class Params:
    interval: IntervalParams = field(default_factory=IntervalParams)
    histograms: HistogramParams = field(default_factory=HistogramParams)
    detector: DetectorParams = field(default_factory=DetectorParams)
