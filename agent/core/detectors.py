"""The detectors: which parts of an execution profile each compares, and how.

``vpf``
    The thesis's detector.  Profiles are the core-voltage histogram and the
    productive-frequency histogram; both are ordered quantities, so each is
    compared with the cumulative histogram distance (a sample moved to a
    neighbouring bin costs little, one moved across the range costs much).
    The profile distance is the larger of the two: two intervals belong together
    only if neither signal tells them apart.

``vpf-ip``
    Adds the code signature: every sampled IP placed in its object (main
    executable, shared library, JIT mapping, kernel) and hashed at two
    resolutions, by 16 KiB code region and by 64-byte cache line, into 1024
    entries each (agent/core/codemap.py).  Its entries have no order, so each
    resolution is compared with the total-variation distance (half the L1
    distance, also 0..1): code that runs in disjoint places is at distance 1
    however close those places lie; beside it, the share of samples in code
    the phase never ran (histograms.code_distance).  Combined again by the maximum, so a change
    of code alone opens a new phase even when voltage and frequency stay alike.
    Where the host gives no voltage or frequency (a virtual machine), the IP
    vector is the only segment present and decides alone.

``vpf-ip-fold``
    ``vpf-ip`` with the thesis's IP vector instead: IPs folded into 32 entries
    over the main executable's ``.text``, kept for comparison.

Where instructions and cycles are counted exactly (a PMU), ``vpf-ip`` also
keeps an interval out of every phase whose mean CPI differs from the
interval's by more than a tolerance (``DetectorParams.cpi_tolerance``, a log
ratio; classify.py).  Without such counts it behaves as if the tolerance
were off.  ``vpf`` stays the thesis's detector and ``vpf-ip-fold`` its code
comparison, without it.

The IP segment is compared after allowing for sampling noise
(``histograms.segment_distance``).

``bbv``
    Basic-block vectors from SimPoint ``.bb`` files (valgrind exp-bbv), hashed
    to a fixed length and classified by the same leader-follower (see
    bbvdetect.py).  It reads ``.bb`` files only, not sample traces.

Segments an interval has no samples for are left out of the maximum, on either
side; if no segment is left, the distance is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UserError


@dataclass(frozen=True)
class Detector:
    """One detector of sample streams: the profile segments it compares, the
    IP signature its profiles carry, whether it keeps intervals out of
    phases of another CPI where counted, and a line for help texts."""

    name: str
    segments: tuple[str, ...]
    ip_signature: str
    uses_cpi: bool
    description: str


#: The detectors of sample streams (live, traces, CSV): what ``run``,
#: ``replay``, ``report``, ``diff`` and ``phasewatchd`` take.
REGISTRY = {d.name: d for d in (
    Detector("vpf", ("voltage", "pfreq"), "regions", False,
             "voltage and productive frequency (the thesis)"),
    Detector("vpf-ip", ("voltage", "pfreq", "ip"), "regions", True,
             "also the code signature over all executable mappings"),
    Detector("vpf-ip-fold", ("voltage", "pfreq", "ip"), "fold", False,
             "the thesis's 32-entry IP fold over .text instead"),
)}
SAMPLE_DETECTORS = tuple(REGISTRY)
#: Every detector; ``bbv`` reads SimPoint .bb files only (simpoint/bbvdetect.py).
NAMES = SAMPLE_DETECTORS + ("bbv",)
DESCRIPTIONS = {**{d.name: d.description for d in REGISTRY.values()},
                "bbv": "basic-block vectors (SimPoint .bb files, chosen for them)"}
USED_SEGMENTS = {d.name: d.segments for d in REGISTRY.values()}
IP_SIGNATURE = {d.name: d.ip_signature for d in REGISTRY.values()}
USES_CPI = frozenset(d.name for d in REGISTRY.values() if d.uses_cpi)

#: Raw signals each segment is computed from.
SEGMENT_SIGNALS = {
    "voltage": ("perf_status",),
    "pfreq": ("pperf", "mperf"),
    "ip": ("ip",),
}


def used_mask(detector: str) -> np.ndarray:
    from .intervals import SEGMENTS  # numba: imported when a pipeline is built, not for options
    if detector not in USED_SEGMENTS:
        raise UserError(f"unknown detector {detector!r}: choose one of {', '.join(NAMES)}")
    return np.array([s in USED_SEGMENTS[detector] for s in SEGMENTS], np.bool_)


def usable_segments(detector: str, signals) -> list[str]:
    """The detector's segments whose raw signals are all present."""
    have = set(signals)
    return [s for s in USED_SEGMENTS[detector] if set(SEGMENT_SIGNALS[s]) <= have]


def check_signals(detector: str, signals) -> list[str]:
    """Segments the detector can use with these signals; an error if none."""
    if detector == "bbv":
        raise UserError("detector bbv reads SimPoint .bb files (valgrind --tool=exp-bbv), "
                        "not sample traces: use --detector vpf or vpf-ip")
    usable = usable_segments(detector, signals)
    if usable:
        return usable
    need = " or ".join("+".join(SEGMENT_SIGNALS[s]) for s in USED_SEGMENTS[detector])
    hint = " (try --detector vpf-ip)" if "ip" in set(signals) and detector == "vpf" else ""
    raise UserError(f"detector {detector} needs {need}, and the samples have none of them{hint}")
