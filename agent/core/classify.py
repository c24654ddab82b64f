"""Leader-follower phase classification, one interval at a time.

An interval stays in the previous phase if that phase's centroid is within the
threshold; otherwise it takes the nearest centroid within the threshold;
otherwise it opens a new phase.  Centroids are running means of their members,
segment by segment.  The distance of a profile to a centroid is the largest of
the segment distances over the segments both have (see agent/core/detectors.py).

Where a source counts instructions and cycles exactly (a PMU), each interval
also carries its log CPI, and a phase keeps the running mean of its members'.
With a CPI tolerance ``tol`` (a log ratio; 0 turns it off), an interval whose
CPI is more than a factor ``exp(tol)`` from a phase's is kept out of that
phase whatever its profile: its distance to it counts as :data:`GATED`,
beyond every threshold, and is reported as 1.  A phase whose members' CPI
scatters more than that by itself tolerates :data:`CPI_NOISE_Z` standard
deviations of it, so that a phase is not split on its own noise.  Intervals
or phases with no known CPI are never kept out (docs/signals.md says why).

With the adaptive threshold, the threshold follows the distances of intervals
that joined an existing phase: an exponentially weighted mean plus ``z``
standard deviations, clamped to [min, max], starting from the fixed threshold
and moving only after ``warmup`` joins.  It is updated after each decision, so
the classifier still decides online.

At most ``max_phases`` phases are live.  A new phase beyond that takes the
slot of the phase used least recently, which is retired: it is never matched
again and its id is not reused.  Phase ids count every phase ever opened.
Centroids live in slots; ``ids`` maps a slot to its phase id.
"""

from __future__ import annotations

import numpy as np

from .histograms import segment_distance
from .kernels import kernel
from .params import DetectorParams

#: An interval stays in the previous phase only if no other phase is nearer
#: by more than this: an interval at a transition that opened a phase of its
#: own does not hold the intervals after it there.
STAY_MARGIN = 0.05
#: The distance of an interval to a phase whose CPI is out of tolerance: above
#: every threshold (at most 1), so such a phase is neither stayed in nor
#: joined, and ranked behind every phase that is in tolerance.
GATED = 2.0
#: A phase's CPI tolerance is at least this many standard deviations of its
#: members' log CPI: beyond 4, noise alone goes about once in 16,000 intervals.
CPI_NOISE_Z = 4.0
# Threshold state slots.
_THR, _MEAN, _VAR, _JOINED = range(4)
# Counter slots: phases opened, phases retired, intervals classified.
_OPENED, _RETIRED, _SEEN = range(3)


class ClassifierState:
    """Centroids and the threshold, grown as phases appear."""

    def __init__(self, width: int, n_segments: int, params: DetectorParams, capacity: int = 64):
        if params.max_phases < 1:
            raise ValueError(f"max_phases {params.max_phases}: at least 1")
        self.params = params
        capacity = min(capacity, params.max_phases)
        self.centroids = np.zeros((capacity, width))
        self.members = np.zeros((capacity, n_segments), np.int64)
        self.ids = np.zeros(capacity, np.int64)         # phase id of each slot
        self.last_used = np.zeros(capacity, np.int64)   # interval that last joined each slot
        self.count = np.zeros(1, np.int64)          # live slots
        self.counters = np.zeros(3, np.int64)       # opened, retired, classified
        self.previous = np.full(1, -1, np.int64)     # slot of the previous interval
        self.log_cpi = np.zeros(capacity)           # mean log CPI of each slot's members
        self.cpi_members = np.zeros(capacity, np.int64)   # members whose CPI is known
        self.cpi_m2 = np.zeros(capacity)            # their sum of squared deviations
        self.threshold = np.array([params.threshold, 0.0, 0.0, 0.0])

    @property
    def n_phases(self) -> int:
        """Phases opened so far, retired ones included."""
        return int(self.counters[_OPENED])

    @property
    def retired(self) -> int:
        """Phases dropped to keep at most ``max_phases`` live."""
        return int(self.counters[_RETIRED])

    def grow(self) -> None:
        cap = len(self.centroids)
        extra = min(cap, self.params.max_phases - cap)
        self.centroids = np.vstack([self.centroids, np.zeros((extra, self.centroids.shape[1]))])
        self.members = np.vstack([self.members, np.zeros((extra, self.members.shape[1]), np.int64)])
        self.ids = np.concatenate([self.ids, np.zeros(extra, np.int64)])
        self.last_used = np.concatenate([self.last_used, np.zeros(extra, np.int64)])
        self.log_cpi = np.concatenate([self.log_cpi, np.zeros(extra)])
        self.cpi_members = np.concatenate([self.cpi_members, np.zeros(extra, np.int64)])
        self.cpi_m2 = np.concatenate([self.cpi_m2, np.zeros(extra)])


