"""Leader-follower phase classification, one interval at a time.

An interval stays in the previous phase if that phase's centroid is within the
threshold; otherwise it takes the nearest centroid within the threshold.  An
interval that fits no phase does not open one at once: it opens a *candidate*
and is labelled with the nearest phase, marked tentative.  A candidate becomes
a phase, with a new id, when a later interval fits it; at most
:data:`CANDIDATES` wait at a time, the oldest giving way.  So a behaviour seen
in one interval only (most often an interval that straddles a change) never
becomes a phase of its own, and a change is confirmed one interval after it is
seen.  The first phase of a run needs no candidate.

An interval with no usable samples keeps the previous phase's id, marked as
having no data; it never opens, joins or evicts a phase.

Centroids are running means of their members, segment by segment, each new
member weighing at least ``1 / memory``: a phase follows behaviour that drifts
slowly instead of leaving a chain of phases behind it.  When a phase has
gained members (at powers of two, then every 16), it is compared with every
other phase, and two phases whose centroids have come within ``merge_share``
of the threshold merge into the older; the younger's id is retired.

The distance of a profile to a centroid is the largest of the segment
distances over the segments both have (see agent/core/detectors.py).

Where a source counts instructions and cycles exactly (a PMU), each interval
also carries its log CPI, and a phase keeps the mean of its members' (not
decayed: a phase does not follow a CPI ramp).  With a CPI tolerance ``tol`` (a
log ratio; 0 turns it off), an interval whose CPI is more than a factor
``exp(tol)`` from a phase's is kept out of that phase whatever its profile:
its distance to it counts as :data:`GATED` and is reported as 1.  A phase
whose CPI scatters from one member to the next by more than that tolerates
:data:`CPI_NOISE_Z` standard deviations of the scatter, estimated from
successive members' differences, which a slow trend does not widen.
Intervals or phases with no known CPI are never kept out (docs/signals.md).

With the adaptive threshold, the threshold follows the distances of intervals
that joined a phase: an exponentially weighted mean plus ``z`` standard
deviations, clamped to [min, max], starting from the fixed threshold and moving
only after ``warmup`` joins.  Where distances are corrected for noise (the code
signature) they are mostly 0 within a phase, and the threshold sinks to its
floor; the candidates keep the rare interval beyond it from opening a phase.

At most ``max_phases`` phases are live.  A new phase beyond that takes the
slot of the phase used least recently, which is retired: it is never matched
again and its id is not reused.  Phase ids count every phase ever opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .histograms import segment_distance
from .kernels import kernel
from .params import DetectorParams

#: An interval stays in the previous phase only if no other phase is nearer
#: by more than this: an interval at a transition that opened a phase of its
#: own does not hold the intervals after it there.
STAY_MARGIN = 0.05
#: The distance of an interval to a phase whose CPI is out of tolerance is
#: this plus their log CPI ratio: above every threshold (at most 1), so such a
#: phase is neither stayed in nor joined, ranked behind every phase that is in
#: tolerance, and among such phases the nearest in CPI first.
GATED = 2.0
#: A phase's CPI tolerance is at least this many standard deviations of its
#: members' log CPI: beyond 4, noise alone goes about once in 16,000 intervals.
CPI_NOISE_Z = 4.0
#: Candidates waiting for a second interval, at most.
CANDIDATES = 8
#: A phase is compared with the others for a merge when its joins reach a
#: power of two, and then every this many joins.
MERGE_EVERY = 16
#: What each interval's label means.
MATCHED, NO_DATA, TENTATIVE = 0, 1, 2
# Slot kinds.
FREE, PHASE, CANDIDATE = 0, 1, 2
# Integer slot columns: phase id, interval last used, kind, members with a
# known CPI, intervals joined.
_ID, _USED_AT, _KIND, _CPI_N, _JOINS = range(5)
# Float slot columns: mean log CPI, the last member's, sum of squared
# differences between successive members'.
_LOG_CPI, _CPI_LAST, _CPI_D2 = range(3)
#: The CPI band is fitted to the run only once this many intervals have a CPI.
RUN_WARMUP = 8
# Threshold state: the threshold, mean and variance of the distances of
# joins, and joins seen; then the count, mean and sum of squared deviations of
# every interval's log CPI so far.
_THR, _MEAN, _VAR, _SEEN_D, _RUN_N, _RUN_MEAN, _RUN_M2 = range(7)
# Counters: phases opened, retired, merged; intervals classified; slots in
# use (high-water mark); slot of the previous phase; live phases; candidates;
# the id the last interval of the previous call takes after all, or -1.
_OPENED, _RETIRED, _MERGED, _SEEN, _HIGH, _PREV, _LIVE, _WAITING, _RELABEL = range(9)


class Decisions(NamedTuple):
    """Each interval's phase id, distance, whether it opened the phase, and
    its status (:data:`MATCHED`, :data:`NO_DATA` or :data:`TENTATIVE`)."""

    phase: np.ndarray
    distance: np.ndarray
    new_phase: np.ndarray
    status: np.ndarray


@dataclass(frozen=True)
class KnownPhase:
    """A phase as it outlives a run (the catalogue keeps these): all the
    classifier needs to know the behaviour again, under the same id."""

    id: int
    centroid: np.ndarray        # the profile, every segment normalised
    members: np.ndarray         # intervals behind each segment, capped at memory
    mean_samples: np.ndarray    # samples a member, per segment
    joins: int                  # intervals joined
    cpi_n: int = 0              # members with a known CPI
    log_cpi: float = 0.0        # their mean log CPI
    cpi_last: float = 0.0
    cpi_d2: float = 0.0         # squared differences of successive members' log CPI


def known_phase_dict(p: KnownPhase) -> dict:
    """A known phase as trace metadata keeps it: the centroid sparse (the
    code signature is mostly zeros)."""
    nonzero = np.flatnonzero(p.centroid)
    return {"id": p.id, "width": len(p.centroid), "index": nonzero.tolist(),
            "value": p.centroid[nonzero].tolist(), "members": p.members.tolist(),
            "mean_samples": p.mean_samples.tolist(), "joins": p.joins, "cpi_n": p.cpi_n,
            "log_cpi": p.log_cpi, "cpi_last": p.cpi_last, "cpi_d2": p.cpi_d2}


def known_phase_of(d: dict) -> KnownPhase:
    centroid = np.zeros(int(d["width"]))
    centroid[np.asarray(d["index"], np.int64)] = np.asarray(d["value"], np.float64)
    return KnownPhase(int(d["id"]), centroid, np.asarray(d["members"], np.int64),
                      np.asarray(d["mean_samples"], np.float64), int(d["joins"]),
                      int(d["cpi_n"]), float(d["log_cpi"]), float(d["cpi_last"]),
                      float(d["cpi_d2"]))


class ClassifierState:
    """Centroids, candidates and the threshold, grown as phases appear."""

    def __init__(self, width: int, n_segments: int, params: DetectorParams, capacity: int = 64):
        if params.max_phases < 1:
            raise ValueError(f"max_phases {params.max_phases}: at least 1")
        if params.memory < 1:
            raise ValueError(f"memory {params.memory}: at least 1")
        self.params = params
        capacity = min(capacity, self.limit)
        self.centroids = np.zeros((capacity, width))
        self.members = np.zeros((capacity, n_segments), np.int64)   # capped at memory
        self.mean_samples = np.zeros((capacity, n_segments))        # samples a member
        self.slots = np.zeros((capacity, 5), np.int64)
        self.slots[:, _ID] = -1
        self.cpi = np.zeros((capacity, 3))
        self.counters = np.zeros(9, np.int64)
        self.counters[_PREV] = -1
        self.threshold = initial_threshold(params)
        #: The first id this run gives a phase it opens: ids before it are known phases'.
        self.first_id = 0

    def seed(self, phases: list[KnownPhase], next_id: int) -> None:
        """Start from phases known before (the catalogue's, most wanted
        first, at most half of ``max_phases``): an interval that fits one
        takes its id; a phase opened takes ``next_id`` on, so that no id is
        ever given twice.  Only before the first interval."""
        if self.counters[_SEEN] or self.counters[_HIGH]:
            raise ValueError("known phases are given before the first interval")
        width = self.centroids.shape[1]
        phases = [p for p in phases if len(p.centroid) == width][:max(self.params.max_phases // 2, 1)]
        while len(self.centroids) < len(phases):
            self.grow()
        for slot, p in enumerate(phases):
            self.centroids[slot] = p.centroid
            self.members[slot] = np.minimum(p.members, self.params.memory)
            self.mean_samples[slot] = p.mean_samples
            self.slots[slot] = (p.id, 0, PHASE, p.cpi_n, p.joins)
            self.cpi[slot] = (p.log_cpi, p.cpi_last, p.cpi_d2)
        self.counters[_HIGH] = self.counters[_LIVE] = len(phases)
        ids = [p.id for p in phases]
        self.first_id = max([next_id, *(i + 1 for i in ids)])
        self.counters[_OPENED] = self.first_id

    def known(self, ids=None) -> list[KnownPhase]:
        """Every live phase (or those of ``ids``), to be kept beyond the run."""
        high = int(self.counters[_HIGH])
        wanted = range(high) if ids is None else [
            s for s in range(high) if int(self.slots[s, _ID]) in ids]
        return [KnownPhase(int(self.slots[s, _ID]), self.centroids[s].copy(),
                           self.members[s].copy(), self.mean_samples[s].copy(),
                           int(self.slots[s, _JOINS]), int(self.slots[s, _CPI_N]),
                           float(self.cpi[s, _LOG_CPI]), float(self.cpi[s, _CPI_LAST]),
                           float(self.cpi[s, _CPI_D2]))
                for s in wanted if self.slots[s, _KIND] == PHASE]

    @property
    def next_id(self) -> int:
        """The id the next phase opened would take."""
        return int(self.counters[_OPENED])

    @property
    def limit(self) -> int:
        return self.params.max_phases + CANDIDATES

    @property
    def n_phases(self) -> int:
        """Phases opened so far in this run, retired ones included."""
        return int(self.counters[_OPENED]) - self.first_id

    @property
    def retired(self) -> int:
        """Phases dropped to keep at most ``max_phases`` live, or merged."""
        return int(self.counters[_RETIRED])

    @property
    def merged(self) -> int:
        return int(self.counters[_MERGED])

    @property
    def live(self) -> int:
        """Phases live now."""
        return int(self.counters[_LIVE])

    @property
    def relabel(self) -> int:
        """After :func:`classify`: the phase id that the last interval of the
        call before takes after all (it was tentative, and opened the phase
        this call confirmed first thing), or -1."""
        return int(self.counters[_RELABEL])

    @property
    def ids(self) -> np.ndarray:
        """The phase id of each slot in use; -1 for a candidate or a free slot."""
        high = int(self.counters[_HIGH])
        return np.where(self.slots[:high, _KIND] == PHASE, self.slots[:high, _ID], -1)

    def grow(self) -> None:
        cap = len(self.centroids)
        extra = min(cap, self.limit - cap)
        self.centroids = np.vstack([self.centroids, np.zeros((extra, self.centroids.shape[1]))])
        self.members = np.vstack([self.members, np.zeros((extra, self.members.shape[1]), np.int64)])
        self.mean_samples = np.vstack([self.mean_samples,
                                       np.zeros((extra, self.mean_samples.shape[1]))])
        slots = np.zeros((extra, 5), np.int64)
        slots[:, _ID] = -1
        self.slots = np.vstack([self.slots, slots])
        self.cpi = np.vstack([self.cpi, np.zeros((extra, 3))])


def detector_settings(p: DetectorParams) -> np.ndarray:
    """The parameters the kernel reads, as one array."""
    return np.array([1.0 if p.adaptive else 0.0, p.adaptive_z, p.adaptive_alpha,
                     p.adaptive_min, p.adaptive_max, float(p.adaptive_warmup),
                     float(p.max_phases), float(p.memory), 1.0 if p.probation else 0.0,
                     p.merge_share, p.cpi_run_share, p.cpi_floor])


(_ADAPTIVE, _Z, _ALPHA, _MIN, _MAX, _WARMUP, _MAX_PHASES, _MEMORY, _PROBATION, _MERGE,
 _RUN_SHARE, _FLOOR) = range(12)


def initial_threshold(p: DetectorParams) -> np.ndarray:
    return np.array([p.threshold, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def interval_log_cpi(instructions: np.ndarray, cycles: np.ndarray) -> np.ndarray:
    """Each interval's log CPI from its counted instructions and cycles; NaN
    where either was not counted (no PMU)."""
    instructions = np.asarray(instructions, np.float64)
    cycles = np.asarray(cycles, np.float64)
    known = (instructions > 0) & (cycles > 0)
    return np.log(np.where(known, cycles, 1.0) / np.where(known, instructions, 1.0),
                  where=known, out=np.full(len(known), np.nan))


def classify(profiles: np.ndarray, counts: np.ndarray, bounds: np.ndarray,
             kinds: np.ndarray, used: np.ndarray, state: ClassifierState,
             log_cpi: np.ndarray | None = None, cpi_tolerance: float = 0.0) -> Decisions:
    """Classify intervals in order.  ``counts`` holds each interval's samples
    per segment.  The distance is to the centroid of the phase taken, or, for
    a new phase or a tentative interval, to the nearest one (NaN for the first
    interval and for intervals without data).  ``log_cpi`` (NaN: unknown) and
    ``cpi_tolerance`` (0: off) keep intervals out of phases of another CPI."""
    n = len(profiles)
    if log_cpi is None:
        log_cpi = np.full(n, np.nan)
    out = Decisions(np.empty(n, np.int64), np.empty(n, np.float64), np.empty(n, np.bool_),
                    np.empty(n, np.int8))
    settings = detector_settings(state.params)
    log_cpi = np.ascontiguousarray(log_cpi, np.float64)
    state.counters[_RELABEL] = -1
    done = 0
    while done < n:
        done = _classify_kernel(profiles, counts, bounds, kinds, used, done, settings,
                                state.centroids, state.members, state.mean_samples,
                                state.slots, state.cpi, state.counters, state.threshold,
                                log_cpi, float(cpi_tolerance), *out)
        if done < n:
            state.grow()
    return out


@kernel(cache=True, nogil=True)
def profile_distance(x, x_counts, c, c_members, bounds, kinds, used):
    """Largest segment distance over the used segments both sides have; 1 if none."""
    d = -1.0
    for s in range(len(kinds)):
        if used[s] and x_counts[s] > 0 and c_members[s] > 0:
            lo, hi = bounds[s], bounds[s + 1]
            d = max(d, segment_distance(x[lo:hi], x_counts[s], c[lo:hi], c_members[s], kinds[s]))
    return d if d >= 0.0 else 1.0


@kernel(cache=True, nogil=True)
def has_data(x_counts, used):
    for s in range(len(used)):
        if used[s] and x_counts[s] > 0:
            return True
    return False


@kernel(cache=True, nogil=True)
def cpi_band(slot_i, slot_f, tolerance):
    """How far a member's log CPI may lie from the phase's: the tolerance, or
    CPI_NOISE_Z standard deviations of the scatter between successive
    members if that is more."""
    n = slot_i[_CPI_N]
    if n < 2:
        return tolerance
    return max(tolerance, CPI_NOISE_Z * np.sqrt(slot_f[_CPI_D2] / (2.0 * (n - 1))))


@kernel(cache=True, nogil=True)
def cpi_out_of_tolerance(x_log_cpi, slot_i, slot_f, tolerance):
    """True if both CPIs are known and further apart than the phase tolerates."""
    if not (tolerance > 0.0 and x_log_cpi == x_log_cpi and slot_i[_CPI_N] > 0):
        return False
    return abs(x_log_cpi - slot_f[_LOG_CPI]) > cpi_band(slot_i, slot_f, tolerance)


@kernel(cache=True, nogil=True)
def _distance(x, x_counts, p, centroids, members, slots, cpi, bounds, kinds, used,
              x_log_cpi, tol):
    if cpi_out_of_tolerance(x_log_cpi, slots[p], cpi[p], tol):
        return GATED + abs(x_log_cpi - cpi[p, _LOG_CPI])
    return profile_distance(x, x_counts, centroids[p], members[p], bounds, kinds, used)


@kernel(cache=True, nogil=True)
def _nearest(x, x_counts, kind, centroids, members, slots, cpi, high, bounds, kinds, used,
             x_log_cpi, tol):
    """The nearest slot of ``kind`` and its distance; (-1, inf) if none."""
    best, best_d = -1, np.inf
    for p in range(high):
        if slots[p, _KIND] != kind:
            continue
        d = _distance(x, x_counts, p, centroids, members, slots, cpi, bounds, kinds, used,
                      x_log_cpi, tol)
        if d < best_d:
            best, best_d = p, d
    return best, best_d


@kernel(cache=True, nogil=True)
def _join_segments(x, x_counts, centroid, members, mean_samples, bounds, memory):
    for s in range(len(members)):
        if x_counts[s] == 0:
            continue
        if members[s] < memory:
            members[s] += 1
        w = 1.0 / members[s]
        mean_samples[s] += (x_counts[s] - mean_samples[s]) * w
        for j in range(bounds[s], bounds[s + 1]):
            centroid[j] += (x[j] - centroid[j]) * w


@kernel(cache=True, nogil=True)
def _join_cpi(x_log_cpi, slot_i, slot_f):
    """The running mean of the members' log CPI, and the squared differences
    between successive members'."""
    if x_log_cpi == x_log_cpi:
        if slot_i[_CPI_N] > 0:
            step = x_log_cpi - slot_f[_CPI_LAST]
            slot_f[_CPI_D2] += step * step
        slot_i[_CPI_N] += 1
        slot_f[_LOG_CPI] += (x_log_cpi - slot_f[_LOG_CPI]) / slot_i[_CPI_N]
        slot_f[_CPI_LAST] = x_log_cpi


