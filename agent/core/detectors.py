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

    Beside the code, ``vpf-ip`` compares the clock (base frequency times
    APERF/MPERF) and the busy share (C0 residency, MPERF/TSC) where they are
    sampled: the clock is the only frequency signal where there is no PPERF
    (AMD; Intel before Skylake), and the busy share tells a phase that waits
    (I/O, locks, sleeps) from one that computes in the same code.  Where
    either stays put (a fixed clock, a CPU never idle) its histogram is the
    same for every interval and decides nothing.  Its value segments are
    compared beyond sampling noise, as the code is
    (``histograms.cumulative_noise_level``).

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

from dataclasses import dataclass, replace

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
    #: Value segments compared beyond sampling noise (``vpf`` is the thesis's: as it was).
    value_noise: bool = False


#: The detectors of sample streams (live, traces, CSV): what ``run``,
#: ``replay``, ``report``, ``diff`` and ``phasewatchd`` take.
REGISTRY = {d.name: d for d in (
    Detector("vpf", ("voltage", "pfreq"), "regions", False,
             "voltage and productive frequency (the thesis)"),
    Detector("vpf-ip", ("voltage", "pfreq", "ip", "freq", "c0"), "regions", True,
             "also the code signature over all executable mappings, the clock and C0 residency",
             value_noise=True),
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
    "freq": ("aperf", "mperf"),
    "c0": ("mperf", "tsc"),
}
#: Signals that stand in for a segment's own where those are absent: core
#: voltage from hwmon where no register reports it (AMD Zen).
SEGMENT_ALTERNATIVES = {"voltage": (("vcore_mv",),)}


def segment_usable(segment: str, signals) -> bool:
    have = set(signals)
    return any(set(needed) <= have for needed in
               (SEGMENT_SIGNALS[segment], *SEGMENT_ALTERNATIVES.get(segment, ())))


def histograms_for(detector: str, hp):
    """The histogram parameters as the detector builds and compares them."""
    d = REGISTRY[detector]
    return replace(hp, ip_signature=d.ip_signature, value_noise=d.value_noise)


def counters_for(detector: str) -> tuple[str, ...]:
    """The raw counters the detector's segments are computed from."""
    return tuple(dict.fromkeys(s for seg in USED_SEGMENTS[detector]
                               for s in SEGMENT_SIGNALS[seg] if s not in ("perf_status", "ip")))


def used_mask(detector: str) -> np.ndarray:
    from .intervals import SEGMENTS  # numba: imported when a pipeline is built, not for options
    if detector not in USED_SEGMENTS:
        raise UserError(f"unknown detector {detector!r}: choose one of {', '.join(NAMES)}")
    return np.array([s in USED_SEGMENTS[detector] for s in SEGMENTS], np.bool_)


def usable_segments(detector: str, signals) -> list[str]:
    """The detector's segments whose raw signals are all present."""
    return [s for s in USED_SEGMENTS[detector] if segment_usable(s, signals)]


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
