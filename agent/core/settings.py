"""Detection settings as the commands and the daemon take them: detector and
interval parameters from options, the detector this host's signals support,
and the pipeline for a stream's metadata with those settings.  Whatever is
said to the user goes through the ``warn`` each caller passes."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import UserError
from . import detectors
from .params import (DEFAULT_CPI_TOLERANCE, DEFAULT_THRESHOLD, DetectorParams, IntervalParams, Params,
                     histogram_params_of, interval_params_of)

if TYPE_CHECKING:  # numba loads with the pipeline, when one is built
    from .pipeline import Pipeline
    from .source import Source


#: Detection settings, where neither an option nor a recording gives them.
DETECTION_DEFAULTS = {"detector": "vpf", "threshold": DEFAULT_THRESHOLD, "adaptive": False,
                      "cpi_tolerance": DEFAULT_CPI_TOLERANCE}


def with_detection(args, recorded: dict | None = None) -> argparse.Namespace:
    """``args`` with each detection setting not given as an option taken from
    ``recorded`` (a trace's ``detection`` metadata: what the recording
    command used), else from :data:`DETECTION_DEFAULTS`."""
    recorded = recorded or {}
    filled = {name: (given if (given := getattr(args, name, None)) is not None
                     else recorded.get(name, default))
              for name, default in DETECTION_DEFAULTS.items()}
    return argparse.Namespace(**{**vars(args), **filled})


def detection_dict(detector: DetectorParams) -> dict:
    """The ``detection`` metadata of a recording made with ``detector``."""
    return {"detector": detector.detector, "threshold": detector.threshold,
            "adaptive": detector.adaptive, "cpi_tolerance": detector.cpi_tolerance}


def detector_params(args) -> DetectorParams:
    if not 0.0 < args.threshold <= 1.0:
        raise UserError(f"--threshold {args.threshold}: give a distance in (0, 1]")
    if not 0.0 <= args.cpi_tolerance <= 10.0:
        raise UserError(f"--cpi-tolerance {args.cpi_tolerance}: give a log ratio in [0, 10]")
    return DetectorParams(detector=args.detector, threshold=args.threshold, adaptive=args.adaptive,
                          cpi_tolerance=args.cpi_tolerance)


def interval_params(args, default: IntervalParams, signals, warn) -> IntervalParams:
    if args.interval_ms is not None:
        if args.interval_ms <= 0:
            raise UserError(f"--interval-ms {args.interval_ms}: give a positive duration")
        return IntervalParams(kind="time", ns=round(args.interval_ms * 1e6))
    if getattr(args, "interval_samples", None) is not None:
        return IntervalParams(kind="samples", samples=args.interval_samples)
    chosen = default
    if args.interval_instructions is not None:
        if args.interval_instructions <= 0:
            raise UserError(f"--interval-instructions {args.interval_instructions}: "
                            f"give a positive count")
        chosen = IntervalParams(kind="instructions", instructions=args.interval_instructions)
    if chosen.kind == "instructions" and "instructions" not in signals:
        warn("the samples have no instruction counts: ending intervals every "
             f"{chosen.samples} samples instead ({chosen.samples} ms of the program's CPU "
             "time at 1 kHz; set it with --interval-samples or --interval-ms)")
        chosen = replace(chosen, kind="samples")
    return chosen


def choose_detector(requested: str, signals, warn) -> str:
    """``vpf`` gives way to ``vpf-ip`` where the host has neither voltage nor
    productive frequency but IP samples (a virtual machine)."""
    if (requested == "vpf" and not detectors.usable_segments("vpf", signals)
            and detectors.usable_segments("vpf-ip", signals)):
        warn("no core voltage or productive frequency on this host (no MSR access): "
             "detecting phases from instruction pointers (--detector vpf-ip)")
        requested = "vpf-ip"
    detectors.check_signals(requested, signals)
    return requested


def pipeline_of(source: Source, args, warn) -> Pipeline:
    """The pipeline for a source's samples, with the detection options given."""
    from .pipeline import Pipeline
    meta = source.metadata
    args = with_detection(args, meta.get("detection"))
    signals = tuple(meta.get("signals") or source.signals)
    detectors.check_signals(args.detector, signals)
    params = Params(interval=interval_params(args, interval_params_of(meta), signals, warn),
                    histograms=histogram_params_of(meta), detector=detector_params(args))
    return Pipeline.for_trace(meta, params)