@kernel(cache=True, nogil=True)
def _adapt(thr, d, settings):
    """Move the threshold by one interval's distance."""
    alpha = settings[_ALPHA]
    if thr[_SEEN_D] == 0:
        thr[_MEAN] = d
        thr[_VAR] = 0.0
    else:
        delta = d - thr[_MEAN]
        thr[_MEAN] += alpha * delta
        thr[_VAR] = (1.0 - alpha) * (thr[_VAR] + alpha * delta * delta)
    thr[_SEEN_D] += 1
    if thr[_SEEN_D] >= settings[_WARMUP]:
        t = thr[_MEAN] + settings[_Z] * np.sqrt(thr[_VAR])
        thr[_THR] = min(max(t, settings[_MIN]), settings[_MAX])


@kernel(cache=True, nogil=True)
def _clear(slot, centroids, members, mean_samples, slots, cpi):
    centroids[slot, :] = 0.0
    members[slot, :] = 0
    mean_samples[slot, :] = 0.0
    slots[slot, :] = 0
    slots[slot, _ID] = -1
    cpi[slot, :] = 0.0


@kernel(cache=True, nogil=True)
def _oldest(slots, high, kind):
    """The slot of ``kind`` used least recently; -1 if none."""
    found = -1
    for p in range(high):
        if slots[p, _KIND] == kind and (found < 0 or slots[p, _USED_AT] < slots[found, _USED_AT]):
            found = p
    return found


