"""What the commands' parsers share: argparse types for numeric options (each
value finite and in a stated range, or refused in one line), and the
detection options every command that detects phases takes."""

from __future__ import annotations

import argparse
import math

from ..core import detectors
from ..core.params import DEFAULT_CPI_TOLERANCE, DEFAULT_THRESHOLD
from ..core.settings import INTERVAL_SETTINGS, LIMITS, DetectionSettings, Limit


def number(kind: type, low: float, high: float, *, low_open: bool = False):
    """An argparse ``type`` for a ``kind`` (int or float) in [low, high],
    or (low, high] with ``low_open``."""
    return within(Limit(kind, low, high, low_open))


def within(limit: Limit):
    """An argparse ``type`` for a number within ``limit``."""
    kind = limit.kind

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {_article(kind)}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if limit.problem(value):
            raise argparse.ArgumentTypeError(f"{text!r} is outside {limit.describe()}")
        return value

    parse.__name__ = kind.__name__      # argparse names the type in its messages
    return parse


def _article(kind: type) -> str:
    return "an integer" if kind is int else "a number"


#: How the defaults of the detection options read in a replaying command's --help.
RECORDED = "what the trace records, else "
#: The options of :func:`add_detector_arguments` that are detection settings.
SETTING_OPTIONS = ("detector", "threshold", "adaptive", "cpi_tolerance") + INTERVAL_SETTINGS


def add_detector_arguments(parser, output: bool = True, names=detectors.NAMES,
                           default: str = RECORDED) -> None:
    """The detection options; ``names`` the detectors the command takes.
    Unset options stay None, for a trace's recorded settings to fill
    (:func:`settings_of`); ``default`` says so in the help."""
    parser.add_argument("--detector", choices=names, default=None,
                        help="; ".join(f"{name}: {detectors.DESCRIPTIONS[name]}" for name in names)
                             + f" (default: {default}vpf-ip where IPs are sampled, else vpf)")
    parser.add_argument("--threshold", type=within(LIMITS["threshold"]),
                        default=None, metavar="X",
                        help="distance in (0, 1] under which an interval joins a phase "
                             f"(default: {default}{DEFAULT_THRESHOLD})")
    parser.add_argument("--adaptive", action="store_true", default=None,
                        help="adapt the threshold online to the distances within phases")
    parser.add_argument("--cpi-tolerance", type=within(LIMITS["cpi_tolerance"]), default=None,
                        metavar="X",
                        help="vpf-ip, where instructions and cycles are counted: keep an "
                             "interval out of phases whose CPI differs by more than this "
                             "log ratio; 0 compares code and frequency only "
                             f"(default: {default}{DEFAULT_CPI_TOLERANCE})")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--interval-instructions", metavar="N",
                      type=within(LIMITS["interval_instructions"]),
                      help=f"end an interval every N retired instructions (default: {default}100M; "
                           "at most 1e15)")
    size.add_argument("--interval-ms", metavar="MS", type=within(LIMITS["interval_ms"]),
                      help="end an interval every MS milliseconds instead (0.01 to 86400000)")
    size.add_argument("--interval-samples", metavar="N", type=within(LIMITS["interval_samples"]),
                      help="end an interval every N samples instead (N ms of the "
                           "program's CPU time at 1 kHz, however busy the host)")
    if output:
        parser.add_argument("--output", metavar="FILE", help="write the results, one per interval: "
                                                            "CSV if FILE ends in .csv, else JSON Lines")


def given_settings(args) -> dict:
    """The detection options given on the command line (None: not given)."""
    return {name: getattr(args, name, None) for name in SETTING_OPTIONS}


def settings_of(args, recorded: dict | None = None) -> DetectionSettings:
    """The detection settings of the options given, over ``recorded`` (a
    trace's ``detection`` metadata) and the defaults."""
    return DetectionSettings.given(given_settings(args), recorded)
