"""What a trace says about where and how its samples were taken."""

from __future__ import annotations

import platform
import time
from typing import Any

from . import __version__
from .cpumodels import UNKNOWN, CpuModel, by_key
from .params import HistogramParams, IntervalParams

FORMAT = "phasewatch-trace"
FORMAT_VERSION = 1


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
        "interval": _interval_dict(interval or IntervalParams()),
        "histograms": _histograms_dict(histograms or HistogramParams()),
    }
    meta.update(extra)
    return meta


def cpu_model(meta: dict[str, Any]) -> CpuModel:
    return by_key((meta.get("cpu") or {}).get("model_key", UNKNOWN.key))


def histogram_params(meta: dict[str, Any]) -> HistogramParams:
    h = meta.get("histograms") or {}
    text = meta.get("text_range") or h.get("text_range")
    model = cpu_model(meta)
    return HistogramParams(
        voltage_mv=tuple(h.get("voltage_mv", model.voltage_range_mv)),
        voltage_bins=int(h.get("voltage_bins", 32)),
        pfreq_mhz=tuple(h.get("pfreq_mhz", (0.0, model.freq_max_mhz))),
        pfreq_bins=int(h.get("pfreq_bins", 64)),
        ip_bins=int(h.get("ip_bins", 32)),
        ip_fold_groups=int(h.get("ip_fold_groups", 2)),
        text_range=tuple(int(x) for x in text) if text else None,
        code_bins=int(h.get("code_bins", HistogramParams.code_bins)),
        code_region_bits=int(h.get("code_region_bits", HistogramParams.code_region_bits)),
    )


def interval_params(meta: dict[str, Any]) -> IntervalParams:
    i = meta.get("interval") or {}
    return IntervalParams(kind=i.get("kind", "instructions"),
                          instructions=int(i.get("instructions", IntervalParams.instructions)),
                          ns=int(i.get("ns", IntervalParams.ns)),
                          samples=int(i.get("samples", IntervalParams.samples)))


def _interval_dict(p: IntervalParams) -> dict[str, Any]:
    return {"kind": p.kind, "instructions": p.instructions, "ns": p.ns, "samples": p.samples}


def _histograms_dict(p: HistogramParams) -> dict[str, Any]:
    return {"voltage_mv": list(p.voltage_mv), "voltage_bins": p.voltage_bins,
            "pfreq_mhz": list(p.pfreq_mhz), "pfreq_bins": p.pfreq_bins,
            "ip_bins": p.ip_bins, "ip_fold_groups": p.ip_fold_groups,
            "text_range": list(p.text_range) if p.text_range else None,
            "code_bins": p.code_bins, "code_region_bits": p.code_region_bits}