@kernel(cache=True, nogil=True)
def _free_slot(slots, counters, capacity):
    """A free slot, the high-water mark raised if need be; -1 if the table must grow."""
    high = counters[_HIGH]
    for p in range(high):
        if slots[p, _KIND] == FREE:
            return p
    if high == capacity:
        return -1
    counters[_HIGH] = high + 1
    return high


@kernel(cache=True, nogil=True)
def _retire(slot, centroids, members, mean_samples, slots, cpi, counters):
    _clear(slot, centroids, members, mean_samples, slots, cpi)
    counters[_RETIRED] += 1
    counters[_LIVE] -= 1
    if counters[_PREV] == slot:
        counters[_PREV] = -1


@kernel(cache=True, nogil=True)
def _make_room_for_phase(settings, centroids, members, mean_samples, slots, cpi, counters):
    """Retire the phase used least recently if ``max_phases`` are live."""
    if counters[_LIVE] >= settings[_MAX_PHASES]:
        _retire(_oldest(slots, counters[_HIGH], PHASE), centroids, members, mean_samples,
                slots, cpi, counters)


@kernel(cache=True, nogil=True)
def _swap(a, b, centroids, members, mean_samples, slots, cpi):
    for arr in (centroids, mean_samples, cpi):
        for j in range(arr.shape[1]):
            arr[a, j], arr[b, j] = arr[b, j], arr[a, j]
    for arr in (members, slots):
        for j in range(arr.shape[1]):
            arr[a, j], arr[b, j] = arr[b, j], arr[a, j]


