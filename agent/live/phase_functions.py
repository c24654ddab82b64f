"""Which functions each phase runs: the IP samples of its intervals, symbolised.

The pipeline puts samples into intervals in the order they are fed: interval
k holds the next ``samples[k]`` rows after those of interval k-1.  So the IPs
of rows not yet in a complete interval wait here (at most one interval's worth
and a batch), and go to the phase of their interval once it is classified.

Per phase, IPs are kept raw only up to ``fold_at``; then they are resolved to
function names and added to per-name counts.  Memory is bounded by that cap
and the number of distinct functions, not by the length of the run.

Kernel addresses are named last, and only where they count: naming them
reads ``/proc/kallsyms`` (120,000 lines, 30-40 ms of the kernel's time), and
in most programs the kernel's few samples reach no phase's top functions.
They wait raw (up to ``fold_at`` too) until a ranking could include one.

As a sink it sees each batch before the pipeline does; where the symbolizer
tells processes apart (a watched tree by thread, a recording by process:
:mod:`.sample_names`), that column of the batch goes with its IPs, so that
each IP is named in the mappings of its own process.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..core.batch import KERNEL_START, MISSING
from ..core.distinct import distinct
from ..core.pipeline import Intervals
from ..core.source import Sink
from .sample_names import owner_column, sample_names
from .symbolizer import Symbolizer
from .tree_symbolizer import RecordedTree, TreeSymbolizer

FOLD_AT = 65536


class PhaseFunctions(Sink):
    """Per-phase sample counts by function, fed alongside the pipeline."""

    #: The trace columns it reads (a replay reads these besides the detector's).
    columns = ("ip", "tid", "pid")

    def __init__(self, symbolizer: Symbolizer | TreeSymbolizer | RecordedTree,
                 fold_at: int = FOLD_AT):
        self.symbolizer = symbolizer
        self.owner = owner_column(symbolizer)
        self.fold_at = fold_at
        self._unassigned: list[np.ndarray] = []
        self._raw: dict[int, list[np.ndarray]] = {}
        self._unassigned_owners: list[np.ndarray] = []
        self._raw_owners: dict[int, list[np.ndarray]] = {}
        self._raw_n: dict[int, int] = {}
        self._names: dict[int, Counter] = {}
        self._kernel_raw: dict[int, list[tuple[np.ndarray, np.ndarray | None]]] = {}
        self._kernel_named: set[int] = set()     # phases with kernel names counted
        self._ips: dict[int, list[int]] = {}       # phase -> [samples with an IP, in kernel mode]

    @classmethod
    def of_recording(cls, meta: dict) -> "PhaseFunctions":
        """Over a recording's mappings (its metadata with its side table),
        each sample named in those of its own process."""
        return cls(RecordedTree(meta))

    def batch(self, batch) -> None:
        """A batch about to be fed: its IPs wait for their intervals, with
        their threads or processes where the symbolizer tells them apart (a
        live tree's processes' mappings are read while they live)."""
        if "ip" not in batch:
            return
        self._unassigned.append(batch["ip"])
        if self.owner is not None and self.owner in batch:
            self._unassigned_owners.append(batch[self.owner])
        if "tid" in batch and isinstance(self.symbolizer, TreeSymbolizer):
            self.symbolizer.watch(batch["ip"], batch["tid"])

    def classified(self, c) -> None:
        self.add(c.intervals)

    def add(self, intervals: Intervals) -> None:
        """The intervals the batches taken so far completed."""
        if len(intervals) == 0 or intervals.partial:
            return
        rows = np.concatenate(self._unassigned)
        ends = np.cumsum(intervals.samples)
        assigned = rows[:ends[-1]]
        self._unassigned = [rows[ends[-1]:]]
        owners = None
        if self._unassigned_owners:
            all_owners = np.concatenate(self._unassigned_owners)
            owners, self._unassigned_owners = all_owners[:ends[-1]], [all_owners[ends[-1]:]]
        row_phase = np.repeat(intervals.phase, intervals.samples)
        for phase in distinct(intervals.phase).tolist():
            mine = row_phase == phase
            self._keep(phase, assigned[mine], None if owners is None else owners[mine])

    def top(self, phase: int, k: int = 3, min_share: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` functions with most of the phase's samples, with their
        shares; given ``min_share``, kernel functions are named only where
        all the phase's kernel samples together reach it (a table that shows
        no function under it spares reading the kernel's symbols), and those
        that could not reach it may be missing."""
        self._fold(phase)
        ranked = self._ranked(phase, k)
        waiting = self._waiting(phase)
        total = sum(self._names.get(phase, {}).values()) + waiting
        could_rank = phase in self._kernel_named or len(ranked) < k or ranked[-1][1] <= waiting
        if waiting and could_rank and waiting >= min_share * total:
            self._name_kernel(phase)
            ranked = self._ranked(phase, k)
        return [(name, n / total) for name, n in ranked]

    def _waiting(self, phase: int) -> int:
        """Kernel samples of the phase not yet named."""
        return sum(len(ips) for ips, _ in self._kernel_raw.get(phase, ()))

    def _ranked(self, phase: int, k: int) -> list[tuple[str, int]]:
        counts = self._names.get(phase) or {}
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]

    def kernel_share(self, phase: int) -> float | None:
        """The share of the phase's samples taken in kernel mode (None: no IPs)."""
        taken, kernel = self._ips.get(phase, (0, 0))
        return kernel / taken if taken else None

    def forget(self, phases) -> None:
        """Drop what is kept of these phases (the daemon's, once named or retired)."""
        for phase in phases:
            for kept in (self._raw, self._raw_owners, self._raw_n, self._names, self._ips,
                         self._kernel_raw):
                kept.pop(phase, None)
            self._kernel_named.discard(phase)

    def _keep(self, phase: int, ips: np.ndarray, owners: np.ndarray | None) -> None:
        if len(ips) == 0:
            return
        counts = self._ips.setdefault(phase, [0, 0])
        placed = ips != MISSING
        counts[0] += int(np.count_nonzero(placed))
        counts[1] += int(np.count_nonzero(placed & (ips >= KERNEL_START)))
        self._raw.setdefault(phase, []).append(ips)
        if owners is not None:
            self._raw_owners.setdefault(phase, []).append(owners)
        self._raw_n[phase] = self._raw_n.get(phase, 0) + len(ips)
        if self._raw_n[phase] >= self.fold_at:
            self._fold(phase)

    def _fold(self, phase: int) -> None:
        raw = self._raw.pop(phase, None)
        raw_owners = self._raw_owners.pop(phase, None)
        self._raw_n[phase] = 0
        if not raw:
            return
        ips = np.concatenate(raw)
        owners = None if raw_owners is None else np.concatenate(raw_owners)
        kernel = ips >= KERNEL_START
        if kernel.any():
            self._kernel_raw.setdefault(phase, []).append(
                (ips[kernel], None if owners is None else owners[kernel]))
            ips, owners = ips[~kernel], None if owners is None else owners[~kernel]
        self._count(phase, ips, owners)
        if self._waiting(phase) >= self.fold_at:
            self._name_kernel(phase)

    def _name_kernel(self, phase: int) -> None:
        waiting = self._kernel_raw.pop(phase, [])
        if not waiting:
            return
        self._kernel_named.add(phase)
        owners = [o for _, o in waiting]
        self._count(phase, np.concatenate([ips for ips, _ in waiting]),
                    None if owners[0] is None else np.concatenate(owners))

    def _count(self, phase: int, ips: np.ndarray, owners: np.ndarray | None) -> None:
        self.symbolizer.snapshot()
        if len(ips) == 0:
            return
        named = sample_names(self.symbolizer, ips, owners, offsets=False)
        names, counts = np.unique(named, return_counts=True)
        self._names.setdefault(phase, Counter()).update(dict(zip(names.tolist(),
                                                                 counts.tolist())))
