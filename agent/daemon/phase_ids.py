"""Stable phase ids and names for the daemon's targets.

The classifier numbers the phases it opens in order; the daemon speaks of
them by *stable ids*, the program's ids in the phase catalogue
(:mod:`phasewatch.formats.catalog`): a known phase keeps its id and name, a
phase the classifier opens takes the id of a phase of the program it is
within the threshold of (one the classifier retired, or one seen in an
earlier run), else the program's next id, never given before.  So an id
never names two behaviours, however many phases come and go.

:class:`ProgramPhases` is what the daemon knows of one program's phases
under one profile, shared by every target running it (two processes of one
command).  :class:`TargetPhases` is one target's map from the classifier's
ids to stable ids, its phases' names, and when each of its phases was
retired: a retired phase's series stay :data:`RETIRED_KEEP_S` seconds (so
that Prometheus scrapes their last values), then go.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np

from ..formats.catalog import CatalogPhase, profile_distances_of
from ..live.phase_catalog import naming_top, phase_name

#: How long a retired phase's series stay in the exposition.
RETIRED_KEEP_S = 300.0
#: Phases of a program known in memory, to match phases opened against: at
#: least this many (each costs its centroid twice, about 35 KB with vpf-ip).
KNOWN_KEPT = 16
#: A target's phases go to the catalogue at most this often (and at once
#: when a phase is opened or changes).
SAVE_EVERY_S = 1.0


def known_kept(pipeline) -> int:
    """How many phases of a program are known in memory, to match phases
    opened against: half as many as a target keeps live (as many as it
    starts from), at least :data:`KNOWN_KEPT`."""
    return max(pipeline.params.detector.max_phases // 2, KNOWN_KEPT)


class ProgramPhases:
    """One program's phases under one profile: those known (the catalogue's,
    the most recently seen, at most ``keep``), the next id never given, and
    the names given; every method under the one lock, for the workers of
    the program's targets."""

    def __init__(self, program: str, path: str, profile: str, phases=(), next_id: int = 0,
                 keep: int = 64):
        self.program, self.path, self.profile = program, path, profile
        self.keep = keep
        self.known: dict[int, CatalogPhase] = {p.known.id: p for p in phases}
        self.names: dict[int, str] = {p.known.id: p.name for p in phases}
        #: For each name proposed, how many phases have had it (``fa``,
        #: ``fa~2``...): a name is never given twice while the daemon runs.
        self.given: dict[str, int] = {}
        for name in self.names.values():
            base, _, k = name.rpartition("~")
            base, k = (base, int(k)) if base and k.isdigit() else (name, 1)
            self.given[base] = max(self.given.get(base, 0), k)
        self.next_id = max([next_id, *(i + 1 for i in self.known)])
        self.distances = profile_distances_of(profile)
        self._matrix = None         # the known phases' ids, centroids and members, stacked
        self.lock = threading.Lock()

    def seeds(self, n: int) -> list:
        """The ``n`` phases seen most recently, for a classifier to start from."""
        with self.lock:
            ranked = sorted(self.known.values(), key=lambda p: (-p.last_seen, p.known.id))
            return [p.known for p in ranked[:n]]

    def take_id(self, phase, threshold: float, busy: set[int]) -> tuple[int, bool]:
        """The stable id of a phase just opened (a KnownPhase, or None if it
        is gone already): that of the nearest known phase within
        ``threshold`` whose id no live phase of the target has, else a new
        one.  (id, whether it is new)."""
        with self.lock:
            if phase is not None and self.known:
                ids, centroids, members = self._stacked()
                d = self.distances(phase, centroids, members)
                d[np.isin(ids, list(busy))] = np.inf
                best = int(np.argmin(d))
                if d[best] <= threshold:
                    return int(ids[best]), False
            self.next_id += 1
            return self.next_id - 1, True

    def _stacked(self):
        if self._matrix is None:
            phases = list(self.known.values())
            self._matrix = (np.array([p.known.id for p in phases]),
                            np.stack([p.known.centroid for p in phases]),
                            np.stack([p.known.members for p in phases]))
        return self._matrix

    def name(self, pid: int, proposed: str) -> str:
        """The phase's name: the one it has, else ``proposed``, with ``~2``,
        ``~3``... where a phase had it before."""
        with self.lock:
            if pid not in self.names:
                taken = set(self.names.values())
                k = self.given.get(proposed, 0)
                name = proposed if k == 0 else f"{proposed}~{k + 1}"
                while name in taken:
                    k += 1
                    name = f"{proposed}~{k + 1}"
                self.given[proposed] = k + 1
                self.names[pid] = name
            return self.names[pid]

    def learnt(self, phases: list[CatalogPhase]) -> None:
        """Phases as a target knows them now: known from here on; the least
        recently seen beyond ``keep`` are forgotten here (the catalogue keeps
        them, and their ids are never given again)."""
        with self.lock:
            if phases:
                self._matrix = None
            for p in phases:
                old = self.known.get(p.known.id)
                first = old.first_seen if old is not None else p.first_seen
                self.known[p.known.id] = replace(p, first_seen=first)
            if len(self.known) > self.keep:
                ranked = sorted(self.known.values(), key=lambda p: (-p.last_seen, p.known.id))
                for p in ranked[self.keep:]:
                    del self.known[p.known.id]
                    self.names.pop(p.known.id, None)