@kernel(cache=True, nogil=True)
def _low_slot(slot, max_phases, centroids, members, mean_samples, slots, cpi, counters):
    """Phases keep to the first ``max_phases`` slots (the daemon's ids are
    slots): a candidate in a slot beyond them changes places with the first
    slot there that holds no phase.  Returns the phase's slot."""
    if slot < max_phases:
        return slot
    for p in range(max_phases):
        if slots[p, _KIND] != PHASE:
            _swap(p, slot, centroids, members, mean_samples, slots, cpi)
            if counters[_PREV] == slot:
                counters[_PREV] = p
            return p
    return slot


@kernel(cache=True, nogil=True)
def _promote(slot, slots, counters):
    """``slot`` becomes a phase with the next id."""
    slots[slot, _KIND] = PHASE
    slots[slot, _ID] = counters[_OPENED]
    counters[_OPENED] += 1
    counters[_LIVE] += 1


@kernel(cache=True, nogil=True)
def _merge_into(keep, gone, centroids, members, mean_samples, slots, cpi, bounds, memory):
    """Fold slot ``gone`` into phase ``keep``, each side weighed by its members."""
    for s in range(members.shape[1]):
        a, b = members[keep, s], members[gone, s]
        if b == 0:
            continue
        w = b / (a + b)
        for j in range(bounds[s], bounds[s + 1]):
            centroids[keep, j] += (centroids[gone, j] - centroids[keep, j]) * w
        mean_samples[keep, s] += (mean_samples[gone, s] - mean_samples[keep, s]) * w
        members[keep, s] = min(a + b, memory)
    na, nb = slots[keep, _CPI_N], slots[gone, _CPI_N]
    if nb > 0:
        cpi[keep, _LOG_CPI] += (cpi[gone, _LOG_CPI] - cpi[keep, _LOG_CPI]) * nb / (na + nb)
        cpi[keep, _CPI_D2] += cpi[gone, _CPI_D2]
        slots[keep, _CPI_N] = na + nb
    slots[keep, _JOINS] += slots[gone, _JOINS]
    slots[keep, _USED_AT] = max(slots[keep, _USED_AT], slots[gone, _USED_AT])