def adaptive_settings(p: DetectorParams) -> np.ndarray:
    return np.array([1.0 if p.adaptive else 0.0, p.adaptive_z, p.adaptive_alpha,
                     p.adaptive_min, p.adaptive_max, float(p.adaptive_warmup)])


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
             log_cpi: np.ndarray | None = None, cpi_tolerance: float = 0.0):
    """Classify intervals in order.  Returns (phase, distance, new_phase) arrays;
    ``counts`` holds each interval's samples per segment.  ``distance`` is to
    the centroid of the phase taken, or, for a new phase, to the nearest one
    (NaN for the first interval).  ``log_cpi`` (NaN: unknown) and
    ``cpi_tolerance`` (0: off) keep intervals out of phases of another CPI."""
    n = len(profiles)
    if log_cpi is None:
        log_cpi = np.full(n, np.nan)
    phase = np.empty(n, np.int64)
    dist = np.empty(n, np.float64)
    new = np.empty(n, np.bool_)
    settings = adaptive_settings(state.params)
    done = 0
    while done < n:
        done = _classify_kernel(profiles, counts, bounds, kinds, used, done, settings,
                                state.params.max_phases, state.centroids, state.members,
                                state.ids, state.last_used, state.count, state.counters,
                                state.previous, state.threshold, phase, dist, new,
                                np.ascontiguousarray(log_cpi, np.float64), float(cpi_tolerance),
                                state.log_cpi, state.cpi_members, state.cpi_m2)
        if done < n:
            state.grow()
    return phase, dist, new


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
def cpi_out_of_tolerance(x_log_cpi, c_log_cpi, c_cpi_members, c_cpi_m2, tolerance):
    """True if both CPIs are known and further apart than the phase tolerates:
    a factor exp(tolerance), or CPI_NOISE_Z standard deviations of its
    members' log CPI if that is more."""
    if not (tolerance > 0.0 and x_log_cpi == x_log_cpi and c_cpi_members > 0):
        return False
    allowed = max(tolerance, CPI_NOISE_Z * np.sqrt(c_cpi_m2 / c_cpi_members))
    return abs(x_log_cpi - c_log_cpi) > allowed


@kernel(cache=True, nogil=True)
def _distance(x, x_counts, p, centroids, members, bounds, kinds, used, x_log_cpi, tol,
              c_log_cpi, c_cpi_members, c_cpi_m2):
    if cpi_out_of_tolerance(x_log_cpi, c_log_cpi[p], c_cpi_members[p], c_cpi_m2[p], tol):
        return GATED
    return profile_distance(x, x_counts, centroids[p], members[p], bounds, kinds, used)


@kernel(cache=True, nogil=True)
def _nearest(x, x_counts, centroids, members, count, bounds, kinds, used, x_log_cpi, tol,
             c_log_cpi, c_cpi_members, c_cpi_m2):
    best, best_d = -1, np.inf
    empty = True
    for s in range(len(kinds)):
        if used[s] and x_counts[s] > 0:
            empty = False
    if empty and not (tol > 0.0 and x_log_cpi == x_log_cpi):
        return (0, 1.0) if count > 0 else (-1, np.inf)    # every distance is 1: the first wins
    for p in range(count):
        if empty:   # no samples to compare: every distance is 1, the first slot in tolerance wins
            d = GATED if cpi_out_of_tolerance(x_log_cpi, c_log_cpi[p], c_cpi_members[p],
                                              c_cpi_m2[p], tol) else 1.0
        else:
            d = _distance(x, x_counts, p, centroids, members, bounds, kinds, used, x_log_cpi,
                          tol, c_log_cpi, c_cpi_members, c_cpi_m2)
        if d < best_d:
            best, best_d = p, d
    return best, best_d


@kernel(cache=True, nogil=True)
def _join(x, x_counts, centroid, members, bounds):
    for s in range(len(members)):
        if x_counts[s] == 0:
            continue
        members[s] += 1
        w = 1.0 / members[s]
        for j in range(bounds[s], bounds[s + 1]):
            centroid[j] += (x[j] - centroid[j]) * w


