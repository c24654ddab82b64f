"""The one schema that every trace's metadata is checked against when it is
read (:func:`validate`), and the typed view of its ``sampling`` field.

The schema (msgspec) types every field and bounds every number; keys it does
not know, as a newer version may write, are kept and ignored.  The keys and
their bounds are :mod:`.metadata`'s.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Literal

import msgspec
import msgspec.inspect
from msgspec import Meta, Struct, field

from ..core.cpumodels import UNKNOWN
from ..core.detectors import SAMPLE_DETECTORS
from ..core.params import (DEFAULT_CPI_TOLERANCE, DEFAULT_INTERVAL_INSTRUCTIONS,
                           DEFAULT_THRESHOLD, HistogramParams, IntervalParams)
from ..core.settings import LIMITS, MAX_INTERVAL_NS, MIN_INTERVAL_NS, Limit
from ..errors import UserError
from .metadata import (DEFAULT_PERIOD_NS, FORMAT, FORMAT_VERSION, MAX_BASE_MHZ, MAX_BINS,
                       MAX_REALTIME_OFFSET_NS, MAX_SAMPLE_RATE_HZ, MIN_SAMPLE_RATE_HZ, U64_MAX)


def bounded(limit: Limit, unit: str = "") -> Meta:
    """The msgspec constraint of a setting's range, its advice as description."""
    low = {"gt": limit.low} if limit.low_open else {"ge": limit.low}
    return Meta(**low, le=limit.high, description=limit.advice(unit))