@kernel(cache=True, nogil=True)
def _twin(slot, threshold, settings, centroids, members, mean_samples, slots, cpi, counters,
          bounds, kinds, used, tol):
    """Another phase whose centroid is within ``merge_share`` of the
    threshold of ``slot``'s and whose CPI is within both tolerances; -1 if none."""
    n = np.empty(members.shape[1], np.int64)
    for s in range(len(n)):
        n[s] = int(mean_samples[slot, s] * members[slot, s] + 0.5)
    for p in range(counters[_HIGH]):
        if p == slot or slots[p, _KIND] != PHASE:
            continue
        if tol > 0.0 and slots[slot, _CPI_N] > 0 and (
                cpi_out_of_tolerance(cpi[slot, _LOG_CPI], slots[p], cpi[p], tol)
                or cpi_out_of_tolerance(cpi[p, _LOG_CPI], slots[slot], cpi[slot], tol)):
            continue
        d = profile_distance(centroids[slot], n, centroids[p], members[p], bounds, kinds, used)
        if d <= settings[_MERGE] * threshold:
            return p
    return -1


@kernel(cache=True, nogil=True)
def run_tolerance(tolerance, thr, settings):
    """The CPI tolerance fitted to the run: at most ``cpi_run_share`` of the
    standard deviation of every interval's log CPI so far, at least
    ``cpi_floor``; a run whose CPI hardly varies is still cut by it."""
    if tolerance <= 0.0 or thr[_RUN_N] < RUN_WARMUP or settings[_RUN_SHARE] <= 0.0:
        return tolerance
    spread = settings[_RUN_SHARE] * np.sqrt(thr[_RUN_M2] / thr[_RUN_N])
    return min(tolerance, max(spread, settings[_FLOOR]))


@kernel(cache=True, nogil=True)
def _run_cpi(thr, x_log_cpi, seen):
    """The run's spread of log CPI, from its second interval on: the first is
    most often start-up, unlike all that follows (zstd's: CPI 1.9 against 1.1)."""
    if x_log_cpi == x_log_cpi and seen > 1:
        thr[_RUN_N] += 1
        delta = x_log_cpi - thr[_RUN_MEAN]
        thr[_RUN_MEAN] += delta / thr[_RUN_N]
        thr[_RUN_M2] += delta * (x_log_cpi - thr[_RUN_MEAN])


@kernel(cache=True, nogil=True)
def _fresh_candidate(slots, high, counters):
    """The candidate the last interval with data opened or joined; -1 if none."""
    for p in range(high):
        if slots[p, _KIND] == CANDIDATE and slots[p, _USED_AT] == counters[_SEEN]:
            return p
    return -1


@kernel(cache=True, nogil=True)
def _first_was_alone(prev, slots, counters):
    """The run's first phase holds only the interval just before, which this
    one does not fit: the first interval was a start-up transient."""
    return (prev >= 0 and counters[_OPENED] == 1 and slots[prev, _JOINS] == 1
            and slots[prev, _USED_AT] == counters[_SEEN])


@kernel(cache=True, nogil=True)
def _reseed(slot, centroids, members, mean_samples, slots, cpi):
    """Empty a phase's centroid, keeping its id: the first phase takes the
    profile of the interval after a start-up transient (which keeps its label)."""
    centroids[slot, :] = 0.0
    members[slot, :] = 0
    mean_samples[slot, :] = 0.0
    cpi[slot, :] = 0.0
    slots[slot, _CPI_N] = 0
    slots[slot, _JOINS] = 0