@kernel(cache=True, nogil=True)
def _join_cpi(x_log_cpi, slot, c_log_cpi, c_cpi_members, c_cpi_m2):
    """Welford's running mean and sum of squared deviations."""
    if x_log_cpi == x_log_cpi:
        c_cpi_members[slot] += 1
        delta = x_log_cpi - c_log_cpi[slot]
        c_log_cpi[slot] += delta / c_cpi_members[slot]
        c_cpi_m2[slot] += delta * (x_log_cpi - c_log_cpi[slot])


@kernel(cache=True, nogil=True)
def _adapt(thr, d, settings):
    alpha = settings[2]
    if thr[_JOINED] == 0:
        thr[_MEAN] = d
        thr[_VAR] = 0.0
    else:
        delta = d - thr[_MEAN]
        thr[_MEAN] += alpha * delta
        thr[_VAR] = (1.0 - alpha) * (thr[_VAR] + alpha * delta * delta)
    thr[_JOINED] += 1
    if thr[_JOINED] >= settings[5]:
        t = thr[_MEAN] + settings[1] * np.sqrt(thr[_VAR])
        thr[_THR] = min(max(t, settings[3]), settings[4])


@kernel(cache=True, nogil=True)
def _open_slot(max_phases, centroids, members, last_used, count, counters, previous):
    """A slot for a new phase: a free one, else the least recently used one
    (retired and cleared); -1 if the table must grow first."""
    k = count[0]
    if k < max_phases:
        if k == len(centroids):
            return -1
        count[0] = k + 1
        return k
    slot = 0
    for p in range(1, k):
        if last_used[p] < last_used[slot]:
            slot = p
    centroids[slot, :] = 0.0
    members[slot, :] = 0
    counters[_RETIRED] += 1
    if previous[0] == slot:
        previous[0] = -1
    return slot


@kernel(cache=True, nogil=True)
def _classify_kernel(profiles, counts, bounds, kinds, used, start, settings, max_phases,
                     centroids, members, ids, last_used, count, counters, previous, thr,
                     o_phase, o_dist, o_new, log_cpi, tol, c_log_cpi, c_cpi_members, c_cpi_m2):
    """Classify from ``start`` on; return the index reached (short of the end
    only when the centroid table must grow)."""
    n = len(profiles)
    for i in range(start, n):
        k = count[0]
        x, xp, lx = profiles[i], counts[i], log_cpi[i]
        prev = previous[0]
        chosen, d = -1, np.nan
        nearest, d_near = -1, np.inf
        if prev >= 0:
            d = _distance(x, xp, prev, centroids, members, bounds, kinds, used, lx, tol,
                          c_log_cpi, c_cpi_members, c_cpi_m2)
            if d <= thr[_THR] and d > STAY_MARGIN:    # else no phase can be nearer by the margin
                nearest, d_near = _nearest(x, xp, centroids, members, k, bounds, kinds, used,
                                           lx, tol, c_log_cpi, c_cpi_members, c_cpi_m2)
            if d <= thr[_THR] and d <= d_near + STAY_MARGIN:
                chosen = prev
        if chosen < 0 and nearest < 0:
            nearest, d_near = _nearest(x, xp, centroids, members, k, bounds, kinds, used,
                                       lx, tol, c_log_cpi, c_cpi_members, c_cpi_m2)
        if chosen < 0 and nearest >= 0:
            d = d_near
            if d_near <= thr[_THR]:
                chosen = nearest
        if chosen < 0:
            chosen = _open_slot(max_phases, centroids, members, last_used, count, counters,
                                previous)
            if chosen < 0:
                return i
            c_log_cpi[chosen], c_cpi_members[chosen], c_cpi_m2[chosen] = 0.0, 0, 0.0
            ids[chosen] = counters[_OPENED]
            counters[_OPENED] += 1
            o_new[i] = True
        else:
            o_new[i] = False
            if settings[0] > 0.0:
                _adapt(thr, d, settings)
        o_phase[i] = ids[chosen]
        o_dist[i] = 1.0 if d > 1.0 else d     # GATED reads 1; NaN stays NaN
        _join(x, xp, centroids[chosen], members[chosen], bounds)
        _join_cpi(lx, chosen, c_log_cpi, c_cpi_members, c_cpi_m2)
        previous[0] = chosen
        counters[_SEEN] += 1
        last_used[chosen] = counters[_SEEN]
    return n