Finite = Annotated[float, Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
Address = Annotated[int, Meta(ge=0)]       # and at most U64_MAX: _inconsistency
Pair = Meta(min_length=2, max_length=2)


class _Schema(Struct, forbid_unknown_fields=False):
    """Unknown keys are kept (a newer writer's); known ones must have the right type."""


class CpuSchema(_Schema):
    vendor: str = ""
    family: Annotated[int, Meta(ge=0)] | None = None
    model: Annotated[int, Meta(ge=0)] | None = None
    model_name: str = ""
    model_key: str = UNKNOWN.key


class IntervalSchema(_Schema):
    kind: Literal["instructions", "time", "samples"] = "instructions"
    instructions: Annotated[int, bounded(LIMITS["interval_instructions"])] = \
        DEFAULT_INTERVAL_INSTRUCTIONS
    ns: Annotated[int, Meta(ge=MIN_INTERVAL_NS, le=MAX_INTERVAL_NS)] = IntervalParams.ns
    samples: Annotated[int, bounded(LIMITS["interval_samples"])] = IntervalParams.samples


class HistogramSchema(_Schema):
    voltage_mv: Annotated[list[Finite], Pair] = None
    voltage_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = 32
    pfreq_mhz: Annotated[list[Finite], Pair] = None
    pfreq_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = 64
    freq_mhz: Annotated[list[Finite], Pair] = None
    freq_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = HistogramParams.freq_bins
    c0_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = HistogramParams.c0_bins
    ip_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = 32
    ip_fold_groups: Annotated[int, Meta(ge=1, le=8)] = 2
    ip_signature: Literal["regions", "fold"] = "regions"
    code_bins: Annotated[int, Meta(ge=2, le=MAX_BINS)] = HistogramParams.code_bins
    code_region_bits: Annotated[int, Meta(ge=4, le=40)] = HistogramParams.code_region_bits
    code_line_bits: Annotated[int, Meta(ge=0, le=40)] = HistogramParams.code_line_bits
    text_range: Annotated[list[Address], Pair] | None = None


class MappingSchema(_Schema):
    """One executable mapping of the watched process."""

    start: Address
    end: Address
    offset: Address
    path: str
    t_ns: Annotated[int, Meta(ge=-2**63, le=2**63 - 1)] | None = None
    #: The process the mapping is in (learnt from perf's records); none: every process's.
    pid: Annotated[int, Meta(ge=0, le=4_194_304)] | None = None


class DetectionSchema(_Schema):
    """The detection settings the recording command used: a replay's defaults."""

    detector: Literal[SAMPLE_DETECTORS] = "vpf"
    threshold: Annotated[float, bounded(LIMITS["threshold"])] = DEFAULT_THRESHOLD
    adaptive: bool = False
    cpi_tolerance: Annotated[float, bounded(LIMITS["cpi_tolerance"])] = DEFAULT_CPI_TOLERANCE


#: Phase ids a recording may name: they index arrays of phases, so they are
#: bounded like a count (ids are never given twice, so they grow run by run).
MAX_PHASE_ID = 2**31 - 1
#: The widest profile a known phase may have (every segment at MAX_BINS).
MAX_PROFILE_WIDTH = 16 * MAX_BINS
Count = Annotated[int, Meta(ge=0, le=2**62)]


class KnownPhaseSchema(_Schema):
    """A phase the recording's run started from (``core.classify.known_phase_dict``):
    its centroid sparse, ``index`` and ``value`` side by side."""

    id: Annotated[int, Meta(ge=0, le=MAX_PHASE_ID)]
    width: Annotated[int, Meta(ge=1, le=MAX_PROFILE_WIDTH)]
    index: list[Annotated[int, Meta(ge=0, le=MAX_PROFILE_WIDTH)]]
    value: list[Finite]
    members: list[Count]
    mean_samples: list[Finite]
    joins: Count = 0
    cpi_n: Count = 0
    log_cpi: Finite = 0.0
    cpi_last: Finite = 0.0
    cpi_d2: Finite = 0.0


class KnownPhasesSchema(_Schema):
    """The ``known_phases`` field: the catalogue's phases the run started from."""

    profile: str = ""
    next_id: Annotated[int, Meta(ge=0, le=MAX_PHASE_ID)] = 0
    phases: list[KnownPhaseSchema] = field(default_factory=list)


class Sampling(_Schema, frozen=True):
    """How the samples were taken (the ``sampling`` field): the collector's
    own description, with the numbers a replay computes with bounded."""

    source: str = ""
    sample_event: str = ""
    sample_rate_hz: Annotated[float, Meta(ge=MIN_SAMPLE_RATE_HZ, le=MAX_SAMPLE_RATE_HZ)] | None = None
    sample_period: Annotated[int, Meta(ge=1, le=2**63 - 1)] | None = None
    realtime_offset_ns: Annotated[int, Meta(ge=0, le=MAX_REALTIME_OFFSET_NS)] | None = None
    counter_scope: Literal["cpu", "thread"] = "cpu"
    clock: str = ""

    @classmethod
    def of(cls, sampling: dict[str, Any] | None) -> Sampling:
        """The typed view of a ``sampling`` dict (one :func:`validate` has
        checked, or a live collector's own)."""
        return msgspec.convert(sampling or {}, cls, strict=True)

    @property
    def period_ns(self) -> int:
        """Nanoseconds of CPU time one sample stands for."""
        if self.sample_rate_hz is None:
            return DEFAULT_PERIOD_NS
        return int(round(1e9 / self.sample_rate_hz))


class TraceSchema(_Schema):
    format: Literal["phasewatch-trace"] = FORMAT
    format_version: Annotated[int, Meta(ge=1)] = FORMAT_VERSION
    tool_version: str = ""
    host: str = ""
    kernel: str = ""
    created_unix_ns: int | None = None
    cpu: CpuSchema = field(default_factory=CpuSchema)
    base_freq_mhz: Annotated[float, Meta(gt=0.0, le=MAX_BASE_MHZ)] | None = None
    signals: dict[str, str] = field(default_factory=dict)
    interval: IntervalSchema = field(default_factory=IntervalSchema)
    detection: DetectionSchema | None = None
    histograms: HistogramSchema = field(default_factory=HistogramSchema)
    text_range: Annotated[list[Address], Pair] | None = None
    counter_scope: Literal["cpu", "thread"] = "cpu"
    mappings: list[MappingSchema] | None = None
    command: list[str] | None = None
    pinned_cpu: Annotated[int, Meta(ge=0)] | None = None
    sampling: Sampling | None = None
    source_file: str | None = None
    known_phases: KnownPhasesSchema | None = None


def validate(meta: Any, columns, where: str) -> dict[str, Any]:
    """``meta`` checked against :class:`TraceSchema`, and its ``signals``
    against the trace's ``columns``; a :class:`UserError` naming the first
    wrong field otherwise."""
    try:
        checked = msgspec.convert(meta, TraceSchema, strict=True)
    except msgspec.ValidationError as exc:
        field_path, message = _where(str(exc))
        name = f"field {field_path!r}" if field_path else "metadata"
        allowed = allowed_range(TraceSchema, field_path)
        raise UserError(f"{where}: trace {name}: {message}"
                        + (f" (allowed: {allowed})" if allowed else "")) from None
    problem = _inconsistency(checked)
    if problem:
        raise UserError(f"{where}: trace field {problem[0]!r}: {problem[1]}")
    absent = [name for name in meta.get("signals", {}) if name not in set(columns)]
    if absent:
        raise UserError(f"{where}: trace field 'signals' names {', '.join(absent)}, "
                        f"which the trace has no column for")
    return meta


def _where(error: str) -> tuple[str, str]:
    """(field as ``a.0.b``, message) of msgspec's ``message - at `$.a[0].b```."""
    message, _, path = error.rpartition(" - at `")
    if not message:
        return "", error
    return re.sub(r"\[(\d+)\]", r".\1", path.rstrip("`")).lstrip("$."), message


def allowed_range(schema: type, field_path: str) -> str | None:
    """The bounds of the number at ``field_path`` (``a.0.b``) of ``schema``,
    as ``[low, high]``, or None where it is not a bounded number."""
    kind = msgspec.inspect.type_info(schema)
    for part in field_path.split(".") if field_path else ():
        kind = _inner(kind, part)
        if kind is None:
            return None
    for number in _alternatives(kind):
        if isinstance(number, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
            low = "(" if number.gt is not None else "["
            high = ")" if number.lt is not None else "]"
            lo = number.gt if number.gt is not None else number.ge
            hi = number.lt if number.lt is not None else number.le
            if lo is not None or hi is not None:
                return f"{low}{_number(lo, '-inf')}, {_number(hi, 'inf')}{high}"
    return None


def _number(bound: float | None, unbounded: str) -> str:
    return unbounded if bound is None else f"{bound:g}" if isinstance(bound, float) else str(bound)


def _alternatives(kind) -> tuple:
    return kind.types if isinstance(kind, msgspec.inspect.UnionType) else (kind,)


def _inner(kind, part: str):
    """The type of field or item ``part`` inside ``kind``, or None."""
    for alternative in _alternatives(kind):
        if isinstance(alternative, msgspec.inspect.StructType):
            for f in alternative.fields:
                if f.encode_name == part:
                    return f.type
        elif isinstance(alternative, msgspec.inspect.ListType) and part.isdigit():
            return alternative.item_type
    return None


def _inconsistency(t: TraceSchema) -> tuple[str, str] | None:
    """(field, problem) of the first rule that types and bounds cannot say."""
    h = t.histograms
    addresses = [("text_range", t.text_range), ("histograms.text_range", h.text_range)]
    addresses += [(f"mappings.{i}", [m.start, m.end, m.offset]) for i, m in enumerate(t.mappings or ())]
    for name, values in addresses:
        problem = address_problem(values)
        if problem:
            return name, problem
    for name, pair in (("text_range", t.text_range), ("histograms.voltage_mv", h.voltage_mv),
                       ("histograms.pfreq_mhz", h.pfreq_mhz), ("histograms.freq_mhz", h.freq_mhz),
                       ("histograms.text_range", h.text_range)):
        if pair is not None and not pair[0] < pair[1]:
            return name, f"the start ({pair[0]}) must be below the end ({pair[1]})"
    if h.ip_bins & (h.ip_bins - 1):
        return "histograms.ip_bins", f"{h.ip_bins} is not a power of two"
    for i, p in enumerate(t.known_phases.phases if t.known_phases else ()):
        problem = _known_phase_problem(p)
        if problem:
            return f"known_phases.phases.{i}", problem
    return None


def _known_phase_problem(p: KnownPhaseSchema) -> str | None:
    if len(p.index) != len(p.value):
        return f"{len(p.index)} indices but {len(p.value)} values"
    if p.index and max(p.index) >= p.width:
        return f"index {max(p.index)} is beyond the width {p.width}"
    if len(p.members) != len(p.mean_samples):
        return f"{len(p.members)} member counts but {len(p.mean_samples)} mean samples"
    return None


def address_problem(values) -> str | None:
    if values is not None and max(values) > U64_MAX:
        return f"{max(values)} is beyond a 64-bit address"
    return None


def check_mapping(row: Any) -> str | None:
    """What is wrong with one executable mapping (as in ``mappings``), or None."""
    try:
        m = msgspec.convert(row, MappingSchema, strict=True)
    except msgspec.ValidationError as exc:
        field_path, message = _where(str(exc))
        return f"{field_path!r}: {message}" if field_path else message
    return address_problem([m.start, m.end, m.offset])