@kernel(cache=True, nogil=True)
def _classify_kernel(profiles, counts, bounds, kinds, used, start, settings, centroids,
                     members, mean_samples, slots, cpi, counters, thr, log_cpi, tolerance,
                     o_phase, o_dist, o_new, o_status):
    """Classify from ``start`` on; return the index reached (short of the end
    only when the slot table must grow)."""
    n = len(profiles)
    memory = int(settings[_MEMORY])
    capacity = len(centroids)
    for i in range(start, n):
        x, xp, lx = profiles[i], counts[i], log_cpi[i]
        prev = counters[_PREV]
        tol = run_tolerance(tolerance, thr, settings)
        if not has_data(xp, used):
            o_phase[i] = slots[prev, _ID] if prev >= 0 else -1
            o_dist[i], o_new[i], o_status[i] = np.nan, False, NO_DATA
            continue
        high = counters[_HIGH]
        chosen, d = -1, np.nan
        nearest, d_near = -1, np.inf
        if prev >= 0:
            d = _distance(x, xp, prev, centroids, members, slots, cpi, bounds, kinds, used, lx, tol)
            if d <= thr[_THR] and d > STAY_MARGIN:    # else no phase can be nearer by the margin
                nearest, d_near = _nearest(x, xp, PHASE, centroids, members, slots, cpi, high,
                                           bounds, kinds, used, lx, tol)
            if d <= thr[_THR] and d <= d_near + STAY_MARGIN:
                chosen = prev
        if chosen < 0 and nearest < 0:
            nearest, d_near = _nearest(x, xp, PHASE, centroids, members, slots, cpi, high,
                                       bounds, kinds, used, lx, tol)
        if chosen < 0 and nearest >= 0:
            d = d_near
            if d_near <= thr[_THR]:
                chosen = nearest
        status, new, joined, promote, adjacent = MATCHED, False, False, True, False
        # the candidate the interval just before opened wins where it is nearer than any phase
        fresh = _fresh_candidate(slots, high, counters) if settings[_PROBATION] > 0.0 else -1
        d_fresh = np.inf
        if fresh >= 0:
            d_fresh = _distance(x, xp, fresh, centroids, members, slots, cpi, bounds, kinds,
                                used, lx, tol)
            if d_fresh <= thr[_THR] and d_fresh < (d if chosen >= 0 else d_near):
                chosen = -1
            else:
                fresh = -1
        if (chosen < 0 and fresh < 0 and settings[_PROBATION] > 0.0
                and _first_was_alone(prev, slots, counters)):
            _reseed(prev, centroids, members, mean_samples, slots, cpi)
            chosen = prev
        if chosen < 0:
            candidate, d_candidate = -1, np.inf
            probation = settings[_PROBATION] > 0.0 and (nearest >= 0 or fresh >= 0)
            if fresh >= 0:
                candidate, d_candidate = fresh, d_fresh
            elif probation:
                candidate, d_candidate = _nearest(x, xp, CANDIDATE, centroids, members, slots,
                                                  cpi, high, bounds, kinds, used, lx, tol)
            adjacent = candidate >= 0 and slots[candidate, _USED_AT] == counters[_SEEN]
            if probation and d_candidate <= thr[_THR] and adjacent:
                counters[_WAITING] -= 1
                _join_segments(x, xp, centroids[candidate], members[candidate],
                               mean_samples[candidate], bounds, memory)
                _join_cpi(lx, slots[candidate], cpi[candidate])
                slots[candidate, _JOINS] += 1
                joined = True
                known = _twin(candidate, thr[_THR], settings, centroids, members, mean_samples,
                              slots, cpi, counters, bounds, kinds, used, tol)
                if known >= 0:      # a phase seen before after all: no new id
                    _merge_into(known, candidate, centroids, members, mean_samples, slots,
                                cpi, bounds, memory)
                    _clear(candidate, centroids, members, mean_samples, slots, cpi)
                    chosen, promote = known, False
                else:
                    chosen, promote = candidate, True
                    _make_room_for_phase(settings, centroids, members, mean_samples, slots,
                                         cpi, counters)
            elif probation:
                if d_candidate <= thr[_THR]:    # seen before, but not just before: wait on
                    slot = candidate
                elif counters[_WAITING] >= CANDIDATES:
                    slot = _oldest(slots, high, CANDIDATE)
                    _clear(slot, centroids, members, mean_samples, slots, cpi)
                else:
                    slot = _free_slot(slots, counters, capacity)
                    if slot < 0:
                        return i
                    counters[_WAITING] += 1
                slots[slot, _KIND] = CANDIDATE
                counters[_SEEN] += 1
                slots[slot, _USED_AT] = counters[_SEEN]
                _join_segments(x, xp, centroids[slot], members[slot], mean_samples[slot],
                               bounds, memory)
                _join_cpi(lx, slots[slot], cpi[slot])
                o_phase[i] = slots[nearest, _ID]
                o_dist[i] = min(d_near, 1.0)
                o_new[i], o_status[i] = False, TENTATIVE
                _run_cpi(thr, lx, counters[_SEEN])
                continue
            else:
                _make_room_for_phase(settings, centroids, members, mean_samples, slots, cpi,
                                     counters)
                chosen = _free_slot(slots, counters, capacity)
                if chosen < 0:
                    return i
            if promote:
                chosen = _low_slot(chosen, int(settings[_MAX_PHASES]), centroids, members,
                                   mean_samples, slots, cpi, counters)
                _promote(chosen, slots, counters)
                new = True
                # the interval that opened the candidate, just before, joins the phase
                if adjacent and i > 0 and o_status[i - 1] == TENTATIVE:
                    o_phase[i - 1], o_new[i - 1], o_status[i - 1] = slots[chosen, _ID], True, MATCHED
                    new = False
                elif adjacent and i == 0:
                    counters[_RELABEL] = slots[chosen, _ID]
                    new = False
            if joined and not new:      # it joined the candidate: its distance is to that
                d = d_candidate
                if settings[_ADAPTIVE] > 0.0:
                    _adapt(thr, d, settings)
        elif settings[_ADAPTIVE] > 0.0:
            _adapt(thr, d, settings)
        if not joined:
            _join_segments(x, xp, centroids[chosen], members[chosen], mean_samples[chosen],
                           bounds, memory)
            _join_cpi(lx, slots[chosen], cpi[chosen])
            slots[chosen, _JOINS] += 1
        joins = slots[chosen, _JOINS]
        if not new and ((joins & (joins - 1)) == 0 or joins % MERGE_EVERY == 0):
            twin = _twin(chosen, thr[_THR], settings, centroids, members, mean_samples, slots,
                         cpi, counters, bounds, kinds, used, tol)
            if twin >= 0:
                keep, gone = (twin, chosen) if slots[twin, _ID] < slots[chosen, _ID] else (chosen, twin)
                _merge_into(keep, gone, centroids, members, mean_samples, slots, cpi, bounds,
                            memory)
                _retire(gone, centroids, members, mean_samples, slots, cpi, counters)
                counters[_MERGED] += 1
                chosen = keep
        o_phase[i] = slots[chosen, _ID]
        o_dist[i] = min(d, 1.0) if d == d else d      # GATED reads 1; NaN stays NaN
        o_new[i], o_status[i] = new, status
        counters[_PREV] = chosen
        counters[_SEEN] += 1
        slots[chosen, _USED_AT] = counters[_SEEN]
        _run_cpi(thr, lx, counters[_SEEN])
    return n