def classify_reference(profiles, counts, bounds, kinds, used, params: DetectorParams,
                       log_cpi=None, cpi_tolerance: float = 0.0):
    """Plain Python/numpy leader-follower, for the tests and the benchmark."""
    from .histograms import segment_distance_reference

    centroids, members, ids, last, phases, dists, news = [], [], [], [], [], [], []
    cpis = []       # per slot: the known log CPIs of its members
    if log_cpi is None:
        log_cpi = np.full(len(profiles), np.nan)
    thr, mean, var, joined = params.threshold, 0.0, 0.0, 0
    opened = 0

    def distance(x, xp, c, cm, lx, lcs):
        if cpi_tolerance > 0 and not np.isnan(lx) and lcs:
            allowed = max(cpi_tolerance, CPI_NOISE_Z * np.std(lcs))
            if abs(lx - np.mean(lcs)) > allowed:
                return GATED
        ds = [segment_distance_reference(x[bounds[s]:bounds[s + 1]], xp[s],
                                         c[bounds[s]:bounds[s + 1]], cm[s], kinds[s])
              for s in range(len(kinds)) if used[s] and xp[s] > 0 and cm[s] > 0]
        return max(ds) if ds else 1.0

    prev = -1
    for i, (x, xp, lx) in enumerate(zip(profiles, counts, log_cpi)):
        ds = [distance(x, xp, c, cm, lx, lcs) for c, cm, lcs in zip(centroids, members, cpis)]
        nearest = int(np.argmin(ds)) if ds else -1
        chosen, d = -1, (ds[nearest] if ds else np.nan)
        if prev >= 0 and ds[prev] <= thr and ds[prev] <= ds[nearest] + STAY_MARGIN:
            chosen, d = prev, ds[prev]
        elif ds and ds[nearest] <= thr:
            chosen = nearest
        if chosen < 0:
            if len(centroids) < params.max_phases:
                centroids.append(np.zeros_like(x))
                members.append(np.zeros(len(kinds), np.int64))
                ids.append(0)
                last.append(0)
                cpis.append([])
                chosen = len(centroids) - 1
            else:                       # retire the least recently used phase
                chosen = int(np.argmin(last))
                centroids[chosen] = np.zeros_like(x)
                members[chosen] = np.zeros(len(kinds), np.int64)
                cpis[chosen] = []
                if prev == chosen:
                    prev = -1
            ids[chosen] = opened
            opened += 1
            news.append(True)
        else:
            news.append(False)
            if params.adaptive:
                if joined == 0:
                    mean, var = d, 0.0
                else:
                    delta = d - mean
                    mean += params.adaptive_alpha * delta
                    var = (1 - params.adaptive_alpha) * (var + params.adaptive_alpha * delta * delta)
                joined += 1
                if joined >= params.adaptive_warmup:
                    thr = min(max(mean + params.adaptive_z * np.sqrt(var), params.adaptive_min),
                              params.adaptive_max)
        for s in range(len(kinds)):
            if xp[s] > 0:
                members[chosen][s] += 1
                sl = slice(bounds[s], bounds[s + 1])
                centroids[chosen][sl] += (x[sl] - centroids[chosen][sl]) / members[chosen][s]
        if not np.isnan(lx):
            cpis[chosen].append(lx)
        phases.append(ids[chosen])
        dists.append(1.0 if d > 1.0 else d)
        prev = chosen
        last[chosen] = i + 1
    return np.array(phases, np.int64), np.array(dists), np.array(news, np.bool_)


def threshold_history(distance: np.ndarray, new_phase: np.ndarray,
                      params: DetectorParams) -> np.ndarray:
    """The threshold each interval was judged against, rebuilt from the
    classifier's decisions by the rule it follows online: fixed, or moved by
    the distance of each interval that joined an existing phase."""
    distance = np.asarray(distance, np.float64)
    if not params.adaptive:
        return np.full(len(distance), params.threshold)
    thr = np.array([params.threshold, 0.0, 0.0, 0.0])
    return _threshold_history(distance, np.asarray(new_phase, np.bool_),
                              adaptive_settings(params), thr)


@kernel(cache=True)
def _threshold_history(distance, new_phase, settings, thr):
    out = np.empty(len(distance))
    for i in range(len(distance)):
        out[i] = thr[_THR]
        if not new_phase[i] and not np.isnan(distance[i]):
            _adapt(thr, distance[i], settings)
    return out
