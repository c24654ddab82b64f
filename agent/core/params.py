"""Parameters of interval splitting, profiling and detection, with the thesis's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cpumodels import UNKNOWN, CpuModel, by_key

DEFAULT_INTERVAL_INSTRUCTIONS = 100_000_000
#: The thesis's 0.25 separated phases worse on the tuning half of the ground
#: truth than 0.2 (docs/detection.md).
DEFAULT_THRESHOLD = 0.2
#: Live phases kept by default: far more than real programs show, small enough
#: that comparing an interval with every centroid stays cheap.
DEFAULT_MAX_PHASES = 256
#: Where instructions and cycles are counted exactly, an interval stays out of
#: a phase whose mean CPI differs by more than this log ratio (a factor
#: exp(0.05) = 1.051).  CPI spread evenly over that band has a CoV of
#: 0.05 / sqrt(3) = 0.029, what SimPoint's phases keep on most real programs
#: (README, ground truth; docs/signals.md).
DEFAULT_CPI_TOLERANCE = 0.05
#: Chosen on the tuning half of the ground truth (docs/detection.md).
DEFAULT_MEMORY = 16
DEFAULT_MERGE_SHARE = 1.0
DEFAULT_CPI_RUN_SHARE = 1.0
DEFAULT_CPI_FLOOR = 0.01


@dataclass(frozen=True)
class IntervalParams:
    """An interval ends at the first sample that brings the retired-instruction
    count to the next multiple of ``instructions``, or, in time mode, at the first
    sample at or past the next multiple of ``ns`` from the run's first sample."""

    kind: str = "instructions"          # "instructions", "time" or "samples"
    instructions: int = DEFAULT_INTERVAL_INSTRUCTIONS
    ns: int = 100_000_000
    #: In samples mode, an interval ends every this many samples: with samples
    #: taken per millisecond of CPU time, milliseconds the program ran, however
    #: busy the host.
    samples: int = 100

    @property
    def size(self) -> int:
        return {"instructions": self.instructions, "time": self.ns}.get(self.kind, self.samples)

    def describe(self) -> str:
        if self.kind == "instructions":
            return f"every {self.instructions:,} instructions"
        if self.kind == "samples":
            return f"every {self.samples:,} samples"
        return f"every {self.ns / 1e6:g} ms"


#: Resolutions of the code signature: code regions, then cache lines.
CODE_RESOLUTIONS = 2


@dataclass(frozen=True)
class HistogramParams:
    """Ranges and bin counts of an execution profile.  Values outside a range
    fall in its end bins; IPs outside the text range likewise."""

    voltage_mv: tuple[float, float] = (962.0, 1080.0)
    voltage_bins: int = 32
    pfreq_mhz: tuple[float, float] = (0.0, 3000.0)
    pfreq_bins: int = 64
    # Clock (base x APERF/MPERF) and busy share (C0 residency, MPERF/TSC).
    freq_mhz: tuple[float, float] = (0.0, 3000.0)
    freq_bins: int = 64
    c0_bins: int = 20
    # Value segments compared beyond sampling noise (detectors.py).
    value_noise: bool = False
    ip_bins: int = 32                    # a power of two
    ip_fold_groups: int = 2              # groups of log2(ip_bins) bits XOR-folded
    text_range: tuple[int, int] | None = None
    # The code signature over all executable mappings (agent/core/codemap.py),
    # at two resolutions side by side: regions of 2**code_region_bits bytes
    # and lines of 2**code_line_bits bytes, each hashed into code_bins entries.
    ip_signature: str = "regions"        # "regions", or "fold": the thesis's 32-entry fold
    code_bins: int = 1024
    code_region_bits: int = 14
    code_line_bits: int = 6

    @property
    def ip_entries(self) -> int:
        """Length of the IP segment of a profile."""
        return self.ip_bins if self.ip_signature == "fold" else CODE_RESOLUTIONS * self.code_bins

    @classmethod
    def for_model(cls, model: CpuModel, text_range=None) -> "HistogramParams":
        return cls(voltage_mv=model.voltage_range_mv,
                   pfreq_mhz=(0.0, model.freq_max_mhz),
                   freq_mhz=(0.0, model.freq_max_mhz),
                   text_range=text_range)


