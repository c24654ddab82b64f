"""What the commands' parsers share: argparse types for numeric options (each
value finite and in a stated range, or refused in one line), and the
detection options every command that detects phases takes."""

from __future__ import annotations

import argparse
import math

from ..core import detectors
from ..core.params import DEFAULT_CPI_TOLERANCE, DEFAULT_THRESHOLD
from ..formats.metadata import MAX_INTERVAL_INSTRUCTIONS, MAX_INTERVAL_NS, MIN_INTERVAL_NS


def number(kind: type, low: float, high: float, *, low_open: bool = False):
    """An argparse ``type`` for a ``kind`` (int or float) in [low, high],
    or (low, high] with ``low_open``."""
    opening = "(" if low_open else "["

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {_article(kind)}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or value > high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is outside {opening}{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__      # argparse names the type in its messages
    return parse


def _article(kind: type) -> str:
    return "an integer" if kind is int else "a number"


#: The detectors for samples (a SimPoint .bb file takes bbv).
SAMPLE_DETECTORS = tuple(name for name in detectors.NAMES if name != "bbv")

DETECTOR_HELP = {
    "vpf": "voltage and productive frequency (the thesis)",
    "vpf-ip": "also the code signature over all executable mappings",
    "vpf-ip-fold": "the thesis's 32-entry IP fold over .text instead",
    "bbv": "basic-block vectors (SimPoint .bb files, chosen for them)",
}


#: How the defaults of the detection options read in a replaying command's --help.
RECORDED = "what the trace records, else "


def add_detector_arguments(parser, output: bool = True, names=detectors.NAMES,
                           default: str = RECORDED) -> None:
    """The detection options; ``names`` the detectors the command takes.
    Unset options stay None, for a trace's recorded settings to fill
    (:func:`phasewatch.core.settings.with_detection`); ``default`` says so
    in the help."""
    parser.add_argument("--detector", choices=names, default=None,
                        help="; ".join(f"{name}: {DETECTOR_HELP[name]}" for name in names) +
                             f" (default: {default}vpf)")
    parser.add_argument("--threshold", type=number(float, 0.0, 1.0, low_open=True),
                        default=None, metavar="X",
                        help="distance in (0, 1] under which an interval joins a phase "
                             f"(default: {default}{DEFAULT_THRESHOLD})")
    parser.add_argument("--adaptive", action="store_true", default=None,
                        help="adapt the threshold online to the distances within phases")
    parser.add_argument("--cpi-tolerance", type=number(float, 0.0, 10.0), default=None,
                        metavar="X",
                        help="vpf-ip, where instructions and cycles are counted: keep an "
                             "interval out of phases whose CPI differs by more than this "
                             "log ratio; 0 compares code and frequency only "
                             f"(default: {default}{DEFAULT_CPI_TOLERANCE})")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--interval-instructions", metavar="N",
                      type=number(int, 1, MAX_INTERVAL_INSTRUCTIONS),
                      help=f"end an interval every N retired instructions (default: {default}100M; "
                           "at most 1e15)")
    size.add_argument("--interval-ms", metavar="MS",
                      type=number(float, MIN_INTERVAL_NS / 1e6, MAX_INTERVAL_NS / 1e6),
                      help="end an interval every MS milliseconds instead (0.01 to 86400000)")
    size.add_argument("--interval-samples", metavar="N", type=number(int, 1, 10**9),
                      help="end an interval every N samples instead (N ms of the "
                           "program's CPU time at 1 kHz, however busy the host)")
    if output:
        parser.add_argument("--output", metavar="FILE", help="write the results, one per interval: "
                                                            "CSV if FILE ends in .csv, else JSON Lines")
