"""A run's phases kept in the catalogue (formats/catalog.py): the pipeline
starts from the program's known phases, and what the run learnt goes back,
each phase named from the code that dominates it."""

from __future__ import annotations

import sqlite3
import time

from ..errors import UserError
from ..formats.catalog import Catalog, CatalogPhase, program_key
from .function_names import short_name

#: What the catalogue may raise that ends its use, never the run.
CATALOG_ERRORS = (sqlite3.Error, OSError, UserError)

#: A phase is named after its top function where that holds at least this
#: share of its samples, else after its top two joined with ``+``.
DOMINANT_SHARE = 0.5


def phase_name(top: list[tuple[str, float]]) -> str:
    """``fa``, ``deflate_slow+crc32``, ``Accumulator<>::fold`` or
    ``[unknown]``: the code that dominates, C++ names without their
    arguments and templates' arguments."""
    if not top:
        return "[unknown]"
    first = short_name(top[0][0])
    if top[0][1] >= DOMINANT_SHARE or len(top) == 1 or short_name(top[1][0]) == first:
        return first
    return f"{first}+{short_name(top[1][0])}"


def naming_top(functions, phase: int) -> list[tuple[str, float]]:
    """The functions :func:`phase_name` needs: the top one where it holds
    ``DOMINANT_SHARE``, else the top two.  Asking for one first spares
    reading the kernel's symbols where only a second place could be the
    kernel's (30-40 ms, and 25 MB of memory touched)."""
    top = functions.top(phase, 1)
    return top if top and top[0][1] >= DOMINANT_SHARE else functions.top(phase, 2)


def unique_name(name: str, taken: set[str]) -> str:
    """The name, with ``~2``, ``~3``... where another phase has it already."""
    if name not in taken:
        return name
    k = 2
    while f"{name}~{k}" in taken:
        k += 1
    return f"{name}~{k}"


def name_phases(phase_ids, functions, known: dict[int, str]) -> dict[int, str]:
    """A name for every phase: ``known``'s where it has one, else from its
    top functions, unique among all of them.  ``known`` gains the new names."""
    taken = set(known.values())
    for pid in phase_ids:
        if pid not in known:
            known[pid] = unique_name(phase_name(naming_top(functions, pid)), taken)
            taken.add(known[pid])
    return {pid: known[pid] for pid in phase_ids}


class RunCatalog:
    """The catalogue as one run of one program uses it."""

    def __init__(self, path: str, executable: str, warn):
        self.catalog = Catalog(path, warn)
        self.program, self.path = program_key(executable)
        self.names: dict[int, str] = {}
        self.first_seen: dict[int, float] = {}
        self.profile = ""

    def seed(self, pipeline) -> None:
        """Start the pipeline's classifier from the program's known phases."""
        if not self.catalog.usable:
            return
        self.profile = pipeline.profile
        key = f"{self.program}|{self.profile}"
        # The catalogue keeps up to 1024 a program; the classifier holds fewer.
        known = self.catalog.phases(key, limit=pipeline.params.detector.max_phases)
        pipeline.classifier.seed([p.known for p in known], self.catalog.next_id(key))
        self.names = {p.known.id: p.name for p in known}
        self.first_seen = {p.known.id: p.first_seen for p in known}

    def seed_predictor(self, tap, known: list[int]) -> None:
        """Start the run's phase predictor from what earlier runs learnt of
        the ``known`` phases (those the classifier starts from)."""
        if not self.catalog.usable or not known:
            return
        memory = self.catalog.prediction_memory(f"{self.program}|{self.profile}")
        if memory is not None:
            tap.seed("", memory, known)

    def save(self, pipeline, intervals: dict[int, int], tap=None) -> None:
        """The run's live phases back into the catalogue, with the intervals
        each took in this run, and what the phase predictor learnt of them."""
        if not self.catalog.usable:
            return
        now = time.time()
        phases = [CatalogPhase(k, self.names.get(k.id, "[unknown]"), intervals.get(k.id, 0),
                               self.first_seen.get(k.id, now),
                               now if intervals.get(k.id) else self.first_seen.get(k.id, now))
                  for k in pipeline.classifier.known()]
        memory = tap.memory("", [p.known.id for p in phases]) if tap is not None else None
        self.catalog.save(self.program, self.path, self.profile, pipeline.classifier.next_id,
                          phases, memory)

    def close(self) -> None:
        self.catalog.close()
