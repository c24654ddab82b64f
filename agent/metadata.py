"""What a trace says about where and how its samples were taken, and the one
schema that every trace's metadata is checked against when it is read.

The schema (pydantic) types every field and bounds every number; keys it does
not know, as a newer version may write, are kept and ignored.
"""

from __future__ import annotations

import platform
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import __version__
from .cpumodels import MAX_PLAUSIBLE_MHZ, UNKNOWN, CpuModel, by_key
from .errors import UserError
from .params import DEFAULT_INTERVAL_INSTRUCTIONS, HistogramParams, IntervalParams

FORMAT = "phasewatch-trace"
FORMAT_VERSION = 1

#: Bounds of the numbers in the metadata (and of the matching options).
MAX_BASE_MHZ = MAX_PLAUSIBLE_MHZ
MAX_INTERVAL_INSTRUCTIONS = 10**15
MIN_INTERVAL_NS, MAX_INTERVAL_NS = 10_000, 86_400 * 10**9   # 10 µs .. a day
MAX_BINS = 4096
U64_MAX = 2**64 - 1

Finite = Annotated[float, Field(allow_inf_nan=False)]
Address = Annotated[int, Field(ge=0, le=U64_MAX)]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def _ordered(pair: list) -> list:
    if pair is not None and not pair[0] < pair[1]:
        raise ValueError(f"the start ({pair[0]}) must be below the end ({pair[1]})")
    return pair


class CpuSchema(_Schema):
    vendor: str = ""
    family: Annotated[int, Field(ge=0)] | None = None
    model: Annotated[int, Field(ge=0)] | None = None
    model_name: str = ""
    model_key: str = UNKNOWN.key


class IntervalSchema(_Schema):
    kind: Literal["instructions", "time", "samples"] = "instructions"
    instructions: Annotated[int, Field(ge=1, le=MAX_INTERVAL_INSTRUCTIONS)] = \
        DEFAULT_INTERVAL_INSTRUCTIONS
    ns: Annotated[int, Field(ge=MIN_INTERVAL_NS, le=MAX_INTERVAL_NS)] = IntervalParams.ns
    samples: Annotated[int, Field(ge=1, le=10**9)] = IntervalParams.samples


class HistogramSchema(_Schema):
    voltage_mv: Annotated[list[Finite], Field(min_length=2, max_length=2)] = None
    voltage_bins: Annotated[int, Field(ge=2, le=MAX_BINS)] = 32
    pfreq_mhz: Annotated[list[Finite], Field(min_length=2, max_length=2)] = None
    pfreq_bins: Annotated[int, Field(ge=2, le=MAX_BINS)] = 64
    ip_bins: Annotated[int, Field(ge=2, le=MAX_BINS)] = 32
    ip_fold_groups: Annotated[int, Field(ge=1, le=8)] = 2
    ip_signature: Literal["regions", "fold"] = "regions"
    code_bins: Annotated[int, Field(ge=2, le=MAX_BINS)] = HistogramParams.code_bins
    code_region_bits: Annotated[int, Field(ge=4, le=40)] = HistogramParams.code_region_bits
    text_range: Annotated[list[Address], Field(min_length=2, max_length=2)] | None = None

    _ranges = field_validator("voltage_mv", "pfreq_mhz", "text_range")(_ordered)

    @field_validator("ip_bins")
    @classmethod
    def _power_of_two(cls, n: int) -> int:
        if n & (n - 1):
            raise ValueError(f"{n} is not a power of two")
        return n


class MappingSchema(_Schema):
    """One executable mapping of the watched process."""

    start: Address
    end: Address
    offset: Address
    path: str
    t_ns: int | None = None


class TraceSchema(_Schema):
    format: Literal[FORMAT] = FORMAT
    format_version: Annotated[int, Field(ge=1)] = FORMAT_VERSION
    tool_version: str = ""
    host: str = ""
    kernel: str = ""
    created_unix_ns: int | None = None
    cpu: CpuSchema = CpuSchema()
    base_freq_mhz: Annotated[float, Field(gt=0.0, le=MAX_BASE_MHZ, allow_inf_nan=False)] | None \
        = None
    signals: dict[str, str] = {}
    interval: IntervalSchema = IntervalSchema()
    histograms: HistogramSchema = HistogramSchema()
    text_range: Annotated[list[Address], Field(min_length=2, max_length=2)] | None = None
    counter_scope: Literal["cpu", "thread"] = "cpu"
    mappings: list[MappingSchema] | None = None
    command: list[str] | None = None
    pinned_cpu: Annotated[int, Field(ge=0)] | None = None
    sampling: dict[str, Any] | None = None
    source_file: str | None = None

    _text = field_validator("text_range")(_ordered)


def validate(meta: Any, columns, where: str) -> dict[str, Any]:
    """``meta`` checked against :class:`TraceSchema`, and its ``signals``
    against the trace's ``columns``; a :class:`UserError` naming the first
    wrong field otherwise."""
    try:
        TraceSchema.model_validate(meta)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        name = f"field {field!r}" if field else "metadata"
        raise UserError(f"{where}: trace {name}: {first['msg']}{more}") from None
    absent = [name for name in meta.get("signals", {}) if name not in set(columns)]
    if absent:
        raise UserError(f"{where}: trace field 'signals' names {', '.join(absent)}, "
                        f"which the trace has no column for")
    return meta


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