@dataclass(frozen=True)
class DetectorParams:
    detector: str = "vpf"                # "vpf", "vpf-ip" or "bbv"
    threshold: float = DEFAULT_THRESHOLD
    adaptive: bool = False
    # Adaptive threshold: mean + z * std of the distances of intervals that
    # joined an existing phase, exponentially weighted, kept within bounds.
    adaptive_z: float = 4.0
    adaptive_alpha: float = 0.05
    adaptive_min: float = 0.05
    adaptive_max: float = 0.5
    adaptive_warmup: int = 8
    # At most this many phases are kept; a new one beyond it replaces the
    # phase used least recently (which is retired: its id is not reused).
    max_phases: int = DEFAULT_MAX_PHASES
    # Log-ratio tolerance of CPI between an interval and a phase, for the
    # detectors that use counter ratios where they are counted; 0 turns it off.
    cpi_tolerance: float = DEFAULT_CPI_TOLERANCE
    # A centroid is the mean of about its last ``memory`` members: each new
    # member weighs at least 1/memory, so a phase follows slow drift.
    memory: int = DEFAULT_MEMORY
    # An interval that fits no phase opens a candidate, not a phase: the
    # candidate becomes a phase when a later interval fits it.  Off by
    # default until the held-out evaluation (docs/detection.md) has chosen it.
    probation: bool = True
    # Two phases whose centroids come within this share of the threshold merge.
    merge_share: float = DEFAULT_MERGE_SHARE
    # The CPI tolerance shrinks to this share of the run's own spread of log
    # CPI (its standard deviation over the intervals so far), down to
    # cpi_floor: a run whose CPI varies by 1 % is cut at 1 %, not at 5 %.
    cpi_run_share: float = DEFAULT_CPI_RUN_SHARE
    cpi_floor: float = DEFAULT_CPI_FLOOR


@dataclass(frozen=True)
class Params:
    interval: IntervalParams = field(default_factory=IntervalParams)
    histograms: HistogramParams = field(default_factory=HistogramParams)
    detector: DetectorParams = field(default_factory=DetectorParams)


# -- a stream's metadata (a trace's, or a live source's) to and from parameters

def cpu_model_of(meta: dict[str, Any]) -> CpuModel:
    return by_key((meta.get("cpu") or {}).get("model_key", UNKNOWN.key))


def histogram_params_of(meta: dict[str, Any]) -> HistogramParams:
    h = meta.get("histograms") or {}
    text = meta.get("text_range") or h.get("text_range")
    model = cpu_model_of(meta)
    return HistogramParams(
        voltage_mv=tuple(h.get("voltage_mv", model.voltage_range_mv)),
        voltage_bins=int(h.get("voltage_bins", 32)),
        pfreq_mhz=tuple(h.get("pfreq_mhz", (0.0, model.freq_max_mhz))),
        pfreq_bins=int(h.get("pfreq_bins", 64)),
        freq_mhz=tuple(h.get("freq_mhz", (0.0, model.freq_max_mhz))),
        freq_bins=int(h.get("freq_bins", HistogramParams.freq_bins)),
        c0_bins=int(h.get("c0_bins", HistogramParams.c0_bins)),
        ip_bins=int(h.get("ip_bins", 32)),
        ip_fold_groups=int(h.get("ip_fold_groups", 2)),
        text_range=tuple(int(x) for x in text) if text else None,
        code_bins=int(h.get("code_bins", HistogramParams.code_bins)),
        code_region_bits=int(h.get("code_region_bits", HistogramParams.code_region_bits)),
        code_line_bits=int(h.get("code_line_bits", HistogramParams.code_line_bits)),
    )


def interval_params_of(meta: dict[str, Any]) -> IntervalParams:
    i = meta.get("interval") or {}
    return IntervalParams(kind=i.get("kind", "instructions"),
                          instructions=int(i.get("instructions", IntervalParams.instructions)),
                          ns=int(i.get("ns", IntervalParams.ns)),
                          samples=int(i.get("samples", IntervalParams.samples)))


def interval_dict(p: IntervalParams) -> dict[str, Any]:
    return {"kind": p.kind, "instructions": p.instructions, "ns": p.ns, "samples": p.samples}


def histograms_dict(p: HistogramParams) -> dict[str, Any]:
    return {"voltage_mv": list(p.voltage_mv), "voltage_bins": p.voltage_bins,
            "pfreq_mhz": list(p.pfreq_mhz), "pfreq_bins": p.pfreq_bins,
            "freq_mhz": list(p.freq_mhz), "freq_bins": p.freq_bins, "c0_bins": p.c0_bins,
            "ip_bins": p.ip_bins, "ip_fold_groups": p.ip_fold_groups,
            "text_range": list(p.text_range) if p.text_range else None,
            "code_bins": p.code_bins, "code_region_bits": p.code_region_bits,
            "code_line_bits": p.code_line_bits}
