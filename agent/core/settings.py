"""The detection settings: one frozen value, checked once, whoever gives it.

The command line (``phasewatch.cli.arguments``), the daemon's config file
(``phasewatch.daemon.config``) and a trace's recorded ``detection``
metadata each give some of the settings; :meth:`DetectionSettings.given`
puts them over the defaults.  Every bound is in :data:`LIMITS`, read by the
options' types, the config's schema and the trace metadata's schema alike.

:meth:`DetectionSettings.for_stream` fits the settings to a stream's signals
(a host without voltage falls back to the code signature, one without
instruction counts to intervals of samples) and :func:`pipeline_for` builds
the pipeline for them.  Whatever is said to the user goes through the
``warn`` the caller passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import UserError
from . import detectors
from .params import (DEFAULT_CPI_TOLERANCE, DEFAULT_MAX_PHASES, DEFAULT_THRESHOLD,
                     DetectorParams, IntervalParams, Params, histogram_params_of,
                     interval_params_of)

if TYPE_CHECKING:  # numba loads with the pipeline, when one is built
    from .pipeline import Pipeline


@dataclass(frozen=True)
class Limit:
    """The range of a numeric setting: [low, high], or (low, high] with
    ``low_open``; ``kind`` int or float; ``what`` it is, for the advice."""

    kind: type
    low: float
    high: float
    low_open: bool = False
    what: str = ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a valid setting, or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (self.kind is int and not isinstance(value, int)):
            return f"{value!r} is not {'an integer' if self.kind is int else 'a number'}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value!r} is not a finite number"
        if value < self.low or value > self.high or (self.low_open and value == self.low):
            return f"{value!r} is outside {self.describe()}"
        return None

    def describe(self) -> str:
        return f"{'(' if self.low_open else '['}{self._bound(self.low)}, {self._bound(self.high)}]"

    def _bound(self, x: float) -> str:
        return f"{int(x)}" if self.kind is int else f"{x:g}"

    def advice(self, unit: str = "") -> str:
        """What to give instead of a value out of range."""
        if self.what:
            return f"give {self.what} in {self.describe()}"
        return f"give a number from {_plain(self.low)} to {_plain(self.high)}{unit}"


def _plain(x) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


#: Nanoseconds an interval of time may last.
MIN_INTERVAL_NS, MAX_INTERVAL_NS = 10_000, 86_400 * 10**9   # 10 µs .. a day

#: Every numeric setting's range, defined here only.
LIMITS = {
    "threshold": Limit(float, 0.0, 1.0, low_open=True, what="a distance"),
    "cpi_tolerance": Limit(float, 0.0, 10.0),
    "interval_instructions": Limit(int, 1, 10**15),
    "interval_ms": Limit(float, MIN_INTERVAL_NS / 1e6, MAX_INTERVAL_NS / 1e6),
    "interval_samples": Limit(int, 1, 10**9),
    "max_phases": Limit(int, 2, 100_000),
}

#: The settings a recording keeps in its ``detection`` metadata.
RECORDED = ("detector", "threshold", "adaptive", "cpi_tolerance")
#: The ways to give an interval's length; at most one at a time.
INTERVAL_SETTINGS = ("interval_instructions", "interval_ms", "interval_samples")


def interval_of(name: str, value) -> IntervalParams:
    """The interval ``--NAME VALUE`` (a name of :data:`INTERVAL_SETTINGS`) asks for."""
    if name == "interval_instructions":
        return IntervalParams(kind="instructions", instructions=int(value))
    if name == "interval_ms":
        return IntervalParams(kind="time", ns=round(value * 1e6))
    return IntervalParams(kind="samples", samples=int(value))


@dataclass(frozen=True)
class DetectionSettings:
    """What the user chose of detection.  ``detector`` None: the best the
    stream's signals allow (:func:`best_detector`).  ``interval`` None: the
    stream's own (a trace's recorded interval), else the default."""

    detector: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    adaptive: bool = False
    cpi_tolerance: float = DEFAULT_CPI_TOLERANCE
    interval: IntervalParams | None = None
    max_phases: int = DEFAULT_MAX_PHASES

    def __post_init__(self):
        if self.detector is not None and self.detector not in detectors.NAMES:
            raise UserError(f"unknown detector {self.detector!r}: choose one of "
                            f"{', '.join(detectors.NAMES)}")
        for name in ("threshold", "cpi_tolerance", "max_phases"):
            problem = LIMITS[name].problem(getattr(self, name))
            if problem:
                raise UserError(f"{name.replace('_', ' ')}: {problem}")
        if not isinstance(self.adaptive, bool):
            raise UserError(f"adaptive: {self.adaptive!r} is not true or false")

    @classmethod
    def given(cls, values: Mapping[str, Any], recorded: Mapping[str, Any] | None = None,
              defaults: "DetectionSettings | None" = None) -> "DetectionSettings":
        """The settings ``values`` gives (a setting name, or one of
        :data:`INTERVAL_SETTINGS`, to its value; None for not given), each
        one not given taken from ``recorded`` (a trace's ``detection``
        metadata), else from ``defaults``."""
        defaults = defaults or cls()
        recorded = recorded or {}
        chosen = {name: value for name, value in values.items() if value is not None}
        lengths = [name for name in INTERVAL_SETTINGS if name in chosen]
        if len(lengths) > 1:
            raise UserError(f"{', '.join(lengths)} exclude each other: give one interval length")
        for name in lengths:
            problem = LIMITS[name].problem(chosen[name])
            if problem:
                raise UserError(f"{name.replace('_', ' ')}: {problem}")
        settled = {}
        for f in fields(cls):
            if f.name == "interval":
                settled["interval"] = (interval_of(lengths[0], chosen[lengths[0]]) if lengths
                                       else defaults.interval)
            elif f.name in chosen:
                settled[f.name] = chosen[f.name]
            elif f.name in RECORDED and f.name in recorded:
                settled[f.name] = recorded[f.name]
            else:
                settled[f.name] = getattr(defaults, f.name)
        return cls(**settled)

    def recorded(self) -> dict[str, Any]:
        """The ``detection`` metadata of a recording made with these settings."""
        return {name: getattr(self, name) for name in RECORDED}

    def detector_params(self) -> DetectorParams:
        return DetectorParams(detector=self.detector or "vpf", threshold=self.threshold,
                              adaptive=self.adaptive, max_phases=self.max_phases,
                              cpi_tolerance=self.cpi_tolerance)

    def params(self, meta: dict) -> Params:
        """The pipeline's parameters for a stream described by ``meta``."""
        return Params(interval=self.interval or interval_params_of(meta),
                      histograms=histogram_params_of(meta), detector=self.detector_params())

    def for_stream(self, signals, warn: Callable[[str], None], *,
                   default_interval: IntervalParams = IntervalParams(),
                   fall_back: bool = False, rate_hz: float = 1000.0) -> "DetectionSettings":
        """The settings fitted to a stream of ``signals``: its interval made
        concrete (``default_interval`` where none was chosen; samples where
        instructions are not counted), and, with ``fall_back``, ``vpf``
        giving way to ``vpf-ip`` where only IPs are sampled.  An error if the
        detector can use none of the signals.  ``rate_hz``: samples a second
        of CPU time, for the warning's milliseconds."""
        if self.detector is None:
            detector = best_detector(signals)
        else:
            detector = choose_detector(self.detector, signals, warn) if fall_back else self.detector
        detectors.check_signals(detector, signals)
        interval = self.interval or default_interval
        if interval.kind == "instructions" and "instructions" not in signals:
            ms = interval.samples * 1000.0 / (rate_hz or 1000.0)
            warn("the samples have no instruction counts: ending intervals every "
                 f"{interval.samples} samples instead ({ms:g} ms of the program's CPU time at "
                 f"{rate_hz:g} Hz; set it with --interval-samples or --interval-ms)")
            interval = replace(interval, kind="samples")
        return replace(self, detector=detector, interval=interval)


