"""Sampled addresses to function names, each in the mappings of its own
process: the one path by which ``run``, ``replay`` (its table and pprof),
``report`` and ``diff`` name a sample.

A symbolizer that tells processes apart says by which sample column
(``owner_column``) and gives the symbolizer of each value of it
(``of_owner``): a watched tree (:class:`~.tree_symbolizer.TreeSymbolizer`)
by thread, since a ``kmod`` source gives no process; a recording
(:class:`~.tree_symbolizer.RecordedTree`) by its ``pid`` column.  A plain
:class:`~.symbolizer.Symbolizer` is one address space, and so are samples
given without the column (an older recording, a CSV trace).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, ContextManager, Iterator

import numpy as np

from ..core.distinct import distinct
from .symbolizer import Symbolizer


def owner_column(symbolizer) -> str | None:
    """The sample column whose values ``symbolizer`` keeps apart, or None."""
    return getattr(symbolizer, "owner_column", None)


def naming(symbolizer) -> ContextManager:
    """Held while names are read: a live tree learns mappings on a thread
    of its own (its ``lock``), and an index into a process's mappings must
    not outlive them."""
    return getattr(symbolizer, "lock", None) or nullcontext()


def each_process(of_owner: Callable[[int], Symbolizer], owners: np.ndarray, first=()
                 ) -> Iterator[tuple[int, np.ndarray, Symbolizer]]:
    """Per distinct value of ``owners`` (those in ``first`` first, then in
    ascending order): the value, which rows hold it, and the symbolizer of
    its process (``of_owner``)."""
    values = sorted(distinct(owners).tolist(), key=lambda v: (v not in first, v))
    for owner in values:
        yield owner, owners == owner, of_owner(owner)


def sample_names(symbolizer, ips, owners=None, offsets: bool = True) -> np.ndarray:
    """Function names of ``ips`` (object array, same shape), each named in
    the mappings of its owner's process (``owners``: the values of the
    symbolizer's :func:`owner_column`, row for row; 0 or none given: no
    known owner), or all in one address space where the symbolizer does not
    tell processes apart.
    With ``offsets=False``, an address in an object but in no known
    function is ``[OBJECT]`` rather than ``[OBJECT+0xVADDR]``."""
    ips = np.asarray(ips, np.uint64)
    of_owner = getattr(symbolizer, "of_owner", None)
    if of_owner is None:
        return symbolizer.names(ips, offsets)
    owners = np.zeros(ips.shape, np.int64) if owners is None else np.asarray(owners)
    out = np.empty(ips.shape, dtype=object)
    with naming(symbolizer):
        for _, rows, process in each_process(of_owner, owners):
            out[rows] = process.names(ips[rows], offsets)
    return out