def classify_reference(profiles, counts, bounds, kinds, used, params: DetectorParams,
                       log_cpi=None, cpi_tolerance: float = 0.0) -> Decisions:
    """Plain Python/numpy leader-follower with candidates, for the tests and
    the benchmark: the kernel's rules, slot for slot."""
    from .histograms import segment_distance_reference

    n_seg = len(kinds)
    if log_cpi is None:
        log_cpi = np.full(len(profiles), np.nan)
    slots: list[dict] = []
    thr = {"value": params.threshold, "mean": 0.0, "var": 0.0, "seen": 0}
    state = {"opened": 0, "seen": 0, "prev": -1}

    run = {"n": 0, "mean": 0.0, "m2": 0.0, "tol": cpi_tolerance}

    def fit_tolerance():
        run["tol"] = cpi_tolerance
        if cpi_tolerance > 0 and run["n"] >= RUN_WARMUP and params.cpi_run_share > 0:
            spread = params.cpi_run_share * np.sqrt(run["m2"] / run["n"])
            run["tol"] = min(cpi_tolerance, max(spread, params.cpi_floor))

    def add_run(lx):
        if not np.isnan(lx) and state["seen"] > 1:
            run["n"] += 1
            delta = lx - run["mean"]
            run["mean"] += delta / run["n"]
            run["m2"] += delta * (lx - run["mean"])

    def band(sl):
        cpi_tolerance = run["tol"]
        if sl["cpi_n"] < 2:
            return cpi_tolerance
        return max(cpi_tolerance, CPI_NOISE_Z * np.sqrt(sl["cpi_d2"] / (2.0 * (sl["cpi_n"] - 1))))

    def gated(lx, sl):
        return (run["tol"] > 0 and not np.isnan(lx) and sl["cpi_n"] > 0
                and abs(lx - sl["log_cpi"]) > band(sl))

    def profile_distance(x, xp, c, cm):
        ds = [segment_distance_reference(x[bounds[s]:bounds[s + 1]], xp[s],
                                         c[bounds[s]:bounds[s + 1]], cm[s], kinds[s])
              for s in range(n_seg) if used[s] and xp[s] > 0 and cm[s] > 0]
        return max(ds) if ds else 1.0

    def distance(x, xp, lx, sl):
        if gated(lx, sl):
            return GATED + abs(lx - sl["log_cpi"])
        return profile_distance(x, xp, sl["centroid"], sl["members"])

    def nearest(x, xp, lx, kind):
        ds = [(distance(x, xp, lx, sl), p) for p, sl in enumerate(slots) if sl["kind"] == kind]
        return min(ds, key=lambda t: (t[0], t[1]))[::-1] if ds else (-1, np.inf)

    def empty_slot():
        return {"kind": FREE, "id": -1, "used_at": 0, "joins": 0, "cpi_n": 0, "log_cpi": 0.0,
                "cpi_last": 0.0, "cpi_d2": 0.0, "centroid": np.zeros(profiles.shape[1]),
                "members": np.zeros(n_seg, np.int64), "mean_samples": np.zeros(n_seg)}

    def free_slot():
        for p, sl in enumerate(slots):
            if sl["kind"] == FREE:
                return p
        slots.append(empty_slot())
        return len(slots) - 1

    def oldest(kind):
        found = [p for p, sl in enumerate(slots) if sl["kind"] == kind]
        return min(found, key=lambda p: (slots[p]["used_at"], p))

    def retire(p):
        slots[p] = empty_slot()
        if state["prev"] == p:
            state["prev"] = -1

    def live():
        return sum(sl["kind"] == PHASE for sl in slots)

    def join(x, xp, lx, sl):
        for s in range(n_seg):
            if xp[s] == 0:
                continue
            sl["members"][s] = min(sl["members"][s] + 1, params.memory)
            w = 1.0 / sl["members"][s]
            sl["mean_samples"][s] += (xp[s] - sl["mean_samples"][s]) * w
            seg = slice(bounds[s], bounds[s + 1])
            sl["centroid"][seg] += (x[seg] - sl["centroid"][seg]) * w
        if not np.isnan(lx):
            if sl["cpi_n"] > 0:
                sl["cpi_d2"] += (lx - sl["cpi_last"]) ** 2
            sl["cpi_n"] += 1
            sl["log_cpi"] += (lx - sl["log_cpi"]) / sl["cpi_n"]
            sl["cpi_last"] = lx

    def adapt(d):
        a = params.adaptive_alpha
        if thr["seen"] == 0:
            thr["mean"], thr["var"] = d, 0.0
        else:
            delta = d - thr["mean"]
            thr["mean"] += a * delta
            thr["var"] = (1 - a) * (thr["var"] + a * delta * delta)
        thr["seen"] += 1
        if thr["seen"] >= params.adaptive_warmup:
            t = thr["mean"] + params.adaptive_z * np.sqrt(thr["var"])
            thr["value"] = min(max(t, params.adaptive_min), params.adaptive_max)

    def twin(c):
        sl = slots[c]
        n = np.array([int(m * k + 0.5) for m, k in zip(sl["mean_samples"], sl["members"])])
        for p, other in enumerate(slots):
            if p == c or other["kind"] != PHASE:
                continue
            if run["tol"] > 0 and sl["cpi_n"] > 0 and (
                    gated(sl["log_cpi"], other) or gated(other["log_cpi"], sl)):
                continue
            if profile_distance(sl["centroid"], n, other["centroid"],
                                other["members"]) <= params.merge_share * thr["value"]:
                return p
        return -1

    def merge(keep, gone):
        k, g = slots[keep], slots[gone]
        for s in range(n_seg):
            a, b = k["members"][s], g["members"][s]
            if b == 0:
                continue
            w = b / (a + b)
            seg = slice(bounds[s], bounds[s + 1])
            k["centroid"][seg] += (g["centroid"][seg] - k["centroid"][seg]) * w
            k["mean_samples"][s] += (g["mean_samples"][s] - k["mean_samples"][s]) * w
            k["members"][s] = min(a + b, params.memory)
        if g["cpi_n"] > 0:
            k["log_cpi"] += (g["log_cpi"] - k["log_cpi"]) * g["cpi_n"] / (k["cpi_n"] + g["cpi_n"])
            k["cpi_d2"] += g["cpi_d2"]
            k["cpi_n"] += g["cpi_n"]
        k["joins"] += g["joins"]
        k["used_at"] = max(k["used_at"], g["used_at"])

    def make_room():
        if live() >= params.max_phases:
            retire(oldest(PHASE))

    out = Decisions(np.empty(len(profiles), np.int64), np.empty(len(profiles)),
                    np.empty(len(profiles), np.bool_), np.empty(len(profiles), np.int8))
    for i, (x, xp, lx) in enumerate(zip(profiles, counts, log_cpi)):
        prev = state["prev"]
        fit_tolerance()
        if not any(used[s] and xp[s] > 0 for s in range(n_seg)):
            out.phase[i] = slots[prev]["id"] if prev >= 0 else -1
            out.distance[i], out.new_phase[i], out.status[i] = np.nan, False, NO_DATA
            continue
        chosen, d = -1, np.nan
        near, d_near = nearest(x, xp, lx, PHASE)
        if prev >= 0:
            d = distance(x, xp, lx, slots[prev])
            if d <= thr["value"] and d <= d_near + STAY_MARGIN:
                chosen = prev
        if chosen < 0 and near >= 0:
            d = d_near
            if d_near <= thr["value"]:
                chosen = near
        new, joined, promote = False, False, True
        fresh = next((p for p, sl in enumerate(slots) if sl["kind"] == CANDIDATE
                      and sl["used_at"] == state["seen"]), -1) if params.probation else -1
        d_fresh = np.inf
        if fresh >= 0:
            d_fresh = distance(x, xp, lx, slots[fresh])
            if d_fresh <= thr["value"] and d_fresh < (d if chosen >= 0 else d_near):
                chosen = -1
            else:
                fresh = -1
        if (chosen < 0 and fresh < 0 and params.probation and prev >= 0 and state["opened"] == 1
                and slots[prev]["joins"] == 1 and slots[prev]["used_at"] == state["seen"]):
            kept = slots[prev]
            slots[prev] = empty_slot()
            slots[prev].update(kind=PHASE, id=kept["id"], used_at=kept["used_at"])
            chosen = prev
        if chosen < 0:
            probation = params.probation and (near >= 0 or fresh >= 0)
            if fresh >= 0:
                cand, d_cand = fresh, d_fresh
            else:
                cand, d_cand = nearest(x, xp, lx, CANDIDATE) if probation else (-1, np.inf)
            adjacent = cand >= 0 and slots[cand]["used_at"] == state["seen"]
            if probation and d_cand <= thr["value"] and adjacent:
                join(x, xp, lx, slots[cand])
                slots[cand]["joins"] += 1
                joined = True
                known = twin(cand)
                if known >= 0:
                    merge(known, cand)
                    slots[cand] = empty_slot()
                    chosen, promote = known, False
                else:
                    chosen = cand
                    make_room()
            elif probation:
                if d_cand <= thr["value"]:
                    slot = cand
                elif sum(sl["kind"] == CANDIDATE for sl in slots) >= CANDIDATES:
                    slot = oldest(CANDIDATE)
                    slots[slot] = empty_slot()
                else:
                    slot = free_slot()
                slots[slot]["kind"] = CANDIDATE
                state["seen"] += 1
                slots[slot]["used_at"] = state["seen"]
                join(x, xp, lx, slots[slot])
                out.phase[i], out.distance[i] = slots[near]["id"], min(d_near, 1.0)
                out.new_phase[i], out.status[i] = False, TENTATIVE
                add_run(lx)
                continue
            else:
                make_room()
                chosen = free_slot()
            if promote:
                if chosen >= params.max_phases:
                    low = next((p for p in range(params.max_phases) if slots[p]["kind"] != PHASE),
                               None)
                    if low is not None:
                        slots[low], slots[chosen] = slots[chosen], slots[low]
                        if state["prev"] == chosen:
                            state["prev"] = low
                        chosen = low
                slots[chosen]["kind"], slots[chosen]["id"] = PHASE, state["opened"]
                state["opened"] += 1
                new = True
                if adjacent and i > 0 and out.status[i - 1] == TENTATIVE:
                    out.phase[i - 1], out.new_phase[i - 1] = slots[chosen]["id"], True
                    out.status[i - 1] = MATCHED
                    new = False
            if joined and not new:
                d = d_cand
                if params.adaptive:
                    adapt(d)
        elif params.adaptive:
            adapt(d)
        sl = slots[chosen]
        if not joined:
            join(x, xp, lx, sl)
            sl["joins"] += 1
        j = sl["joins"]
        if not new and ((j & (j - 1)) == 0 or j % MERGE_EVERY == 0):
            other = twin(chosen)
            if other >= 0:
                keep, gone = ((other, chosen) if slots[other]["id"] < sl["id"]
                              else (chosen, other))
                merge(keep, gone)
                retire(gone)
                chosen = keep
        out.phase[i] = slots[chosen]["id"]
        out.distance[i] = min(d, 1.0) if d == d else d
        out.new_phase[i], out.status[i] = new, MATCHED
        state["prev"] = chosen
        state["seen"] += 1
        slots[chosen]["used_at"] = state["seen"]
        add_run(lx)
    return out


def threshold_history(distance: np.ndarray, new_phase: np.ndarray, params: DetectorParams,
                      status: np.ndarray | None = None) -> np.ndarray:
    """The threshold each interval was judged against, rebuilt from the
    classifier's decisions by the rule it follows online: fixed, or moved by
    the distance of each interval that joined a phase."""
    distance = np.asarray(distance, np.float64)
    if not params.adaptive:
        return np.full(len(distance), params.threshold)
    if status is None:
        status = np.zeros(len(distance), np.int8)
    thr = initial_threshold(params)
    return _threshold_history(distance, np.asarray(new_phase, np.bool_),
                              np.asarray(status, np.int8), detector_settings(params), thr)


@kernel(cache=True)
def _threshold_history(distance, new_phase, status, settings, thr):
    out = np.empty(len(distance))
    for i in range(len(distance)):
        out[i] = thr[_THR]
        d = distance[i]
        if status[i] == MATCHED and not new_phase[i] and d == d:
            _adapt(thr, d, settings)
    return out
