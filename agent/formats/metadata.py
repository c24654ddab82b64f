"""What a trace says about where and how its samples were taken: its keys,
their bounds, and the metadata of a new trace.  The schema every trace's
metadata is checked against when it is read is :mod:`.schema`'s (loaded only
to read one: msgspec takes 8 ms to import).
"""

from __future__ import annotations

import platform
import time
from typing import Any

from .. import __version__
from ..core.cpumodels import MAX_PLAUSIBLE_MHZ, UNKNOWN
from ..core.params import HistogramParams, IntervalParams, histograms_dict, interval_dict

FORMAT = "phasewatch-trace"
FORMAT_VERSION = 1

#: Bounds of the numbers in the metadata (the settings' own: core.settings.LIMITS).
MAX_BASE_MHZ = MAX_PLAUSIBLE_MHZ
MAX_BINS = 4096
U64_MAX = 2**64 - 1
#: Sampling rates a trace may record: from one sample in 1000 s to 1 MHz.
MIN_SAMPLE_RATE_HZ, MAX_SAMPLE_RATE_HZ = 0.001, 1_000_000.0
#: CLOCK_REALTIME minus CLOCK_MONOTONIC: from the epoch to 2**62 ns after it
#: (year 2116), so that adding a sample's time stays within 64 bits.
MAX_REALTIME_OFFSET_NS = 2**62
#: Nanoseconds one sample stands for where the trace records no rate (1 kHz).
DEFAULT_PERIOD_NS = 1_000_000


def kernel_sampled(sampling: dict) -> bool:
    """Whether a source's sampling (metadata, or its parts') took kernel mode too."""
    return any(part.get("kernel") for part in [sampling, *sampling.get("parts", [])])


def new(*, cpu: dict[str, Any] | None = None, base_freq_mhz: float | None = None,
        signals: dict[str, str] | None = None, interval: IntervalParams | None = None,
        histograms: HistogramParams | None = None, **extra) -> dict[str, Any]:
    """Metadata for a new trace.  ``signals`` maps each sampled column to the
    source it came from (``"msr"``, ``"perf"``, ``"kmod"``, ``"csv"`` …)."""
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool_version": __version__,
        "host": platform.node(),
        "kernel": platform.release(),
        "created_unix_ns": time.time_ns(),
        "cpu": cpu or {"vendor": "", "family": None, "model": None,
                       "model_name": "", "model_key": UNKNOWN.key},
        "base_freq_mhz": base_freq_mhz,
        "signals": signals or {},
        "interval": interval_dict(interval or IntervalParams()),
        "histograms": histograms_dict(histograms or HistogramParams()),
    }
    meta.update(extra)
    return meta