class TargetPhases:
    """One target's phases: classifier ids to stable ids, names, retirement."""

    def __init__(self, program: ProgramPhases, namer=None, store=None,
                 keep_s: float = RETIRED_KEEP_S, clock=time.monotonic):
        self.program = program
        self.namer = namer          # a PhaseFunctions: names from the code that dominates
        self.store = store          # the daemon's catalogue, or None
        self.keep_s = keep_s
        self.clock = clock
        self.stable: dict[int, int] = {}        # classifier id -> stable id
        self.live: set[int] = set()             # stable ids of the classifier's live phases
        self.retired_at: dict[int, float] = {}  # stable id -> when its phase was retired
        self.named: dict[int, str] = {}         # stable id -> name, while shown
        self.unsaved: dict[int, int] = {}       # stable id -> intervals not yet saved
        self.opened = False                     # a new id given since the last save
        self.last = -1                          # the last interval's stable id
        self.last_save = clock()

    def seed(self, pipeline) -> None:
        """Start the classifier from the program's phases seen most recently."""
        known = self.program.seeds(max(pipeline.params.detector.max_phases // 2, 1))
        pipeline.classifier.seed(known, self.program.next_id)
        self.stable = {p.id: p.id for p in pipeline.classifier.known()}

    def ids(self, pipeline, intervals) -> np.ndarray:
        """The stable id of each interval's phase (-1 stays -1): new phases
        get theirs, those of this batch are named, and what changed goes to
        the catalogue (before any sink shows an id)."""
        phase = intervals.phase
        new = [p for p in np.unique(phase).tolist() if p >= 0 and p not in self.stable]
        if new:
            self._open(pipeline, new)
        lookup = self.stable.get
        out = np.fromiter((lookup(p, p) for p in phase.tolist()), np.int64, len(phase))
        self._name(replace(intervals, phase=out))
        self._note_live(pipeline)
        if not intervals.partial and len(out):
            changed = bool((out[1:] != out[:-1]).any() or out[0] != self.last)
            self.last = int(out[-1])
            self._count(out)
            if self.save_due(changed):
                self.save(pipeline)
        return out

    def _open(self, pipeline, new: list[int]) -> None:
        live_c = pipeline.classifier.ids
        busy = {self.stable[c] for c in live_c[live_c >= 0].tolist() if c in self.stable}
        known = {k.id: k for k in pipeline.classifier.known(set(new))}
        for c in new:
            # None: opened and retired within the batch
            sid, fresh = self.program.take_id(known.get(c), pipeline.threshold, busy)
            self.opened |= fresh
            self.stable[c] = sid
            busy.add(sid)

    def _name(self, intervals) -> None:
        """Names for the phases of these intervals that have none, from the
        code that dominates their samples here."""
        if self.namer is not None:
            self.namer.add(intervals)
        phases = [p for p in np.unique(intervals.phase).tolist() if p >= 0]
        for sid in phases:
            if sid not in self.named:
                top = naming_top(self.namer, sid) if self.namer is not None else []
                self.named[sid] = self.program.name(sid, phase_name(top))
        if self.namer is not None:
            self.namer.forget(phases)

    def names(self, phases) -> dict[int, str]:
        return {p: self.named[p] for p in np.unique(phases).tolist() if p in self.named}

    def _note_live(self, pipeline) -> None:
        live_c = pipeline.classifier.ids
        live = {self.stable[c] for c in live_c[live_c >= 0].tolist() if c in self.stable}
        now = self.clock()
        for sid in self.live - live:
            self.retired_at[sid] = now
        for sid in live:
            self.retired_at.pop(sid, None)
        self.live = live

    def _count(self, phase: np.ndarray) -> None:
        """Intervals classified, to be added to their phases' in the catalogue."""
        for p, n in zip(*np.unique(phase, return_counts=True)):
            if p >= 0:
                self.unsaved[int(p)] = self.unsaved.get(int(p), 0) + int(n)

    def shown(self, now: float | None = None) -> set[int]:
        """Stable ids whose series are shown: live, or retired within ``keep_s``."""
        now = self.clock() if now is None else now
        return self.live | {s for s, t in self.retired_at.items() if now - t <= self.keep_s}

    def expire(self, now: float | None = None) -> list[int]:
        """Forget phases retired more than ``keep_s`` ago; their stable ids."""
        now = self.clock() if now is None else now
        gone = [s for s, t in self.retired_at.items() if now - t > self.keep_s]
        for sid in gone:
            del self.retired_at[sid]
        if gone:
            dropped = set(gone) - self.live
            self.stable = {c: s for c, s in self.stable.items() if s not in dropped}
            for sid in dropped:
                self.named.pop(sid, None)
        return gone

    # --- the catalogue -------------------------------------------------------

    def save_due(self, changed: bool) -> bool:
        return bool(self.opened or (self.unsaved and (
            changed or self.clock() - self.last_save >= SAVE_EVERY_S)))

    def save(self, pipeline) -> None:
        """The phases that took intervals since the last save (and any new
        one) into the catalogue, in one transaction, and into what the
        program knows here (so that a retired phase's id comes back with
        its behaviour, catalogue or not)."""
        if not (self.opened or self.unsaved):
            return
        now = time.time()
        wanted = {c for c, s in self.stable.items()
                  if s in self.unsaved or s not in self.program.known}
        phases = []
        for k in pipeline.classifier.known(wanted):
            sid = self.stable[k.id]
            n = self.unsaved.get(sid, 0)
            old = self.program.known.get(sid)
            phases.append(CatalogPhase(replace(k, id=sid), self.named.get(sid, "[unknown]"), n,
                                       old.first_seen if old else now,
                                       now if n or old is None else old.last_seen))
        self.unsaved.clear()
        self.opened = False
        self.last_save = self.clock()
        if self.store is not None and self.store.usable:
            self.store.save(self.program, phases)
        self.program.learnt(phases)

    def close(self, pipeline) -> None:
        """The target ended (or starts afresh): its phases saved, its program let go."""
        self.save(pipeline)
        if self.store is not None:
            self.store.release(self.program)