#: Said after the detector's name where no option or recording chose it.
DEFAULT_NOTE = " (the default with IP samples)"


def detector_label(detector: str, chosen: str | None) -> str:
    """The detector as the first line of output names it: ``chosen`` None
    (nothing chose one) says that it is the default for the signals."""
    return detector + (DEFAULT_NOTE if chosen is None and detector == "vpf-ip" else "")


def best_detector(signals) -> str:
    """The detector where none is chosen: ``vpf-ip`` wherever IPs are sampled
    (it scores best on the held-out programs, docs/detection.md), else ``vpf``."""
    return "vpf-ip" if detectors.usable_segments("vpf-ip", signals) and "ip" in set(signals) \
        else "vpf"


def choose_detector(requested: str | None, signals, warn) -> str:
    """``vpf`` gives way to ``vpf-ip`` where the host has neither voltage nor
    productive frequency but IP samples (a virtual machine); none chosen, the
    best the signals allow."""
    if requested is None:
        return best_detector(signals)
    if (requested == "vpf" and not detectors.usable_segments("vpf", signals)
            and detectors.usable_segments("vpf-ip", signals)):
        warn("no core voltage or productive frequency on this host (no MSR access): "
             "detecting phases from instruction pointers (--detector vpf-ip)")
        requested = "vpf-ip"
    return requested


def pipeline_for(meta: dict, settings: DetectionSettings, signals, warn, *,
                 fall_back: bool = False) -> Pipeline:
    """The pipeline for a stream described by ``meta`` whose samples have
    ``signals``, with ``settings`` fitted to them; the interval is the
    stream's own where the settings choose none."""
    from .pipeline import Pipeline
    fitted = settings.for_stream(signals, warn, default_interval=interval_params_of(meta),
                                 fall_back=fall_back)
    return Pipeline.for_trace(meta, fitted.params(meta))
